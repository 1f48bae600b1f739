"""Runs a function on N ranks (spawned processes) with a hard timeout.

Each rank initialises the default group (``cpu:gloo,tpu:tpu`` unless told otherwise) from a
TCP store on a port the OS picked, runs ``fn(rank, world_size, *args)`` and tears the group
down. A rank's exception fails the run with its traceback; a run past ``timeout`` kills
every rank and fails, so no test can hang.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.multiprocessing as mp


def _entry(rank: int, fn: Callable, world_size: int, port: int, backend: str,
           pg_timeout_s: float, env: dict, args: tuple, bind_device: bool = False) -> None:
    os.environ.update(env)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # as torchrun does: ranks share the machine's cores

    import torchtpu  # noqa: F401  (registers the tpu backend)

    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=pg_timeout_s),
                            device_id=torch.device("tpu", 0) if bind_device else None)
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(fn: Callable, world_size: int = 2, *, args: tuple = (), timeout: float = 150,
              backend: str = "cpu:gloo,tpu:tpu", pg_timeout_s: float = 60,
              env: dict[str, str] | None = None, bind_device: bool = False) -> None:
    # Here, not at the top: a spawned rank imports this module before its env is set.
    from torchtpu._ports import free_port

    ctx = mp.start_processes(
        _entry, args=(fn, world_size, free_port(), backend, pg_timeout_s, env or {}, args,
                      bind_device),
        nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    try:
        while not ctx.join(timeout=max(0.1, min(1.0, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ranks did not finish within {timeout} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()


def run_ranks_expect_failure(fn: Callable, world_size: int = 2, **kw: Any) -> str:
    """Like run_ranks, but a rank must fail; returns the failure's text."""
    try:
        run_ranks(fn, world_size, **kw)
    except mp.ProcessRaisedException as e:
        return str(e)
    except mp.ProcessExitedException as e:
        return str(e)
    raise AssertionError("every rank succeeded; a failure was expected")
