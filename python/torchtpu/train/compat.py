"""What TorchTitan 0.3.0 needs from PyTorch that torch 2.13 does not have.

TorchTitan 0.3.0 calls ``torch.distributed.set_timeout(timeout, group)`` after the first
training step (``torchtitan/distributed/utils.py: set_pg_timeouts``, called from
``Trainer.train``). torch 2.13.0 has no such module-level function (it has the method
``ProcessGroup.set_timeout`` and the private ``distributed_c10d._set_pg_timeout``), so on torch
2.13 every TorchTitan 0.3.0 run -- on any device, CUDA included -- stops after step 1 with::

    File ".../torchtitan/distributed/utils.py", line 595, in set_pg_timeouts
        torch.distributed.set_timeout(timeout, group)
    AttributeError: module 'torch.distributed' has no attribute 'set_timeout'

``install()`` defines the function (only when it is missing) through the public
``ProcessGroup.set_timeout``, which sets the timeout of every backend of the group.
``tests/python/train/test_titan_compat.py`` fails once torch has the function, so this shim
is removed then.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist


def missing() -> list[str]:
    """The PyTorch functions TorchTitan 0.3.0 calls that this torch lacks."""
    return [] if hasattr(dist, "set_timeout") else ["torch.distributed.set_timeout"]


def _set_timeout(timeout: timedelta, group: dist.ProcessGroup | None = None) -> None:
    process_group = group if group is not None else dist.group.WORLD
    if process_group is None:
        raise RuntimeError("torch.distributed.set_timeout: the default process group is not "
                           "initialized; call init_process_group first")
    process_group.set_timeout(timeout)


def install() -> None:
    """Adds what ``missing()`` lists to torch.distributed; a no-op on a torch that has it."""
    if "torch.distributed.set_timeout" in missing():
        dist.set_timeout = _set_timeout
