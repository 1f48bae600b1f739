"""torch.igamma / torch.igammac (special.gammainc / gammaincc) on tpu, lowered: every
boundary value of PyTorch's CPU kernel (zeros, infinities, NaN, negative arguments) and
every region of its method choice, against the CPU; in the region where the CPU takes its
asymptotic expansion (a > 20 near x), against mpmath, which the tpu values match more
closely in float64."""

from __future__ import annotations

import mpmath
import pytest
import torch
from _compare import assert_close, fallbacks, new_fallbacks

TPU = "tpu"
_POINTS = [0.0, 1e-3, 0.3, 0.5, 0.7, 1.0, 1.05, 1.2, 2.0, 5.0, 9.0, 19.0, 25.0, 60.0, 150.0,
           float("inf"), float("nan"), -1.0]


def _grid(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    points = torch.tensor(_POINTS, dtype=dtype)
    a, x = torch.meshgrid(points, points, indexing="ij")
    return a.reshape(-1), x.reshape(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=lambda f: f.__name__)
def test_grid_against_cpu(fn, dtype: torch.dtype) -> None:
    a, x = _grid(dtype)
    before = fallbacks()
    actual = fn(a.to(TPU), x.to(TPU))
    assert not new_fallbacks(before), new_fallbacks(before)
    expected = fn(a, x)
    assert torch.equal(actual.cpu().isnan(), expected.isnan())
    # The CPU's asymptotic expansion (a > 20, |x - a| / a < 0.3) is itself 4e-10 off in
    # float64; float32 agrees to a few ulp.
    tols = {torch.float32: (2e-6, 2e-6), torch.float64: (1e-9, 1e-9), torch.bfloat16: (1e-2, 1e-2)}
    assert_close(actual, expected, dtype_tols={dtype: tols[dtype]})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=lambda f: f.__name__)
def test_x_far_past_a_like_cpu(fn, dtype: torch.dtype) -> None:
    # The continued fraction's terms overflow there (inf / inf) while its prefactor
    # underflows to 0: the result was NaN where the CPU's is exactly 1 or 0.
    a = torch.tensor([0.5, 1.0, 2.0, 50.0, 501.0, 1e4], dtype=dtype).repeat_interleave(3)
    x = torch.tensor([1e20, 1e30, 3e38 if dtype == torch.float32 else 1e300],
                     dtype=dtype).repeat(6)
    assert torch.equal(fn(a.to(TPU), x.to(TPU)).cpu(), fn(a, x))


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=lambda f: f.__name__)
def test_random_arguments_broadcast_and_variants(fn) -> None:
    torch.manual_seed(0)
    a = torch.empty(64, 1).uniform_(-2, 12)
    x = torch.empty(1, 32).uniform_(-2, 12)
    before = fallbacks()
    assert_close(fn(a.to(TPU), x.to(TPU)), fn(a, x), dtype_tols={torch.float32: (2e-6, 2e-6)})
    out = torch.empty(64, 32, device=TPU)
    fn(a.to(TPU), x.to(TPU), out=out)
    assert_close(out, fn(a, x), dtype_tols={torch.float32: (2e-6, 2e-6)})
    inplace = a.expand(64, 32).clone().to(TPU)
    getattr(inplace, fn.__name__ + "_")(x.to(TPU))
    assert_close(inplace, fn(a, x), dtype_tols={torch.float32: (2e-6, 2e-6)})
    assert not new_fallbacks(before), new_fallbacks(before)


def _against_mpmath(cases: list[tuple[float, float]], tol: float) -> None:
    a = torch.tensor([c[0] for c in cases], dtype=torch.float64)
    x = torch.tensor([c[1] for c in cases], dtype=torch.float64)
    lower, upper = torch.igamma(a.to(TPU), x.to(TPU)).cpu(), torch.igammac(a.to(TPU), x.to(TPU)).cpu()
    mpmath.mp.dps = 40
    for i, (ai, xi) in enumerate(cases):
        q = float(mpmath.gammainc(mpmath.mpf(ai), mpmath.mpf(xi), mpmath.inf, regularized=True))
        assert abs(lower[i].item() - (1 - q)) < tol, (ai, xi, lower[i].item(), 1 - q)
        assert abs(upper[i].item() - q) < tol, (ai, xi, upper[i].item(), q)


def test_large_a_near_x_against_mpmath() -> None:
    _against_mpmath([(25.0, 25.0), (25.0, 22.0), (150.0, 150.0), (150.0, 160.0), (500.0, 480.0)],
                    1e-13)


def test_very_large_a_near_x_against_mpmath() -> None:
    # Past a = 1e4 the series and the fraction need more than their 2000 terms (a = 1e6 gave
    # P(a, a) = 0.477 for 0.50013, float32 gammaincc(1e10, 1e10) 0.935, gammainc(1e20, 1.1e20)
    # NaN): Temme's expansion there.
    _against_mpmath([(2e4, 2e4), (1e5, 0.75e5), (1e6, 1e6), (1e6, 1.02e6), (1e7, 0.999e7)], 1e-12)
    big = torch.tensor([1e10, 3e12], dtype=torch.float64), torch.tensor([1e10, 3.00001e12],
                                                                        dtype=torch.float64)
    torch.testing.assert_close(torch.igamma(big[0].to(TPU), big[1].to(TPU)).cpu(),
                               torch.igamma(*big), rtol=1e-10, atol=1e-12)
    f32 = torch.tensor([1e10, 1e20, 1e20]), torch.tensor([1e10, 1e20, 1.1e20])
    got = torch.igammac(f32[0].to(TPU), f32[1].to(TPU)).cpu()
    torch.testing.assert_close(got, torch.igammac(*f32), rtol=1e-5, atol=1e-6)


def test_gradient_of_x_matches_cpu() -> None:
    # PyTorch's derivative of igamma in x: exp(-x) x^(a-1) / Gamma(a), from lowered ops.
    torch.manual_seed(1)
    a = torch.empty(16).uniform_(0.5, 6)
    x = torch.empty(16).uniform_(0.1, 8)
    for fn in (torch.igamma, torch.igammac):
        x_cpu, x_tpu = x.clone().requires_grad_(True), x.to(TPU).requires_grad_(True)
        fn(a, x_cpu).sum().backward()
        fn(a.to(TPU), x_tpu).sum().backward()
        assert_close(x_tpu.grad, x_cpu.grad, dtype_tols={torch.float32: (1e-5, 1e-5)})
