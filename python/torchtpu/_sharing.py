"""tpu tensors through ``torch.multiprocessing`` (queues, ``Process`` arguments, the
results of spawn-started DataLoader workers).

torch's reducers share CPU tensors through shared memory and CUDA tensors through CUDA
IPC; a tpu tensor reached the CPU path, whose ``_share_fd_`` refused it in the queue's
feeder thread, so the receiver waited forever. A tpu buffer cannot be mapped by another
process (each has its own PJRT client), so a tpu tensor or storage travels as a copy: its
value on the host, put back on the same tpu device index by the receiver. Writes on one
side do not reach the other, unlike CUDA's shared tensors. The value travels inside the
pickle itself (torch.save's bytes), not in a shared-memory segment as a CPU tensor's does:
that segment's lifetime would end with the sender's temporary host copy, before a spawned
process's arguments are read.
"""

from __future__ import annotations

import io
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions as _torch_reductions


def _to_bytes(value) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def _from_bytes(data: bytes):
    return torch.load(io.BytesIO(data), weights_only=True)


def _rebuild_tensor(cls: type, data: bytes, index: int, requires_grad: bool):
    value = _from_bytes(data).to(torch.device("tpu", index))
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(value, requires_grad=requires_grad)
    return value.requires_grad_(requires_grad)


def _reduce_tensor(tensor: torch.Tensor):
    if tensor.device.type != "tpu":
        return _torch_reductions.reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        # torch's own refusal, for the same reason
        return _torch_reductions.reduce_tensor(tensor)
    data = _to_bytes(tensor.detach().cpu())
    return (_rebuild_tensor, (type(tensor), data, tensor.device.index, tensor.requires_grad))


def _rebuild_storage(data: bytes, index: int) -> torch.UntypedStorage:
    return _from_bytes(data).untyped_storage().to(device=torch.device("tpu", index))


def _reduce_storage(storage: torch.UntypedStorage):
    if storage.device.type != "tpu":
        return _torch_reductions.reduce_storage(storage)
    host = torch.empty(0, dtype=torch.uint8).set_(storage.cpu())
    return (_rebuild_storage, (_to_bytes(host), storage.device.index))


def register() -> None:
    """Takes over torch's reducers for tensors and untyped storages (after torch's own
    ``init_reductions``); other devices keep torch's."""
    for cls in (torch.Tensor, torch.nn.Parameter, *torch._tensor_classes):
        ForkingPickler.register(cls, _reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)
