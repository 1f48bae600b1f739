"""uint16, uint32 and uint64 tensors in compiled graphs and in eager mode, against NumPy's
unsigned arithmetic (PyTorch's CPU kernels stop at casts and comparisons for these dtypes,
so NumPy is the reference): wrap-around, division, shifts, bitwise ops, reductions and
casts at the dtype's extremes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torchtpu

DTYPES = {torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64}


def program(a, b):
    d = b | 1
    return (a + b, a - b, a * 3, a // d, a % d, a >> 3, a << 2, a & b, a ^ b, a | b,
            a.amax(dim=0), a.amin(dim=1), a > b, a == b, torch.where(a > b, a, b))


def reference(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    d = b | 1
    with np.errstate(over="ignore"):
        return [a + b, a - b, a * a.dtype.type(3), a // d, a % d, a >> a.dtype.type(3),
                a << a.dtype.type(2), a & b, a ^ b, a | b, a.max(axis=0), a.min(axis=1),
                a > b, a == b, np.where(a > b, a, b)]


def operands(np_dtype: type) -> tuple[np.ndarray, np.ndarray]:
    top = np.iinfo(np_dtype).max
    a = np.array([[0, 1, 7, top], [top - 1, 300, top // 2, 12345]], dtype=np_dtype)
    b = np.array([[5, top, 2, 1], [3, 65535 % (top + 1), top // 3, 0]], dtype=np_dtype)
    return a, b


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_unsigned_arithmetic_matches_numpy(dtype: torch.dtype, compiled: bool) -> None:
    torch._dynamo.reset()
    a, b = operands(DTYPES[dtype])
    fn = torch.compile(program, backend="tpu") if compiled else program
    before = torchtpu.debug.metrics()
    got = fn(torch.from_numpy(a).to("tpu"), torch.from_numpy(b).to("tpu"))
    after = torchtpu.debug.metrics()
    for k, (g, want) in enumerate(zip(got, reference(a, b))):
        g = g.cpu()
        want_dtype = torch.bool if want.dtype == np.bool_ else dtype
        assert g.dtype == want_dtype, (k, g.dtype)
        assert np.array_equal(g.numpy(), want), (k, g, want)
    if compiled:
        assert after["num_graph_executions"] - before["num_graph_executions"] == 1
        assert after.get("num_graph_breaks", 0) == before.get("num_graph_breaks", 0)
    assert after["fallback_ops"] == before["fallback_ops"]


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_unsigned_casts_in_a_graph_match_the_cpu(dtype: torch.dtype) -> None:
    # Casts are what PyTorch's CPU kernels do for these dtypes: compare with them.
    torch._dynamo.reset()
    a, _ = operands(DTYPES[dtype])
    x = torch.from_numpy(a)
    f = torch.tensor([0.0, 1.5, 255.9, 65535.0, 1e9])

    def casts(x, f):
        return x.to(torch.float64), x.to(torch.int64), f.to(dtype), x.view(-1)[1::2].clone()

    got = torch.compile(casts, backend="tpu")(x.to("tpu"), f.to("tpu"))
    for g, want in zip(got, casts(x, f)):
        assert g.dtype == want.dtype and torch.equal(g.cpu(), want), (g, want)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_python_ints_past_int64_in_a_graph_are_uint64_scalars(dynamic: bool) -> None:
    # PyTorch takes an int in [2**63, 2**64) as a uint64 Scalar: it wraps in integer ops and
    # keeps its value in float ones.
    cases = [lambda u: u + (2**64 - 1), lambda u: u.long() < 2**63,
             lambda u: u.long() * 2**63, lambda u: u.float() + 2**63]
    for fn in cases:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="tpu", dynamic=dynamic)
        for n in (3, 5, 9):
            u = torch.arange(n, dtype=torch.uint8) * 60
            assert torch.equal(compiled(u.to("tpu")).cpu(), fn(u)), (n, fn(u))
