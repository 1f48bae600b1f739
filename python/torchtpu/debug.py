"""Nothing silent: metrics of the ``tpu`` device and a readable report.

``metrics()`` returns counters (compiles, cache hits, executions, transfers and bytes,
compile time) and CPU fallbacks per op. ``plugin()`` describes the running PJRT plugin and
``plugins()`` every plugin torchtpu knows. ``report()`` renders all of it as text.
"""

from __future__ import annotations

import sys
from typing import Any

from torchtpu import _C


def metrics() -> dict[str, Any]:
    """A snapshot of every counter; ``fallback_ops`` maps op name -> number of CPU runs.
    Every counter ``report()`` shows is present, 0 until it first counts, so a process that
    has compiled nothing (every program from the disk cache) has the same keys as one that
    has."""
    counters: dict[str, Any] = {key: 0 for key, _ in _ROWS}
    counters.update(_C.counters())
    keyed = _C.keyed_counters()
    counters["fallback_ops"] = dict(keyed.get("fallback_ops", {}))
    counters["host_roundtrip_ops"] = dict(keyed.get("host_roundtrip_ops", {}))
    counters["lowering_errors"] = dict(keyed.get("lowering_errors", {}))
    counters["compile_time_s"] = counters.get("compile_time_us", 0) / 1e6
    counters["num_op_signatures_cached"] = _C.op_cache_size()
    backend = sys.modules.get("torchtpu.dynamo.backend")  # only once torch.compile was used
    if backend is not None:
        counters.update(backend.compile_stats())
    return counters


def plugin() -> dict[str, Any]:
    """The running PJRT plugin: its registry name ("" for a path the user gave), how it was
    chosen, its library path, and what it reports at load: PJRT C API version, platform name
    and version, device kind, whether it has the FFI extension (host kernels), and its plugin
    attributes (``xla_version``, ``stablehlo_current_version``, ...); ``host_malloc``: the
    host allocator policy in force ("retain" on a CPU plugin unless
    ``TORCHTPU_HOST_MALLOC=system``, else "system"; docs/architecture.md); ``cpu_async``:
    ``TORCHTPU_CPU_ASYNC`` as the CPU plugin took it (False: programs run on the calling
    thread), None where it was not set or the plugin has no such option (``xla-cpu-pjrt``)."""
    return dict(_C.plugin_info())


def plugins() -> list[dict[str, Any]]:
    """Every PJRT plugin torchtpu knows, in the registry's order (the default candidates
    first): name (the PyPI distribution, also a ``TORCHTPU_PJRT_PLUGIN`` value), platform,
    whether it is a default candidate, provenance, and its installed path ("" if absent)."""
    return [dict(p) for p in _C.known_plugins()]


def _plugin_lines() -> list[str]:
    try:
        info = plugin()
    except RuntimeError as e:  # no plugin could be loaded: say why instead of the facts
        return [f"PJRT plugin: not loaded: {e}"]
    attrs = info["attributes"]
    lines = [
        f"PJRT plugin: {info['name'] or '(unregistered)'} ({info['chosen_by']})",
        f"  path: {info['path']}",
        f"  PJRT C API {info['api_version']}, platform {info['platform']} "
        f"{info['platform_version']}, device kind {info['device_kind']}, "
        f"FFI extension: {'yes' if info['ffi_extension'] else 'no'}, "
        f"host malloc: {info['host_malloc']}"
        + ("" if info["cpu_async"] is None else
           f", programs on {'worker threads' if info['cpu_async'] else 'the calling thread'}"),
    ]
    for key in sorted(attrs):
        lines.append(f"  {key}: {attrs[key]}")
    installed = [p["name"] for p in plugins() if p["path"]]
    lines.append(f"  installed plugins: {', '.join(installed) or 'none'}")
    return lines


def reset_metrics() -> None:
    _C.reset_metrics()


_ROWS = [
    ("num_compiles", "programs compiled"),
    ("compile_time_s", "seconds compiling"),
    ("num_compile_cache_hits_memory", "compile cache hits (memory)"),
    ("num_compile_cache_hits_disk", "compile cache hits (disk)"),
    ("num_compile_cache_evictions", "executables evicted (memory tier full)"),
    ("num_disk_cache_writes", "executables written to the disk cache"),
    ("num_disk_cache_corrupt", "corrupt disk cache entries recompiled"),
    ("num_disk_cache_evictions", "disk cache entries deleted to keep TORCHTPU_CACHE_MAX_SIZE"),
    ("num_op_signatures_compiled", "op signatures compiled"),
    ("num_eager_ops", "eager ops executed on tpu"),
    ("num_executions", "programs executed (ops + copies/views)"),
    ("num_graphs_compiled", "torch.compile graphs compiled"),
    ("num_graph_executions", "torch.compile graphs executed"),
    ("num_cpu_fallbacks", "ops run on the CPU (fallback)"),
    ("num_lowering_errors", "ops whose lowering failed (torchtpu bugs)"),
    ("num_data_checks", "data checks read back (index bounds)"),
    ("num_host_roundtrips", "data-dependent ops via host (nonzero...)"),
    ("num_transfers_to_device", "host->device transfers"),
    ("transfer_to_device_bytes", "host->device bytes"),
    ("num_transfers_to_host", "device->host transfers"),
    ("transfer_to_host_bytes", "device->host bytes"),
]


def report() -> str:
    """The running plugin and a readable table of the metrics, with every CPU fallback
    listed by op."""
    m = metrics()
    width = max(len(label) for _, label in _ROWS)
    lines = ["torchtpu report", *_plugin_lines(), "-" * (width + 16)]
    for key, label in _ROWS:
        value = m.get(key, 0)
        shown = f"{value:.3f}" if isinstance(value, float) else f"{value:,}"
        lines.append(f"{label:<{width}}  {shown:>12}")
    if "num_dynamo_compiles" in m:
        lines.append(f"{'torch.compile: Dynamo graphs compiled':<{width}}  {m['num_dynamo_compiles']:>12,}")
        lines.append(f"{'torch.compile: recompilations':<{width}}  {m['num_recompiles']:>12,}")
        lines.append(f"{'torch.compile: graph breaks':<{width}}  {m['num_graph_breaks']:>12,}")
        for reason in m["recompile_reasons"][-5:]:
            lines.append(f"  {reason}")
        for reason, n in sorted(m["graph_breaks"].items(), key=lambda kv: -kv[1])[:5]:
            lines.append(f"  graph break x{n}: {reason}")
    fallbacks = m["fallback_ops"]
    lines.append("-" * (width + 16))
    if fallbacks:
        lines.append("CPU fallbacks by op (each copies inputs to the host and back):")
        for op, n in sorted(fallbacks.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {op:<{width - 2}}  {n:>12,}")
    else:
        lines.append("CPU fallbacks: none")
    if m["lowering_errors"]:
        lines.append("Lowering errors by op (raised; please report them):")
        for op, n in sorted(m["lowering_errors"].items(), key=lambda kv: -kv[1]):
            lines.append(f"  {op:<{width - 2}}  {n:>12,}")
    if m["host_roundtrip_ops"]:
        lines.append("Host round-trips for data-dependent shapes (by design):")
        for op, n in sorted(m["host_roundtrip_ops"].items(), key=lambda kv: -kv[1]):
            lines.append(f"  {op:<{width - 2}}  {n:>12,}")
    text = "\n".join(lines)
    print(text)
    return text
