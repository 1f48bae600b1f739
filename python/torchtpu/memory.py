"""Device memory API of ``torch.tpu`` (the names and meanings of ``torch.cuda``'s).

``memory_allocated`` counts the bytes of live tpu storages (``x.untyped_storage().nbytes()``
for each), ``memory_reserved`` the bytes of live PJRT buffers on the device (storages that
have been written, results in flight, cached scalars). ``torch.accelerator``'s memory
functions read the same allocator. See csrc/aten/tpu_allocator.h.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from torchtpu import _C
from torchtpu.device import _index

Device = int | str | torch.device | None


def memory_stats(device: Device = None) -> collections.OrderedDict[str, int]:
    """Allocator statistics, keys as in ``torch.cuda.memory_stats()``
    (``allocated_bytes.all.current``, ``reserved_bytes.all.peak``, ...)."""
    stats = _C.memory_stats(_index(device))
    return collections.OrderedDict(sorted(stats.items()))


def memory_summary(device: Device = None, abbreviated: bool = False) -> str:
    """A readable table of ``memory_stats``: current, peak, allocated and freed of each
    statistic (bytes in MiB), as ``torch.cuda.memory_summary`` prints its own. With
    ``abbreviated``, the byte statistics only."""
    stats = memory_stats(device)
    rows = [("Allocated memory", "allocated_bytes", True), ("Active memory", "active_bytes", True),
            ("Requested memory", "requested_bytes", True), ("Reserved memory", "reserved_bytes", True)]
    if not abbreviated:
        rows += [("Allocations", "allocation", False), ("Active allocs", "active", False),
                 ("Device buffers", "segment", False)]
    lines = [f"tpu:{_index(device)} memory summary",
             f"{'':<20}{'current':>14}{'peak':>14}{'allocated':>14}{'freed':>14}"]
    for title, key, is_bytes in rows:
        cells = []
        for field in ("current", "peak", "allocated", "freed"):
            v = stats.get(f"{key}.all.{field}", 0)
            cells.append(f"{v / 2**20:>11.2f} MiB" if is_bytes else f"{v:>14d}")
        lines.append(f"{title:<20}" + "".join(cells))
    lines.append(f"{'Out-of-memory errors':<20}{stats.get('num_ooms', 0):>14d}")
    return "\n".join(lines) + "\n"


def memory_allocated(device: Device = None) -> int:
    """Bytes held by tpu tensors' storages on ``device`` now."""
    return _C.memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device: Device = None) -> int:
    """Peak of ``memory_allocated`` since start or ``reset_peak_memory_stats``."""
    return _C.memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device: Device = None) -> int:
    """Bytes of live PJRT buffers on ``device`` now."""
    return _C.memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device: Device = None) -> int:
    return _C.memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Device = None) -> None:
    _C.reset_peak_memory_stats(_index(device))


def memory_stats_as_nested_dict(device: Device = None) -> dict[str, Any]:
    """``memory_stats`` with its dotted keys as nested dicts
    (``["allocated_bytes"]["all"]["current"]``), as ``torch.cuda``'s."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *path, last = key.split(".")
        node = nested
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


# torch.cuda's deprecated names, with its warnings, for code written against them.
def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"torch.tpu.{old} is deprecated (as torch.cuda's is); use torch.tpu.{new}",
                  FutureWarning, stacklevel=3)


def memory_cached(device: Device = None) -> int:
    _deprecated("memory_cached", "memory_reserved")
    return memory_reserved(device)


def max_memory_cached(device: Device = None) -> int:
    _deprecated("max_memory_cached", "max_memory_reserved")
    return max_memory_reserved(device)


def reset_max_memory_allocated(device: Device = None) -> None:
    _deprecated("reset_max_memory_allocated", "reset_peak_memory_stats")
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: Device = None) -> None:
    _deprecated("reset_max_memory_cached", "reset_peak_memory_stats")
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Device = None) -> None:
    _C.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Frees the device buffers torchtpu keeps cached (the 0-d buffers of scalar
    arguments). Tensors' memory is freed when they are, as with CUDA."""
    _C.empty_cache()


def mem_get_info(device: Device = None) -> tuple[int, int]:
    """(free, total) bytes of ``device``: the plugin's figures where it reports a limit,
    the host's memory on the CPU plugin (its device memory is host memory)."""
    return tuple(_C.mem_get_info(_index(device)))


@dataclasses.dataclass(frozen=True)
class TpuDeviceProperties:
    name: str  # the plugin's device kind ("cpu", "NVIDIA H200", "TPU v5 lite", ...)
    platform: str  # the plugin's platform name ("cpu", "cuda", "tpu")
    index: int
    total_memory: int  # bytes, as mem_get_info()[1]
    pjrt_api_version: str
    plugin_attributes: dict[str, Any]


def get_device_properties(device: Device = None) -> TpuDeviceProperties:
    index = _index(device)
    p = _C.device_properties(index)
    return TpuDeviceProperties(name=p["name"], platform=p["platform"], index=index,
                               total_memory=int(p["total_memory"]),
                               pjrt_api_version=p["pjrt_api_version"],
                               plugin_attributes=dict(p["plugin_attributes"]))


def get_device_name(device: Device = None) -> str:
    return _C.device_properties(_index(device))["name"]


@dataclasses.dataclass(frozen=True)
class HugePages:
    """What ``use_huge_pages`` did. `huge_bytes` counts whole huge pages (the buffers'
    pages rounded out to huge page boundaries, so it can exceed `buffer_bytes`)."""
    buffers: int  # buffers in host memory that were asked for
    buffer_bytes: int  # their bytes
    huge_bytes: int  # bytes of huge pages now backing them
    refused_bytes: int  # bytes of huge pages the kernel refused (they stay 4 KiB pages)
    skipped_bytes: int  # bytes not asked for: not host memory, or TORCHTPU_HUGE_PAGES=0
    first_refusal: str  # why the first refusal ("EINVAL": a kernel older than 6.1, ...)
    seconds: float  # how long the kernel took (it copies every huge page it makes)


def huge_pages_enabled() -> bool:
    """TORCHTPU_HUGE_PAGES: unset or ``1`` (``use_huge_pages`` asks the kernel), ``0``
    (it asks for nothing)."""
    v = os.environ.get("TORCHTPU_HUGE_PAGES", "")
    if v not in ("", "0", "1"):
        raise ValueError(f"tpu: TORCHTPU_HUGE_PAGES={v!r} is not a switch (expected 1, the "
                         "default: large long-lived weights on CPU plugins are moved onto huge "
                         "pages, or 0: they keep the pages they were allocated on)")
    return v != "0"


def use_huge_pages(tensors: Iterable[torch.Tensor]) -> HugePages:
    """Moves the host memory behind these tpu tensors onto transparent huge pages (2 MiB),
    once: for buffers that live as long as the process and are streamed every step (a
    serving engine's weights), which read faster from huge pages. Only where the device's
    memory is host memory (a CPU plugin); synchronous (the kernel copies each 2 MiB page,
    about as long as writing it). The kernel may refuse (a kernel older than Linux 6.1, no
    free huge page): the memory then stays as it was, and the refusal is counted here and
    in ``torchtpu.debug.metrics()`` (``huge_page_refused_bytes``), never raised.
    Tensors not on ``tpu`` are skipped. ``TORCHTPU_HUGE_PAGES=0`` turns it off."""
    tensors = [t for t in tensors if t is not None]
    enabled = huge_pages_enabled()
    asked = [t for t in tensors if enabled and t.device.type == "tpu"]
    # Tensors not asked for (off, or not on tpu), each storage once.
    others = {(t.device, t.untyped_storage().data_ptr()): t.untyped_storage().nbytes()
              for t in tensors if not (enabled and t.device.type == "tpu")}
    r = _C.collapse_huge_pages(asked) if asked else dict(
        buffers=0, buffer_bytes=0, huge_bytes=0, refused_bytes=0, skipped_bytes=0,
        first_refusal="", seconds=0.0)
    return HugePages(buffers=r["buffers"], buffer_bytes=r["buffer_bytes"],
                     huge_bytes=r["huge_bytes"], refused_bytes=r["refused_bytes"],
                     skipped_bytes=r["skipped_bytes"] + sum(others.values()),
                     first_refusal=r["first_refusal"], seconds=r["seconds"])


__all__ = [
    "HugePages",
    "TpuDeviceProperties",
    "empty_cache",
    "get_device_name",
    "get_device_properties",
    "huge_pages_enabled",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "use_huge_pages",
]
