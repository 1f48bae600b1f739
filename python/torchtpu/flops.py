"""Peak FLOP/s of a tpu device: the denominator of model FLOPs utilization (MFU).

``peak_flops(dtype)`` answers per device kind:

- Accelerator plugins (TPU, NVIDIA GPU): the vendor's dense bf16 matrix-unit peak for the
  plugin's device kind (``torch.tpu.get_device_name()``), the figure MFU is conventionally
  quoted against whatever dtype the model trains in.
- The XLA CPU plugin, and any kind the table does not know: *measured*. A large matmul of
  ``dtype`` runs through the plugin (the same path every lowered ``mm`` takes) and the best
  of a few timed runs is the peak. On a CPU plugin a run is timed by the process's CPU time
  (FLOPs per CPU-second, times the usable cores), not by wall time: other load on the
  machine takes cores away from the wall clock, and a peak measured once under load would
  be cached low for good. A vendor figure for "a CPU" would be meaningless: it
  depends on the cores the process may use, the ISA the plugin's code uses and the dtype
  (XLA's CPU backend has no native bf16 dots). The measurement runs once and is cached in
  ``$TORCHTPU_CACHE_DIR/peak_flops.json`` (default ``~/.cache/torchtpu``), keyed by plugin,
  device kind, CPU model, usable cores, ``XLA_FLAGS`` and dtype.

``TORCHTPU_PEAK_FLOPS`` (a number, FLOP/s) overrides both, for a figure measured elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from torchtpu import _C

log = logging.getLogger("torchtpu.flops")

# Dense bf16 peak per device, by substrings of the plugin's device kind (first match wins,
# so more specific names come first). Sources: the vendors' data sheets (Cloud TPU system
# architecture pages; NVIDIA's H100/H200/A100/B200/L40S sheets, without sparsity).
_ACCELERATOR_PEAKS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("TPU v4",), 275e12),
    (("TPU v5 lite", "TPU v5e"), 197e12),
    (("TPU v5p", "TPU v5"), 459e12),
    (("TPU v6 lite", "TPU v6e", "TPU v6"), 918e12),
    (("TPU7x", "TPU v7"), 2307e12 / 2),  # two TensorCores, each its own device
    (("GB200", "GB300"), 2.5e15),
    (("B200", "B300"), 2.25e15),
    (("H100 NVL",), 835e12),
    (("H100 PCIe",), 756e12),
    (("H100", "H200", "H800"), 989e12),
    (("A100",), 312e12),
    (("L40S",), 362e12),
)

_MATMUL_SIZE = 2048  # 17 GFLOP per product: long enough to time, short enough to run once
_MATMUL_RUNS = 4


def table_peak_flops(device_kind: str) -> float | None:
    """The data-sheet bf16 peak for ``device_kind``, or None when the table has no entry."""
    for names, peak in _ACCELERATOR_PEAKS:
        if any(name.lower() in device_kind.lower() for name in names):
            return peak
    return None


def peak_flops(dtype: torch.dtype = torch.bfloat16, device: int | str | torch.device | None = None
               ) -> float:
    """Peak FLOP/s of one tpu device for matmuls in ``dtype`` (see the module docstring)."""
    override = os.environ.get("TORCHTPU_PEAK_FLOPS")
    if override:
        try:
            value = float(override)
        except ValueError:
            raise ValueError(f"torchtpu: TORCHTPU_PEAK_FLOPS must be a number of FLOP/s, got "
                             f"{override!r}") from None
        if not 0 < value < float("inf"):  # NaN too
            raise ValueError(f"torchtpu: TORCHTPU_PEAK_FLOPS must be a positive finite number "
                             f"of FLOP/s, got {override!r}")
        return value
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"torchtpu: peak_flops takes float32, bfloat16 or float16, got {dtype}")
    props = torch.tpu.get_device_properties(device)
    if props.platform != "cpu":
        peak = table_peak_flops(props.name)
        if peak is not None:
            return peak
        log.warning("torchtpu: no data-sheet peak for device kind %r; measuring a %s matmul "
                    "instead", props.name, dtype)
    return _cached_measurement(dtype, props)


def _cache_file() -> Path | None:
    root = os.environ.get("TORCHTPU_CACHE_DIR")
    if root is not None and root.strip() in ("", "off"):
        return None
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "torchtpu"
    return base / "peak_flops.json"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cache_key(dtype: torch.dtype, props) -> str:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # The plugin as it reported itself at load (two builds may share an xla_version).
    attrs = props.plugin_attributes
    facts = [props.platform, props.name, _C.plugin_info()["path"], props.pjrt_api_version,
             str(attrs.get("xla_version", "")), str(attrs.get("stablehlo_current_version", "")),
             _cpu_model(), str(cores),
             os.environ.get("XLA_FLAGS", ""), str(dtype), str(_MATMUL_SIZE), "cpu-time"]
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


def _cached_measurement(dtype: torch.dtype, props) -> float:
    path = _cache_file()
    key = _cache_key(dtype, props)
    entries: dict = {}
    if path is not None and path.exists():
        try:
            entries = json.loads(path.read_text())
            if isinstance(entries.get(key), dict) and entries[key].get("flops", 0) > 0:
                return float(entries[key]["flops"])
        except (OSError, ValueError, AttributeError):
            log.warning("torchtpu: ignoring unreadable peak FLOP/s cache %s", path)
            entries = {}
    flops = measure_matmul_flops(dtype, props.index, by_cpu_time=props.platform == "cpu")
    if path is not None:
        entries[key] = {"flops": flops, "dtype": str(dtype), "device_kind": props.name,
                        "cpu": _cpu_model(), "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as f:
                json.dump(entries, f, indent=1)
            os.replace(f.name, path)
        except OSError as e:
            log.warning("torchtpu: could not cache the peak FLOP/s in %s: %s", path, e)
    return flops


def best_flops(run: Callable[[], None], flop: float, runs: int, by_cpu_time: bool) -> float:
    """``flop`` over the fastest of ``runs`` calls of ``run``. By CPU time: FLOPs per second
    of this process's CPU time times the cores it may use, which is what the cores deliver
    while they run it, however many of them other load takes away from the wall clock."""
    clock = time.process_time if by_cpu_time else time.perf_counter
    best = float("inf")
    for _ in range(runs):
        start = clock()
        run()
        best = min(best, clock() - start)
    cores = len(os.sched_getaffinity(0)) if by_cpu_time else 1
    return flop / best * cores


def measure_matmul_flops(dtype: torch.dtype, device: int = 0, size: int = _MATMUL_SIZE,
                         runs: int = _MATMUL_RUNS, by_cpu_time: bool = False) -> float:
    """FLOP/s of the best of ``runs`` ``size`` x ``size`` matmuls in ``dtype`` on tpu.
    ``by_cpu_time`` (a CPU plugin, whose device is this process's cores): each run's FLOPs
    per second of process CPU time, times the usable cores."""
    dev = torch.device("tpu", device)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=gen).to(dev, dtype)
    b = torch.randn(size, size, generator=gen).to(dev, dtype)
    torch.tpu.synchronize(dev)
    torch.mm(a, b)  # compile and warm up
    torch.tpu.synchronize(dev)

    def product() -> None:
        torch.mm(a, b)
        torch.tpu.synchronize(dev)

    flops = best_flops(product, 2.0 * size**3, runs, by_cpu_time)
    log.info("torchtpu: measured peak %.3g FLOP/s (%s matmul %dx%d through the plugin)", flops,
             dtype, size, size)
    return flops


__all__ = ["best_flops", "measure_matmul_flops", "peak_flops", "table_peak_flops"]
