"""``pin_memory()`` with tpu as the accelerator: PJRT stages host copies itself, so pinning
gives ordinary host memory that tpu's pinned allocator records (is_pinned() is true of it,
as PyTorch code pinning for a device asserts); DataLoader(pin_memory=True) works."""

from __future__ import annotations

import torch

import torchtpu  # noqa: F401


def test_pin_memory_copies_into_host_memory_that_is_pinned() -> None:
    # Ordinary host memory that tpu's pinned allocator records: is_pinned() is true of it
    # (DDP's reducer asserts it), of its views too, and of nothing else.
    x = torch.arange(6.)
    y = x.pin_memory()
    assert y.is_pinned() and not x.is_pinned() and y.device.type == "cpu"
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()
    assert y[2:].is_pinned()
    z = torch.empty(3, pin_memory=True)
    assert z.is_pinned()
    z.copy_(torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(z.to("tpu", non_blocking=True).cpu(), torch.tensor([1.0, 2.0, 3.0]))
    del y, z
    assert not torch.ones(2).is_pinned()


def test_dataloader_with_pin_memory() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(8.).reshape(4, 2))
    loader = torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True)
    batches = [b[0].to("tpu") for b in loader]
    assert torch.equal(torch.cat(batches).cpu(), torch.arange(8.).reshape(4, 2))


def test_storage_to_cpu_non_blocking() -> None:
    s = torch.arange(4.).to("tpu").untyped_storage()
    back = s.to(device="cpu", non_blocking=True)
    assert bytes(back) == bytes(torch.arange(4.).untyped_storage())


def test_empty_host_cache_after_the_device_started() -> None:
    # torch.accelerator.empty_host_cache() asks the device type's host allocator; with none
    # registered it dereferenced null (a segfault once the device had run anything).
    (torch.ones(4, device="tpu") * 2).cpu()
    pinned = torch.arange(6.0).pin_memory()
    torch.accelerator.empty_host_cache()
    assert pinned.is_pinned()
    assert torch.equal(pinned.to("tpu").cpu(), torch.arange(6.0))
