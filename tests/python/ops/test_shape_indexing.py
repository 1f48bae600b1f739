"""Shape and indexing ops: cat/stack, index_select, gather/scatter, masked ops, index_put, ..."""

from __future__ import annotations

import pytest
import torch
from _compare import ALL_DTYPES, assert_raises_like_cpu, assert_same, make

import torchtpu


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cat(dtype: torch.dtype) -> None:
    a, b = make((2, 3), dtype), make((4, 3), dtype)
    assert_same(lambda x, y: torch.cat([x, y]), a, b)
    assert_same(lambda x, y: torch.cat([x.t(), y.t()], dim=1), a, b)
    assert_same(lambda x, y: torch.cat([x, y, x], dim=-2), a, b)


def test_cat_type_promotion_and_empty() -> None:
    assert_same(lambda x, y: torch.cat([x, y]), make((2, 3), torch.int64),
                make((1, 3), torch.float32))
    assert_same(lambda x, y: torch.cat([x, y]), make((2, 3), torch.float32), torch.empty(0, 3))


@pytest.mark.parametrize("dim,start,length", [(0, 1, 2), (1, -3, 2), (2, 6, 0), (-1, -6, 6)])
def test_narrow_copy(dim: int, start: int, length: int) -> None:
    x = make((4, 5, 6), torch.float32)
    assert_same(lambda t: torch.narrow_copy(t, dim, start, length), x)
    assert_same(lambda t: torch.narrow_copy(t, dim, start, length,
                                            out=torch.empty(0, device=t.device)), x)


def test_stack_split_chunk() -> None:
    a, b = make((2, 3), torch.float32), make((2, 3), torch.float32)
    assert_same(lambda x, y: torch.stack([x, y], dim=1), a, b)
    x = make((7, 4), torch.float32)
    assert_same(lambda t: [c.contiguous() for c in t.split(3)], x)
    assert_same(lambda t: [c * 1 for c in t.chunk(2, dim=1)], x)
    assert_same(lambda t: [c + 0 for c in t.unbind(1)], x)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_stack_dims_promotion_views_and_out(dtype: torch.dtype) -> None:
    a, b = make((2, 3), dtype), make((2, 3), dtype)
    for dim in (0, 1, 2, -1, -3):
        assert_same(lambda x, y, d=dim: torch.stack([x, y, x], dim=d), a, b)
    assert_same(lambda x, y: torch.stack([x.t(), y.t()]), a, b)  # transposed views
    assert_same(lambda x, y: torch.stack([x[0], y[1, :]]), a, b)  # views at an offset
    assert_same(lambda x: torch.stack([x.sum(), x.sum() * 2]), make((4,), torch.float32))
    assert_same(lambda x, y: torch.stack([x, y]), make((2,), dtype), make((2,), torch.float32))
    assert_same(lambda x, y: torch.stack([x, y], dim=1), torch.empty(0, 3), torch.empty(0, 3))

    def into_out(x, y):
        out = torch.empty(0, dtype=x.dtype, device=x.device)
        torch.stack([x, y], dim=1, out=out)
        return out
    assert_same(into_out, a, b)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_index_select(dtype: torch.dtype) -> None:
    x = make((5, 4), dtype)
    idx = torch.tensor([4, 0, 0, 2])
    assert_same(lambda t, i: t.index_select(0, i), x, idx)
    assert_same(lambda t, i: t.index_select(1, i[:3] % 4), x, idx)
    assert_same(lambda t, i: t.t().index_select(0, i[:2] % 4), x, idx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_gather(dtype: torch.dtype) -> None:
    x = make((3, 5), dtype)
    idx = torch.randint(0, 5, (3, 4))
    assert_same(lambda t, i: torch.gather(t, 1, i), x, idx)
    assert_same(lambda t, i: torch.gather(t, 0, i % 3), x, idx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter(dtype: torch.dtype) -> None:
    x = make((3, 5), dtype)
    src = make((3, 5), dtype)
    idx = torch.stack([torch.randperm(5) for _ in range(3)])  # unique per row: deterministic
    assert_same(lambda t, i, s: t.scatter(1, i, s), x, idx, src)
    assert_same(lambda t, i: t.scatter(1, i[:, :2], 7), x, idx)
    assert_same(lambda t, i, s: t.scatter_add(1, i, s), x, idx, src)
    dup = torch.tensor([[0, 0, 1, 1, 4]] * 3)
    assert_same(lambda t, i, s: t.scatter_add(1, i, s), x, dup, src)
    assert_same(lambda t, i, s: t.scatter_reduce(1, i, s, "amax"), x, dup, src)
    assert_same(lambda t, i, s: t.scatter_reduce(1, i, s, "sum", include_self=False), x, dup, src)


def test_scatter_inplace() -> None:
    def fn(t: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t.scatter_(0, i, s)
        return t

    assert_same(fn, make((4, 3), torch.float32), torch.tensor([[3, 0, 1]]),
                make((1, 3), torch.float32))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_masked_fill(dtype: torch.dtype) -> None:
    x = make((4, 5), dtype)
    mask = make((4, 5), torch.bool)
    value = True if dtype == torch.bool else 3
    assert_same(lambda t, m: t.masked_fill(m, value), x, mask)
    assert_same(lambda t, m: t.masked_fill(m[0], value), x, mask)  # broadcast mask
    assert_same(lambda t, m, v: t.masked_fill(m, v), x, mask, torch.tensor(value, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_masked_fill_cpu_scalar_tensor_value(dtype: torch.dtype) -> None:
    # As on CUDA, a 0-dim CPU tensor is a scalar and may be the fill value of a device tensor.
    x = make((4, 5), dtype)
    mask = make((4, 5), torch.bool)
    value = torch.tensor(3, dtype=dtype)
    out = x.to("tpu").masked_fill(mask.to("tpu"), value)
    assert out.device.type == "tpu"
    assert torch.equal(out.cpu(), x.masked_fill(mask, value))


def test_masked_fill_inplace_and_scatter() -> None:
    x = make((3, 4), torch.float32)
    mask = make((3, 4), torch.bool)
    assert_same(lambda t, m: t.clone().masked_fill_(m, -1.0), x, mask)
    assert_same(lambda t, m, s: t.masked_scatter(m, s), x, mask, make((12,), torch.float32))


@pytest.mark.parametrize("name,fn", [
    ("uint8 mask", lambda t, m: t.masked_fill(m.to(torch.uint8), 1.0)),
    ("uint8 mask in place", lambda t, m: t.clone().masked_fill_(m.to(torch.uint8), 1.0)),
    ("mask not broadcastable", lambda t, m: t.masked_fill(m[:, :2], 1.0)),
    ("mask not broadcastable in place", lambda t, m: t.clone().masked_fill_(m[:, :2], 1.0)),
    ("1-d value", lambda t, m: t.clone().masked_fill_(m, t[0, :2])),
])
def test_masked_fill_refuses_like_cpu(name: str, fn) -> None:
    # The in-place form took a uint8 mask as bool; the others raised the Python meta's words.
    assert_raises_like_cpu(fn, make((3, 4), torch.float32), make((3, 4), torch.bool))


def test_masked_select_and_nonzero() -> None:
    x = make((3, 4), torch.float32)
    mask = x > 0
    # Data-dependent output shapes: not lowered, run on the CPU.
    assert_same(torch.masked_select, x, mask, allow_fallback=["aten::masked_select"])
    assert_same(torch.nonzero, x, allow_fallback=["aten::nonzero"])


def test_index_tensor() -> None:
    x = make((5, 4), torch.float32)
    idx = torch.tensor([4, 1, 1])
    assert_same(lambda t, i: t[i], x, idx)
    assert_same(lambda t, i: t[:, i % 4], x, idx)
    assert_same(lambda t, i: t[i, i % 4], x, idx)


def test_index_put() -> None:
    def put(t: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t[i] = v
        return t

    def put_acc(t: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return t.index_put((i,), v, accumulate=True)

    x = make((5, 3), torch.float32)
    assert_same(put, x, torch.tensor([0, 3]), make((2, 3), torch.float32))
    assert_same(put_acc, x, torch.tensor([1, 1, 4]), make((3, 3), torch.float32))


def test_index_add_copy_fill() -> None:
    x = make((5, 3), torch.float32)
    idx = torch.tensor([0, 4, 0])
    src = make((3, 3), torch.float32)
    assert_same(lambda t, i, s: t.index_add(0, i, s, alpha=2), x, idx, src)
    assert_same(lambda t, i, s: t.index_copy(0, i[:2], s[:2]), x, idx, src)
    assert_same(lambda t, i: t.index_fill(1, i[:2] % 3, -2.0), x, idx)


def test_setitem_bool_mask() -> None:
    def fn(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t[t > 0] = 0.0
        return t

    assert_same(fn, make((4, 4), torch.float32))


# x[mask] = value with one bool mask and a one-element value fills through the mask, as the
# CPU and CUDA kernels do (masked_fill): no host read of the mask (nanoGPT's top-k sampling
# runs `logits[logits < v[:, [-1]]] = -inf` at every token).
def test_setitem_bool_mask_one_value_reads_no_host() -> None:
    x = make((3, 5, 4), torch.float32)

    def cases(t: torch.Tensor) -> list[torch.Tensor]:
        y = t.clone()
        y[y < 0] = -float("inf")
        z = t.clone()
        z[:, t[0, :, 0] > 0] = 7  # a mask over dims 1.. after a None
        w = t.clone()
        w[t > 0.5] = torch.tensor(2.0, device=t.device)
        u = t.clone()
        u[t[:, :, 0] > 0] = torch.tensor([3.0], device=t.device)  # one element, not 0-dim
        return [y, z, w, u, torch.index_put(t, (t > 0,), torch.tensor(-1.0, device=t.device))]

    expected = cases(x)
    before = torchtpu.debug.metrics().get("num_host_roundtrips", 0)
    got = [r.cpu() for r in cases(x.to("tpu"))]
    assert torchtpu.debug.metrics().get("num_host_roundtrips", 0) == before
    for e, g in zip(expected, got):
        assert torch.equal(e, g)
    # A mask of another shape: the CPU's IndexError, before anything is written.
    d = x.to("tpu")
    with pytest.raises(IndexError, match=r"The shape of the mask \[3, 4\] at index 1 does not match"):
        d[torch.zeros(3, 4, dtype=torch.bool, device="tpu")] = 1.0
    assert torch.equal(d.cpu(), x)
    # Accumulating through a mask expands it (a host read, as the CPU does).
    assert_same(lambda t: t.clone().index_put_((t > 0,), torch.tensor(1.5, device=t.device),
                                               accumulate=True), x)
    # What the CPU refuses on the way (its masked_fill path is for accumulate=False only):
    # a value that does not broadcast to the selection or of another dtype when
    # accumulating, and more indices than dims.
    z, m = torch.zeros(3), torch.tensor([True, False, True])
    assert_raises_like_cpu(lambda t, k, v: t.index_put_((k,), v, accumulate=True), z, m,
                           torch.tensor([[4.0]]))
    assert_raises_like_cpu(lambda t, k, v: t.index_put_((k,), v, accumulate=True), z, m,
                           torch.tensor(4))
    assert_raises_like_cpu(lambda t, k, v: torch.ops.aten.index_put_(t, [k, None, None], v),
                           torch.zeros(2, 3), m[:2], torch.tensor(1.0))
    # Several values still select through the mask's positions (a host read, as the CPU).
    m = x > 0
    e = x.clone()
    e[m] = torch.arange(float(int(m.sum())))
    g = x.to("tpu")
    g[m.to("tpu")] = torch.arange(float(int(m.sum()))).to("tpu")
    assert torch.equal(g.cpu(), e)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_flip_roll_repeat(dtype: torch.dtype) -> None:
    x = make((3, 4), dtype)
    assert_same(lambda t: t.flip(0), x)
    assert_same(lambda t: t.flip((0, 1)), x)
    assert_same(lambda t: t.roll(2, 1), x)
    assert_same(lambda t: t.roll((1, -1), (0, 1)), x)
    assert_same(lambda t: t.repeat(2, 1, 3), x)


def test_tril_triu_diag() -> None:
    x = make((4, 5), torch.float32)
    assert_same(torch.tril, x)
    assert_same(lambda t: torch.triu(t, 1), x)
    assert_same(lambda t: torch.diagonal(t, 1) * 1, x)
    assert_same(lambda t: torch.diag_embed(t), x[:2])


def test_take_and_where_index() -> None:
    x = make((3, 4), torch.float32)
    assert_same(torch.take, x, torch.tensor([0, 11, 5]))


def test_slice_select_scatter() -> None:
    x = make((4, 6), torch.float32)
    assert_same(lambda t, s: torch.slice_scatter(t, s, dim=1, start=1, end=5, step=2), x,
                make((4, 2), torch.float32))
    assert_same(lambda t, s: torch.select_scatter(t, s, 0, 2), x, make((6,), torch.float32))


# CPU index tensors (and 0-dim CPU values) are accepted as on CUDA: they move to the
# indexed tensor's device.
def test_cpu_index_tensors_and_0d_cpu_values_like_cuda() -> None:
    x = torch.arange(12.0).reshape(3, 4)
    d = x.to("tpu")
    rows, mask = torch.tensor([0, 2]), torch.tensor([True, False, True])
    assert torch.equal(d[rows].cpu(), x[rows])
    assert torch.equal(d[mask].cpu(), x[mask])
    assert torch.equal(d[rows, torch.tensor([1, 1], device="tpu")].cpu(), x[rows, torch.tensor([1, 1])])
    d.index_put_((torch.tensor([1]),), torch.tensor(5.0))
    x.index_put_((torch.tensor([1]),), torch.tensor(5.0))
    d[torch.tensor([0]), torch.tensor([2])] = torch.tensor(-1.0)
    x[torch.tensor([0]), torch.tensor([2])] = torch.tensor(-1.0)
    assert torch.equal(d.cpu(), x)
    idx = torch.tensor([0])
    assert torch.equal(d.index_fill(1, idx.to("tpu"), torch.tensor(7.0)).cpu(),
                       x.index_fill(1, idx, torch.tensor(7.0)))
    assert d[rows].device.type == "tpu"


def test_index_put_with_indices_that_do_not_broadcast_is_an_index_error() -> None:
    # PyTorch's test_indexing NumpyTests.test_broaderrors_indexing.
    def put(a):
        a[[0, 1], [0, 1, 2]] = 0
    err = assert_raises_like_cpu(put, torch.zeros(3, 3))
    assert "shape mismatch" in str(err)


def _mask_put(x: torch.Tensor) -> torch.Tensor:
    x[x < 50] = 1.0
    return x


def _slice_put(x: torch.Tensor) -> torch.Tensor:
    x[0:50] = 1.0
    return x


@pytest.mark.parametrize("fn", [_mask_put, _slice_put], ids=["mask", "slice"])
def test_torchscript_index_put(fn) -> None:
    # PyTorch's test_indexing test_jit_indexing: TorchScript's interpreter passes
    # index_put_'s Tensor?[] indices as a plain list.
    scripted = torch.jit.script(fn)
    data = torch.arange(100, dtype=torch.float32)
    assert torch.equal(scripted(data.to("tpu")).cpu(), fn(data.clone()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16])
@pytest.mark.parametrize("accumulate", [False, True])
def test_put(dtype: torch.dtype, accumulate: bool) -> None:
    # Flat positions, negative ones wrapped; accumulate adds repeated positions.
    x = make((3, 4), dtype)
    idx = torch.tensor([0, -1, 5, 7])
    src = make((4,), dtype)
    assert_same(lambda t, s: t.clone().put_(idx.to(t.device), s, accumulate=accumulate), x, src)
    assert_same(lambda t, s: torch.put(t, idx.view(2, 2).to(t.device), s.view(2, 2),
                                       accumulate=accumulate), x, src)
    if accumulate:
        assert_same(lambda t: t.clone().put_(torch.tensor([1, 1, 1], device=t.device),
                                             torch.ones(3, dtype=dtype, device=t.device),
                                             accumulate=True), x)


def test_put_errors_like_cpu() -> None:
    z = torch.zeros(3)
    assert_raises_like_cpu(lambda t: t.put_(torch.tensor([3], device=t.device),
                                            torch.ones(1, device=t.device)), z.clone())
    assert_raises_like_cpu(lambda t: t.put_(torch.tensor([0, 1], device=t.device),
                                            torch.ones(1, device=t.device)), z.clone())
    assert_raises_like_cpu(lambda t: t.put_(torch.tensor([0], device=t.device),
                                            torch.ones(1, dtype=torch.long, device=t.device)),
                           z.clone())
    assert_raises_like_cpu(lambda t: t.put_(torch.tensor([0.0], device=t.device),
                                            torch.ones(1, device=t.device)), z.clone())
    assert_raises_like_cpu(lambda t: t.put_(torch.tensor([0, 1], device=t.device), t[1:3]),
                           z.clone())


@pytest.mark.parametrize("size,fill", [(0, -1), (3, -1), (10, 7), (100, -5)])
def test_nonzero_static_on_the_device(size: int, fill: int) -> None:
    # Unlike nonzero, its size is given: computed on the device, no read-back.
    cases = [torch.tensor([0, 3, 0, 5]), torch.randint(0, 2, (3, 4, 5)),
             torch.tensor([[0.0, float("nan")], [1.0, 0.0]]), torch.zeros(2, 3),
             torch.ones(2, 2, dtype=torch.bool), torch.tensor(5.0), torch.empty(0, 3)]
    for x in cases:
        assert_same(lambda t: torch.nonzero_static(t, size=size, fill_value=fill), x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_scatter_sums_of_half_types_accumulate_like_the_cpu(dtype: torch.dtype) -> None:
    # 3000 additions of 0.1 into one element: accumulated in 16 bits they stop at 32 (256
    # in float16); the CPU accumulates in float32 and rounds once.
    index = torch.zeros(3000, dtype=torch.long)
    values = torch.full((3000,), 0.1, dtype=dtype)
    base = torch.zeros(1, dtype=dtype)
    for fn in (lambda s, i, v: s.scatter_add(0, i, v),
               lambda s, i, v: s.scatter_reduce(0, i, v, "sum"),
               lambda s, i, v: s.scatter_reduce(0, i, v, "mean"),
               lambda s, i, v: s.scatter_reduce(0, i, v, "mean", include_self=False)):
        assert_same(fn, base, index, values, dtype_tols={dtype: (0.0, 0.0)})
    torch.manual_seed(0)
    x, idx, start = make((4, 50), dtype), torch.randint(0, 3, (4, 50)), make((4, 3), dtype)
    for reduce in ("sum", "mean", "amax", "amin"):
        assert_same(lambda s, i, v: s.scatter_reduce(1, i, v, reduce), start, idx, x)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_products_and_index_reduce_of_half_types_round_like_the_cpu(dtype: torch.dtype) -> None:
    # scatter's products accumulate in float32 like its sums (300 * 300 * 0.001 is 90 in
    # float16, not inf); index_reduce combines in the tensor's own dtype at each step, its
    # count too (a float16 mean of 3000 tenths is 256 / 2048), as the CPU's kernel does.
    big = torch.tensor([300.0, 300.0, 0.001], dtype=dtype)
    near_one = (1 + torch.rand(200, generator=torch.Generator().manual_seed(0)) * 0.02)
    tenths = torch.full((3000,), 0.1, dtype=dtype)
    exact = {dtype: (0.0, 0.0)}
    for values in (big, near_one.to(dtype)):
        index = torch.zeros(len(values), dtype=torch.long)
        one = torch.ones(1, dtype=dtype)
        for fn in (lambda s, i, v: s.scatter_reduce(0, i, v, "prod"),
                   lambda s, i, v: s.scatter_reduce(0, i, v, "prod", include_self=False),
                   lambda s, i, v: s.scatter(0, i, v, reduce="multiply"),
                   lambda s, i, v: s.index_reduce(0, i, v, "prod")):
            assert_same(fn, one, index, values, dtype_tols=exact)
    index = torch.zeros(3000, dtype=torch.long)
    for include_self in (True, False):
        assert_same(lambda s, i, v: s.index_reduce(0, i, v, "mean", include_self=include_self),
                    torch.zeros(1, dtype=dtype), index, tenths, dtype_tols=exact)


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_max_min_propagate_nan(reduce: str, include_self: bool) -> None:
    # A NaN scattered into a position wins, as on the CPU, wherever it stands among the
    # position's sources; with include_self=False a position written only by NaN is NaN,
    # not the reduction's identity.
    nan = float("nan")
    start = torch.tensor([1.0, 2.0, 3.0, nan])
    index = torch.tensor([0, 0, 1, 2, 2, 3])
    src = torch.tensor([nan, 5.0, nan, -1.0, nan, 4.0])
    assert_same(lambda s, i, v: s.scatter_reduce(0, i, v, reduce, include_self=include_self),
                start, index, src)
    assert_same(lambda s, i, v: s.scatter_reduce(0, i, v.flip(0), reduce,
                                                 include_self=include_self),
                start, index, src)


def test_masked_scatter_with_too_short_a_source_raises_like_the_cpu() -> None:
    mask = torch.ones(4, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones"):
        torch.zeros(4).masked_scatter(mask, torch.ones(2))
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones"):
        torch.zeros(4, device="tpu").masked_scatter(mask.to("tpu"),
                                                    torch.ones(2, device="tpu")).cpu()
