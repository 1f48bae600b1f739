"""Runs a function on N ranks that are threads of this process, one tpu device each.

PyTorch's threaded test world (``torch.testing._internal.distributed.multi_threaded_pg``,
with c10d's thread isolation mode) makes c10d's group registries thread-local, so every thread initialises its own default
group, here of the ``tpu`` backend over one shared HashStore; the ranks of a group then
share this process's PJRT client and the backend picks the in-plugin transport. The
process needs ``TORCHTPU_NUM_DEVICES`` >= N (the tests start it through run_python).
The ranks also share the process's default random generator: ``torch.manual_seed`` in one
rank reseeds it for all, and concurrent draws interleave, so a rank that needs the same
random values as its peers draws them from a ``torch.Generator`` of its own.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from datetime import timedelta


def run_rank_threads(fn: Callable[[int, int], None], world_size: int = 4, *,
                     timeout: float = 120, pg_timeout_s: float = 30) -> None:
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.multi_threaded_pg import _install_threaded_pg

    import torchtpu  # noqa: F401  (registers the tpu backend)

    _install_threaded_pg()
    # c10d's registry of group names is process-wide unless isolated per thread.
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    store = dist.HashStore()
    errors: list[str] = []

    def entry(rank: int) -> None:
        try:
            torch.tpu.set_device(rank)
            dist.init_process_group("tpu", rank=rank, world_size=world_size, store=store,
                                    timeout=timedelta(seconds=pg_timeout_s))
            try:
                fn(rank, world_size)
            finally:
                dist.destroy_process_group()
        except BaseException:  # noqa: BLE001  (reported by the main thread)
            errors.append(f"rank {rank}:\n{traceback.format_exc()}")

    threads = [threading.Thread(target=entry, args=(r,), daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"rank threads did not finish within {timeout} s")
    if errors:
        raise AssertionError("\n".join(errors))
