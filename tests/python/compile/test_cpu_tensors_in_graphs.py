"""CPU tensors in a compiled function, as eager mode takes them: a captured CPU tensor moved
with `.to(x.device)`, computed on before the move, returned on the CPU, mutated, saved for
the backward, and sliced at a varying length. Each result is compared with the same
function run eagerly (values and devices)."""

from __future__ import annotations

import pytest
import torch

import torchtpu

torch._dynamo.config.cache_size_limit = 64
TPU = "tpu"


def compiled(fn, **kwargs):
    torch._dynamo.reset()
    return torch.compile(fn, backend="tpu", **kwargs)


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


W = torch.randn(4)
W64 = torch.randn(4, dtype=torch.float64)

CASES = {
    "moved": lambda x: x * W.to(x.device) + 1,
    "moved_with_dtype": lambda x: x * W64.to(x.device, torch.float32),
    "computed_on_cpu_then_moved": lambda x: x * (W * 2).to(x.device),
    "cpu_output": lambda x: (x + 1, W + 1),
    "moved_to_cpu": lambda x: (x * 2).cpu() + W,
    "cpu_scalar": lambda x: x * torch.tensor(3.0),
    # Constants made in the function, one on the device before one on the CPU.
    "device_then_cpu_constant": lambda x: (
        x * torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device)
        + torch.tensor([5.0, 6.0, 7.0, 8.0]).to(x.device)),
    "device_constant_and_cpu_constant_out": lambda x: (
        x * torch.tensor([1.0, 2.0, 3.0, 4.0], device=x.device),
        torch.tensor([5.0, 6.0, 7.0, 8.0]) * 2),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_tensor_in_graph_matches_eager(name: str) -> None:
    fn = CASES[name]
    x = torch.randn(4, device=TPU)
    expected = _as_tuple(fn(x))
    actual = _as_tuple(compiled(fn)(x))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.device == e.device
        torch.testing.assert_close(a.cpu(), e.cpu())


def test_gradient_reaches_a_captured_cpu_parameter() -> None:
    w = torch.randn(4, requires_grad=True)

    def f(x):
        return (x * w.to(x.device)).sin().sum()

    x = torch.randn(4, device=TPU, requires_grad=True)
    f(x).backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad, w.grad = None, None
    compiled(f)(x).backward()
    assert w.grad.device.type == "cpu"
    torch.testing.assert_close(w.grad, gw)
    torch.testing.assert_close(x.grad.cpu(), gx.cpu())


def test_mutated_cpu_tensor_is_updated_in_place() -> None:
    counter = torch.zeros(3)

    def f(x):
        counter.add_(1)
        return x + counter.to(x.device)

    run = compiled(f)
    x = torch.randn(3, device=TPU)
    run(x)
    out = run(x)
    torch.testing.assert_close(counter, torch.full((3,), 2.0))
    torch.testing.assert_close(out.cpu(), x.cpu() + 2)


def test_cpu_table_sliced_at_varying_lengths() -> None:
    table = torch.randn(64, 8)

    def f(x):
        return x + table[: x.shape[0]].to(x.device)

    run = compiled(f, dynamic=True)
    before = torchtpu.debug.metrics()["num_graphs_compiled"]
    for n in (5, 7, 9, 20):
        x = torch.randn(n, 8, device=TPU)
        torch.testing.assert_close(run(x).cpu(), x.cpu() + table[:n])
    # Lengths 5..9 share a bucket: at most one program per bucket.
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before <= 3


def test_cpu_draws_take_the_cpu_generator() -> None:
    """Random tensors made on the CPU inside a graph over tpu tensors (an augmentation's
    `torch.randint(10, (5,))`) draw from the CPU's generator, as in eager mode: the same
    numbers, and the CPU generator advanced by them."""
    def fn(x: torch.Tensor) -> tuple:
        return x + torch.rand(2).to(x.device), torch.randint(10, (5,)), torch.rand(3)

    graph = compiled(fn)
    torch.manual_seed(5)
    got = graph(torch.zeros(2, device=TPU))
    got_next = torch.rand(2)
    torch.manual_seed(5)
    expected = fn(torch.zeros(2))
    expected_next = torch.rand(2)
    for g, e in zip(got, expected):
        assert g.device.type == (TPU if e is expected[0] else "cpu")
        torch.testing.assert_close(g.cpu(), e)
    torch.testing.assert_close(got_next, expected_next)
