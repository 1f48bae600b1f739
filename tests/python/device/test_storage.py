"""Storages on ``tpu``: created, copied, moved, resized and pointed at like CUDA's.

A tpu storage holds one PJRT buffer of the dtype last written; PyTorch sees untyped bytes,
so reading it as another dtype bitcasts on the device. Every check compares bytes with the
same operation on a CPU storage.
"""

from __future__ import annotations

import pytest
import torch
from _compare import eager_mode

import torchtpu


def storage_bytes(s: torch.UntypedStorage) -> bytes:
    return bytes(s.cpu())


def test_untyped_storage_on_device() -> None:
    s = torch.UntypedStorage(16, device="tpu")
    assert s.device == torch.device("tpu", 0)
    assert s.nbytes() == 16
    assert s.is_tpu
    s.fill_(7)
    assert storage_bytes(s) == bytes([7] * 16)


@pytest.mark.parametrize("move", ["to", "tpu", "typed_tpu"])
def test_storage_moves_to_tpu_and_back(move: str) -> None:
    cpu = torch.arange(10, dtype=torch.float32).untyped_storage()
    if move == "to":
        dev = cpu.to(device="tpu")
    elif move == "tpu":
        dev = cpu.tpu()
    else:
        dev = torch.arange(10, dtype=torch.float32).storage().tpu()
    assert dev.device.type == "tpu"
    assert storage_bytes(dev.untyped() if hasattr(dev, "untyped") else dev) == bytes(cpu)


def test_storage_of_tensor_reads_as_bytes() -> None:
    x = torch.randn(5, 3)
    t = x.to("tpu")
    assert storage_bytes(t.untyped_storage()) == bytes(x.untyped_storage())
    assert t.untyped_storage().nbytes() == x.untyped_storage().nbytes()
    assert t.untyped_storage()[4] == x.untyped_storage()[4]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool,
                                   torch.float16, torch.int8])
def test_set_from_storage_bit_exact(dtype: torch.dtype) -> None:
    x = (torch.randn(24) * 10).to(dtype)
    dev_storage = x.untyped_storage().tpu()  # bytes, no dtype
    t = torch.empty(0, dtype=dtype, device="tpu").set_(dev_storage, 2, (4, 5), (5, 1))
    c = torch.empty(0, dtype=dtype).set_(x.untyped_storage(), 2, (4, 5), (5, 1))
    assert torch.equal(t.cpu(), c)
    whole = torch.empty(0, dtype=dtype, device="tpu").set_(dev_storage)
    assert torch.equal(whole.cpu(), x)


def test_set_from_storage_reinterprets_dtype() -> None:
    x = torch.randn(8)
    t = x.to("tpu")
    as_int = torch.empty(0, dtype=torch.int32, device="tpu").set_(t.untyped_storage())
    assert torch.equal(as_int.cpu(), x.view(torch.int32))
    as_bytes = torch.empty(0, dtype=torch.uint8, device="tpu").set_(t.untyped_storage())
    assert torch.equal(as_bytes.cpu(), x.view(torch.uint8))
    as_bf16 = torch.empty(0, dtype=torch.bfloat16, device="tpu").set_(t.untyped_storage())
    assert torch.equal(as_bf16.cpu(), x.view(torch.bfloat16))


def test_set_shares_the_storage() -> None:
    base = torch.zeros(6, device="tpu")
    alias = torch.empty(0, device="tpu").set_(base.untyped_storage(), 1, (2,), (2,))
    alias.fill_(3.0)  # a write through the alias is seen by the base
    assert base.cpu().tolist() == [0.0, 3.0, 0.0, 3.0, 0.0, 0.0]
    other = torch.empty(0, device="tpu").set_(base)
    assert other.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert torch.equal(other.cpu(), base.cpu())


def test_is_set_to_like_cpu() -> None:
    def answers(device: str) -> list[bool]:
        t = torch.arange(4.0, device=device)
        a = torch.empty(0, device=device).set_(t)
        return [a.is_set_to(t), t.is_set_to(t), t.is_set_to(t.clone()), t[1:].is_set_to(t),
                t.view(2, 2).is_set_to(t)]

    assert answers("tpu") == answers("cpu") == [True, True, False, False, False]


def test_set_empty_and_grow() -> None:
    t = torch.ones(3, device="tpu").set_()
    assert t.shape == (0,) and t.untyped_storage().nbytes() == 0
    # A view larger than its storage grows the storage, as on the CPU.
    s = torch.arange(2, dtype=torch.float32).to("tpu").untyped_storage()
    g = torch.empty(0, device="tpu").set_(s, 0, (4,), (1,))
    assert s.nbytes() == 16
    assert g.cpu().tolist()[:2] == [0.0, 1.0]


def test_set_rejects_cpu_storage_with_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="storage.to|devices must match"):
        torch.empty(0, device="tpu").set_(torch.UntypedStorage(8))


def test_storage_slice_raises_with_what_to_do() -> None:
    s = torch.arange(4, dtype=torch.float32).to("tpu").untyped_storage()
    with pytest.raises(RuntimeError, match="tensor view instead"):
        s[4:8].tolist()


def test_dlpack_round_trip_of_a_tensor_at_offset_zero() -> None:
    from torch.utils.dlpack import from_dlpack, to_dlpack

    x = torch.arange(10.0).to("tpu").view(2, 5).t()
    back = from_dlpack(to_dlpack(x))
    assert back.device == x.device
    assert torch.equal(back.cpu(), x.cpu())


def test_dlpack_protocol_of_a_tpu_tensor() -> None:
    # torch.from_dlpack(obj) asks obj.__dlpack_device__() first, which PyTorch answers by
    # the name "privateuse1": "Unknown device type tpu for Dlpack" once renamed.
    from torch.utils.dlpack import DLDeviceType

    x = torch.arange(6.0).to("tpu")
    assert x.__dlpack_device__() == (DLDeviceType.kDLExtDev, 0)
    back = torch.from_dlpack(x)
    assert back.device == x.device and back.data_ptr() == x.data_ptr()
    assert torch.equal(back.cpu(), torch.arange(6.0))
    assert torch.arange(3.0).__dlpack_device__() == (DLDeviceType.kDLCPU, 0)


def test_dlpack_of_a_view_with_an_offset_copies_or_is_refused_at_the_export() -> None:
    # Its pointer lies inside the storage, which a tpu storage cannot alias: exported as a
    # copy where the caller allows one (copy=None: "copy if needed", torch.from_dlpack's
    # default), refused at the export where it asks for an alias, naming the way out.
    from torch.utils.dlpack import from_dlpack, to_dlpack

    base = torch.arange(10.0).to("tpu")
    view = base[3:7]
    for export in (to_dlpack, torch.to_dlpack, lambda t: t.__dlpack__(copy=False)):
        with pytest.raises(BufferError, match=r"storage offset 3.*clone\(\)"):
            export(view)
    for imported in (torch.from_dlpack(view), torch.from_dlpack(view.__dlpack__()),
                     torch.from_dlpack(view.__dlpack__(copy=True)),
                     from_dlpack(to_dlpack(view.clone()))):
        assert torch.equal(imported.cpu(), torch.arange(3.0, 7.0))
    torch.from_dlpack(view).fill_(0)  # a copy: the base is unchanged
    assert torch.equal(base.cpu(), torch.arange(10.0))


@pytest.mark.parametrize("make", [lambda: torch.empty(0, device="tpu"),
                                  lambda: torch.ones(0, 3, device="tpu"),
                                  lambda: torch.arange(12.0, device="tpu")[12:]],
                         ids=["empty", "zero_rows", "empty_view_at_offset"])
def test_dlpack_round_trip_of_an_empty_tensor(make) -> None:
    x = make()
    back = torch.from_dlpack(x)
    assert back.shape == x.shape and back.device == x.device
    assert back.cpu().shape == x.shape
    assert torch.equal(torch.cat([back.reshape(-1), torch.ones(2, device="tpu")]).cpu(),
                       torch.ones(2))
    assert (back + 1).shape == x.shape


@pytest.mark.parametrize("nbytes", [0, 8, 24, 30])
def test_untyped_storage_resize_keeps_bytes(nbytes: int) -> None:
    x = torch.arange(4, dtype=torch.float32)
    cpu = x.untyped_storage().clone()
    dev = x.to("tpu").untyped_storage()
    cpu.resize_(nbytes)
    dev.resize_(nbytes)
    assert dev.nbytes() == nbytes
    keep = min(nbytes, 16)
    assert storage_bytes(dev)[:keep] == bytes(cpu)[:keep]
    assert storage_bytes(dev)[keep:] == bytes(nbytes - keep)  # new bytes are zeros on tpu


def test_tensor_resize_grows_on_device() -> None:
    t = torch.arange(3, dtype=torch.float32).to("tpu")
    t.resize_(2, 3)
    assert t.shape == (2, 3)
    assert t.cpu().flatten()[:3].tolist() == [0.0, 1.0, 2.0]


def test_storage_copy_between_devices() -> None:
    src = torch.randn(6).untyped_storage()
    dev = torch.UntypedStorage(src.nbytes(), device="tpu").copy_(src)
    back = torch.UntypedStorage(src.nbytes()).copy_(dev)
    assert bytes(back) == bytes(src)
    dev2 = torch.UntypedStorage(src.nbytes(), device="tpu").copy_(dev)
    assert storage_bytes(dev2) == bytes(src)


def test_no_fallback_for_storage_ops() -> None:
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    s = torch.randn(8).untyped_storage().tpu()
    t = torch.empty(0, device="tpu").set_(s, 0, (2, 4), (4, 1))
    torch.empty(0, device="tpu").set_(t)
    t.untyped_storage().resize_(64)
    after = dict(torchtpu.debug.metrics()["fallback_ops"])
    assert after == before


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int16, torch.complex64,
                                   torch.uint8])
def test_storage_byteswap_like_cpu(dtype: torch.dtype) -> None:
    # PyTorch's byteswap writes through the data pointer, which on tpu names device state.
    cpu = torch.arange(12).to(dtype)
    dev = cpu.to("tpu")
    cpu.untyped_storage().byteswap(dtype)
    dev.untyped_storage().byteswap(dtype)
    assert storage_bytes(dev.untyped_storage()) == storage_bytes(cpu.untyped_storage())
    with pytest.raises(RuntimeError, match="not a multiple of 4"):
        torch.zeros(3, dtype=torch.uint8, device="tpu").untyped_storage().byteswap(torch.int32)


def test_a_negative_storage_size_is_an_error_like_cpu() -> None:
    with pytest.raises(RuntimeError, match="negative"):
        torch.UntypedStorage(-1)
    with pytest.raises(RuntimeError, match="must not be negative"):
        torch.UntypedStorage(-1, device="tpu")


def test_resize_to_the_same_sizes_keeps_the_strides_like_cpu() -> None:
    cpu = torch.arange(12.0).reshape(3, 4)[:, 1:3].t()
    dev = torch.arange(12.0, device="tpu").reshape(3, 4)[:, 1:3].t()
    for t in (cpu, dev):
        t.resize_(2, 3)
        t.resize_as_(torch.empty(2, 3))
    assert dev.stride() == cpu.stride() and torch.equal(dev.cpu(), cpu)


@pytest.mark.parametrize("shape,fmt", [((2, 3, 4, 5), torch.channels_last),
                                       ((2, 3, 2, 4, 5), torch.channels_last_3d),
                                       ((6, 20), torch.contiguous_format)])
def test_resize_to_a_memory_format_like_cpu(shape, fmt) -> None:
    numel = 1
    for s in shape:
        numel *= s
    cpu = torch.arange(numel, dtype=torch.float32)
    dev = cpu.to("tpu")
    cpu.resize_(shape, memory_format=fmt)
    dev.resize_(shape, memory_format=fmt)
    assert dev.is_contiguous(memory_format=fmt) and dev.stride() == cpu.stride()
    assert torch.equal(dev.cpu(), cpu)  # same storage bytes, restrided
    like = torch.empty(shape, device="tpu", memory_format=fmt)
    flat = torch.arange(numel, dtype=torch.float32, device="tpu")
    flat.resize_as_(like, memory_format=torch.preserve_format)
    assert flat.is_contiguous(memory_format=fmt)
    with pytest.raises(RuntimeError, match="Unsupported memory format"):
        dev.resize_(shape, memory_format=torch.preserve_format)


_CL, _CL3 = torch.channels_last, torch.channels_last_3d


@pytest.mark.parametrize("name,make", [
    ("clone to channels_last", lambda t: t.clone(memory_format=_CL)),
    ("contiguous(channels_last)", lambda t: t.contiguous(memory_format=_CL)),
    ("clone of channels_last keeps it", lambda t: t.contiguous(memory_format=_CL).clone()),
    ("clone of a transpose keeps its strides", lambda t: t.transpose(1, 3).clone()),
    ("clone of a permute", lambda t: t.permute(0, 2, 3, 1).clone()),
    ("clone of a strided slice is contiguous", lambda t: t[:, ::2].clone()),
    ("clone of an expand is contiguous", lambda t: t[:1].expand(3, 3, 4, 5).clone()),
    ("contiguous_format", lambda t: t.transpose(1, 3).clone(memory_format=torch.contiguous_format)),
    ("conjugate to channels_last", lambda t: t.to(torch.complex64).conj().clone(memory_format=_CL)),
    ("5-d to channels_last_3d", lambda t: t.unsqueeze(2).clone(memory_format=_CL3)),
])
def test_clone_lays_out_its_result_like_cpu(name, make) -> None:
    cpu = torch.randn(3, 3, 4, 5)
    ours, want = make(cpu.to("tpu")), make(cpu)
    assert ours.stride() == want.stride(), name
    assert torch.equal(ours.cpu(), want) and ours.is_conj() == want.is_conj()


def test_resize_as_preserves_the_templates_channels_last() -> None:
    # PyTorch's test_view_ops test_memory_format_resize_as.
    template = torch.randn(10, 3, 32, 32, device="tpu").contiguous(memory_format=_CL)
    flat = torch.randn(template.numel(), device="tpu")
    flat.resize_as_(template, memory_format=torch.preserve_format)
    assert flat.is_contiguous(memory_format=_CL)


def test_channels_last_of_the_wrong_rank_is_an_error_like_cpu() -> None:
    with pytest.raises(RuntimeError, match="rank 4 tensor"):
        torch.randn(3, 4, device="tpu").clone(memory_format=_CL)


@pytest.mark.parametrize("mode", ["op", "fused"])
def test_wider_view_of_an_odd_sized_storage_loses_no_byte(mode: str) -> None:
    """A 3-element int16 view of a 7-byte storage does not cover it: a write through it
    splices its bytes into the storage's (7 bytes are no whole int16 elements), as on the
    CPU, and never replaces the storage's buffer by the view's 6 bytes."""
    with eager_mode(mode):
        cpu = torch.arange(1, 8, dtype=torch.uint8)
        x = cpu.to("tpu")
        for t in (cpu, x):
            t[:6].view(torch.int16).fill_(258)  # bytes 2, 1
            t[2:6].view(torch.int16)[1] = -2  # bytes 254, 255
        assert x.cpu().tolist() == cpu.tolist() == [2, 1, 2, 1, 254, 255, 7]
        assert (x + 1).cpu().tolist() == [3, 2, 3, 2, 255, 0, 8]
        # Read as int16 the 7 bytes cannot be (clear error); as bytes they read as zeros.
        s = torch.UntypedStorage(7, device="tpu")
        with pytest.raises(RuntimeError, match="not a multiple of 2 bytes"):
            torch.empty(0, dtype=torch.int16, device="tpu").set_(s, 0, (3,)).cpu()
        assert torch.empty(0, dtype=torch.uint8, device="tpu").set_(s, 0, (7,)).cpu().tolist() \
            == [0] * 7
