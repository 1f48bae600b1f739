"""Matrix products: mm, bmm, matmul broadcasting, addmm/baddbmm, linear, dot/vdot, transposes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_same, make

# K <= 64 products of values in [-3, 3]: sums of order 10-100, accumulated in another order.
MM_TOLS = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (2e-2, 2e-1)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm(dtype: torch.dtype) -> None:
    assert_same(torch.mm, make((5, 7), dtype), make((7, 3), dtype), dtype_tols=MM_TOLS)


def test_mm_int64() -> None:
    a = make((4, 6), torch.int64, low=-9, high=9)
    b = make((6, 3), torch.int64, low=-9, high=9)
    assert_same(torch.mm, a, b)


def test_mm_transposed_inputs() -> None:
    a = make((7, 5), torch.float32).t()
    b = make((3, 7), torch.float32).t()
    assert_same(torch.mm, a, b, dtype_tols=MM_TOLS)
    assert_same(torch.mm, make((5, 7), torch.float32, noncontiguous=True), make((7, 2),
                torch.float32), dtype_tols=MM_TOLS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm(dtype: torch.dtype) -> None:
    assert_same(torch.bmm, make((3, 4, 5), dtype), make((3, 5, 6), dtype), dtype_tols=MM_TOLS)


@pytest.mark.parametrize("shapes", [
    ((5,), (5,)),
    ((3, 5), (5,)),
    ((5,), (5, 2)),
    ((2, 3, 4), (4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((4, 3), (2, 3, 6)),
])
def test_matmul_broadcasting(shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a, b = (make(s, torch.float32) for s in shapes)
    assert_same(torch.matmul, a, b, dtype_tols=MM_TOLS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm(dtype: torch.dtype) -> None:
    bias = make((6,), dtype)
    a, b = make((4, 5), dtype), make((5, 6), dtype)
    assert_same(torch.addmm, bias, a, b, dtype_tols=MM_TOLS)
    assert_same(lambda c, x, y: torch.addmm(c, x, y, beta=0.5, alpha=2.0), make((4, 6), dtype),
                a, b, dtype_tols=MM_TOLS)


def test_baddbmm_addbmm_addmv() -> None:
    f = torch.float32
    assert_same(lambda c, x, y: torch.baddbmm(c, x, y, alpha=0.5), make((2, 3, 4), f),
                make((2, 3, 5), f), make((2, 5, 4), f), dtype_tols=MM_TOLS)
    assert_same(torch.addbmm, make((3, 4), f), make((2, 3, 5), f), make((2, 5, 4), f),
                dtype_tols=MM_TOLS)
    assert_same(torch.addmv, make((3,), f), make((3, 5), f), make((5,), f), dtype_tols=MM_TOLS)


def test_zero_alpha_drops_the_product_like_the_cpu_gemm() -> None:
    # addmm, addmv, addbmm and _addmm_activation are one GEMM/GEMV call on the CPU: alpha == 0
    # leaves NaN and inf of the product out (BLAS). baddbmm's small-batch loop keeps them.
    def poisoned(*shape: int) -> torch.Tensor:
        t = make(shape, torch.float32)
        t.view(-1)[0] = float("nan")
        t.view(-1)[1] = float("inf")
        return t
    f = torch.float32
    assert_same(lambda c, x, y: torch.addmm(c, x, y, alpha=0), make((3, 4), f), poisoned(3, 5),
                poisoned(5, 4))
    assert_same(lambda c, x, y: torch.addmm(c, x, y, alpha=0, beta=0), poisoned(3, 4),
                poisoned(3, 5), make((5, 4), f))
    assert_same(lambda c, x, y: torch.ops.aten._addmm_activation(c, x, y, alpha=0),
                make((3, 4), f), poisoned(3, 5), make((5, 4), f))
    assert_same(lambda c, x, y: torch.addmv(c, x, y, alpha=0), make((3,), f), poisoned(3, 5),
                make((5,), f))
    assert_same(lambda c, x, y: torch.addbmm(c, x, y, alpha=0), make((3, 4), f),
                poisoned(2, 3, 5), make((2, 5, 4), f))
    assert_same(lambda c, x, y: torch.baddbmm(c, x, y, alpha=0), make((2, 3, 4), f),
                poisoned(2, 3, 5), make((2, 5, 4), f))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear(dtype: torch.dtype) -> None:
    x, w, b = make((2, 3, 8), dtype), make((4, 8), dtype), make((4,), dtype)
    assert_same(F.linear, x, w, b, dtype_tols=MM_TOLS)
    assert_same(F.linear, x, w, dtype_tols=MM_TOLS)


def test_dot_vdot_outer() -> None:
    a, b = make((9,), torch.float32), make((9,), torch.float32)
    assert_same(torch.dot, a, b, dtype_tols=MM_TOLS)
    assert_same(torch.vdot, a, b, dtype_tols=MM_TOLS)
    assert_same(torch.outer, a, b[:4])


def test_mm_empty_inner_dim() -> None:
    assert_same(torch.mm, torch.empty(3, 0), torch.empty(0, 4))

