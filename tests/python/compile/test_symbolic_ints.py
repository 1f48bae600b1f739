"""Python ints and sizes that become symbolic under torch.compile (Dynamo makes an int
argument a SymInt at its second value, no `dynamic=True` needed): positions counted from
the end (`x[-k:]`, `x[i]` with a negative `i`), views of an input at a symbolic offset
(`chunk`, `split`), with shape buckets on (the default) and off. Each call is compared with
the same function on the CPU, values and storage offsets of returned views."""

from __future__ import annotations

import pytest
import torch

import torchtpu  # noqa: F401

torch._dynamo.config.cache_size_limit = 64
TPU = "tpu"

X6 = torch.arange(6.0)
X43 = torch.arange(12.0).view(4, 3)
X42 = torch.arange(8.0).view(4, 2)

CASES = {
    # (function, input, ints the function is called with, in order)
    "last_k_view": (lambda x, k: x[-k:], X6, [1, 2, 3, 4]),
    "last_k_copy": (lambda x, k: x[-k:] * 1, X6, [1, 2, 3, 4]),
    "all_but_last_k": (lambda x, k: x[:-k] * 1, X6, [1, 2, 3]),
    "from_k": (lambda x, k: x[k:] * 1, X6, [1, 2, 3]),
    "select_negative": (lambda x, i: x[i], X43, [0, 1, -1, -2]),
    "select_negative_copy": (lambda x, i: x[i] * 2, X43, [0, 1, -1, -2, 3]),
    "slice_from_negative": (lambda x, i: x[i:], X43, [0, 1, 2, -1, -2]),
    "select_from_end_k": (lambda x, k: x[-k] * 1, X6, [1, 2, 3, 4]),
}


@pytest.fixture(params=["auto", "off"])
def buckets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", request.param)
    return request.param


@pytest.mark.parametrize("name", sorted(CASES))
def test_symbolic_int_positions_match_the_cpu(name: str, buckets: str) -> None:
    fn, x, ints = CASES[name]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tpu")
    for i in ints:
        expected = fn(x, i)
        actual = compiled(x.to(TPU), i)
        torch.testing.assert_close(actual.cpu(), expected, msg=f"{name} at {i}")
        if expected._base is not None:  # a view: the same place in the input
            assert actual.storage_offset() == expected.storage_offset(), (name, i)


@pytest.mark.parametrize("split", [
    lambda x: x.chunk(2, 0)[1],
    lambda x: x.chunk(2, 1)[1],
    lambda x: x.split([1, x.shape[0] - 1])[1],
    lambda x: x.chunk(2, 0),
])
def test_views_of_an_input_at_a_symbolic_offset(split, buckets: str) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(split, backend="tpu", dynamic=True)
    for rows in (4, 6):
        x = torch.arange(rows * 2.0).view(rows, 2)
        expected, actual = split(x), compiled(x.to(TPU))
        for e, a in zip(expected if isinstance(expected, tuple) else (expected,),
                        actual if isinstance(actual, tuple) else (actual,)):
            torch.testing.assert_close(a.cpu(), e)
            assert a.storage_offset() == e.storage_offset()


def test_repeated_heads_follow_a_changing_head_count(buckets: str) -> None:
    # K/V heads repeated q.shape[1] // 2 times: 2 * (H // 2) rows expanded to H are equal
    # only at run time, so the graph may not take them as one padded dim.
    def f(q, k):
        return q @ k.repeat_interleave(q.shape[1] // 2, 1).transpose(-1, -2)

    def g(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)

    torch._dynamo.reset()
    cf, cg = torch.compile(f, backend="tpu"), torch.compile(g, backend="tpu")
    torch.manual_seed(0)
    for heads in (2, 4, 8):
        q, k, v = torch.randn(1, heads, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
        torch.testing.assert_close(cf(q.to(TPU), k.to(TPU)).cpu(), f(q, k))
        torch.testing.assert_close(cg(q.to(TPU), k.to(TPU), v.to(TPU)).cpu(), g(q, k, v),
                                   rtol=1e-5, atol=1e-5)


def test_index_add_of_a_dynamic_source(buckets: str) -> None:
    def f(x):
        index = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        return torch.zeros(3, 2, device=x.device).index_add(0, index, x)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for rows in (4, 7):
        x = torch.randn(rows, 2)
        torch.testing.assert_close(compiled(x.to(TPU)).cpu(), f(x))


def test_values_computed_from_a_symbolic_size_keep_their_type(buckets: str) -> None:
    # A comparison of sizes is a bool (a SymBool), a true division a float, a product an
    # int, whatever the size; each as the CPU gives it.
    def fn(x):
        n = x.shape[0]
        return x.relu(), n > 1, n == 3, n / 2, n * 2

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for n in (1, 2, 3, 5):
        x = torch.randn(n, 2)
        actual, expected = compiled(x.to(TPU)), fn(x)
        torch.testing.assert_close(actual[0].cpu(), expected[0])
        assert actual[1:] == expected[1:]
        assert [type(v) for v in actual[1:]] == [bool, bool, float, int]


def test_jagged_nested_tensor_compiles_and_matches_aot_eager() -> None:
    # The graph takes the ragged size (a nested int at run time, no number) as an input it
    # never reads; binding it failed with "'NestedIntNode' object has no attribute 'int_'".
    import warnings

    warnings.filterwarnings("ignore", message=".*nested tensors is in prototype")
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)

    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softmax(lin(t), dim=-1) * 3

    for lengths in ([2, 5], [3, 7, 1]):
        pieces = [torch.randn(n, 8) for n in lengths]
        got = {}
        for dev, backend in (("cpu", "aot_eager"), (TPU, "tpu")):
            lin.to(dev)
            nt = torch.nested.nested_tensor([p.to(dev) for p in pieces], layout=torch.jagged,
                                            requires_grad=True)
            r = torch.compile(f, backend=backend)(nt)
            r.values().sum().backward()
            got[dev] = (r.values().detach().cpu(), nt.grad.values().cpu(), lin.weight.grad.cpu())
            lin.weight.grad = None
        for a, b in zip(got["cpu"], got[TPU]):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        torch._dynamo.reset()
