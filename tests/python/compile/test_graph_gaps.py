"""Compiled-graph cases the OpInfo matrix found missing: tensor constants in graphs
(get_attr), factories with device="tpu", random factories and functional random ops,
mean over all dims, diagonal/diagonal_scatter values, any/all over several dims, and an
optimizer step with foreach list ops. Each is compared with the CPU (random ones by
range and shape) and must not fall back."""

from __future__ import annotations

import pytest
import torch
from _compare import fallbacks, new_fallbacks

TPU = "tpu"
TOLS = dict(rtol=1e-5, atol=1e-5)

torch._dynamo.config.cache_size_limit = 64


def compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="tpu", dynamic=False)


def check_same(fn, *inputs) -> None:
    expected = fn(*inputs)
    before = fallbacks()
    actual = compiled(fn)(*[x.to(TPU) for x in inputs])
    assert new_fallbacks(before) == {}
    for a, e in zip(actual if isinstance(actual, tuple) else (actual,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert a.device.type == TPU and a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, **TOLS)


def test_tensor_constant_in_graph() -> None:
    # A CPU torch.tensor(...) built in the frame becomes a get_attr constant of the graph.
    check_same(lambda x: torch.where(x > 0, x, torch.tensor(-1.0)), torch.randn(4, 3))
    check_same(lambda x: torch.masked.sum(x, 0, mask=x > 0), torch.randn(4, 3))


def test_mean_over_all_dims_and_multi_dim_any() -> None:
    check_same(lambda x: (x.mean(), torch.mean(x, dtype=torch.float64)), torch.randn(3, 5))
    check_same(lambda x: (torch.any(x > 1, dim=(0, 2)), torch.all(x > -3, dim=(1, 2))),
               torch.randn(2, 3, 4))


@pytest.mark.parametrize("offset", [0, 1, -2])
def test_diagonal_and_diagonal_scatter(offset: int) -> None:
    x = torch.randn(2, 4, 5)
    src = torch.randn_like(torch.diagonal(x, offset, 1, 2))
    check_same(lambda x, s: (torch.diagonal(x, offset, 1, 2) * 2,
                             torch.diagonal_scatter(x, s, offset, 1, 2)), x, src)


def test_factories_on_tpu_inside_graph() -> None:
    def fn(x):
        return (x + torch.ones(3, device=x.device), torch.arange(6, device=x.device) * 2,
                torch.full((2, 2), 7.0, device=x.device), torch.eye(3, device=x.device))

    check_same(fn, torch.randn(3))


def test_random_factories_and_functional_random_ops() -> None:
    def fn(x):
        return (torch.rand(1000, device=x.device), torch.randn_like(x),
                torch.randint(3, 9, (1000,), device=x.device), torch.bernoulli(x.clamp(0, 1)),
                x.clone().uniform_(-2, -1), x.clone().exponential_(2.0))

    before = fallbacks()
    r = compiled(fn)(torch.rand(1000, device=TPU))
    assert new_fallbacks(before) == {}
    rand, randn, randint, bern, uni, expo = [t.cpu() for t in r]
    assert 0 <= rand.min() and rand.max() < 1 and abs(rand.mean() - 0.5) < 0.05
    assert abs(randn.mean()) < 0.15 and abs(randn.std() - 1) < 0.1
    assert randint.dtype == torch.int64 and randint.min() >= 3 and randint.max() <= 8
    assert set(bern.unique().tolist()) <= {0.0, 1.0}
    assert -2 <= uni.min() and uni.max() < -1
    assert expo.min() >= 0 and abs(expo.mean() - 0.5) < 0.08


def test_compiled_optimizer_step_with_foreach() -> None:
    torch.manual_seed(0)
    params = [torch.randn(4, 3), torch.randn(3)]
    grads = [torch.randn(4, 3), torch.randn(3)]

    def run(device: str) -> list[torch.Tensor]:
        ps = [p.clone().to(device).requires_grad_(True) for p in params]
        for p, g in zip(ps, grads):
            p.grad = g.to(device)
        opt = torch.optim.AdamW(ps, lr=0.01, foreach=True)
        step = opt.step if device == "cpu" else compiled(opt.step)
        for _ in range(2):
            step()
        return [p.detach().cpu() for p in ps]

    expected = run("cpu")
    before = fallbacks()
    actual = run(TPU)
    assert new_fallbacks(before) == {}
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
