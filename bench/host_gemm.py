"""float32 matrix products on the CPU plugin: the host GEMM kernel (PyTorch's BLAS sgemm run
inside the program) against XLA's own dot, and PyTorch on the CPU, side by side in one run.

For each size (M x K times K x N) a compiled function multiplies one activation by 8
different weights and sums the products (8 products per call, as a layer stack does); the
figure is the time per product and its GFLOP/s, minimum over batches of calls (median
beside it). The tpu rows run in child processes, one with `TORCHTPU_HOST_GEMM=1` and one
with `0` (the setting is read when the device starts); the CPU row runs here with the same
thread count. A `linear` row multiplies by the transposed weight, as nn.Linear does (the
kernel reads it in place; XLA's dot folds the transpose into its layout).

    python bench/host_gemm.py [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIZES = [(64, 64, 64), (512, 128, 384), (512, 512, 128), (128, 512, 512), (512, 576, 1536),
         (1024, 1024, 1024)]
QUICK_SIZES = [(64, 64, 64), (512, 128, 384)]
PRODUCTS = 8

CHILD = r"""
import json, sys, torch, torchtpu
sys.path.insert(0, {bench!r})
from host_gemm import measure
torch.set_num_threads({threads})
print(json.dumps(measure("tpu", {sizes!r}, {batches})))
"""


def chain(x, ws, linear):
    import torch.nn.functional as F

    out = 0
    for w in ws:
        out = out + (F.linear(x, w) if linear else x @ w)
    return out


def measure(device: str, sizes: list, batches: int) -> dict:
    """Per size and form: (min, median) microseconds per product on `device`."""
    import torch

    results = {}
    for m, k, n in sizes:
        for linear in (False, True):
            torch.manual_seed(0)
            x = torch.randn(m, k, device=device)
            ws = [torch.randn(n, k, device=device) if linear else torch.randn(k, n, device=device)
                  for _ in range(PRODUCTS)]
            fn = chain if device == "cpu" else torch.compile(chain, backend="tpu", dynamic=False)
            calls = max(1, int(2e8 / (2 * m * k * n * PRODUCTS)))
            for _ in range(3):
                fn(x, ws, linear).cpu()
            times = []
            for _ in range(batches):
                t = time.perf_counter()
                for _ in range(calls):
                    r = fn(x, ws, linear)
                r.cpu()
                times.append((time.perf_counter() - t) / (calls * PRODUCTS) * 1e6)
            results[f"{m}x{k}x{n}{' linear' if linear else ''}"] = (min(times),
                                                                     statistics.median(times))
    return results


def child(env_value: str, sizes: list, batches: int, threads: int) -> dict:
    code = CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), sizes=sizes,
                        batches=batches, threads=threads)
    env = dict(os.environ, TORCHTPU_HOST_GEMM=env_value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise SystemExit(f"host_gemm: the TORCHTPU_HOST_GEMM={env_value} run failed:\n"
                         f"{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two sizes, fewer batches")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="PyTorch CPU threads for the CPU row and the BLAS (default: cores)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    sizes = QUICK_SIZES if args.quick else SIZES
    batches = 3 if args.quick else 7
    load = os.getloadavg()[0]
    print(f"float32 products, {PRODUCTS} per compiled call; cores={os.cpu_count()} "
          f"load={load:.1f} torch threads={args.threads}")
    gemm = child("1", sizes, batches, args.threads)
    dot = child("0", sizes, batches, args.threads)
    cpu = measure("cpu", sizes, batches)
    print(f"{'product':24} {'host gemm us':>13} {'xla dot us':>11} {'cpu us':>9} "
          f"{'gemm GF/s':>10} {'dot GF/s':>9} {'cpu GF/s':>9} {'gemm/dot':>9} {'gemm/cpu':>9}")
    for key, (g, g_med) in gemm.items():
        m, k, n = (int(v) for v in key.split()[0].split("x"))
        flops = 2 * m * k * n
        d, c = dot[key][0], cpu[key][0]
        print(f"{key:24} {g:8.1f} ({g_med:5.0f}) {d:11.1f} {c:9.1f} {flops / g / 1e3:10.1f} "
              f"{flops / d / 1e3:9.1f} {flops / c / 1e3:9.1f} {g / d:9.2f} {g / c:9.2f}")
    print("gemm/dot and gemm/cpu: time ratios (below 1: the host GEMM is faster)")


if __name__ == "__main__":
    main()
