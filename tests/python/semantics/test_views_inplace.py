"""Views alias their base; in-place ops, copy_/fill_/zero_ and out= write through them."""

from __future__ import annotations

import pytest
import torch
from _compare import ALL_DTYPES, assert_close, assert_raises_like_cpu, assert_same, eager_mode, make

TPU = "tpu"

VIEWS = {
    "view": lambda t: t.view(4, 6),
    "reshape": lambda t: t.reshape(2, 12),
    "permute": lambda t: t.permute(1, 0),
    "transpose": lambda t: t.transpose(0, 1),
    "t": lambda t: t.t(),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t.unsqueeze(0).squeeze(0),
    "slice": lambda t: t[1:5:2, 2:],
    "select": lambda t: t[3],
    "narrow": lambda t: t.narrow(1, 1, 3),
    "as_strided": lambda t: t.as_strided((3, 2), (5, 2), 1),
    "diagonal": lambda t: t.diagonal(),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "flatten": lambda t: t.flatten(),
    "expand": lambda t: t[:, :1].expand(6, 3),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_values(name: str) -> None:
    assert_same(lambda t: VIEWS[name](t).contiguous(), make((6, 4), torch.float32))


@pytest.mark.parametrize("name", sorted(set(VIEWS) - {"expand"}))
def test_write_through_view_seen_by_base(name: str) -> None:
    def fn(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        v = VIEWS[name](t)
        v.mul_(10).add_(1)
        return t

    x = make((6, 4), torch.float32)
    out = assert_same(fn, x)
    assert out.device.type == TPU


def test_view_shares_storage() -> None:
    base = torch.arange(12.0).to(TPU)
    v = base.view(3, 4)
    assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert v._base is base
    s = base[2:8:2]
    assert s.storage_offset() == 2 and s.stride() == (2,)


def test_write_seen_by_other_views() -> None:
    base = torch.zeros(4, 4, device=TPU)
    row = base[1]
    col = base[:, 2]
    t = base.t()
    row.fill_(5.0)
    assert col.cpu().tolist() == [0.0, 5.0, 0.0, 0.0]
    assert t[2].cpu().tolist() == [0.0, 5.0, 0.0, 0.0]
    col.zero_()
    assert row.cpu().tolist() == [5.0, 5.0, 0.0, 5.0]
    base.add_(1)
    assert row.cpu().tolist() == [6.0, 6.0, 1.0, 6.0]
    assert t.cpu()[2].tolist() == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.bfloat16, torch.int64])
def test_view_as_other_dtype_aliases_the_bytes(dtype: torch.dtype) -> None:
    # A tpu buffer has one dtype; a view of another element type reads the same bytes
    # bitcast, and a write through it is seen by the base, as on the CPU.
    cpu = torch.randn(2, 8)
    dev = cpu.to(TPU)
    assert torch.equal(dev.view(dtype).cpu(), cpu.view(dtype))
    cpu.view(dtype)[1, :2] = cpu.view(dtype)[0, :2]
    dev.view(dtype)[1, :2] = dev.view(dtype)[0, :2]
    assert torch.equal(dev.cpu().view(torch.uint8), cpu.view(torch.uint8))
    assert torch.equal(dev.view(torch.float32).cpu(), cpu)


@pytest.mark.parametrize("mode", ["op", "fused"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.float32])
def test_bool_view_of_other_bytes_keeps_them(dtype: torch.dtype, mode: str) -> None:
    """A bool view reads another dtype's non-zero bytes as true; neither that read nor a
    write through the view changes the bytes it does not write (as on the CPU)."""
    cpu = torch.tensor([0, 2, 1, 255, 16, 7, 0, 3], dtype=torch.uint8).view(dtype)
    with eager_mode(mode):
        dev = cpu.to(TPU)
        assert dev.view(torch.bool).any().item()
        assert dev.view(torch.bool).sum().item() == 6  # bytes that are not zero
        assert torch.equal(dev.cpu(), cpu)
        cpu.view(torch.bool)[0] = True
        cpu.view(torch.bool)[5:7] = False
        dev.view(torch.bool)[0] = True
        dev.view(torch.bool)[5:7] = False
        assert torch.equal(dev.cpu().view(torch.uint8), cpu.view(torch.uint8))
        computed = (dev + 0).view(torch.bool)  # a value a graph computed, read as bool
        computed[1:3] = torch.tensor([False, True], device=TPU)
        expected = (cpu + 0).view(torch.bool)
        expected[1:3] = torch.tensor([False, True])
        assert torch.equal(computed.view(torch.uint8).cpu(), expected.view(torch.uint8))


def test_base_write_seen_by_view() -> None:
    base = torch.arange(6.0).to(TPU)
    v = base.view(2, 3)[:, 1]
    base[1] = 100.0
    assert v.cpu().tolist() == [100.0, 4.0]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_copy_fill_zero_into_views(dtype: torch.dtype) -> None:
    def fn(t: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t[1:3].copy_(src)
        t[:, 0].fill_(1)
        t[3, 1:].zero_()
        t.t()[2, ::2].copy_(src[0, :2].to(t.device))
        return t

    assert_same(fn, make((4, 3), dtype), make((2, 3), dtype))


def test_copy_broadcast_and_cross_dtype() -> None:
    def fn(t: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t.copy_(src)  # broadcasts (3,) and casts int64 -> float32
        return t

    assert_same(fn, make((2, 3), torch.float32), make((3,), torch.int64))


def test_copy_cpu_into_tpu_view() -> None:
    t = torch.zeros(3, 4, device=TPU)
    src = torch.arange(3.0)
    t[:, 1].copy_(src)
    expected = torch.zeros(3, 4)
    expected[:, 1] = src
    assert torch.equal(t.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_inplace_arithmetic(dtype: torch.dtype) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.clone()
        a.add_(b).mul_(2).sub_(b[0], alpha=3)
        a.clamp_(-20, 20)
        return a

    assert_same(fn, make((3, 4), dtype), make((3, 4), dtype))


def test_inplace_on_noncontiguous() -> None:
    def fn(a: torch.Tensor) -> torch.Tensor:
        a = a.clone()
        v = a.t()[::2]
        v.exp_()
        v.div_(2)
        return a

    assert_same(fn, make((4, 6), torch.float32))


def test_inplace_returns_self() -> None:
    a = torch.ones(3, device=TPU)
    assert a.add_(1) is a
    assert a.cpu().tolist() == [2.0, 2.0, 2.0]


def test_out_variants() -> None:
    a, b = make((3, 4), torch.float32), make((3, 4), torch.float32)

    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        o1 = torch.empty(3, 4, device=x.device)
        r1 = torch.add(x, y, out=o1)
        o2 = torch.empty(0, device=x.device)  # resized by the op
        torch.mm(x, y.t(), out=o2)
        o3 = torch.empty(3, dtype=torch.float32, device=x.device)
        torch.sum(x, 1, out=o3)
        o4 = torch.empty(3, 4, dtype=torch.bool, device=x.device)
        torch.gt(x, y, out=o4)
        assert r1 is o1
        return o1, o2, o3, o4

    assert_same(fn, a, b, dtype_tols={torch.float32: (1e-5, 1e-4)})


def test_out_into_view() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        big = torch.zeros(4, 6, device=x.device)
        torch.exp(x, out=big[:, ::2])
        return big

    assert_same(fn, make((4, 3), torch.float32))


def test_out_multiple_returns() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = torch.empty(0, device=x.device)
        i = torch.empty(0, dtype=torch.int64, device=x.device)
        torch.max(x, 1, out=(v, i))
        return v, i

    assert_same(fn, make((3, 5), torch.float32))


def test_noncontiguous_inputs_to_ops() -> None:
    x = make((4, 6), torch.float32)
    assert_same(lambda t: (t.t() @ t[:, :4]), x, dtype_tols={torch.float32: (1e-5, 1e-4)})
    assert_same(lambda t: torch.softmax(t[:, 1::2], dim=0), x)
    assert_same(lambda t: t.expand(2, 4, 6) + t.unsqueeze(0), x)
    assert_same(lambda t: t.as_strided((2, 2), (1, 6), 3).sum(), x)
    # as_strided_copy addresses the input's storage, as the view does (not its values).
    for view in (lambda t: t.t(), lambda t: t[:, 1:3], lambda t: t[1]):
        assert_same(lambda t, v=view: torch.as_strided_copy(v(t), (2, 2), (1, 2), 0), x)


def test_contiguous_and_clone() -> None:
    x = torch.arange(12.0).to(TPU).view(3, 4).t()
    assert not x.is_contiguous()
    c = x.contiguous()
    assert c.is_contiguous() and c.stride() == (3, 1)
    assert torch.equal(c.cpu(), torch.arange(12.0).view(3, 4).t())
    k = x.clone()
    k.fill_(0)
    assert x.cpu().sum().item() == 66.0


def test_resize_and_set_item_scalar() -> None:
    t = torch.empty(0, device=TPU)
    t.resize_(2, 3)
    assert t.shape == (2, 3)
    t.fill_(1.0)
    t[0, 1] = 7.0
    assert_close(t, torch.tensor([[1.0, 7.0, 1.0], [1.0, 1.0, 1.0]]))


def test_detach_shares_storage() -> None:
    a = torch.zeros(3, device=TPU, requires_grad=True)
    d = a.detach()
    d.add_(2)
    assert a.detach().cpu().tolist() == [2.0, 2.0, 2.0]


def test_fills_write_through_expanded_views_like_cpu() -> None:
    # The CPU's fill kernels take a tensor whose elements share memory; other in-place
    # kernels refuse it.
    for fill in (lambda t: t.fill_(2.0), lambda t: t.zero_(),
                 lambda t: t.masked_fill_(torch.ones(3, 4, dtype=torch.bool, device=t.device), 5.0)):
        cpu, dev = torch.zeros(4), torch.zeros(4, device=TPU)
        fill(cpu.expand(3, 4))
        fill(dev.expand(3, 4))
        assert torch.equal(dev.cpu(), cpu)
    e = assert_raises_like_cpu(lambda t: t.expand(3, 4).uniform_(), torch.zeros(4))
    assert "more than one element" in str(e)


def _donated_view_writes() -> int:
    import torchtpu

    torch.tpu.synchronize()
    return torchtpu.debug.metrics().get("num_donated_view_writes", 0)


@pytest.mark.parametrize("mode", ["op", "fused"])
def test_a_write_through_a_view_reuses_the_storage_it_holds_alone(mode):
    """A write into a slice of a storage held by nothing else is spliced into that storage's
    memory (its buffer donated to the write), not into a copy of the whole storage; values
    made from the storage before (a clone, a result read from it, another factory tensor of
    the same shape, which may share a cached buffer) keep their contents. Fused eager
    records the writes into its graphs instead (values checked, not counts)."""
    with eager_mode(mode):
        _write_through_views(counted=mode == "op")


def _write_through_views(counted: bool) -> None:
    base = torch.arange(4096, dtype=torch.float32)
    x = base.to(TPU)
    before = _donated_view_writes()
    x[10:20].fill_(-1.0)
    x[::512] = 7.0
    assert not counted or _donated_view_writes() - before == 2
    expected = base.clone()
    expected[10:20] = -1.0
    expected[::512] = 7.0
    assert torch.equal(x.cpu(), expected)

    kept, doubled, first = x.clone(), x * 2, x[:8]
    shared = torch.empty_like(x)
    shared.copy_(x)  # a whole-storage copy hands `shared` x's buffer itself
    before = _donated_view_writes()
    x[:5].zero_()
    assert not counted or _donated_view_writes() - before == 0  # another holder: copied
    assert torch.equal(shared.cpu(), expected)
    assert torch.equal(kept.cpu(), expected)
    assert torch.equal(doubled.cpu(), expected * 2)
    expected[:5] = 0.0
    assert torch.equal(x.cpu(), expected)
    assert torch.equal(first.cpu(), expected[:8])  # a view reads the write

    zeros = [torch.zeros(4096, device=TPU) for _ in range(2)]
    ones = torch.ones(4096, device=TPU)
    zeros[0][100:200].fill_(3.0)
    ones[::2] = 0.0
    assert torch.count_nonzero(zeros[1]).item() == 0 and zeros[0].sum().item() == 300.0
    assert ones.sum().item() == 2048.0 and torch.ones(4096, device=TPU).sum().item() == 4096.0

    # Views of several items of one storage written by one list op splice in place too.
    parts = [x[i * 64:(i + 1) * 64] for i in range(3)]
    before = _donated_view_writes()
    torch._foreach_add_(parts, 1.0)
    expected[:192] += 1.0
    assert torch.equal(x.cpu(), expected)
    assert not counted or _donated_view_writes() - before >= 1


def test_a_thread_reading_a_storage_another_writes_a_part_of_never_fails():
    """One thread writes a window of a storage (each write donating the storage's buffer)
    while another reads a different window: the reader gets the old or the new buffer,
    never one being given up ("Buffer has been deleted or donated"). Op mode: fused eager
    records the writes instead."""
    with eager_mode("op"):
        _read_while_another_thread_writes()


def _read_while_another_thread_writes() -> None:
    import threading
    import time

    x = torch.ones(1 << 16, device=TPU)
    errors: list[BaseException] = []
    reads = [0]
    stop = time.monotonic() + 3.0

    def writer() -> None:
        i = 0
        try:
            while time.monotonic() < stop:
                x[0:4].fill_(float(i))
                i += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def reader() -> None:
        try:
            while time.monotonic() < stop:
                assert torch.equal(x[1000:1004].cpu(), torch.ones(4))
                assert x[2000:2004].sum().item() == 4.0
                reads[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert reads[0] > 0
