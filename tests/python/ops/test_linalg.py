"""torch.linalg on tpu: factorizations, solves, decompositions, their backward, and errors.

Every op is compared with PyTorch on the CPU with CPU fallbacks forbidden. Results that
are unique only up to sign (eigenvectors, singular vectors) are checked by what defines
them — reconstruction, orthogonality, agreement of the spanned directions — rather than
element by element. Tolerances reflect conditioning: float32 inputs here are
well-conditioned (a random matrix plus n*I), except in the ill-conditioned tests, which
check backward error (residuals) and relative accuracy against known answers instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
from _compare import (
    assert_close,
    assert_raises_like_cpu,
    assert_same,
    fallbacks,
    make,
    new_fallbacks,
)

import torchtpu

DTYPES = [torch.float32, torch.float64]
TOLS = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-10, 1e-10)}
# Gradients go through several solves and products: a few more float32 ulps.
GRAD_TOLS = {torch.float32: (5e-4, 5e-4), torch.float64: (1e-9, 1e-9)}


def general(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A well-conditioned general square (batch of) matrix: randn + n*I."""
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    return (torch.randn(*shape, generator=g, dtype=torch.float64) +
            n * torch.eye(n, dtype=torch.float64)).to(dtype)


def spd(*shape: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A symmetric positive-definite (batch of) matrix: X X^T + n*I."""
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    return (x @ x.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def rand(*shape: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def with_known_spectrum(n: int, values: torch.Tensor, seed: int = 3) -> torch.Tensor:
    """Q1 diag(values) Q2^T in float64 for random orthogonal Q1, Q2."""
    g = torch.Generator().manual_seed(seed)
    q1 = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0]
    q2 = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))[0]
    return q1 @ torch.diag(values) @ q2.mT


def run_no_fallback(fn: Callable[..., Any], *args: Any) -> Any:
    before = fallbacks()
    out = fn(*args)
    torchtpu.synchronize()
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"
    return out


def grads_match(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor,
                tols: dict = GRAD_TOLS) -> None:
    """Gradients of sum(fn(*inputs) * fixed weights) on tpu equal the CPU's."""
    cpu = [x.detach().clone().requires_grad_(True) for x in inputs]
    tpu = [x.detach().to("tpu").requires_grad_(True) for x in inputs]

    def loss(xs: list[torch.Tensor]) -> torch.Tensor:
        out = fn(*xs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        total = 0
        for i, o in enumerate(outs):
            g = torch.Generator().manual_seed(10 + i)
            w = torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device)
            total = total + (o * w).sum()
        return total

    loss(cpu).backward()
    run_no_fallback(lambda: loss(tpu).backward())
    for i, (a, e) in enumerate(zip(tpu, cpu)):
        assert_close(a.grad, e.grad, dtype_tols=tols, what=f"grad of input {i}")


# ---- Cholesky and triangular solves ------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("shape", [(4, 4), (3, 5, 5), (2, 2, 3, 3)])
def test_cholesky(dtype: torch.dtype, upper: bool, shape: tuple[int, ...]) -> None:
    assert_same(lambda a: torch.linalg.cholesky(a, upper=upper), spd(*shape, dtype=dtype),
                dtype_tols=TOLS)


def test_cholesky_reads_only_its_triangle() -> None:
    a = spd(4, 4, dtype=torch.float64)
    junk = a + torch.triu(torch.full_like(a, 7.0), 1)  # garbage above the diagonal
    assert_same(torch.linalg.cholesky, junk, dtype_tols=TOLS)
    junk_lower = a + torch.tril(torch.full_like(a, -5.0), -1)
    assert_same(lambda x: torch.linalg.cholesky(x, upper=True), junk_lower, dtype_tols=TOLS)


def not_pd_batch(dtype: torch.dtype) -> torch.Tensor:
    a = spd(3, 4, 4, dtype=torch.float64)
    a[1, 2, 2] = -50.0  # minor of order 3 fails in batch element 1
    return a.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_ex_info_matches_cpu(dtype: torch.dtype) -> None:
    a = not_pd_batch(dtype)
    _, info_cpu = torch.linalg.cholesky_ex(a)
    _, info = run_no_fallback(torch.linalg.cholesky_ex, a.to("tpu"))
    assert info.dtype == torch.int32
    assert info.cpu().tolist() == info_cpu.tolist() == [0, 3, 0]


def test_cholesky_not_positive_definite_raises_like_cpu() -> None:
    e = assert_raises_like_cpu(torch.linalg.cholesky, not_pd_batch(torch.float32))
    assert isinstance(e, torch.linalg.LinAlgError) and "positive-definite" in str(e)
    matrix = not_pd_batch(torch.float32)[1]
    e = assert_raises_like_cpu(torch.linalg.cholesky, matrix)
    assert "order 3" in str(e)  # PyTorch's own check of info, which runs on tpu
    e = assert_raises_like_cpu(lambda x: torch.linalg.cholesky_ex(x, check_errors=True), matrix)
    assert isinstance(e, torch.linalg.LinAlgError)
    e = assert_raises_like_cpu(torch.cholesky, matrix)
    assert isinstance(e, torch.linalg.LinAlgError)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(dtype: torch.dtype, upper: bool, left: bool, unit: bool) -> None:
    a = general(2, 4, 4, dtype=dtype)
    b = rand(2, 4, 3, dtype=dtype) if left else rand(2, 3, 4, dtype=dtype)
    assert_same(lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left,
                                                           unitriangular=unit),
                a, b, dtype_tols=TOLS)


def test_triangular_solves_ignore_the_other_triangle() -> None:
    # LAPACK never reads the other triangle (nor the diagonal when unitriangular): NaN there
    # must not reach the result.
    a = general(4, 4, dtype=torch.float64)
    b = rand(4, 2, dtype=torch.float64)
    poisoned = a.clone()
    poisoned[0, 3] = float("nan")
    assert_same(lambda x, y: torch.linalg.solve_triangular(x, y, upper=False), poisoned, b,
                dtype_tols=TOLS)
    poisoned.diagonal().fill_(float("inf"))
    assert_same(lambda x, y: torch.linalg.solve_triangular(x, y, upper=False,
                                                           unitriangular=True),
                poisoned, b, dtype_tols=TOLS)
    assert_same(lambda y, x: torch.triangular_solve(y, x, upper=False), b, poisoned.tril(-1) +
                torch.eye(4, dtype=torch.float64) + poisoned.triu(1).nan_to_num(), dtype_tols=TOLS)


def test_solve_triangular_broadcasts_batches() -> None:
    a = general(3, 1, 4, 4, dtype=torch.float32)
    b = rand(2, 4, 5, dtype=torch.float32)
    assert_same(lambda x, y: torch.linalg.solve_triangular(x, y, upper=False), a, b,
                dtype_tols=TOLS)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("upper", [False, True])
def test_triangular_solve(transpose: bool, upper: bool) -> None:
    a = general(2, 4, 4, dtype=torch.float64)
    b = rand(2, 4, 2, dtype=torch.float64)
    assert_same(lambda y, x: torch.triangular_solve(y, x, upper=upper, transpose=transpose),
                b, a, dtype_tols=TOLS)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(upper: bool) -> None:
    a = spd(2, 5, 5, dtype=torch.float32)
    factor = torch.linalg.cholesky(a, upper=upper)
    b = rand(2, 5, 3, dtype=torch.float32)
    assert_same(lambda y, f: torch.cholesky_solve(y, f, upper=upper), b, factor, dtype_tols=TOLS)
    assert_same(lambda f: torch.cholesky_inverse(f, upper=upper), factor[0], dtype_tols=TOLS)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_inverse_of_a_singular_factor_raises_like_cpu(upper: bool) -> None:
    # A zero on the factor's diagonal: the CPU raises; the program gave NaN.
    singular = torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    for factor in (singular, torch.stack([singular, torch.eye(2)])):
        e = assert_raises_like_cpu(lambda f: torch.cholesky_inverse(f, upper=upper), factor)
        assert isinstance(e, torch.linalg.LinAlgError) and "singular" in str(e)


# ---- LU, solve, inverse, determinants ----------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (6, 4), (4, 6), (2, 3, 2, 5)])
def test_lu_factor_and_lu(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    a = rand(*shape, dtype=dtype)  # no diagonal boost: pivoting must happen
    lu, piv = assert_same(torch.linalg.lu_factor, a, dtype_tols=TOLS)
    assert piv.dtype == torch.int32
    assert_same(torch.linalg.lu, a, dtype_tols=TOLS)
    assert_same(torch.lu_unpack, lu.cpu(), piv.cpu(), dtype_tols=TOLS)


def test_lu_factor_singular_info_matches_cpu() -> None:
    a = rand(3, 4, 4, dtype=torch.float64)
    a[1, :, 1] = 0.0  # U[1, 1] is exactly zero
    a[2] = 0.0
    _, _, info_cpu = torch.linalg.lu_factor_ex(a)
    _, _, info = run_no_fallback(torch.linalg.lu_factor_ex, a.to("tpu"))
    assert info.cpu().tolist() == info_cpu.tolist()
    assert info_cpu.tolist()[0] == 0 and info_cpu.tolist()[1] > 0
    # PyTorch raises this one as a plain RuntimeError (not LinAlgError).
    e = assert_raises_like_cpu(torch.linalg.lu_factor, a)
    assert "is zero" in str(e)
    e = assert_raises_like_cpu(lambda x: torch.linalg.lu_factor_ex(x, check_errors=True), a)
    assert "is zero" in str(e)


def test_lu_without_pivoting_reconstructs() -> None:
    # The CPU kernel supports pivot=False only on CUDA; check the factorization itself.
    a = general(2, 4, 4, dtype=torch.float64)
    p, lower, upper = run_no_fallback(lambda x: torch.linalg.lu(x, pivot=False), a.to("tpu"))
    lower, upper = lower.cpu(), upper.cpu()
    torch.testing.assert_close(lower @ upper, a, rtol=1e-12, atol=1e-12)
    assert torch.equal(lower, lower.tril()) and torch.equal(upper, upper.triu())
    assert torch.equal(torch.diagonal(lower, 0, -2, -1), torch.ones(2, 4, dtype=torch.float64))


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(left: bool, adjoint: bool) -> None:
    a = rand(2, 4, 4, dtype=torch.float64)
    lu, piv = torch.linalg.lu_factor(a)
    b = rand(2, 4, 3, dtype=torch.float64) if left else rand(2, 3, 4, dtype=torch.float64)
    assert_same(lambda x, p, y: torch.linalg.lu_solve(x, p, y, left=left, adjoint=adjoint),
                lu, piv, b, dtype_tols=TOLS)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_shapes(dtype: torch.dtype) -> None:
    a = general(3, 4, 4, dtype=dtype)
    assert_same(torch.linalg.solve, a, rand(3, 4, 2, dtype=dtype), dtype_tols=TOLS)
    assert_same(torch.linalg.solve, a, rand(3, 4, dtype=dtype), dtype_tols=TOLS)  # vectors
    assert_same(torch.linalg.solve, a[0], rand(4, dtype=dtype), dtype_tols=TOLS)
    assert_same(lambda x, y: torch.linalg.solve(x, y, left=False), a, rand(3, 2, 4, dtype=dtype),
                dtype_tols=TOLS)
    assert_same(torch.linalg.solve, a[:1], rand(2, 1, 4, 3, dtype=dtype), dtype_tols=TOLS)
    # A non-contiguous A takes PyTorch's other path (it factors A, not A^T).
    assert_same(torch.linalg.solve, a.mT, rand(3, 4, 2, dtype=dtype), dtype_tols=TOLS)


def test_solve_ill_conditioned_has_small_backward_error() -> None:
    # kappa = 1e5 in float32: the solution itself is accurate to ~kappa * eps, but the
    # residual (backward error) must be at the level of float32 rounding.
    a64 = with_known_spectrum(6, torch.logspace(0, -5, 6, dtype=torch.float64))
    a = a64.float()
    b = rand(6, 2, dtype=torch.float32)
    x = run_no_fallback(torch.linalg.solve, a.to("tpu"), b.to("tpu")).cpu()
    residual = (a.double() @ x.double() - b.double()).norm() / (
        a.double().norm() * x.double().norm())
    assert residual < 1e-6, residual
    x_exact = torch.linalg.solve(a.double(), b.double())
    assert ((x.double() - x_exact).norm() / x_exact.norm()) < 1e5 * 1.2e-7 * 10


@pytest.mark.parametrize("dtype", DTYPES)
def test_inv_det_slogdet(dtype: torch.dtype) -> None:
    a = general(3, 4, 4, dtype=dtype)
    assert_same(torch.linalg.inv, a, dtype_tols=TOLS)
    assert_same(torch.linalg.inv_ex, a, dtype_tols=TOLS)
    assert_same(torch.linalg.det, a, dtype_tols={torch.float32: (1e-4, 1e-3),
                                                 torch.float64: (1e-10, 1e-8)})
    assert_same(torch.linalg.slogdet, a, dtype_tols=TOLS)
    r = rand(5, 5, dtype=dtype)  # pivoting, and a sign to get right
    assert_same(torch.linalg.det, r, dtype_tols=TOLS)
    assert_same(torch.linalg.slogdet, r, dtype_tols=TOLS)
    assert_same(torch.linalg.det, r.mT, dtype_tols=TOLS)


def test_singular_matrix_behaviour_matches_cpu() -> None:
    # Exactly singular in any elimination order: a zero column. (A matrix that is singular
    # only mathematically, such as two equal columns, can leave a pivot of 1e-17 instead of
    # 0 depending on the order of the operations, in LAPACK as here; which pivot is the
    # first zero, and so `info`, then depends on rounding.)
    s = rand(4, 4, dtype=torch.float64)
    s[:, 2] = 0.0
    e = assert_raises_like_cpu(torch.linalg.inv, s)
    assert isinstance(e, torch.linalg.LinAlgError) and "singular" in str(e)
    e = assert_raises_like_cpu(torch.linalg.solve, s, rand(4, 2, dtype=torch.float64))
    assert isinstance(e, torch.linalg.LinAlgError)
    e = assert_raises_like_cpu(lambda x: torch.linalg.inv_ex(x, check_errors=True), s)
    assert isinstance(e, torch.linalg.LinAlgError)
    _, info = run_no_fallback(torch.linalg.inv_ex, s.to("tpu"))
    assert info.item() == torch.linalg.inv_ex(s)[1].item() != 0
    assert_same(torch.linalg.det, s)
    sign, logabsdet = run_no_fallback(torch.linalg.slogdet, s.to("tpu"))
    assert sign.item() == 0.0 and logabsdet.item() == float("-inf")


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0)])
def test_empty_inputs_match_cpu(shape: tuple[int, ...]) -> None:
    a = torch.zeros(shape)
    for fn in (torch.linalg.cholesky_ex, torch.linalg.inv, torch.linalg.det,
               torch.linalg.slogdet, torch.linalg.lu_factor, torch.linalg.qr, torch.linalg.eigh,
               torch.linalg.svd, lambda x: torch.linalg.solve(x, x)):
        assert_same(fn, a)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (2, 3, 0), (2, 0, 4)])
def test_factors_of_an_empty_matrix_are_identities_as_on_the_cpu(shape: tuple[int, ...]
                                                                  ) -> None:
    # The orthogonal or permutation factor of the side that is not empty (svd's U of a 3x0
    # matrix, Vh of a 0x3, qr's complete Q, lu's P) is the identity, not zeros.
    a = torch.zeros(shape)
    for fn in (torch.linalg.svd, lambda x: torch.linalg.svd(x, full_matrices=False),
               lambda x: torch.linalg.qr(x, mode="complete"), torch.linalg.qr, torch.linalg.lu,
               torch.linalg.lu_factor_ex, lambda x: torch.lu_unpack(*torch.linalg.lu_factor(x))):
        assert_same(fn, a)


# ---- QR, eigh, SVD -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("shape", [(5, 5), (2, 6, 3), (3, 4), (2, 2, 5, 2)])
def test_qr(dtype: torch.dtype, mode: str, shape: tuple[int, ...]) -> None:
    a = rand(*shape, dtype=dtype)
    # XLA's Householder QR takes LAPACK's reflectors (and signs): Q and R equal the CPU's.
    q, r = assert_same(lambda x: torch.linalg.qr(x, mode=mode), a, dtype_tols=TOLS)
    if mode != "r":
        q, r = q.cpu(), r.cpu()
        assert_close(q @ r, a, dtype_tols=TOLS, check_device=False, what="Q R")
        eye = torch.eye(q.shape[-1], dtype=dtype)
        assert_close(q.mT @ q, eye.expand(q.mT.shape[:-1] + (q.shape[-1],)), dtype_tols=TOLS,
                     check_device=False, what="Q^T Q")


def test_geqrf_and_householder_product() -> None:
    a = rand(2, 5, 3, dtype=torch.float64)
    packed, tau = assert_same(torch.geqrf, a, dtype_tols=TOLS)
    assert_same(torch.linalg.householder_product, packed.cpu(), tau.cpu(), dtype_tols=TOLS)
    assert_same(torch.linalg.householder_product, packed.cpu(), tau.cpu()[..., :2],
                dtype_tols=TOLS)


def symmetric(*shape: int, dtype: torch.dtype, seed: int = 4) -> torch.Tensor:
    x = rand(*shape, dtype=torch.float64, seed=seed)
    return ((x + x.mT) / 2).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (1, 1)])
def test_eigh(dtype: torch.dtype, uplo: str, shape: tuple[int, ...]) -> None:
    a = symmetric(*shape, dtype=dtype)
    # Only the UPLO triangle may be read: garbage in the other one.
    junk = a + (torch.triu(torch.ones_like(a), 1) if uplo == "L" else torch.tril(
        torch.ones_like(a), -1)) * 3.0
    w_cpu, v_cpu = torch.linalg.eigh(junk, UPLO=uplo)
    w, v = run_no_fallback(lambda x: torch.linalg.eigh(x, UPLO=uplo), junk.to("tpu"))
    assert w.device.type == "tpu" and v.dtype == dtype
    w, v = w.cpu(), v.cpu()
    assert_close(w, w_cpu, dtype_tols=TOLS, check_device=False, what="eigenvalues")
    assert_close(v @ torch.diag_embed(w) @ v.mT, a, dtype_tols=TOLS, check_device=False,
                 what="V diag(w) V^T")
    eye = torch.eye(shape[-1], dtype=dtype).expand(shape)
    assert_close(v.mT @ v, eye, dtype_tols=TOLS, check_device=False, what="V^T V")
    # Random symmetric matrices have distinct eigenvalues: each vector equals the CPU's up
    # to sign.
    # (An eigenvector's error is eps * ||A|| / gap, so this is looser than the values.)
    assert_close((v.mT @ v_cpu).abs(), eye, dtype_tols={torch.float32: (1e-3, 1e-3),
                                                        torch.float64: (1e-8, 1e-8)},
                 check_device=False, what="|V^T V_cpu|")
    assert_same(lambda x: torch.linalg.eigvalsh(x, UPLO=uplo), junk, dtype_tols=TOLS)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64])
@pytest.mark.parametrize("fn", ["eigvals", "eig", "eigvals_out"])
def test_eig_of_a_nan_matrix_does_not_crash(fn: str, dtype: torch.dtype) -> None:
    # The general eigendecomposition runs on the CPU (a counted fallback), where MKL's geev
    # crashes the process on a NaN (PyTorch issue 61251). The matrix with a NaN gets NaN
    # eigenvalues and eigenvectors, the others their CPU values.
    torch.manual_seed(0)
    a = torch.randn(3, 4, 4, dtype=dtype)
    a[1, 0, 2] = float("nan")
    x = a.to("tpu")
    if fn == "eigvals_out":
        out = torch.empty(0, dtype=torch.linalg.eigvals(a[:1]).dtype, device="tpu")
        results = (torch.linalg.eigvals(x, out=out),)
    else:
        results = getattr(torch.linalg, fn)(x)
        results = results if isinstance(results, tuple) else (results,)
    finite = a[[0, 2]]
    expected = getattr(torch.linalg, "eigvals" if fn == "eigvals_out" else fn)(finite)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(results, expected, strict=True):
        got = got.cpu()
        assert bool(got[1].real.isnan().all() and got[1].imag.isnan().all())
        assert_close(got[[0, 2]], want, check_device=False,
                     dtype_tols={torch.complex64: (1e-4, 1e-4), torch.complex128: (1e-9, 1e-9)})


def test_eigh_repeated_and_ill_conditioned_eigenvalues() -> None:
    q = torch.linalg.qr(rand(6, 6, dtype=torch.float64))[0]
    values = torch.tensor([-1e-9, 1e-9, 1.0, 1.0, 2.0, 1e6], dtype=torch.float64)
    a = q @ torch.diag(values) @ q.mT
    a = (a + a.mT) / 2
    w, v = run_no_fallback(torch.linalg.eigh, a.to("tpu"))
    w, v = w.cpu(), v.cpu()
    # Absolute accuracy eps * ||A||, as LAPACK's.
    assert (w - values).abs().max() < 1e6 * 2.2e-16 * 50
    torch.testing.assert_close(v @ torch.diag(w) @ v.mT, a, rtol=0, atol=1e6 * 1e-14)
    torch.testing.assert_close(v.mT @ v, torch.eye(6, dtype=torch.float64), rtol=0, atol=1e-13)


@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_eigh_of_a_non_finite_matrix_is_nan_as_on_the_cpu(uplo: str, bad: float) -> None:
    # Only the triangle UPLO names is read: a NaN or inf there makes that matrix's
    # eigenvalues and eigenvectors NaN (the Jacobi rotations gave finite, wrong values);
    # the other matrices of the batch keep theirs.
    a = torch.tensor([[[1.0, bad], [0.0, 1.0]], [[1.0, 0.0], [bad, 1.0]],
                      [[2.0, 1.0], [1.0, 2.0]]])
    w_cpu, v_cpu = torch.linalg.eigh(a, UPLO=uplo)
    w, v = run_no_fallback(lambda x: torch.linalg.eigh(x, UPLO=uplo), a.to("tpu"))
    w, v = w.cpu(), v.cpu()
    assert torch.equal(w.isnan(), w_cpu.isnan()) and torch.equal(v.isnan(), v_cpu.isnan())
    torch.testing.assert_close(w[2], w_cpu[2])
    w_only = run_no_fallback(lambda x: torch.linalg.eigvalsh(x, UPLO=uplo), a.to("tpu"))
    assert torch.equal(w_only.cpu().isnan(), w_cpu.isnan())


@pytest.mark.parametrize("fn", [
    lambda a: torch.linalg.svd(a).S, torch.linalg.svdvals, torch.linalg.pinv,
    torch.linalg.matrix_rank,
    lambda a: torch.linalg.matrix_norm(a, 2), lambda a: torch.linalg.matrix_norm(a, "nuc"),
], ids=["svd", "svdvals", "pinv", "matrix_rank", "norm2", "nuc"])
def test_svd_of_a_matrix_with_nan_raises_like_the_cpu(fn) -> None:
    # LAPACK reports the NaN as a convergence failure, a LinAlgError; an inf gives NaN.
    nan, inf = float("nan"), float("inf")
    e = assert_raises_like_cpu(fn, torch.tensor([[[1.0, 2.0], [0.0, 1.0]], [[1.0, nan], [0.0, 1.0]]]))
    assert isinstance(e, torch.linalg.LinAlgError) and "non-finite" in str(e)
    assert_same(fn, torch.tensor([[1.0, inf], [inf, 1.0]]))


def check_svd(a: torch.Tensor, full: bool, tols: dict) -> None:
    u_cpu, s_cpu, vh_cpu = torch.linalg.svd(a, full_matrices=full)
    u, s, vh = run_no_fallback(lambda x: torch.linalg.svd(x, full_matrices=full), a.to("tpu"))
    assert (u.shape, s.shape, vh.shape) == (u_cpu.shape, s_cpu.shape, vh_cpu.shape)
    u, s, vh = u.cpu(), s.cpu(), vh.cpu()
    assert_close(s, s_cpu, dtype_tols=tols, check_device=False, what="S")
    k = s.shape[-1]
    recon = u[..., :, :k] @ torch.diag_embed(s) @ vh[..., :k, :]
    assert_close(recon, a, dtype_tols=tols, check_device=False, what="U S Vh")
    for name, m in (("U", u.mT @ u), ("Vh", vh @ vh.mT)):
        eye = torch.eye(m.shape[-1], dtype=a.dtype).expand(m.shape)
        assert_close(m, eye, dtype_tols=tols, check_device=False, what=f"{name} orthogonality")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("shape", [(4, 4), (2, 6, 3), (3, 2, 5), (5, 1), (1, 1)])
def test_svd(dtype: torch.dtype, full: bool, shape: tuple[int, ...]) -> None:
    check_svd(rand(*shape, dtype=dtype), full, TOLS)


def test_svd_rank_deficient_and_svdvals() -> None:
    a = rand(6, 2, dtype=torch.float64) @ rand(2, 4, dtype=torch.float64, seed=2)
    check_svd(a, True, TOLS)  # zero singular values: U still orthonormal, and complete
    assert_same(torch.linalg.svdvals, rand(3, 4, 6, dtype=torch.float32), dtype_tols=TOLS)


def test_svd_ill_conditioned_relative_accuracy() -> None:
    # One-sided Jacobi gets small singular values to high relative accuracy.
    values = torch.logspace(0, -10, 6, dtype=torch.float64)
    a = with_known_spectrum(6, values)
    s = run_no_fallback(torch.linalg.svdvals, a.to("tpu")).cpu()
    # A itself carries rounding errors of ~eps * ||A|| = 2e-16: the smallest value can be
    # known to ~2e-16 / 1e-10 relative; the larger ones far better.
    rel = ((s - values) / values).abs()
    assert rel[:3].max() < 1e-12, rel
    assert rel.max() < 1e-4, rel


# ---- backward ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_solve_inv_det(dtype: torch.dtype) -> None:
    a = general(2, 4, 4, dtype=dtype)
    b = rand(2, 4, 3, dtype=dtype)
    grads_match(torch.linalg.solve, a, b)
    grads_match(lambda x, y: torch.linalg.solve(x, y, left=False), a, b.mT.contiguous())
    grads_match(torch.linalg.inv, a)
    grads_match(torch.linalg.det, a)
    grads_match(lambda x: torch.linalg.slogdet(x)[1], a)
    grads_match(lambda x, y: torch.linalg.solve_triangular(x, y, upper=True), a, b)
    grads_match(lambda x: torch.linalg.lu_factor(x)[0], rand(3, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_cholesky_qr(dtype: torch.dtype) -> None:
    grads_match(torch.linalg.cholesky, spd(2, 4, 4, dtype=dtype))
    grads_match(lambda x, y: torch.cholesky_solve(y, torch.linalg.cholesky(x)),
                spd(4, 4, dtype=dtype), rand(4, 2, dtype=dtype))
    grads_match(torch.linalg.qr, rand(2, 5, 3, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_eigh_svd(dtype: torch.dtype) -> None:
    # Losses that do not depend on the eigen/singular vectors' signs.
    a = symmetric(2, 4, 4, dtype=dtype)
    grads_match(torch.linalg.eigvalsh, a)
    grads_match(lambda x: (lambda w, v: (w, v.abs()))(*torch.linalg.eigh(x)), a)
    m = rand(2, 5, 3, dtype=dtype)
    grads_match(torch.linalg.svdvals, m)
    grads_match(lambda x: (lambda u, s, vh: (u * s.unsqueeze(-2)) @ vh)(
        *torch.linalg.svd(x, full_matrices=False)), m)


# ---- bincount ----------------------------------------------------------------------------

def test_bincount_matches_cpu() -> None:
    x = torch.tensor([1, 3, 3, 0, 7, 3])
    assert_same(torch.bincount, x)
    assert_same(lambda v: torch.bincount(v, minlength=12), x)
    assert_same(torch.bincount, x, torch.tensor([0.5, 1, 2, 3, 4, 5.5]))
    assert_same(torch.bincount, x, torch.arange(6, dtype=torch.float64))
    assert_same(torch.bincount, x.int(), torch.arange(6))  # int weights: float64 sums
    assert_same(lambda v: torch.bincount(v, minlength=4), torch.tensor([], dtype=torch.long))
    for dtype in (torch.uint8, torch.int8, torch.int16):  # any integer dtype counts
        assert_same(torch.bincount, x.to(dtype))
        assert_same(torch.bincount, x.to(dtype), torch.ones(6))
    before = dict(torchtpu.debug.metrics()["host_roundtrip_ops"])
    torch.bincount(x.to("tpu"))
    after = torchtpu.debug.metrics()["host_roundtrip_ops"]
    assert after["aten::bincount"] == before.get("aten::bincount", 0) + 1


def test_bincount_errors_match_cpu() -> None:
    x = torch.tensor([1, 2])
    assert_raises_like_cpu(torch.bincount, torch.tensor([-1, 2]))
    assert_raises_like_cpu(torch.bincount, torch.tensor([[1, 2]]))
    assert_raises_like_cpu(lambda v: torch.bincount(v, minlength=-1), x)
    assert_raises_like_cpu(torch.bincount, x, torch.ones(3))
    assert_raises_like_cpu(torch.bincount, torch.tensor([1.5]))


def test_repeat_interleave_by_tensor_matches_cpu() -> None:
    # On the device: the length (the repeats' sum) is one counted read-back, none when the
    # caller gives output_size.
    for repeats in ([2, 0, 3, 1], [0, 0], [5], [1, 1, 1]):
        for dtype in (torch.int64, torch.int32):
            r = torch.tensor(repeats, dtype=dtype)
            assert_same(torch.repeat_interleave, r)
            assert_same(lambda t: torch.repeat_interleave(t, output_size=sum(repeats)), r)
    x, rep = torch.randn(4, 3), torch.tensor([1, 0, 2, 3])
    assert_same(lambda t, r: torch.repeat_interleave(t, r, dim=0), x, rep)
    assert_same(lambda t, r: torch.repeat_interleave(t, r[:3], dim=1), x, rep)
    assert_same(torch.repeat_interleave, torch.empty(0, dtype=torch.long))
    reads = dict(torchtpu.debug.metrics()["host_roundtrip_ops"]).get("aten::repeat_interleave", 0)
    torch.repeat_interleave(rep.to("tpu"), output_size=6)
    after = torchtpu.debug.metrics()["host_roundtrip_ops"].get("aten::repeat_interleave", 0)
    assert after == reads
    assert_raises_like_cpu(torch.repeat_interleave, torch.tensor([1, -1]))
    assert_raises_like_cpu(torch.repeat_interleave, torch.tensor([[1]]))
    assert_raises_like_cpu(torch.repeat_interleave, torch.tensor([1.0]))
    # A wrong output_size: the CPU refuses at once; here the next host read raises.
    with pytest.raises(RuntimeError, match="allocated size does not match required size"):
        torch.repeat_interleave(rep.to("tpu"), output_size=4)
        torch.zeros(1, device="tpu").item()


# ---- transformer fast path ---------------------------------------------------------------

def _ran_on_tpu(fn: Callable[[], Any], op: str) -> Any:
    """Runs fn under the profiler; asserts `op` was called and nothing fell back."""
    before = fallbacks()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn()
        torchtpu.synchronize()
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"
    names = {e.name for e in prof.events()}
    assert op in names, f"test is wrong: {op} was not called (the fast path was not taken)"
    return out


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal"])
def test_transformer_encoder_eval_fast_path(norm_first: bool, activation: str,
                                            masks: str) -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                       norm_first=norm_first, activation=activation)
    enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    src = torch.randn(3, 5, 16)
    kwargs: dict[str, torch.Tensor] = {}
    if masks == "padding":
        kwargs["src_key_padding_mask"] = torch.tensor(
            [[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    elif masks == "causal":
        kwargs["mask"] = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        expected = enc(src, **kwargs)
        enc_tpu = enc.to("tpu")
        actual = _ran_on_tpu(lambda: enc_tpu(src.to("tpu"), **{k: v.to("tpu") for k, v in
                                                                kwargs.items()}),
                             "aten::_transformer_encoder_layer_fwd")
    assert_close(actual, expected, dtype_tols={torch.float32: (1e-5, 1e-5)})


def test_multihead_attention_eval_fast_path_with_weights() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 2 + [True] * 3])
    with torch.no_grad():
        expected = mha(x, x, x, key_padding_mask=pad)
        mha_tpu = mha.to("tpu")
        xt = x.to("tpu")
        actual = _ran_on_tpu(lambda: mha_tpu(xt, xt, xt, key_padding_mask=pad.to("tpu")),
                             "aten::_native_multi_head_attention")
    assert_close(list(actual), list(expected), dtype_tols={torch.float32: (1e-5, 1e-5)})


# ---- compiled graphs ---------------------------------------------------------------------

def test_compiled_graph_shares_the_lowerings() -> None:
    # The *_ex ops and the factorizations lower inside one graph like in eager mode (the
    # checking wrappers, linalg.inv and co., in compile/test_graph_checks.py).
    def f(a: torch.Tensor, s: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, r = torch.linalg.qr(a)
        lower, info = torch.linalg.cholesky_ex(s)
        x = torch.linalg.solve_triangular(lower, b, upper=False)
        lu, piv, _ = torch.linalg.lu_factor_ex(a)
        return (q, r, lower, info, x, lu, piv, torch.linalg.svdvals(a),
                torch.linalg.eigvalsh(s))

    a = general(2, 4, 4, dtype=torch.float32)
    s = spd(2, 4, 4, dtype=torch.float32)
    b = rand(2, 4, 3, dtype=torch.float32)
    expected = f(a, s, b)
    compiled = torch.compile(f, backend="tpu")
    actual = run_no_fallback(compiled, a.to("tpu"), s.to("tpu"), b.to("tpu"))
    assert_close(list(actual), list(expected), dtype_tols=TOLS)


def test_cross_broadcast_dims_and_gradient() -> None:
    # linalg_cross is lowered (it ran on the CPU): operands broadcast to the result, any dim
    # of size 3, integers too, and the gradient through it.
    x, y = make((2, 3, 4), torch.float32), make((1, 3, 4), torch.float32)
    assert_same(lambda a, b: torch.linalg.cross(a, b, dim=1), x, y)
    assert_same(lambda a, b: torch.cross(a, b, dim=-2), x, y)
    assert_same(lambda a, b: torch.linalg.cross(a, b), make((5, 3), torch.int64, low=-9, high=9),
                make((5, 3), torch.int64, low=-9, high=9))

    def grads(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        torch.linalg.cross(a, b, dim=1).square().sum().backward()
        return a.grad, b.grad

    assert_same(grads, x, y, dtype_tols={torch.float32: (1e-5, 1e-4)})


# ---- Matrix exponential -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [1e-8, 1.0, 3.0, 40.0])
@pytest.mark.parametrize("shape", [(1, 1), (4, 4), (3, 5, 5), (2, 2, 3, 3)])
def test_matrix_exp_matches_cpu(dtype: torch.dtype, scale: float, shape: tuple[int, ...]) -> None:
    # Norms from below every threshold to many squarings; a batch's matrices need different
    # numbers of squarings (each row of the batch is scaled differently).
    a = rand(*shape, dtype=torch.float64) * scale
    if len(shape) > 2:
        a = a * torch.linspace(0.1, 1.0, shape[0], dtype=torch.float64).view(-1, *[1] * (len(shape) - 1))
    a = a.to(dtype)
    expected = torch.linalg.matrix_exp(a)
    actual = run_no_fallback(torch.linalg.matrix_exp, a.to("tpu"))
    # Relative to the result's size: exp(40 A) spans many orders of magnitude.
    atol = {torch.float32: 2e-5, torch.float64: 1e-12}[dtype] * expected.abs().max().item()
    torch.testing.assert_close(actual.cpu(), expected, rtol=TOLS[dtype][0], atol=atol)


def test_matrix_exp_edges_and_half_precision() -> None:
    assert_close(run_no_fallback(torch.linalg.matrix_exp, torch.zeros(0, 3, 3, device="tpu")),
                 torch.zeros(0, 3, 3))
    nonfinite = torch.tensor([[[float("nan"), 0.0], [0.0, 1.0]], [[float("inf"), 0.0], [0.0, 1.0]],
                              [[0.0, 1.0], [-1.0, 0.0]]])
    assert_close(run_no_fallback(torch.linalg.matrix_exp, nonfinite.to("tpu")),
                 torch.linalg.matrix_exp(nonfinite), dtype_tols=TOLS)
    # float16 and bfloat16 compute in float32 and round once (the CPU kernel computes in the
    # half type, whose Padé coefficients overflow: NaN/inf for a plain randn(3, 3)).
    a = rand(3, 3, dtype=torch.float32)
    for dtype in (torch.float16, torch.bfloat16):
        actual = run_no_fallback(torch.linalg.matrix_exp, a.to(dtype).to("tpu"))
        expected = torch.linalg.matrix_exp(a.to(dtype).float()).to(dtype)
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-2, atol=1e-2)


def test_matrix_exp_gradient_and_compiled() -> None:
    grads_match(torch.linalg.matrix_exp, rand(2, 4, 4, dtype=torch.float64))
    a = rand(3, 4, 4, dtype=torch.float32) * 5
    compiled = torch.compile(lambda m: torch.linalg.matrix_exp(m) @ m, backend="tpu")
    actual = run_no_fallback(compiled, a.to("tpu"))
    expected = torch.linalg.matrix_exp(a) @ a
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4,
                               atol=1e-5 * expected.abs().max().item())
