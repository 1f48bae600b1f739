"""Storage methods PyTorch implements over host memory, given their meaning on tpu.

A tpu storage's data pointer names its device state, not its bytes (the allocator's
DataPtr, ``csrc/aten/tpu_allocator.h``): a method that writes through it, as
``UntypedStorage.byteswap`` does in PyTorch's C++, would overwrite host memory. Such methods
run here on the storage's bytes as a uint8 tensor on the device instead.
"""

from __future__ import annotations

import torch

_host_byteswap = torch.UntypedStorage._byteswap


def _byteswap(self: torch.UntypedStorage, elem_size: int) -> None:
    if self.device.type != "tpu":
        return _host_byteswap(self, elem_size)
    if elem_size not in (1, 2, 4, 8):
        raise RuntimeError("elem_size must be 1, 2, 4, or 8")
    if self.nbytes() % elem_size:
        raise RuntimeError(f"the length of data is not a multiple of {elem_size}")
    if elem_size == 1 or self.nbytes() == 0:
        return None
    data = torch.empty(0, dtype=torch.uint8, device=self.device).set_(self)
    data.copy_(data.view(-1, elem_size).flip(-1).reshape(-1))
    return None


def register() -> None:
    torch.UntypedStorage._byteswap = _byteswap
