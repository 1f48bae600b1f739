"""Bus bandwidth of the in-plugin transport: N ranks as threads of one process, each on its
own tpu device (TORCHTPU_NUM_DEVICES=N on the XLA CPU plugin), every collective one
StableHLO program over their devices; beside it, Gloo on CPU tensors with the same N ranks
as threads of the same process (PyTorch's threaded world), measured in the same run.

    python bench/collectives_in_plugin.py [--ranks 4] [--max-mb 64] [--json]

Sizes are 1 KB to 64 MB (the larger side of the op); each figure is the fastest of 3
measurements (rank 0's clock, every rank synchronized on its device). Bus bandwidth follows nccl-tests:
all_reduce moves 2(n-1)/n of its size per rank, all_gather and reduce_scatter (n-1)/n.
`seconds_per_call()` is what bench/collectives.py's in-plugin column calls: it runs this
file in a child process (the device count is fixed when the PJRT client is created) and
returns {(op, nbytes): seconds}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time

SIZES_KB = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536]
OPS = ("all_reduce", "all_gather", "reduce_scatter")
REPEATS = 3


def bus_factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def iterations(nbytes: int) -> int:
    """Calls per measurement: about 256 MB moved, between 3 and 200 calls."""
    return max(3, min(200, (256 << 20) // nbytes))


def _measure(ranks: int, max_kb: int, ops: tuple[str, ...] = OPS) -> dict[str, dict[str, float]]:
    """{backend: {"op nbytes": seconds per call}} for "tpu" (in-plugin) and "gloo"."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.multi_threaded_pg import _install_threaded_pg

    import torchtpu

    _install_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    results: dict[str, dict[str, float]] = {"tpu": {}, "gloo": {}}
    errors: list[BaseException] = []

    def run(rank: int, store, backend: str, device: str) -> None:
        try:
            if device == "tpu":
                torch.tpu.set_device(rank)
            dist.init_process_group(backend, rank=rank, world_size=ranks, store=store,
                                    timeout=timedelta(seconds=300))
            if device == "tpu":
                assert torchtpu.distributed.transport() == "in_plugin"
            for op in ops:
                for kb in SIZES_KB:
                    if kb > max_kb:
                        continue
                    nbytes = kb * 1024
                    big = torch.ones(nbytes // 4, device=device)
                    small = torch.ones(nbytes // 4 // ranks, device=device)

                    def call():
                        if op == "all_reduce":
                            dist.all_reduce(big)
                        elif op == "all_gather":
                            dist.all_gather_into_tensor(big, small)
                        else:
                            dist.reduce_scatter_tensor(small, big)

                    out = small if op == "reduce_scatter" else big

                    def sync():
                        # Waits for the last call's output itself: on the CPU plugin a
                        # program with no inputs (torchtpu.synchronize's) may finish before
                        # collectives enqueued earlier.
                        if device == "tpu":
                            out[:1].cpu()

                    call()  # compile / connect
                    call()
                    sync()
                    n = iterations(nbytes)
                    best = float("inf")
                    for _ in range(REPEATS):  # the machine is shared: keep the fastest
                        dist.barrier()
                        start = time.perf_counter()
                        for _ in range(n):
                            call()
                        sync()
                        best = min(best, (time.perf_counter() - start) / n)
                    dist.barrier()
                    if rank == 0:
                        results[backend][f"{op} {nbytes}"] = best
            dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001  (re-raised by the caller)
            errors.append(e)

    for backend, device in (("tpu", "tpu"), ("gloo", "cpu")):
        store = dist.HashStore()
        threads = [threading.Thread(target=run, args=(r, store, backend, device))
                   for r in range(ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
    return results


def seconds_per_call(ranks: int = 4, max_kb: int = 65536,
                     ops: tuple[str, ...] = OPS) -> dict[str, dict[str, float]]:
    """Runs the measurement in a child process with TORCHTPU_NUM_DEVICES=ranks."""
    env = dict(os.environ, TORCHTPU_NUM_DEVICES=str(ranks))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--ranks", str(ranks),
                          "--max-mb", str(max_kb / 1024), "--ops", ",".join(ops), "--json"],
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"in-plugin bench child failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt_size(n: int) -> str:
    return f"{n // 2**20} MB" if n >= 2**20 else f"{n // 1024} KB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--max-mb", type=float, default=64)
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " +
                    ", ".join(OPS))
    ap.add_argument("--json", action="store_true", help="print the raw seconds as JSON")
    args = ap.parse_args()
    max_kb = int(args.max_mb * 1024)
    ops = tuple(args.ops.split(","))
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        ap.error(f"unknown op {unknown[0]!r}; valid: {', '.join(OPS)}")
    if os.environ.get("TORCHTPU_NUM_DEVICES") != str(args.ranks):
        results = seconds_per_call(args.ranks, max_kb, ops)
    else:
        results = _measure(args.ranks, max_kb, ops)
    if args.json:
        print(json.dumps(results))
        return
    print(f"bus bandwidth, GB/s: {args.ranks} ranks as threads of one process "
          f"({platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()})")
    print(f"{'op':<15}{'size':>8}{'in-plugin':>11}{'gloo cpu':>11}{'ratio':>7}")
    for key, t_tpu in results["tpu"].items():
        op, nbytes = key.split()[0], int(key.split()[1])
        f = bus_factor(op, args.ranks) * nbytes / 1e9
        t_gloo = results["gloo"][key]
        print(f"{op:<15}{fmt_size(nbytes):>8}{f / t_tpu:>11.3f}{f / t_gloo:>11.3f}"
              f"{t_gloo / t_tpu:>7.2f}")


if __name__ == "__main__":
    main()
