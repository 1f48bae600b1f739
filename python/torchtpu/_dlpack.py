"""``Tensor.__dlpack_device__`` for tpu tensors, and the exports a tpu tensor cannot make.

PyTorch's method recognizes a PrivateUse1 device by the name ``privateuse1``, which it no
longer has once the backend is renamed ``tpu``: it raised "Unknown device type tpu for
Dlpack", so ``torch.from_dlpack(t)`` and array-API consumers refused tpu tensors (the
capsule route, ``to_dlpack``/``from_dlpack``, exported them as kDLExtDev). Here a tpu
tensor answers (kDLExtDev, index), what the capsule carries; other tensors go to PyTorch's.

An export carries the tensor's data pointer, over which the importer makes a storage; a
tpu storage's pointer names the storage, and one cannot alias part of another. So a view
with a storage offset (``base[3:7]``) is exported as a copy where the caller allows one
(``copy=None``, the array API's "copy if needed", or ``copy=True``) and refused at the export
otherwise (``copy=False``, the aliasing capsule route ``to_dlpack``), naming ``clone()``. A
tensor of no elements holds nothing to alias: it is exported as a fresh empty tensor, and
imported as one (its pointer, null or inside another storage, names no storage).
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
_torch_from_dlpack = torch.utils.dlpack.from_dlpack


def _exported(t: torch.Tensor, copy: bool | None) -> torch.Tensor:
    """What the export of tpu tensor `t` carries (see the module docstring)."""
    if t.device.type != "tpu" or t.storage_offset() == 0:
        return t
    if t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    if copy is None:
        return t.clone()
    if copy:
        return t
    raise BufferError(
        f"tpu: cannot export a view with storage offset {t.storage_offset()} through DLPack "
        "without a copy: the importer would make a storage over a pointer inside this "
        "tensor's storage, and a tpu storage cannot alias part of another. Export a copy "
        "(view.clone(), or __dlpack__(copy=True)), or the base tensor and take the view of "
        "the imported one")


def _dlpack(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    if has_torch_function_unary(self):
        return _torch_dlpack(self, *args, **kwargs)
    return _torch_dlpack(_exported(self, kwargs.get("copy")), *args, **kwargs)


def _to_dlpack(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    # The capsule route aliases: a copy only when asked for.
    return _torch_to_dlpack(_exported(tensor, bool(kwargs.get("copy"))), *args, **kwargs)


def _from_dlpack(ext_tensor: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    t = _torch_from_dlpack(ext_tensor, *args, **kwargs)
    if t.device.type == "tpu" and t.numel() == 0:
        return torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return t


def register() -> None:
    torch.Tensor.__dlpack_device__ = _dlpack_device  # type: ignore[method-assign]
    torch.Tensor.__dlpack__ = _dlpack  # type: ignore[method-assign]
    torch.utils.dlpack.to_dlpack = _to_dlpack
    torch.to_dlpack = _to_dlpack  # type: ignore[attr-defined]
    torch.utils.dlpack.from_dlpack = _from_dlpack
    torch.from_dlpack = _from_dlpack
