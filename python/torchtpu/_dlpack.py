"""``Tensor.__dlpack_device__`` for tpu tensors.

PyTorch's method recognizes a PrivateUse1 device by the name ``privateuse1``, which it no
longer has once the backend is renamed ``tpu``: it raised "Unknown device type tpu for
Dlpack", so ``torch.from_dlpack(t)`` and array-API consumers refused tpu tensors (the
capsule route, ``to_dlpack``/``from_dlpack``, exported them as kDLExtDev). Here a tpu
tensor answers (kDLExtDev, index), what the capsule carries; other tensors go to PyTorch's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import has_torch_function_unary

_torch_dlpack_device = torch.Tensor.__dlpack_device__


def _dlpack_device(self: torch.Tensor) -> tuple[Any, int]:
    if self.device.type != "tpu" or has_torch_function_unary(self):
        return _torch_dlpack_device(self)
    from torch.utils.dlpack import DLDeviceType

    return (DLDeviceType.kDLExtDev, self.device.index or 0)


def register() -> None:
    torch.Tensor.__dlpack_device__ = _dlpack_device  # type: ignore[method-assign]
