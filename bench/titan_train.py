"""TorchTitan's trainer on tpu against TorchTitan on PyTorch's CPU, side by side in one run.

The same TorchTitan job -- config ``--config`` of torchtpu.train.configs (default the
135M-class ``smollm2_135m``: SmolLM2-135M's shape as a TorchTitan llama3), the same batch,
sequence length, precision (TorchTitan's default bf16 mixed precision unless ``--f32``) and
steps -- runs three ways, each a ``torchrun`` job on one rank:

- tpu: ``python -m torchtpu.train``, every TransformerBlock compiled with backend ``tpu``;
- CPU eager: ``python -m torchtpu.train.cpu_reference --compile.no-enable``;
- CPU Inductor: the same with ``--compile.backend inductor`` (a failure is reported in its
  row, not raised).

For each it reports TorchTitan's own per-step figures, medians over the steps after the
first ``--skip`` (compilation happens in the first steps): tokens/s, TFLOP/s and MFU as
TorchTitan computes them (6N + 12LHQT FLOPs per token). MFU is shown against one peak for
all rows: the measured peak of a matmul of the run's dtype through the XLA CPU plugin
(``torchtpu.flops.peak_flops``, as the tpu run uses; same machine, same cores), and also
against PyTorch's own CPU matmul peak for the CPU rows. Both peaks are timed by CPU time
(FLOPs per CPU-second times the usable cores), and each MFU is also shown "by cpu": the
step's FLOPs per second of the trainer process's CPU time (``process_cpu_s_per_step`` in
its metrics) against one core's share of the peak, which other load on a shared machine
skews far less than TorchTitan's wall-time figure. Goals (printed with the figures):
MFU of the tpu run >= 50% of the plugin's peak; tpu tokens/s >= 1.5x CPU eager.

Timings on a shared machine are noisy: the load average is printed, and the rows run one
after another in this one invocation so their ratios are comparable.

    python bench/titan_train.py [--config smollm2_135m] [--steps 6] [--skip 2]
                                [--seq-len 256] [--batch 2] [--f32] [--no-inductor]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile

import torch

import torchtpu
from torchtpu.flops import peak_flops
from torchtpu.train import launch
from torchtpu.train.cpu_reference import cpu_peak_flops


def load() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="smollm2_135m")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--skip", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--f32", action="store_true", help="f32 parameters (no bf16 mixed precision)")
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    if args.steps <= args.skip:
        ap.error("--steps must exceed --skip")

    dtype = torch.float32 if args.f32 else torch.bfloat16
    common = ["--training.steps", str(args.steps), "--training.seq_len", str(args.seq_len),
              "--training.local_batch_size", str(args.batch),
              "--training.global_batch_size", str(args.batch), "--checkpoint.no-enable",
              "--metrics.no-progress-bar", "--loss_curve", ""]
    if args.f32:
        common += ["--training.mixed_precision_param", "float32"]
    print(f"# TorchTitan {args.config}: batch {args.batch} x {args.seq_len} tokens, {dtype}, "
          f"{args.steps} steps (medians over steps {args.skip + 1}..{args.steps})")
    print(f"# machine: {platform.processor() or platform.machine()}, "
          f"{len(os.sched_getaffinity(0))} cores usable, load average {load()} (start)")
    plugin_peak = peak_flops(dtype)
    host_peak = cpu_peak_flops(dtype)
    print(f"# peak {dtype} matmul: XLA CPU plugin {plugin_peak / 1e9:.1f} GFLOP/s "
          f"(torchtpu.flops), PyTorch CPU {host_peak / 1e9:.1f} GFLOP/s")
    rows = [("tpu (compiled, backend tpu)", "tpu", [])]
    rows.append(("CPU eager", "cpu", ["--compile.no-enable"]))
    if not args.no_inductor:
        rows.append(("CPU Inductor", "cpu", ["--compile.backend", "inductor"]))

    results = {}
    with tempfile.TemporaryDirectory(prefix="titan_bench_") as tmp:
        for name, device, extra in rows:
            folder = os.path.join(tmp, name.split()[0] + "_" + str(len(results)))
            try:
                run = launch.run(args.config, folder, *common, *extra, device=device,
                                 timeout=7200)
            except RuntimeError as e:
                results[name] = str(e).splitlines()[0]
                print(f"{name}: failed ({results[name]})", flush=True)
                continue
            keep = slice(args.skip, None)
            tps = statistics.median(run.metric("throughput(tps)")[keep])
            tflops = statistics.median(run.metric("tflops")[keep])
            cpu_s = run.metric("process_cpu_s_per_step")[keep]
            results[name] = (tps, tflops, run.losses, statistics.median(cpu_s) if cpu_s else None)
            print(f"{name}: {tps:.1f} tokens/s, {tflops * 1e3:.2f} GFLOP/s model, "
                  f"load {load()}", flush=True)

    print()
    cores = len(os.sched_getaffinity(0))
    tokens_per_step = args.batch * args.seq_len

    def mfu_by_cpu(r: tuple, peak: float) -> float | None:
        """By CPU time: the step's FLOPs per second of the process's CPU time against one
        core's share of the peak (both peaks are timed that way too), so other load on the
        machine does not read as a slow step."""
        tps, tflops, _, cpu_s = r
        if not cpu_s:
            return None
        return 100 * tflops * 1e12 * tokens_per_step / tps / cpu_s / (peak / cores)

    def cell(mfu: float | None) -> str:
        return f"{mfu:6.1f}%" if mfu is not None else f"{'-':>7}"

    print(f"{'run':30} {'tokens/s':>10} {'GFLOP/s':>9} {'MFU plugin':>11} {'by cpu':>7} "
          f"{'MFU torch':>10} {'by cpu':>7} {'final loss':>11}")
    for name, _, _ in rows:
        r = results.get(name)
        if not isinstance(r, tuple):
            print(f"{name:30} {'failed: ' + str(r)[:80]}")
            continue
        tps, tflops, losses, _ = r
        mfu_plugin = 100 * tflops * 1e12 / plugin_peak
        host = "CPU" in name
        mfu_host = f"{100 * tflops * 1e12 / host_peak:9.1f}%" if host else f"{'':>10}"
        print(f"{name:30} {tps:10.1f} {tflops * 1e3:9.2f} {mfu_plugin:10.1f}% "
              f"{cell(mfu_by_cpu(r, plugin_peak))} {mfu_host} "
              f"{cell(mfu_by_cpu(r, host_peak)) if host else '':>7} "
              f"{losses[-1]:11.4f}")
    tpu = results.get(rows[0][0])
    eager = results.get("CPU eager")
    print()
    if isinstance(tpu, tuple):
        mfu = 100 * tpu[1] * 1e12 / plugin_peak
        print(f"goal MFU >= 50% of the plugin's measured peak: {mfu:.1f}% by wall time "
              f"({'met' if mfu >= 50 else 'NOT met'})")
        mfu_cpu = mfu_by_cpu(tpu, plugin_peak)
        if mfu_cpu is not None:
            print(f"    by CPU time: {mfu_cpu:.1f}% ({'met' if mfu_cpu >= 50 else 'NOT met'})")
    if isinstance(tpu, tuple) and isinstance(eager, tuple):
        ratio = tpu[0] / eager[0]
        print(f"goal tokens/s >= 1.5x CPU eager: {ratio:.2f}x "
              f"({'met' if ratio >= 1.5 else 'NOT met'})")
    print(f"# load average {load()} (end)")
    return 0 if isinstance(tpu, tuple) else 1


if __name__ == "__main__":
    torchtpu.current_device()
    sys.exit(main())
