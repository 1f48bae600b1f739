"""The key-value store a multi-process PJRT client is given (torchtpu.distributed.
initialize_multiprocess_client): two processes exchange values through it over a real
TCPStore, a missing key times out with its name, and on the XLA CPU plugin (which takes no
store) the device starts as usual and its groups stay host-staged. The plugins that do take
the store (CUDA, ROCm, TPU) need two accelerators to run; what they receive is checked in
tests/cpp/kv_store_test.cc."""

from __future__ import annotations

import os
import time

import pytest
import torch.multiprocessing as mp

pytestmark = pytest.mark.timeout(300)


def _rank(rank: int, world: int, port: int) -> None:
    os.environ.pop("TORCHTPU_PJRT_PLUGIN", None)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    import torchtpu.distributed as tdist
    from torchtpu import _C

    native = _C._distributed
    store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0)
    assert not native.device_started()
    assert native.multi_process_support() == "none"  # the default CPU plugin

    # The config is taken before the device starts; the CPU plugin will not use it.
    assert tdist.initialize_multiprocess_client(store, rank, world) == "none"

    kv = native.StoreKeyValueStore(store, tdist.PJRT_STORE_PREFIX)
    mine = bytes([rank, 0, 255]) + f"topology of {rank}".encode()
    kv.put(f"local_topology/{rank}", mine)
    for peer in range(world):
        got = kv.get(f"local_topology/{peer}", 60.0)
        assert got == bytes([peer, 0, 255]) + f"topology of {peer}".encode(), got
    # The keys live under the prefix in the job's store.
    assert store.get(f"torchtpu_pjrt/local_topology/{rank}") == mine
    assert kv.try_get("never_set") is None
    assert kv.try_get(f"local_topology/{1 - rank}") is not None
    with pytest.raises(TimeoutError, match="torchtpu_pjrt/never_set"):
        kv.get("never_set", 0.2)
    with pytest.raises(TimeoutError, match="never_set"):
        kv.get("never_set", 0.0)

    # The CPU plugin's client starts as a single-process one, as without the config.
    x = torch.full((4,), float(rank + 1), device="tpu")
    assert native.device_started()
    assert tdist.multiprocess_client() is False
    multi, local, total = native.client_devices()
    assert (multi, local, total) == (False, torch.tpu.device_count(), torch.tpu.device_count())
    with pytest.raises(RuntimeError, match="already started"):
        tdist.initialize_multiprocess_client(store, rank, world)

    # Its groups are host-staged, as before.
    dist.init_process_group("cpu:gloo,tpu:tpu", store=dist.PrefixStore("pg", store),
                            rank=rank, world_size=world)
    try:
        assert tdist.transport() == "host_staged"
        dist.all_reduce(x)
        assert x.cpu().tolist() == [3.0] * 4
    finally:
        dist.destroy_process_group()


def test_two_processes_exchange_through_the_store_and_cpu_client_is_unaffected():
    from torchtpu._ports import free_port  # not at the top: the ranks import this module

    ctx = mp.start_processes(_rank, args=(2, free_port()), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + 200
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise TimeoutError("ranks did not finish within 200 s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()


def test_arguments_are_checked_before_the_device_starts():
    import torch.distributed as dist

    import torchtpu.distributed as tdist

    with pytest.raises(ValueError, match="needs rank and world_size"):
        old = {k: os.environ.pop(k, None) for k in ("RANK", "WORLD_SIZE")}
        try:
            tdist.initialize_multiprocess_client(dist.HashStore())
        finally:
            os.environ.update({k: v for k, v in old.items() if v is not None})
    with pytest.raises(ValueError, match="needs a store outside torchrun"):
        tdist.initialize_multiprocess_client(None, 0, 2)
    with pytest.raises(ValueError, match="node 2 of 2"):
        tdist.initialize_multiprocess_client(dist.HashStore(), 2, 2)
