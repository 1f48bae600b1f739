"""Factory functions: shapes, dtypes, values, and the statistics of random ones."""

from __future__ import annotations

import math

import pytest
import torch

import torchtpu

TPU = "tpu"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_empty_zeros_ones_full(dtype: torch.dtype) -> None:
    e = torch.empty(2, 3, dtype=dtype, device=TPU)
    assert e.device.type == TPU and e.shape == (2, 3) and e.dtype == dtype
    z = torch.zeros(2, 3, dtype=dtype, device=TPU)
    assert torch.equal(z.cpu(), torch.zeros(2, 3, dtype=dtype))
    o = torch.ones(4, dtype=dtype, device=TPU)
    assert torch.equal(o.cpu(), torch.ones(4, dtype=dtype))
    value = True if dtype == torch.bool else 3
    f = torch.full((2, 2), value, dtype=dtype, device=TPU)
    assert torch.equal(f.cpu(), torch.full((2, 2), value, dtype=dtype))


def test_full_infers_dtype() -> None:
    assert torch.full((2,), 1.5, device=TPU).dtype == torch.float32
    assert torch.full((2,), 7, device=TPU).dtype == torch.int64
    assert torch.full((2,), True, device=TPU).dtype == torch.bool


def test_like_factories() -> None:
    x = torch.randn(3, 4, device=TPU)
    for fn, expected in ((torch.zeros_like, torch.zeros(3, 4)), (torch.ones_like, torch.ones(3, 4)),
                         (lambda t: torch.full_like(t, 2.5), torch.full((3, 4), 2.5))):
        y = fn(x)
        assert y.device.type == TPU
        assert torch.equal(y.cpu(), expected)
    assert torch.empty_like(x).shape == x.shape
    assert x.new_zeros(5).device.type == TPU
    assert torch.equal(x.new_ones(2, dtype=torch.int64).cpu(), torch.ones(2, dtype=torch.int64))


def test_zero_size() -> None:
    for shape in ((0,), (3, 0), (0, 2, 4)):
        t = torch.zeros(shape, device=TPU)
        assert t.shape == shape and t.numel() == 0
        assert t.cpu().shape == shape


@pytest.mark.parametrize("args,kwargs", [
    ((10,), {}),
    ((2, 11, 3), {}),
    ((0.0, 1.0, 0.1), {}),
    ((5,), {"dtype": torch.float32}),
    ((-3, 3), {"dtype": torch.bfloat16}),
    ((10, 0, -2), {}),
])
def test_arange(args: tuple, kwargs: dict) -> None:
    t = torch.arange(*args, device=TPU, **kwargs)
    expected = torch.arange(*args, **kwargs)
    assert t.dtype == expected.dtype and t.shape == expected.shape
    torch.testing.assert_close(t.cpu(), expected, rtol=1e-6, atol=1e-6)


def test_linspace_logspace_eye() -> None:
    torch.testing.assert_close(torch.linspace(-1, 2, 7, device=TPU).cpu(),
                               torch.linspace(-1, 2, 7), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(torch.logspace(0, 2, 5, device=TPU).cpu(), torch.logspace(0, 2, 5),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(torch.eye(3, 4, device=TPU).cpu(), torch.eye(3, 4))
    assert torch.equal(torch.eye(3, dtype=torch.int64, device=TPU).cpu(),
                       torch.eye(3, dtype=torch.int64))
    # Complex endpoints (a complex result; the keying of the endpoints' values refused them).
    for start, end in ((0, 1 + 2j), (1j, 2j), (-1.5, 2.5 - 1j)):
        torch.testing.assert_close(torch.linspace(start, end, 5, device=TPU).cpu(),
                                   torch.linspace(start, end, 5))


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
@pytest.mark.parametrize("row,col,offset", [(3, 3, 0), (4, 3, 1), (3, 5, -1), (5, 3, -7),
                                            (3, 5, 10), (0, 3, 0), (6, 4, -2), (40, 30, 5)])
def test_triangle_indices_on_the_device(fn, row: int, col: int, offset: int) -> None:
    # Made by a program on the device (they ran on the CPU and were copied over).
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    for dtype in (torch.int64, torch.int32):
        t = fn(row, col, offset, dtype=dtype, device=TPU)
        assert t.device.type == TPU and t.dtype == dtype
        assert torch.equal(t.cpu(), fn(row, col, offset, dtype=dtype))
    assert dict(torchtpu.debug.metrics()["fallback_ops"]) == before
    with pytest.raises(RuntimeError, match="row must be non-negative"):
        fn(-1, col, offset, device=TPU)


@pytest.mark.parametrize("n,periodic,beta,dtype", [
    (64, True, 12.0, torch.float32), (16, False, 5.0, torch.float64), (1, True, 12.0, torch.float32),
    (0, True, 12.0, torch.float32), (33, True, 0.5, torch.bfloat16), (10, False, 8.6, torch.float16)])
def test_kaiser_window(n: int, periodic: bool, beta: float, dtype: torch.dtype) -> None:
    # Its composite kernel calls a DispatchStub for the device: PyTorch's internal assert
    # ("missing kernel for tpu") until tpu registered one.
    w = torch.kaiser_window(n, periodic=periodic, beta=beta, dtype=dtype, device=TPU)
    assert w.device.type == TPU and w.dtype == dtype
    torch.testing.assert_close(w.cpu(), torch.kaiser_window(n, periodic=periodic, beta=beta,
                                                            dtype=dtype))


def test_tensor_constructor() -> None:
    t = torch.tensor([[1, 2], [3, 4]], device=TPU)
    assert t.dtype == torch.int64 and t.device.type == TPU
    assert t.tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rand(dtype: torch.dtype) -> None:
    torchtpu.manual_seed(0)
    t = torch.rand(100_000, dtype=dtype, device=TPU)
    assert t.dtype == dtype and t.device.type == TPU and t.shape == (100_000,)
    c = t.float().cpu()
    assert c.min().item() >= 0.0 and c.max().item() < 1.0
    assert abs(c.mean().item() - 0.5) < 0.01
    assert abs(c.var().item() - 1 / 12) < 0.005
    # Roughly uniform: each decile holds ~10%.
    counts = torch.histc(c, bins=10, min=0, max=1) / c.numel()
    assert (counts - 0.1).abs().max().item() < 0.01, counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_randn(dtype: torch.dtype) -> None:
    torchtpu.manual_seed(0)
    t = torch.randn(200, 500, dtype=dtype, device=TPU)
    assert t.dtype == dtype and t.shape == (200, 500)
    c = t.float().cpu()
    assert abs(c.mean().item()) < 0.015  # 4.7 standard errors at n = 100k
    assert abs(c.std().item() - 1.0) < 0.01
    assert torch.isfinite(c).all()
    # Normal tails: P(|x| > 2) = 4.55%.
    assert abs((c.abs() > 2).float().mean().item() - 0.0455) < 0.005


def test_randint() -> None:
    torchtpu.manual_seed(0)
    t = torch.randint(-3, 5, (50_000,), device=TPU)
    assert t.dtype == torch.int64 and t.device.type == TPU
    c = t.cpu()
    assert c.min().item() == -3 and c.max().item() == 4
    counts = torch.bincount(c + 3, minlength=8).float() / c.numel()
    assert (counts - 1 / 8).abs().max().item() < 0.01, counts
    assert torch.randint(10, (3, 4), dtype=torch.int32, device=TPU).dtype == torch.int32


def test_randperm() -> None:
    torchtpu.manual_seed(0)
    p = torch.randperm(50, device=TPU)
    assert p.device.type == TPU and p.dtype == torch.int64
    assert torch.equal(p.cpu().sort().values, torch.arange(50))
    assert not torch.equal(p.cpu(), torch.arange(50))


def test_inplace_random() -> None:
    torchtpu.manual_seed(0)
    x = torch.empty(20_000, device=TPU)
    x.uniform_(-2, 4)
    c = x.cpu()
    assert c.min().item() >= -2 and c.max().item() < 4 and abs(c.mean().item() - 1) < 0.05
    x.normal_(3.0, 0.5)
    c = x.cpu()
    assert abs(c.mean().item() - 3.0) < 0.02 and abs(c.std().item() - 0.5) < 0.02
    x.bernoulli_(0.25)
    assert set(x.cpu().unique().tolist()) <= {0.0, 1.0}
    assert abs(x.cpu().mean().item() - 0.25) < 0.02
    x.exponential_(2.0)
    assert abs(x.cpu().mean().item() - 0.5) < 0.02 and x.cpu().min().item() >= 0
    x.random_(0, 7)
    assert x.cpu().min().item() == 0 and x.cpu().max().item() == 6


@pytest.mark.parametrize("args", [(), (5, None)])
def test_int64_random_without_an_upper_bound_runs_on_tpu(args) -> None:
    """random_() on int64 draws from [from, 2**63 - 1] on the device (the bound overflowed
    when taken through a double, and every call ran on the CPU)."""
    from _compare import fallbacks, new_fallbacks

    before = fallbacks()
    x = torch.empty(20_000, dtype=torch.int64, device=TPU).random_(*args).cpu()
    assert not new_fallbacks(before)
    low = args[0] if args else 0
    assert x.min().item() >= low and x.max().item() > 2**62  # reaches the upper half
    assert x.unique().numel() == x.numel()


def test_normal_tensor_args() -> None:
    torchtpu.manual_seed(0)
    mean = torch.full((10_000,), 5.0, device=TPU)
    t = torch.normal(mean, 2.0)
    assert t.device.type == TPU
    assert abs(t.cpu().mean().item() - 5.0) < 0.1 and abs(t.cpu().std().item() - 2.0) < 0.1


def test_random_differs_across_calls_and_elements() -> None:
    torchtpu.manual_seed(0)
    a, b = torch.rand(1000, device=TPU).cpu(), torch.rand(1000, device=TPU).cpu()
    assert not torch.equal(a, b)
    assert a.unique().numel() > 990
    # Independence of consecutive draws: correlation near zero.
    corr = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
    assert abs(corr) < 0.1 and not math.isnan(corr)


def test_arange_lengths_in_one_process() -> None:
    # The length of arange depends on the values of start/end/step, not only their types: two
    # calls with different lengths must not share one compiled program.
    for args in ((10,), (2, 11, 3), (10, 0, -2), (7,), (0, 100, 7)):
        assert torch.equal(torch.arange(*args, device=TPU).cpu(), torch.arange(*args)), args


# out= into a non-contiguous view: PyTorch's CPU range factories keep out's shape when its
# element count matches and fill it in row-major order (the Python meta kernels resize it).
@pytest.mark.parametrize("factory", [
    lambda out: torch.arange(0, 4, out=out),
    lambda out: torch.linspace(0, 1, 4, out=out),
    lambda out: torch.logspace(0, 1, 4, out=out),
])
def test_range_factory_out_into_a_strided_view_keeps_the_base(factory) -> None:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the meta kernels warn about resizing
        cpu = torch.zeros(2, 3)
        factory(cpu.narrow(1, 1, 2))
        dev = torch.zeros(2, 3, device=TPU)
        factory(dev.narrow(1, 1, 2))
    assert torch.equal(dev.cpu(), cpu)


def test_range_factory_out_of_another_count_is_resized_like_cpu() -> None:
    cpu, dev = torch.zeros(2, 3), torch.zeros(2, 3, device=TPU)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.arange(0, 5, out=cpu)
        torch.arange(0, 5, out=dev)
    assert dev.shape == cpu.shape == (5,)
    assert torch.equal(dev.cpu(), cpu)


# XLA rewrote the step's division by the constant steps - 1 into a multiplication by its
# rounded reciprocal: linspace(1, 127, 50, dtype=int32)[21] truncated 54.999... to 54.
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float64, torch.float32])
def test_linspace_divides_by_steps_minus_one_exactly(dtype: torch.dtype) -> None:
    for start, end, steps in [(1, 127, 50), (0, 1000, 7), (-5, 1e6 if dtype.is_floating_point
                                                          else 999983, 97)]:
        got = torch.linspace(start, end, steps, dtype=dtype, device=TPU).cpu()
        assert torch.equal(got, torch.linspace(start, end, steps, dtype=dtype)), (start, end)


@pytest.mark.parametrize("p", [1.5, -0.5, float("nan")])
def test_bernoulli_probability_out_of_range_raises_like_the_cpu(p: float) -> None:
    import re
    with pytest.raises(RuntimeError) as cpu:
        torch.empty(3).bernoulli_(p)
    with pytest.raises(RuntimeError, match=re.escape(str(cpu.value).split(",")[0])):
        torch.empty(3, device=TPU).bernoulli_(p)
    probs = torch.tensor([0.5, p, 0.25])
    with pytest.raises(RuntimeError) as cpu:
        torch.bernoulli(probs)
    with pytest.raises(RuntimeError, match=re.escape(str(cpu.value)[:40])):
        torch.bernoulli(probs.to(TPU)).cpu()
    with pytest.raises(RuntimeError, match=re.escape(str(cpu.value)[:40])):
        torch.empty(3, device=TPU).bernoulli_(probs.to(TPU)).cpu()


def test_bernoulli_probability_in_range_is_accepted() -> None:
    probs = torch.tensor([0.0, 1.0, 0.5])
    out = torch.bernoulli(probs.to(TPU)).cpu()
    assert out[0] == 0 and out[1] == 1
    assert torch.empty(4, device=TPU).bernoulli_(1.0).cpu().eq(1).all()


def test_bernoulli_takes_probabilities_on_the_cpu_as_cuda_does() -> None:
    # CUDA's kernel moves p to the device; it was refused as a device mismatch here.
    for probs in (torch.tensor([0.0, 1.0, 0.0]), torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]])):
        out = torch.empty(2, 3, device=TPU).bernoulli_(probs)
        assert out.device.type == TPU
        assert torch.equal(out.cpu(), probs.expand(2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exponential_never_draws_zero(dtype: torch.dtype) -> None:
    # 2^24 draws at this seed held a uniform draw of exactly 0, which -log1p(-u) turned into
    # 0: a Gumbel sample -log(exponential) was then inf and gumbel_softmax all NaN.
    torchtpu.manual_seed(0)
    x = torch.empty(1 << 24, device=TPU, dtype=dtype).exponential_()
    assert x.min().item() > 0
    torchtpu.manual_seed(0)
    g = torch.nn.functional.gumbel_softmax(torch.zeros(1 << 24, device=TPU, dtype=dtype))
    assert not g.isnan().any().item()


def test_randperm_fills_a_small_dtype_it_fits() -> None:
    # The dtype checks (test_errors) refuse n - 1 beyond the dtype, not n up to its size.
    p = torch.randperm(256, dtype=torch.uint8, device=TPU).cpu()
    assert torch.equal(p.sort().values, torch.arange(256, dtype=torch.uint8))
