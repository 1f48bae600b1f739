"""Eager overhead of the ``tpu`` device against PyTorch on the CPU, measured side by side.

For a small op (64x64 add) and a large one (1024x1024 matmul) it reports the latency of a
cached op (compile excluded: each signature is warmed up first) on ``tpu`` and on PyTorch
CPU, and their ratio, in both eager modes (op by op, and fused: recorded and run as a
graph, here a graph of one op since every call waits). Each timed ``tpu`` iteration waits
for its result, so the figure is dispatch + execute + completion, not just enqueue. Goals:
the small op within 3x the CPU op by op, the matmul within 1.2x. Times are taken over batches of calls;
the minimum over batches is the figure least disturbed by other load on the machine, the
median is printed beside it.

An in-place update of two rows (`index_copy_`, as a KV cache is written) is timed into a
64 KiB and a 64 MiB tensor: the op writes into the tensor's own buffer when nothing else
holds it, so the larger tensor should cost about the same (goal: within 2x).

For the small op it then explains where the microseconds go:

    dispatch   PyTorch's dispatcher and Python binding, the result tensor's allocation
               (an enqueued op's host time minus the boxed kernel's phases below)
    key        classifying the call into its signature, finding its program
    bind       gathering the program's arguments (buffers, scalars)
    execute    the PJRT execute call (the plugin enqueues the program)
    complete   data checks, results wrapped as tensors or written into their targets
    wait       waiting for the result (the plugin's worker threads run the program)

and counts the work per op: PJRT calls, program executions, device buffers created, and the
process's thread switches (voluntary context switches) per synced op.

On a CPU plugin the wait is a hand-off between threads, not the program: XLA's CPU client
runs a program its cost analysis puts under 1000 flops on the calling thread, and hands any
larger one to its worker pool. A 64x64 add (a multiply by `alpha` and an add: 8192 flops)
is handed off; a 16x16 add (512) is not. The `inline` line times that 16x16 add synced, the
same path without the hand-off. PJRT's C API has no option to choose. A waiter that slept
would be woken after the worker (thread switches; their latency follows the machine's load
and the idle states of its cores, tens of microseconds), so device waits poll first
(TORCHTPU_POLL_US): the `no poll` line times the synced add in a child process
with TORCHTPU_POLL_US=0, and the work line counts the synced waits that slept. The XLA CPU
plugin can also run every program on the calling thread (its client option `asynchronous`,
TORCHTPU_CPU_ASYNC=0): the `cpu sync` line times the synced add in a child process so set.

    python bench/eager_overhead.py [--iters N] [--quick] [--json PATH]

``--json PATH`` appends one JSON record per run to PATH (a trend file: the test suite's
bench smoke run keeps one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

import torchtpu

try:
    import resource  # POSIX only
except ImportError:  # pragma: no cover
    resource = None


def _timed_batches(fn: Callable[[], None], batches: int, per_batch: int) -> list[float]:
    """Per-call microseconds of each batch of `per_batch` calls."""
    out = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(per_batch):
            fn()
        out.append((time.perf_counter() - start) * 1e6 / per_batch)
    return out


def _case(name: str, op: Callable, shapes: list[tuple[int, ...]], batches: int,
          per_batch: int) -> dict[str, Any]:
    torch.manual_seed(0)
    cpu_inputs = [torch.randn(*s) for s in shapes]
    tpu_inputs = [t.to("tpu") for t in cpu_inputs]

    def run_cpu() -> None:
        op(*cpu_inputs)

    def run_tpu() -> None:
        torchtpu.block_until_ready(op(*tpu_inputs))

    for _ in range(5):  # compile once, then warm the caches
        run_cpu()
        run_tpu()
    cpu = _timed_batches(run_cpu, batches, per_batch)
    tpu = _timed_batches(run_tpu, batches, per_batch)
    return {"case": name, "cpu_us": min(cpu), "tpu_us": min(tpu),
            "cpu_median_us": statistics.median(cpu), "tpu_median_us": statistics.median(tpu),
            "ratio": min(tpu) / min(cpu)}


def _row_updates(batches: int, per_batch: int) -> list[dict[str, Any]]:
    """A KV-cache style in-place update (index_copy_ of 2 rows of 1,024 floats) into a
    64 KiB and a 64 MiB tensor: the op writes into the tensor's own buffer, so its cost
    should follow the rows, not the tensor (goal: 64 MiB within 2x of 64 KiB on tpu)."""
    out = []
    for rows in (16, 16384):
        times = {}
        for device in ("cpu", "tpu"):
            cache = torch.zeros(rows, 1024, device=device)
            src = torch.ones(2, 1024, device=device)
            at = torch.tensor([1, rows - 1], device=device)

            def update() -> None:
                cache.index_copy_(0, at, src)
                if device == "tpu":
                    torchtpu.block_until_ready(cache)

            for _ in range(3):
                update()
            times[device] = min(_timed_batches(update, batches, per_batch))
        size = "64 KiB" if rows == 16 else "64 MiB"
        out.append({"case": f"index_copy_ 2 rows into {size}",
                    "cpu_us": times["cpu"], "tpu_us": times["tpu"]})
    return out


def _breakdown(batches: int, per_batch: int) -> dict[str, float]:
    """Where a 64x64 add's host microseconds go (see the module docstring)."""
    a = torch.randn(64, 64, device="tpu")
    b = torch.randn(64, 64, device="tpu")
    for _ in range(5):
        torchtpu.block_until_ready(torch.add(a, b))

    def enqueue_batch() -> None:
        for _ in range(per_batch):
            c = torch.add(a, b)
        torchtpu.block_until_ready(c)

    # Enqueue only: the batch's one wait is spread over many calls.
    best_enqueue = float("inf")
    best_phases: dict[str, int] = {}
    torchtpu._C.set_dispatch_profile(True)
    try:
        for _ in range(batches):
            torchtpu._C.reset_dispatch_profile()
            start = time.perf_counter()
            enqueue_batch()
            us = (time.perf_counter() - start) * 1e6 / per_batch
            if us < best_enqueue:
                best_enqueue = us
                best_phases = torchtpu._C.dispatch_profile()
    finally:
        torchtpu._C.set_dispatch_profile(False)
    calls = max(best_phases["calls"], 1)
    phases = {p: best_phases[f"{p}_ns"] / calls / 1e3
              for p in ("key", "bind", "execute", "complete")}
    synced = min(_timed_batches(lambda: torchtpu.block_until_ready(torch.add(a, b)), batches,
                                per_batch))
    small_a = torch.randn(16, 16, device="tpu")
    small_b = torch.randn(16, 16, device="tpu")
    for _ in range(5):
        torchtpu.block_until_ready(torch.add(small_a, small_b))
    inline = min(_timed_batches(
        lambda: torchtpu.block_until_ready(torch.add(small_a, small_b)), batches, per_batch))
    kernel = sum(phases.values())
    return {"dispatch": max(best_enqueue - kernel, 0.0), **phases,
            "wait": max(synced - best_enqueue, 0.0), "enqueue_total": best_enqueue,
            "synced_total": synced, "inline_synced_total": inline}


def _synced_waits(shape: tuple[int, ...], n: int = 200) -> tuple[float, float]:
    """Voluntary context switches of the whole process, and device waits that slept, per
    synced add of `shape`."""
    a = torch.randn(*shape, device="tpu")
    b = torch.randn(*shape, device="tpu")
    for _ in range(5):
        torchtpu.block_until_ready(torch.add(a, b))
    slept0 = torchtpu._C.counters().get("device_waits_slept", 0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    for _ in range(n):
        torchtpu.block_until_ready(torch.add(a, b))
    switches = (resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before) / n
    return switches, (torchtpu._C.counters().get("device_waits_slept", 0) - slept0) / n


def _synced_in_child(iters: int, env: dict[str, str]) -> float | None:
    """The synced 64x64 add's microseconds in a child process with `env` set (None when
    it failed)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--synced-only", "--iters", str(iters)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                             env={**os.environ, **env})
        return float(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _counts(n: int = 100) -> dict[str, float]:
    """Work per 64x64 add, counted on this thread (stable, unlike times)."""
    a = torch.randn(64, 64, device="tpu")
    b = torch.randn(64, 64, device="tpu")
    for _ in range(5):
        torchtpu.block_until_ready(torch.add(a, b))
    counters = torchtpu._C.counters
    pjrt0 = torchtpu._C.pjrt_calls_on_this_thread()
    exe0 = counters().get("num_executions", 0)
    buf0 = torchtpu._C.memory_stats(0)["num_device_alloc"]
    for _ in range(n):
        c = torch.add(a, b)
    pjrt = torchtpu._C.pjrt_calls_on_this_thread() - pjrt0
    exe = counters().get("num_executions", 0) - exe0
    buf = torchtpu._C.memory_stats(0)["num_device_alloc"] - buf0
    torchtpu.block_until_ready(c)
    return {"pjrt_calls": pjrt / n, "executions": exe / n, "device_buffers": buf / n}


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200,
                        help="calls of the small op per measurement (in batches of 20)")
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="append a JSON record of the run to PATH")
    parser.add_argument("--synced-only", action="store_true",
                        help="print only the synced 64x64 add's microseconds (the child run "
                             "that times it without polling)")
    args = parser.parse_args()
    iters = 40 if args.quick else args.iters
    per_batch = 20
    batches = max(iters // per_batch, 2)
    if args.synced_only:
        print(f"{_breakdown(batches, per_batch)['synced_total']:.2f}")
        return

    info = torchtpu._C.plugin_info()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()} {platform.processor() or ''} cores={os.cpu_count()} "
          f"load={load:.1f} torch={torch.__version__} threads={torch.get_num_threads()}")
    print(f"tpu plugin: platform={info['platform']} api={info['api_version']} "
          f"kind={info['device_kind']}")
    rows = []
    for mode in ("op", "fused"):
        torchtpu.set_eager_mode(mode)
        rows.append(_case("add 64x64", torch.add, [(64, 64), (64, 64)], batches, per_batch))
        rows.append(_case("matmul 1024x1024", torch.matmul, [(1024, 1024), (1024, 1024)],
                          2 if args.quick else max(batches // 2, 2), 2 if args.quick else 5))
        rows[-2]["mode"] = rows[-1]["mode"] = mode
    torchtpu.set_eager_mode("op")
    goals = {"add 64x64": 3.0, "matmul 1024x1024": 1.2}
    print(f"{'case':<18} {'mode':<6} {'cpu us':>9} {'tpu us':>9} {'tpu/cpu':>8} {'goal':>6}   "
          f"(min over batches; medians {'cpu':>5} / {'tpu':>5})")
    for r in rows:
        goal = goals[r["case"]]
        verdict = "met" if r["ratio"] <= goal else "missed"
        print(f"{r['case']:<18} {r['mode']:<6} {r['cpu_us']:>9.1f} {r['tpu_us']:>9.1f} "
              f"{r['ratio']:>8.2f} <={goal:>4} {verdict}  {r['cpu_median_us']:>9.1f} / "
              f"{r['tpu_median_us']:.1f}")

    updates = _row_updates(2 if args.quick else batches, 5 if args.quick else per_batch)
    for r in updates:
        print(f"{r['case']:<31} cpu {r['cpu_us']:>9.1f} us  tpu {r['tpu_us']:>9.1f} us")
    grow = updates[1]["tpu_us"] / updates[0]["tpu_us"]
    print(f"in-place row update, 64 MiB / 64 KiB tensor on tpu: {grow:.2f}x  (goal <= 2: "
          f"{'met' if grow <= 2 else 'missed'}; cpu {updates[1]['cpu_us'] / updates[0]['cpu_us']:.2f}x)")

    parts = _breakdown(batches, per_batch)
    print("add 64x64 on tpu, host microseconds per op:")
    for key in ("dispatch", "key", "bind", "execute", "complete", "wait"):
        print(f"  {key:<9} {parts[key]:>7.2f}")
    print(f"  {'enqueued':<9} {parts['enqueue_total']:>7.2f}   (no wait per op)")
    print(f"  {'synced':<9} {parts['synced_total']:>7.2f}   (a wait per op)")
    print(f"  {'inline':<9} {parts['inline_synced_total']:>7.2f}   (a wait per op, 16x16: "
          "run on the calling thread by a CPU plugin)")
    for key, label, env, what in (
            ("synced_no_polling_total", "no poll", {"TORCHTPU_POLL_US": "0"},
             "TORCHTPU_POLL_US=0"),
            ("synced_cpu_sync_total", "cpu sync", {"TORCHTPU_CPU_ASYNC": "0"},
             "TORCHTPU_CPU_ASYNC=0: every program on the calling thread")):
        if key == "synced_cpu_sync_total" and info["platform"] != "cpu":
            continue
        us = parts[key] = _synced_in_child(iters, env)
        print(f"  {label:<9} " + (f"{us:>7.2f}" if us is not None else "failed") +
              f"   (a wait per op, in a child process with {what})")
    counts = _counts()
    if info["platform"] == "cpu" and resource is not None:
        for name, shape in (("synced", (64, 64)), ("synced_16x16", (16, 16))):
            switches, slept = _synced_waits(shape)
            counts[f"thread_switches_{name}"] = switches
            counts[f"waits_slept_{name}"] = slept
    print("add 64x64 on tpu, work per op: " +
          ", ".join(f"{k} {v:g}" for k, v in counts.items()))

    if args.json:
        record = {"bench": "eager_overhead", "time": time.time(), "commit": _commit(),
                  "load": load, "quick": args.quick, "cases": rows, "row_updates": updates,
                  "breakdown_us": parts,
                  "counts_per_op": counts}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "a") as f:
            f.write(json.dumps(record) + "\n")
        print(f"appended a record to {args.json}")


if __name__ == "__main__":
    main()
