"""``Tensor.__dlpack_device__`` for tpu tensors, and the exports a tpu tensor cannot make.

PyTorch's method recognizes a PrivateUse1 device by the name ``privateuse1``, which it no
longer has once the backend is renamed ``tpu``: it raised "Unknown device type tpu for
Dlpack", so ``torch.from_dlpack(t)`` and array-API consumers refused tpu tensors (the
capsule route, ``to_dlpack``/``from_dlpack``, exported them as kDLExtDev). Here a tpu
tensor answers (kDLExtDev, index), what the capsule carries; other tensors go to PyTorch's.

An export carries the tensor's data pointer, and an import makes a storage over it; a tpu
storage's pointer names the storage, and one cannot alias part of another. So the export of
a view with a storage offset (``base[3:7]``) is refused at the export, naming the way out
(``copy=True``, or ``clone()``), not at the imported tensor's first use.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.dlpack
from torch.overrides import has_torch_function_unary

_torch_dlpack_device = torch.Tensor.__dlpack_device__


def _dlpack_device(self: torch.Tensor) -> tuple[Any, int]:
    if self.device.type != "tpu" or has_torch_function_unary(self):
        return _torch_dlpack_device(self)
    from torch.utils.dlpack import DLDeviceType

    return (DLDeviceType.kDLExtDev, self.device.index or 0)


_torch_dlpack = torch.Tensor.__dlpack__
_torch_to_dlpack = torch.utils.dlpack.to_dlpack


def _check_exportable(t: torch.Tensor) -> None:
    if t.device.type == "tpu" and t.numel() > 0 and t.storage_offset() != 0:
        raise BufferError(
            f"tpu: cannot export a view with storage offset {t.storage_offset()} through DLPack "
            "without a copy: the importer would make a storage over a pointer inside this "
            "tensor's storage, and a tpu storage cannot alias part of another. Export a copy "
            "(__dlpack__(copy=True), or view.clone()), or the base tensor and take the view "
            "of the imported one")


def _dlpack(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    if not kwargs.get("copy") and not has_torch_function_unary(self):
        _check_exportable(self)
    return _torch_dlpack(self, *args, **kwargs)


def _to_dlpack(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    if not kwargs.get("copy"):
        _check_exportable(tensor)
    return _torch_to_dlpack(tensor, *args, **kwargs)


def register() -> None:
    torch.Tensor.__dlpack_device__ = _dlpack_device  # type: ignore[method-assign]
    torch.Tensor.__dlpack__ = _dlpack  # type: ignore[method-assign]
    torch.utils.dlpack.to_dlpack = _to_dlpack
    torch.to_dlpack = _to_dlpack  # type: ignore[attr-defined]
