"""torch.distributed's ``tpu`` backend.

Importing torchtpu registers it, so ``dist.init_process_group("tpu")`` (or
``backend="cpu:gloo,tpu:tpu"`` to keep CPU tensors on Gloo) works, and
``dist.Backend.default_device_backend_map["tpu"] == "tpu"``. The backend is a C++
``c10d::Backend`` (``csrc/distributed``) and serves DDP, FSDP2, DTensor and DCP.

A group's collectives travel through one of two transports, chosen here when the group is
created:

- in-plugin: every rank of the group is in this process, each on its own device, and the
  extension has the in-plugin transport: a collective is one StableHLO program over those
  devices;
- host-staged otherwise (ranks in other processes on a plugin without a cross-process
  transport, as the XLA CPU plugin): data is copied to host memory and exchanged over the
  group's own TCP connections (their addresses travel through the group's store); send and
  recv go through PyTorch's Gloo, on a Gloo backend created here. Collectives run
  on the group's own thread in issue order and return pending works (``async_op=True``
  overlaps them with the caller's work). Counted in ``torchtpu.debug.metrics()`` as
  ``num_host_staged_collectives`` / ``host_staged_bytes``.

``torchtpu.distributed.transport(group)`` says which one a group uses.

Accelerator plugins (XLA's CUDA/ROCm plugin, libtpu) can form one PJRT client over the
devices of several processes, given a key-value store the processes share.
``initialize_multiprocess_client`` gives them one over a torch.distributed Store; it must
run before the device starts. The XLA CPU plugins take none and start as usual.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from torchtpu import _C, _exit

_native = _C._distributed


def _wait_for_detached_collective_threads(limit_s: float = 10.0) -> None:
    """At exit: lets the threads of destroyed host-staged groups finish their last
    collective (they may need the GIL) before Python's finalization cancels them, which
    aborts the process when it catches one inside a destructor. Bounded: a collective
    still blocked after `limit_s` is left to the finalization."""
    deadline = time.monotonic() + limit_s
    while _native.detached_queue_threads() > 0 and time.monotonic() < deadline:
        time.sleep(0.005)


_exit.register(_wait_for_detached_collective_threads)

BACKEND_NAME = "tpu"


def _making(store: Any, global_ranks: list[int]) -> str:
    """Which making of the group this is: its members, and n (0, 1, ...) among the makings
    of a group with these members under this name. The store outlives a group
    (torchrun's), and a group made again after ``destroy_process_group()`` has the same
    name, so the same keys (a subgroup's name may come back with other members): every
    member's join counts, and each making keeps its keys under its own members and n,
    never reading what the last one left (Gloo connected to the old addresses and waited
    out the group's timeout)."""
    members = hashlib.sha1(",".join(map(str, global_ranks)).encode()).hexdigest()[:12]
    n = (store.add(f"torchtpu_group/{members}/joins", 1) - 1) // len(global_ranks)
    return f"{members}/{n}"


def _group_members(store: Any, rank: int, size: int, timeout: timedelta) -> list[str]:
    """Every rank's ``host:pid:device``, exchanged through the group's store."""
    me = f"{socket.gethostname()}:{os.getpid()}:{torch.tpu.current_device()}"
    store.set(f"torchtpu_member/{rank}", me)
    keys = [f"torchtpu_member/{r}" for r in range(size)]
    store.wait(keys, timeout)
    return [store.get(k).decode() for k in keys]


def in_plugin_available() -> bool:
    """Whether this build has the in-plugin transport (collectives as StableHLO programs)."""
    return hasattr(_native.TpuBackend, "in_plugin")


def _ranks_share_a_client(members: list[str]) -> bool:
    """All ranks in this process (one PJRT client), each on a different device."""
    procs = {m.rsplit(":", 1)[0] for m in members}
    devices = {m.rsplit(":", 1)[1] for m in members}
    return len(procs) == 1 and len(devices) == len(members)


def _create_backend(opts: Any, backend_options: Any) -> dist.Backend:
    """The creator torch.distributed calls for every group of the ``tpu`` backend."""
    global_ranks = list(opts.global_ranks_in_group) or list(range(opts.group_size))
    return _make_group(opts.store, opts.group_rank, opts.group_size, global_ranks, opts.timeout)


def _split_group(store: Any, rank: int, size: int, global_ranks: list[int],
                 timeout_s: float) -> dist.Backend:
    """A group split out of a tpu group (``dist.split_group``; DeviceMesh when the default
    group is bound to a device): made as the creator makes any group."""
    return _make_group(store, rank, size, list(global_ranks), timedelta(seconds=timeout_s))


def _make_group(store: Any, rank: int, size: int, global_ranks: list[int],
                timeout: timedelta) -> dist.Backend:
    store = dist.PrefixStore(f"torchtpu/{_making(store, global_ranks)}/", store)
    members = _group_members(store, rank, size, timeout)
    if in_plugin_available() and _ranks_share_a_client(members):
        return _native.TpuBackend.in_plugin(store, rank, size, global_ranks,
                                            timeout.total_seconds())
    gloo = dist.ProcessGroupGloo(dist.PrefixStore("torchtpu_gloo/", store), rank, size, timeout)
    return _native.TpuBackend.host_staged(gloo, dist.PrefixStore("torchtpu_staged/", store),
                                          global_ranks, timeout.total_seconds())


PJRT_STORE_PREFIX = "torchtpu_pjrt"


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"tpu: {name}={value!r} is not an integer") from None


def initialize_multiprocess_client(
    store: Any = None,
    rank: int | None = None,
    world_size: int | None = None,
    local_device_ids: list[int] | None = None,
) -> str:
    """Makes the tpu device's PJRT client, when it starts, one client over the devices of
    ``world_size`` processes (this one is ``rank``), exchanging what they need through
    ``store`` (a torch.distributed Store; keys under ``torchtpu_pjrt/``).

    Call it in every process before the device starts (before any tpu tensor,
    ``torch.tpu`` call or ``init_process_group``); after that it raises ``RuntimeError``.
    Only a plugin that takes a key-value store uses it: XLA's CUDA/ROCm plugin (with
    ``node_id``/``num_nodes`` and, if given, ``local_device_ids`` as its
    ``visible_devices``) and libtpu (the store alone). The XLA CPU plugins ignore it: their
    processes exchange data through the host-staged transport.

    Defaults come from torchrun's environment: ``RANK``, ``WORLD_SIZE``, and a client of
    the launcher's store at ``MASTER_ADDR:MASTER_PORT`` when torchrun hosts it
    (``TORCHELASTIC_USE_AGENT_STORE=True``); elsewhere pass ``store`` (creating a
    ``TCPStore`` server on ``MASTER_PORT`` here would take the port
    ``init_process_group`` needs). Keys of a restarted torchrun attempt are kept apart by
    ``TORCHELASTIC_RESTART_COUNT``.

    Returns what the chosen plugin takes: ``"none"`` (nothing changes),
    ``"store"`` or ``"store_and_node_options"``.
    """
    rank = _env_int("RANK") if rank is None else rank
    world_size = _env_int("WORLD_SIZE") if world_size is None else world_size
    if rank is None or world_size is None:
        raise ValueError("tpu: initialize_multiprocess_client needs rank and world_size "
                         "(or RANK and WORLD_SIZE in the environment, as torchrun sets)")
    if store is None:
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
            raise ValueError(
                "tpu: initialize_multiprocess_client needs a store outside torchrun (pass a "
                "torch.distributed Store every process reaches, e.g. a TCPStore)")
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              world_size, is_master=False)
    prefix = PJRT_STORE_PREFIX
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if restart is not None:
        prefix += f"/{restart}"
    kv = _native.StoreKeyValueStore(store, prefix)
    _native.set_multi_process_config(kv, rank, world_size, list(local_device_ids or []))
    return _native.multi_process_support()


def multiprocess_client() -> bool:
    """Whether the started client spans several processes (starts the device)."""
    return _native.client_devices()[0]


def transport(group: dist.ProcessGroup | None = None) -> str:
    """``"in_plugin"`` or ``"host_staged"``: how ``group``'s tpu collectives travel."""
    pg = group if group is not None else dist.group.WORLD
    return pg._get_backend(torch.device("tpu")).transport


def _register() -> None:
    if BACKEND_NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True,
                                  devices=["tpu"])
    _native.TpuBackend.set_group_factory(_split_group)

    class GroupOptions(torch._C._distributed_c10d.Backend.Options):
        """A tpu group's options (its timeout), which ``split_group`` copies for the groups
        it makes (the base class cannot be copied)."""

        def __deepcopy__(self, memo: Any) -> GroupOptions:
            return GroupOptions(self.backend, self._timeout)

    _native.TpuBackend.options = property(
        lambda b: GroupOptions(BACKEND_NAME, timedelta(seconds=b.timeout_s)))


if dist.is_available():
    _register()
