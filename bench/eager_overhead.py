"""Eager overhead of the ``tpu`` device against PyTorch on the CPU, measured side by side.

For a small op (64x64 add) and a large one (1024x1024 matmul) it reports the median latency
of a cached op (compile excluded: each signature is warmed up first) on ``tpu`` and on
PyTorch CPU, and their ratio. Each timed ``tpu`` iteration waits for its result, so the
figure is dispatch + execute, not just enqueue.

    python bench/eager_overhead.py [--iters N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

import torchtpu


def _median_us(fn, iters: int) -> float:
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def _case(name: str, op, shapes: list[tuple[int, ...]], iters: int) -> dict[str, float | str]:
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
    cpu_us = _median_us(run_cpu, iters)
    tpu_us = _median_us(run_tpu, iters)
    return {"case": name, "cpu_us": cpu_us, "tpu_us": tpu_us, "ratio": tpu_us / cpu_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()

    info = torchtpu._C.plugin_info()
    print(f"machine: {platform.machine()} {platform.processor() or ''} cores={os.cpu_count()} "
          f"torch={torch.__version__} threads={torch.get_num_threads()}")
    print(f"tpu plugin: platform={info['platform']} api={info['api_version']} "
          f"kind={info['device_kind']}")
    rows = [
        _case("add 64x64", torch.add, [(64, 64), (64, 64)], args.iters),
        _case("matmul 1024x1024", torch.matmul, [(1024, 1024), (1024, 1024)],
              max(20, args.iters // 10)),
    ]
    goals = {"add 64x64": 5.0, "matmul 1024x1024": 1.5}
    print(f"{'case':<18} {'cpu median us':>14} {'tpu median us':>14} {'tpu/cpu':>8} {'goal':>6}")
    for r in rows:
        goal = goals[r["case"]]
        verdict = "met" if r["ratio"] < goal else "missed"
        print(f"{r['case']:<18} {r['cpu_us']:>14.1f} {r['tpu_us']:>14.1f} {r['ratio']:>8.2f} "
              f"<{goal:>4} {verdict}")


if __name__ == "__main__":
    main()
