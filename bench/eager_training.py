"""A nanoGPT-style training step, side by side in one run: op-by-op eager, fused eager and
compiled on ``tpu``, and PyTorch's eager on the CPU.

The model is bench/compiled_vs_jax.py's GPT (pre-norm blocks, causal attention, GELU MLP)
with 4 layers at d=128, trained with SGD on one fixed batch. Each way runs warm-up steps
(compiles excluded), then timed steps that each wait for the step's loss and updated
weights. Times are per step, the minimum over steps (the least disturbed by other load on
the machine) with the median beside it, and the process CPU time per step (all threads,
median): on a shared machine whose other load steals cores, wall times swing by tens of
percent while CPU time stays close to the work done. Per step it also counts the programs
run (PJRT executions), the fused graphs run and the host reads (each a wait for the device
in the middle of the step: in fused mode every one ends a graph). Goals: fused eager within
1.3x of compiled, and faster than the CPU's eager step.

    python bench/eager_training.py [--steps N] [--layers L] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import torch

import torchtpu

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compiled_vs_jax import GPT, Config, torch_loss  # noqa: E402


class Runner:
    """One way of running the training step: a model, its optimizer, a step callable."""

    def __init__(self, cfg: Config, device: str, compiled: bool) -> None:
        torch.manual_seed(cfg.seed)
        self.model = GPT(cfg).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, foreach=False)
        g = torch.Generator().manual_seed(cfg.seed + 1)
        tokens = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.seq_len + 1), generator=g)
        self.tokens, self.targets = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
        self.device = device
        model, opt = self.model, self.opt

        def loss_fn(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return torch_loss(model, tokens, targets)

        def opt_step() -> None:
            opt.step()

        self._loss, self._opt_step = loss_fn, opt_step
        if compiled:
            self._loss = torch.compile(loss_fn, backend="tpu")
            self._opt_step = torch.compile(opt_step, backend="tpu")

    def step(self) -> float:
        loss = self._loss(self.tokens, self.targets)
        loss.backward()
        self._opt_step()
        self.opt.zero_grad(set_to_none=True)
        if self.device == "tpu":
            torchtpu.block_until_ready(loss)
            torchtpu.block_until_ready(self.model.head.weight)
        return float(loss.detach().cpu()) if self.device == "cpu" else float("nan")


def measure(cfg: Config, way: str, steps: int, warmup: int) -> dict[str, Any]:
    device = "cpu" if way == "cpu eager" else "tpu"
    torchtpu.set_eager_mode("fused" if way == "fused eager" else "op")
    runner = Runner(cfg, device, compiled=way == "compiled")
    for _ in range(warmup):
        runner.step()
    counted = ("num_executions", "num_fused_graphs_run", "num_transfers_to_host")
    before = {k: torchtpu._C.counters().get(k, 0) for k in counted}
    times, cpu_times = [], []
    for _ in range(steps):
        start, cpu_start = time.perf_counter(), time.process_time()
        runner.step()
        times.append((time.perf_counter() - start) * 1e3)
        cpu_times.append((time.process_time() - cpu_start) * 1e3)
    per_step = {k: (torchtpu._C.counters().get(k, 0) - before[k]) / steps for k in counted}
    loss = float(torch_loss(runner.model, runner.tokens, runner.targets).detach().cpu())
    torchtpu.set_eager_mode("op")
    return {"way": way, "min_ms": min(times), "median_ms": statistics.median(times),
            "cpu_ms": statistics.median(cpu_times), "loss_after": loss,
            "programs": per_step["num_executions"], "graphs": per_step["num_fused_graphs_run"],
            "host_reads": per_step["num_transfers_to_host"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2 layers, few steps (a smoke run)")
    args = parser.parse_args()
    steps, warmup = (3, 2) if args.quick else (args.steps, args.warmup)
    cfg = Config(num_layers=2 if args.quick else args.layers, d_model=128, lr=0.01)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"nanoGPT-style training step: {cfg.num_layers} layers, d={cfg.d_model}, "
          f"batch {cfg.batch_size}x{cfg.seq_len}, vocab {cfg.vocab_size}; "
          f"cores={os.cpu_count()} load={load:.1f} torch threads={torch.get_num_threads()}")
    ways = ["op-by-op eager", "fused eager", "compiled", "cpu eager"]
    rows = {w: measure(cfg, w, steps, warmup) for w in ways}
    print(f"{'way':<16} {'min ms':>8} {'median ms':>10} {'cpu ms':>8} {'loss after':>11} "
          f"{'programs':>9} {'graphs':>7} {'host reads':>11}")
    for w in ways:
        r = rows[w]
        counts = ("" if w == "cpu eager" else
                  f" {r['programs']:>9.1f} {r['graphs']:>7.1f} {r['host_reads']:>11.1f}")
        print(f"{w:<16} {r['min_ms']:>8.2f} {r['median_ms']:>10.2f} {r['cpu_ms']:>8.2f} "
              f"{r['loss_after']:>11.4f}{counts}")
    fused, compiled, cpu = (rows[w]["min_ms"] for w in ("fused eager", "compiled", "cpu eager"))
    opbyop = rows["op-by-op eager"]["min_ms"]
    print(f"fused / compiled   {fused / compiled:6.2f}   (goal <= 1.3: "
          f"{'met' if fused / compiled <= 1.3 else 'missed'})")
    print(f"fused / cpu eager  {fused / cpu:6.2f}   (goal < 1: "
          f"{'met' if fused < cpu else 'missed'})")
    print(f"op-by-op / fused   {opbyop / fused:6.2f}")
    cpu_ratio = rows["fused eager"]["cpu_ms"] / rows["compiled"]["cpu_ms"]
    print(f"fused / compiled, CPU time per step  {cpu_ratio:6.2f}")
    print(f"fused graphs compiled {torchtpu._C.counters().get('num_fused_graphs_compiled', 0)}, "
          f"run {torchtpu._C.counters().get('num_fused_graphs_run', 0)}")


if __name__ == "__main__":
    main()
