"""Reductions: full and per-dim, keepdim, dtypes, non-contiguous inputs, index-returning ones."""

from __future__ import annotations

import math

import pytest
import torch
from _compare import assert_raises_like_cpu, assert_same, fallbacks, make

# Sums of ~30 values in [-3, 3]: the order of accumulation differs from ATen's.
SUM_TOLS = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (2e-2, 5e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_sum(dtype: torch.dtype) -> None:
    x = make((5, 6), dtype, low=-9, high=9)
    assert_same(torch.sum, x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.sum(dim=1), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.sum(dim=(0, 1), keepdim=True), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.sum(dim=-2, keepdim=True), x, dtype_tols=SUM_TOLS)


def test_sum_dtype_argument() -> None:
    x = make((4, 5), torch.bfloat16)
    assert_same(lambda t: t.sum(dtype=torch.float32), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.sum(1, dtype=torch.float32), make((4, 5), torch.int64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mean(dtype: torch.dtype) -> None:
    x = make((4, 3, 5), dtype)
    assert_same(torch.mean, x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.mean(dim=(0, 2)), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.mean(dim=1, keepdim=True), x, dtype_tols=SUM_TOLS)


def test_reduction_noncontiguous() -> None:
    x = make((6, 4), torch.float32, noncontiguous=True)
    assert_same(lambda t: t.sum(0), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.amax(1), make((4, 6), torch.float32).t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_prod(dtype: torch.dtype) -> None:
    x = make((3, 4), dtype, low=-2, high=2)
    assert_same(torch.prod, x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.prod(1), x, dtype_tols=SUM_TOLS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_max_min(dtype: torch.dtype) -> None:
    x = make((4, 6), dtype, low=-50, high=50)
    assert_same(torch.max, x)
    assert_same(torch.min, x)
    assert_same(lambda t: t.amax(dim=0), x)
    assert_same(lambda t: t.amin(dim=1, keepdim=True), x)
    assert_same(lambda t: tuple(t.max(dim=1)), x)
    assert_same(lambda t: tuple(t.min(dim=0, keepdim=True)), x)
    assert_same(lambda t: tuple(torch.aminmax(t)), x)


def test_max_ties_return_first_index() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    assert_same(lambda t: tuple(t.max(dim=1)), x)
    assert_same(lambda t: t.argmax(dim=1), x)
    assert_same(lambda t: t.argmin(dim=1), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_argmax_argmin(dtype: torch.dtype) -> None:
    x = make((5, 7), dtype, low=-100, high=100)
    assert_same(torch.argmax, x)
    assert_same(lambda t: t.argmax(dim=0), x)
    assert_same(lambda t: t.argmin(dim=1, keepdim=True), x)


def test_max_with_nan_propagates() -> None:
    x = torch.tensor([[1.0, float("nan"), 2.0], [0.0, 5.0, -1.0]])
    assert_same(lambda t: t.sum(1), x)
    assert_same(lambda t: tuple(t.max(dim=1)), x)
    assert_same(torch.argmax, x)
    assert_same(torch.max, x)
    assert_same(torch.min, x)
    assert_same(lambda t: t.amax(1), x)
    assert_same(lambda t: t.amin(1), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_all_any(dtype: torch.dtype) -> None:
    x = make((4, 5), dtype, low=0, high=2)
    assert_same(torch.all, x)
    assert_same(torch.any, x)
    assert_same(lambda t: t.all(dim=1), x)
    assert_same(lambda t: t.any(dim=0), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("correction", [0, 1])
def test_var_std(dtype: torch.dtype, correction: int) -> None:
    x = make((4, 8), dtype)
    assert_same(lambda t: t.var(correction=correction), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.std(dim=1, correction=correction), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: tuple(torch.var_mean(t, dim=0, correction=correction)), x,
                dtype_tols=SUM_TOLS)
    assert_same(lambda t: tuple(torch.std_mean(t, dim=1, keepdim=True)), x,
                dtype_tols=SUM_TOLS)


@pytest.mark.parametrize("scale", [1e20, 1e36, 1e-30, 1e-36])
def test_var_std_of_float32_extremes_like_cpu(scale: float) -> None:
    # The CPU accumulates a float32 variance in double: its std stays finite and non-zero
    # where float32 squares of the deviations overflow (1e20) or flush to zero (1e-30).
    x = make((3, 8), torch.float32) * scale
    assert_same(lambda t: t.std(dim=1), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: tuple(torch.std_mean(t, dim=0)), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: tuple(torch.var_mean(t, dim=1, correction=0)), x,
                dtype_tols=SUM_TOLS)


def test_var_in_range_whose_squares_overflow_float32() -> None:
    # Values in [-3, 3] * 5e18: a variance near 1e38 fits, deviations' squares up to ~1e39
    # do not.
    x = make((3, 8), torch.float32) * 5e18
    assert_same(lambda t: t.var(dim=1), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: torch.var(t), x, dtype_tols=SUM_TOLS)


def test_norms() -> None:
    x = make((4, 6), torch.float32)
    assert_same(torch.linalg.vector_norm, x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=1, dim=1), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=float("inf"), dim=0), x)
    assert_same(lambda t: t.norm(p=2, dim=1), x, dtype_tols=SUM_TOLS)


# The orders with a reduction of their own (one program each: the order is structure), and
# one order that takes the general sum(|x|^p)^(1/p).
NORM_ORDERS = [2, 1, 0, float("inf"), -float("inf"), 3.5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", NORM_ORDERS)
def test_vector_norm_orders(p: float, dtype: torch.dtype) -> None:
    x = make((4, 6), dtype)
    x[1, 2] = 0  # the 0-norm counts nonzeros; -inf has a zero to find
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p, dim=1), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p, dim=(0, 1), keepdim=True), x,
                dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.norm(p=p, dim=0, keepdim=True), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p, dtype=torch.float32), x,
                dtype_tols=SUM_TOLS)


@pytest.mark.parametrize("p", NORM_ORDERS)
def test_vector_norm_non_finite_elements(p: float) -> None:
    x = make((3, 4), torch.float32)
    x[0, 1] = float("nan")
    x[1, 3] = float("inf")
    x[2, 0] = -float("inf")
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p, dim=1), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p), x, dtype_tols=SUM_TOLS)


@pytest.mark.parametrize("p", [2, 1, 0, 3.5])
def test_vector_norm_empty(p: float) -> None:
    # The infinity norms of an empty tensor raise (no identity); these are 0.
    x = torch.empty(0, 3)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p), x)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p, dim=0), x)
    assert_same(lambda t: torch.linalg.vector_norm(t, ord=p, dim=1, keepdim=True), x)


@pytest.mark.parametrize("p", [float("-inf"), -1.0, -0.5, float("inf")])
def test_foreach_norm_without_identity_refuses_an_empty_tensor(p: float) -> None:
    # The norm would ignore the empty gradient (clip_grad_norm_(..., norm_type=-inf) said 1).
    assert_raises_like_cpu(lambda a, e: torch._foreach_norm([a, e], p),
                           torch.tensor([3.0, -1.0]), torch.empty(0))


@pytest.mark.parametrize("p", NORM_ORDERS)
def test_foreach_norm_and_clip_grad_norm(p: float) -> None:
    grads = [make((5, 3), torch.float32), make((7,), torch.float32), make((2, 2, 2), torch.float32)]
    assert_same(lambda *g: tuple(torch._foreach_norm(list(g), p)), *grads, dtype_tols=SUM_TOLS)

    def clip(*g: torch.Tensor) -> tuple[torch.Tensor, ...]:
        params = [torch.zeros_like(t, requires_grad=True) for t in g]
        for param, grad in zip(params, g):
            param.grad = grad.clone()
        total = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0, norm_type=p)
        return (total, *(param.grad for param in params))

    assert_same(clip, *grads, dtype_tols=SUM_TOLS)


def test_logsumexp() -> None:
    x = make((3, 7), torch.float32) * 10
    assert_same(lambda t: torch.logsumexp(t, dim=1), x, dtype_tols=SUM_TOLS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_cumsum_cumprod(dtype: torch.dtype) -> None:
    x = make((3, 6), dtype, low=-2, high=2)
    assert_same(lambda t: t.cumsum(1), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.cumsum(0), x, dtype_tols=SUM_TOLS)
    assert_same(lambda t: t.cumprod(1), x, dtype_tols=SUM_TOLS)


def test_cumsum_bool_promotes_to_int64() -> None:
    assert_same(lambda t: t.cumsum(0), make((7,), torch.bool))


def test_nansum_count_nonzero() -> None:
    x = torch.tensor([[1.0, float("nan"), 2.0], [0.0, 0.0, -1.0]])
    assert_same(torch.nansum, x)
    assert_same(lambda t: torch.count_nonzero(t, dim=1), x)


def test_empty_reductions() -> None:
    x = torch.empty(0, 3)
    assert_same(lambda t: t.sum(0), x)
    assert_same(torch.sum, x)
    assert_same(lambda t: t.prod(0), x)


# A ScalarType argument reached the lowerings as an int: prod(dtype=torch.int64) reduced
# "dim 4" and the plugin rejected the program.
@pytest.mark.parametrize("op,dtype", [
    (op, dtype) for op in (torch.prod, torch.sum, torch.mean)
    for dtype in (torch.int64, torch.float64, torch.float32)
    if op is not torch.mean or dtype.is_floating_point])  # mean takes floating dtypes only
def test_reduction_with_a_dtype_argument(op, dtype: torch.dtype) -> None:
    src = torch.float32 if dtype.is_floating_point else torch.int32
    x = torch.arange(1, 7, dtype=src).reshape(2, 3)
    assert torch.equal(op(x.to("tpu"), dtype=dtype).cpu(), op(x, dtype=dtype))
    assert torch.equal(op(x.to("tpu"), 1, dtype=dtype).cpu(), op(x, 1, dtype=dtype))


@pytest.mark.parametrize("fn", [
    lambda x: torch.max(x),
    lambda x: torch.min(x),
    lambda x: x.flatten().max(),
    lambda x: torch.median(x, 0),
    lambda x: torch.median(x, -2),
    lambda x: torch.nanmedian(x, 0),
    lambda x: torch.median(x, 0, out=(torch.empty(0, device=x.device),
                                      torch.empty(0, dtype=torch.long, device=x.device))),
    lambda x: torch.kthvalue(x, 1, 0),
    lambda x: torch.mode(x, 0),
    lambda x: torch.mode(x.flatten()),
], ids=["max", "min", "max_flat", "median_dim", "median_neg_dim", "nanmedian_dim", "median_out",
        "kthvalue_dim", "mode_dim", "mode_flat"])
def test_reduction_without_identity_over_nothing_raises(fn) -> None:
    # No value to return: the CPU raises (RuntimeError / IndexError) where the lowering's
    # fill value (-inf, inf, NaN) would otherwise come back as the result.
    assert_raises_like_cpu(fn, torch.empty(0, 3))


def test_reduction_without_identity_nonempty_extent() -> None:
    # Along a non-empty dim of a tensor with no elements the result is empty, no error.
    x = torch.empty(0, 3)
    assert_same(lambda t: torch.median(t, 1), x)
    assert_same(lambda t: torch.nanmedian(t, 1), x)
    assert_same(lambda t: torch.max(t, 1), x)
    assert_same(torch.median, x)  # over everything: NaN, as on the CPU
    assert_same(lambda t: tuple(torch.mode(t, 1)), x)


@pytest.mark.parametrize("name", ["nansum", "nanmean", "any", "all", "sum", "mean"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reduction_over_an_empty_dim_list(name: str, keepdim: bool) -> None:
    # dim=() reduces everything for sum / nansum (nansum's meta kernel reduces nothing) and
    # nothing for any / all, as on the CPU.
    x = torch.tensor([[0.0, float("nan"), 2.0], [3.0, 0.0, 5.0]])
    fn = getattr(torch, name)
    assert_same(lambda t: fn(t, dim=(), keepdim=keepdim), x)
    if name not in ("nanmean", "mean"):
        assert_same(lambda t: fn(t, dim=[], keepdim=keepdim), x.long())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["sum", "nansum", "mean", "cumsum", "cumprod"])
def test_reduction_dtype_argument_rounds_input_first(name: str, dtype: torch.dtype) -> None:
    # dtype= casts the input before reducing: float32 values are rounded to the 16-bit
    # dtype, then accumulated in float32 and rounded once (tolerances a few 16-bit ulps).
    torch.manual_seed(1)
    x = torch.randn(16, 8 if name == "cumprod" else 40) * 3
    tols = {torch.bfloat16: (4e-3, 4e-3), torch.float16: (5e-4, 5e-4)}
    assert_same(lambda t: getattr(t, name)(1, dtype=dtype), x, dtype_tols=tols)


@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin], ids=["cummax", "cummin"])
def test_cummax_cummin_ties_nan_dtypes_and_gradient(fn) -> None:
    # Of equal values the later index wins, and a NaN sticks with the index of the latest
    # NaN, as in the CPU kernel's forward walk; of 0.0 and -0.0 the later one's sign.
    nan = float("nan")
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, nan, 5.0, nan, 0.0],
                      [2.0, 2.0, 1.0, 1.0, 4.0, 4.0, -1.0, -1.0]])
    assert_same(lambda t: tuple(fn(t, 1)), x)
    assert_same(lambda t: tuple(fn(t, 0)), x)
    zeros = torch.tensor([0.0, -0.0, 1.0, -0.0, 0.0, -2.0, -0.0])
    signs = [torch.signbit(fn(t, 0).values).cpu() for t in (zeros, zeros.to("tpu"))]
    assert torch.equal(signs[0], signs[1])
    # Longer than 256 (XLA's CPU compiler failed on a variadic scan there), with ties.
    assert_same(lambda t: tuple(fn(t, 1)), make((3, 3000), torch.int64, low=-50, high=50))
    assert_same(lambda t: tuple(fn(t, 0)), make((257,), torch.float32))
    assert_same(lambda t: tuple(fn(t, -1)), make((3, 17), torch.int64, low=-3, high=3))
    assert_same(lambda t: tuple(fn(t, 0)), make((9,), torch.int64, low=-2, high=2) > 0)
    assert_same(lambda t: tuple(fn(t, 0)), make((0, 4), torch.float32))

    def grad(t: torch.Tensor) -> torch.Tensor:
        t = t.detach().requires_grad_()
        fn(t, 1).values.square().sum().backward()
        return t.grad

    assert_same(grad, make((4, 6), torch.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_like_cpu(dtype: torch.dtype) -> None:
    # The CPU's bins exactly: elements on bin edges, the data's own range when min == max,
    # a single value, NaN and out-of-range elements skipped, nothing.
    cases = [
        (torch.randn(1000, dtype=dtype), {}),
        (torch.randn(1000, dtype=dtype), {"bins": 10, "min": -1, "max": 1}),
        (torch.randn(1000, dtype=dtype), {"bins": 3, "min": 0.5, "max": 0.5}),
        (torch.linspace(0, 1, 101, dtype=dtype), {"bins": 10, "min": 0, "max": 1}),
        (torch.linspace(-3, 7, 1001, dtype=dtype), {"bins": 37, "min": -3, "max": 7}),
        (torch.tensor([1.0, 1.0, 1.0], dtype=dtype), {"bins": 4}),
        (torch.tensor([0.1, 0.2, float("nan"), 0.3, 2.0], dtype=dtype), {"bins": 5, "min": 0,
                                                                         "max": 1}),
        (torch.tensor([], dtype=dtype), {"bins": 5}),
        (torch.randn(5, 6, dtype=dtype), {"bins": 1}),
    ]
    before = fallbacks()
    for x, kwargs in cases:
        assert torch.equal(torch.histc(x.to("tpu"), **kwargs).cpu(), torch.histc(x, **kwargs))
    assert fallbacks() == before
    for x, kwargs in [(torch.randn(10, dtype=dtype), {"min": 0, "max": float("inf")}),
                      (torch.tensor([1.0, float("inf")], dtype=dtype), {})]:
        assert_raises_like_cpu(lambda t: torch.histc(t, **kwargs), x)


def test_histc_values_on_bin_edges_like_cpu() -> None:
    # The bin width divided as a product with its rounded reciprocal: 0.3 in 7 bins over
    # [-0.3, 1.1] went into bin 2, the CPU's bin 3.
    for dtype in (torch.float32, torch.float64):
        for v, bins, lo, hi in [(0.3, 7, -0.3, 1.1), (0.9, 7, -0.3, 1.1), (0.1, 10, 0.0, 1.0),
                                (0.7, 10, 0.0, 1.0), (2.2, 11, 0.0, 3.3)]:
            x = torch.full((3,), v, dtype=dtype)
            assert torch.equal(torch.histc(x.to("tpu"), bins, lo, hi).cpu(),
                               torch.histc(x, bins, lo, hi)), (dtype, v, bins, lo, hi)
        x = torch.linspace(-1, 1, 201, dtype=dtype)
        assert torch.equal(torch.histc(x.to("tpu"), 40, -1, 1).cpu(), torch.histc(x, 40, -1, 1))


def test_topk_of_0d_tensor_like_cpu() -> None:
    x = torch.tensor(3.0)
    for k in (0, 1):
        got, want = torch.topk(x.to("tpu"), k), torch.topk(x, k)
        assert torch.equal(got.values.cpu(), want.values)
        assert torch.equal(got.indices.cpu(), want.indices)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_histc_of_16_bit_floats_bins_like_cpu(dtype: torch.dtype) -> None:
    # It ran on the CPU (and compiled graphs refused it): the CPU bins in 16-bit
    # arithmetic, every step rounded, which moves elements near bin edges.
    g = torch.Generator().manual_seed(0)
    before = fallbacks()
    for trial in range(60):
        n = int(torch.randint(1, 250, (), generator=g))
        x = (torch.randn(n, generator=g) * float(torch.rand((), generator=g) * 10)).to(dtype)
        if trial % 3 == 0:
            x = torch.round(x * 4) / 4  # values on bin edges
        bins = int(torch.randint(1, 40, (), generator=g))
        kwargs = {} if trial % 2 else {"min": float(x.min()) - 0.5 * (trial % 5),
                                       "max": float(x.max()) + 0.25 * (trial % 7)}
        want = torch.histc(x, bins, **kwargs)
        assert torch.equal(torch.histc(x.to("tpu"), bins, **kwargs).cpu(), want), (trial, kwargs)
    assert fallbacks() == before
    # Counts are exact, rounded once: the CPU's bfloat16 count of 300 ones stops at 256.
    ones = torch.ones(300, dtype=dtype)
    assert torch.histc(ones.to("tpu"), 1).cpu().item() == 300
    f = torch.compile(lambda a: torch.histc(a, 4), backend="tpu", dynamic=True)
    for n in (10, 13):
        x = torch.randn(n).to(dtype)
        assert torch.equal(f(x.to("tpu")).cpu(), torch.histc(x, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram_like_cpu(dtype: torch.dtype) -> None:
    # Counted bins over the data's range or a given one (elements on the edges, a range
    # of one value widened, nothing), given edges, weights and density: hist and edges
    # as the CPU computes them.
    def t(*v: float) -> torch.Tensor:
        return torch.tensor(v, dtype=dtype)

    x = torch.randn(1000, dtype=dtype)
    w = torch.rand(1000, dtype=dtype)
    cases = [
        (x, 10, {}), (x, 7, {"range": (-1.0, 1.0)}), (x, 5, {"density": True}),
        (x, 6, {"weight": w}), (x, 6, {"weight": w, "density": True}),
        (x, t(-2.0, -0.5, 0.0, 0.3, 2.5), {}),
        (x, t(-2.0, -0.5, 0.0, 0.3, 2.5), {"weight": w, "density": True}),
        (torch.full((5,), 3.0, dtype=dtype), 4, {}), (t(), 4, {}),
        (torch.arange(10, dtype=dtype), 9, {}),
        (torch.arange(10, dtype=dtype).reshape(2, 5), 3, {"range": (2.0, 7.0)}),
        (t(float("nan"), 1.0, 2.0, float("inf")), 3, {"range": (0.0, 5.0)}),
        (torch.linspace(0, 1, 101, dtype=dtype), 7, {}),
        (torch.rand(5000, dtype=dtype) * 1e-3 + 1.0, 13, {}),
    ]
    before = fallbacks()
    for data, bins, kwargs in cases:
        weight = kwargs.pop("weight", None)

        def histogram(d, b, wt, kwargs=kwargs):
            return tuple(torch.histogram(d, b, weight=wt, **kwargs))

        assert_same(histogram, data, bins, weight)
    assert fallbacks() == before
    for data, bins, kwargs in [(x, 3, {"range": (1.0, 0.0)}), (x, 3, {"range": (0.0, math.inf)}),
                               (t(1.0, math.nan), 3, {}), (x, 0, {}), (x, t(1.0), {}),
                               (x, 3, {"weight": torch.ones(3, dtype=dtype)})]:
        assert_raises_like_cpu(lambda d, b: torch.histogram(d, b, **kwargs), data, bins)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogramdd_like_cpu(dtype: torch.dtype) -> None:
    # Counted bins per dim over the data's ranges or given ones, given edges, weights and
    # density; rows with a NaN or outside one dim's edges are dropped.
    x = torch.randn(200, 3, dtype=dtype)
    with_nan = x.clone()
    with_nan[5, 1] = math.nan  # a range from the data would then be NaN: the CPU refuses
    w = torch.rand(200, dtype=dtype)
    edges = [torch.tensor([-2.0, 0.0, 0.5, 2.0], dtype=dtype),
             torch.linspace(-1, 1, 5, dtype=dtype), torch.tensor([-3.0, 3.0], dtype=dtype)]
    before = fallbacks()
    for data, bins, kwargs in [
            (x, [3, 4, 2], {}), (x, [3, 4, 2], {"weight": w, "density": True}),
            (with_nan, [2, 2, 5], {"range": [-1.0, 1.0, 0.0, 2.0, -3.0, 3.0]}),
            (with_nan, edges, {}), (with_nan, edges, {"weight": w, "density": True})]:
        wt = kwargs.pop("weight", None)
        given = [] if isinstance(bins[0], int) else bins  # edge tensors go as arguments

        def histogramdd(d, wt, *given, bins=bins, kwargs=kwargs):
            hist, bin_edges = torch.histogramdd(d, list(given) or bins, weight=wt, **kwargs)
            return (hist, *bin_edges)

        assert_same(histogramdd, data, wt, *given)
    assert fallbacks() == before
    assert_raises_like_cpu(lambda d: torch.histogramdd(d, [3, 3, 3]), with_nan)
    assert_raises_like_cpu(lambda d: torch.histogramdd(d, [3, 3]), x)
    assert_raises_like_cpu(lambda d: torch.histogramdd(d, [3, 3, 3], range=[0.0, 1.0]), x)


def test_hash_tensor_like_cpu() -> None:
    # The xor of the elements' bits as uint64: floats by their float64 bits, integers and
    # bools by their int64 value's; over all dims or some, keepdim.
    cases = [torch.randn(4, 5), torch.randn(3, dtype=torch.float64),
             make((4, 5), torch.bfloat16), torch.tensor([-1, 7, 2**40], dtype=torch.int64),
             torch.tensor([-1, 3], dtype=torch.int8), torch.tensor([True, False, True]),
             torch.tensor([math.nan, -0.0, math.inf])]
    before = fallbacks()
    for x in cases:
        assert_same(torch.hash_tensor, x)
    x = torch.randn(4, 5, 6)
    assert_same(lambda t: torch.hash_tensor(t, [0, 2]), x)
    assert_same(lambda t: torch.hash_tensor(t, [1], keepdim=True), x)
    assert fallbacks() == before
    assert_raises_like_cpu(torch.hash_tensor, torch.zeros(0, 3))
    assert_raises_like_cpu(lambda t: torch.hash_tensor(t, [0]), torch.zeros(0, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("p,dim,maxnorm", [(2, 0, 1.0), (1, 1, 2.0), (3.5, -1, 0.5),
                                           (float("inf"), 2, 1.0), (2, 1, 100.0),
                                           (0.5, 0, 3.0)])
def test_renorm_like_cpu(dtype: torch.dtype, p: float, dim: int, maxnorm: float) -> None:
    x = make((4, 5, 6), dtype)
    tols = {torch.bfloat16: (1e-2, 1e-2)}
    before = fallbacks()
    assert_same(lambda t: torch.renorm(t, p, dim, maxnorm), x, dtype_tols=tols)
    assert_same(lambda t: t.clone().renorm_(p, dim, maxnorm), x, dtype_tols=tols)
    assert fallbacks() == before


def test_mode_like_cpu() -> None:
    # The first longest run of the sorted row (the smallest most frequent value) and the
    # index of its last occurrence, as the CPU kernel returns them for these short rows.
    cases = [torch.tensor([1, 2, 2, 3, 3, 0]), torch.randint(0, 4, (3, 7)),
             torch.randint(0, 3, (2, 5, 6)).float(), torch.tensor([[1.0, 1.0, 2.0, 2.0]]),
             torch.tensor(3.0), torch.tensor([True, False, True]), torch.randn(4, 5)]
    before = fallbacks()
    for x in cases:
        for dim in range(-max(x.dim(), 1), max(x.dim(), 1)):
            for keepdim in (False, True):
                assert_same(lambda t: tuple(torch.mode(t, dim, keepdim)), x)
    assert fallbacks() == before


@pytest.mark.parametrize("call", [
    lambda x: x[:1].var(), lambda x: x.view(2, 3)[:, :1].std(1),
    lambda x: torch.var_mean(x[:1]), lambda x: x[:3].var(correction=5),
])
def test_nonpositive_degrees_of_freedom_warn_like_cpu(call) -> None:
    x = torch.arange(6.0)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0") as cpu:
        call(x)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0") as tpu:
        call(x.to("tpu"))
    assert str(tpu[0].message).split(" (Triggered")[0] == str(cpu[0].message).split(" (Trigg")[0]


def test_positive_degrees_of_freedom_do_not_warn() -> None:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.arange(6.0, device="tpu").view(2, 3).std(1)
