"""Bus bandwidth of all_reduce, all_gather and reduce_scatter, 1 KB to 64 MB, side by side:

- gloo: CPU tensors through PyTorch's Gloo, 2 processes (the reference);
- host-staged: tpu tensors through the tpu backend across 2 processes (copy to host, the
  ranks' own TCP exchange, copy back), with the cross-rank signature check (the default)
  and without it (TORCHTPU_DIST_CHECK=0);
- in-plugin: 4 ranks as threads on 4 devices of one process, when this build has the
  in-plugin transport ("n/a" and the reason otherwise).

    python bench/collectives.py [--max-mb 64] [--repeats 5]

After the table: where a host-staged 1 KB all_reduce spends its microseconds, each call
waited for (the transport's host_staged_<phase>_ns counters), beside Gloo's time per call,
and how many of its waits ended while polling rather than sleeping.

Each rank runs with one intra-op thread (OMP_NUM_THREADS, default 1), as under torchrun.
Bus bandwidth follows nccl-tests: all_reduce moves 2(n-1)/n of its size per rank,
all_gather and reduce_scatter (n-1)/n of their larger side.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta

import torch
import torch.multiprocessing as mp

SIZES_KB = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536]
OPS = ("all_reduce", "all_gather", "reduce_scatter")


def bus_factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def make_call(op: str, nbytes: int, device: str, group, out: list | None = None):
    """One call of `op` on `nbytes` (its larger side) in `group`; `out`, when given,
    receives the tensor the call writes."""
    import torch.distributed as dist

    n = dist.get_world_size(group)
    big = torch.ones(nbytes // 4, device=device)
    small = torch.ones(nbytes // 4 // n, device=device)
    if out is not None:
        out.append(small if op == "reduce_scatter" else big)

    def call():
        if op == "all_reduce":
            dist.all_reduce(big, group=group)
        elif op == "all_gather":
            dist.all_gather_into_tensor(big, small, group=group)
        else:
            dist.reduce_scatter_tensor(small, big, group=group)

    return call


def time_variants(variants, nbytes: int, repeats: int, sync) -> list[float]:
    """Seconds per call of each variant: the best of `repeats` blocks, the variants
    interleaved block by block so that they see the same machine load. Every rank runs
    the same number of calls (it depends on the size only)."""
    calls = max(2, min(50, (32 << 20) // nbytes))
    best = [float("inf")] * len(variants)
    for call in variants:
        call()
    sync()
    for _ in range(repeats):
        for i, call in enumerate(variants):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            sync()
            best[i] = min(best[i], (time.perf_counter() - start) / calls)
    return best


def _rank_main(rank: int, world: int, port: int, max_kb: int, repeats: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # One intra-op thread per rank, as torchrun sets (OMP_NUM_THREADS=1): with 2 ranks on a
    # small machine, PyTorch's thread pools would otherwise contend for the same cores.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import torch.distributed as dist

    import torchtpu

    dist.init_process_group("cpu:gloo,tpu:tpu", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    checked = dist.new_group(backend="tpu")
    os.environ["TORCHTPU_DIST_CHECK"] = "0"
    unchecked = dist.new_group(backend="tpu")
    rows = []
    for op in OPS:
        for kb in SIZES_KB:
            if kb > max_kb:
                continue
            nbytes = kb * 1024
            variants = [make_call(op, nbytes, "cpu", None),
                        make_call(op, nbytes, "tpu", checked),
                        make_call(op, nbytes, "tpu", unchecked)]
            t_gloo, t_hs, t_nc = time_variants(variants, nbytes, repeats, torchtpu.synchronize)
            rows.append((op, nbytes, t_gloo, t_hs, t_nc))
    parts, per_call = breakdown(checked, 1024, repeats)
    gloo_call = breakdown(None, 1024, repeats, device="cpu")[1]
    if rank == 0:
        queue.put((rows, parts, per_call, gloo_call))
    dist.destroy_process_group()


PHASES = ("issue", "queue_wait", "d2h", "exchange", "to_device", "complete")
# Waits of the caller and the queue thread that ended while polling, or went on to sleep.
WAITS = ("polled", "slept")


def breakdown(group, nbytes: int, repeats: int, device: str = "tpu",
              calls: int = 200) -> tuple[dict[str, float], float]:
    """Microseconds per all_reduce of `nbytes` in `group`, each call waited for (the best of
    `repeats` blocks), and where a host-staged call spends them: the transport's phase
    counters (host_staged_<phase>_ns) over the best block."""
    import torch.distributed as dist

    import torchtpu

    t = torch.ones(nbytes // 4, device=device)

    def one():
        dist.all_reduce(t, group=group)
        torchtpu.synchronize()

    for _ in range(10):
        one()
    best, parts = float("inf"), {}
    for _ in range(repeats):
        before = torchtpu.debug.metrics()
        start = time.perf_counter()
        for _ in range(calls):
            one()
        total = (time.perf_counter() - start) / calls * 1e6
        after = torchtpu.debug.metrics()
        if total < best:
            best = total
            parts = {p: (after.get(f"host_staged_{p}_ns", 0) - before.get(f"host_staged_{p}_ns", 0))
                     / calls / 1e3 for p in PHASES}
            for w in WAITS:
                key = f"host_staged_waits_{w}"
                parts[w] = (after.get(key, 0) - before.get(key, 0)) / calls
    return parts, best


IN_PLUGIN_RANKS = 4

_IN_PLUGIN_CHILD = r"""
import json, sys, threading, time
from datetime import timedelta
import torch, torch.distributed as dist
import torchtpu
from torch.testing._internal.distributed.multi_threaded_pg import _install_threaded_pg
sys.path.insert(0, {bench_dir!r})
from collectives import OPS, SIZES_KB, make_call, time_variants

W, MAX_KB, REPEATS = {ranks}, {max_kb}, {repeats}
_install_threaded_pg()
torch._C._distributed_c10d._set_thread_isolation_mode(True)
store = dist.HashStore()
results, errors = {{}}, []

def rank_main(rank):
    try:
        torch.tpu.set_device(rank)
        dist.init_process_group("tpu", rank=rank, world_size=W, store=store,
                                timeout=timedelta(seconds=120))
        assert torchtpu.distributed.transport() == "in_plugin"
        for op in OPS:
            for kb in SIZES_KB:
                if kb <= MAX_KB:
                    written = []
                    call = make_call(op, kb * 1024, "tpu", None, written)
                    sync = lambda: torchtpu.block_until_ready(written[0])
                    # Each call waits for its output: with several programs in flight, XLA's
                    # in-process rendezvous was seen to miss a replica and abort
                    # ("Termination timeout ... only 3 of them arrived").
                    t = time_variants([lambda: (call(), sync())], kb * 1024,
                                      REPEATS, sync)[0]
                    if rank == 0:
                        results[f"{{op}} {{kb * 1024}}"] = t
        dist.destroy_process_group()
    except BaseException as e:
        errors.append(f"rank {{rank}}: {{e!r}}")

threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(W)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({{"results": results, "errors": errors}}))
"""


def in_plugin_column(max_kb: int, repeats: int) -> tuple[dict | None, str]:
    """Seconds per call by (op, bytes) with 4 ranks as threads on 4 devices of one process,
    or None and the reason."""
    import json
    import subprocess

    import torchtpu

    if not torchtpu.distributed.in_plugin_available():
        return None, "the in-plugin transport is not in this build"
    code = _IN_PLUGIN_CHILD.format(bench_dir=os.path.dirname(os.path.abspath(__file__)),
                                   ranks=IN_PLUGIN_RANKS, max_kb=max_kb, repeats=repeats)
    env = dict(os.environ, TORCHTPU_NUM_DEVICES=str(IN_PLUGIN_RANKS))
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=1800)
    except subprocess.TimeoutExpired:
        return None, "the 4-thread run did not finish within 30 minutes"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        err = [ln for ln in out.stderr.splitlines() if ln.startswith("F0000") or "Error" in ln]
        why = (err or out.stderr.strip().splitlines()[-1:] or ["no output"])[0][:200]
        return None, f"the 4-thread run failed (exit {out.returncode}): {why}"
    got = json.loads(lines[-1])
    if got["errors"]:
        return None, f"the 4-thread run failed: {got['errors'][0]}"
    res = {}
    for key, t in got["results"].items():
        op, nbytes = key.split()
        res[(op, int(nbytes))] = t
    return res, f"{IN_PLUGIN_RANKS} ranks as threads"


def fmt_size(n: int) -> str:
    return f"{n // 2**20} MB" if n >= 2**20 else f"{n // 1024} KB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-mb", type=float, default=64)
    ap.add_argument("--repeats", type=int, default=5, help="timed blocks per variant (best)")
    args = ap.parse_args()
    from torchtpu._ports import free_port  # here: the spawned ranks import this module

    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = mp.start_processes(_rank_main, nprocs=2, join=False, start_method="spawn",
                               args=(2, port, int(args.max_mb * 1024), args.repeats, queue))
    rows, parts, per_call, gloo_call = queue.get(timeout=1800)
    procs.join()
    in_plugin, reason = in_plugin_column(int(args.max_mb * 1024), args.repeats)
    print(f"bus bandwidth, GB/s (gloo and host-staged: 2 processes; in-plugin: {reason})")
    hdr = (f"{'op':<15}{'size':>8}{'gloo cpu':>11}{'host-staged':>13}{'ratio':>7}"
           f"{'no check':>10}{'ratio':>7}{'in-plugin':>11}")
    print(hdr)
    for op, nbytes, t_gloo, t_hs, t_nc in rows:
        f = bus_factor(op, 2) * nbytes / 1e9
        g, h, c = f / t_gloo, f / t_hs, f / t_nc
        ip = "n/a"
        if in_plugin is not None and (op, nbytes) in in_plugin:
            ip = f"{bus_factor(op, IN_PLUGIN_RANKS) * nbytes / 1e9 / in_plugin[(op, nbytes)]:.3f}"
        print(f"{op:<15}{fmt_size(nbytes):>8}{g:>11.3f}{h:>13.3f}{h / g:>7.2f}"
              f"{c:>10.3f}{c / g:>7.2f}{ip:>11}")
    print(f"\nall_reduce of 1 KB, each call waited for, rank 0, microseconds per call: gloo cpu "
          f"{gloo_call:.0f}, host-staged {per_call:.0f} =")
    for p in PHASES:
        print(f"  {p:<12}{parts[p]:>8.1f}")
    other = per_call - sum(parts[p] for p in PHASES)
    print(f"  {'other':<12}{other:>8.1f}  (Python, the wake-up of the waiting thread, "
          "synchronize)")
    print(f"waits per call: {parts['polled']:.2f} ended while polling, {parts['slept']:.2f} slept "
          "(TORCHTPU_POLL_US)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
