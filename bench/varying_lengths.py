"""Naturally varying sequence lengths under torch.compile(backend="tpu"): shape buckets
against exact sizes, side by side.

A model runs for every length n in ``--min-len``..``--max-len``, forward under
``torch.no_grad()``, or with ``--train`` a training step (forward and next-token loss in the
compiled function, then backward: a forward and a backward graph). Models (``--model``):

- ``block`` (default): the issue's block, ``nn.MultiheadAttention`` with a causal mask built
  from the length, then an MLP, both pre-LayerNorm, on [batch, n, d] inputs, under
  ``dynamic=True`` (batch and length symbolic);
- ``gpt``: the GPT-style decoder of ``compiled_vs_jax.py`` on [batch, n] tokens, without
  ``mark_dynamic`` (Dynamo makes n symbolic after the first change).

Each policy runs in its own process, with an empty compile cache:

- buckets (``TORCHTPU_SHAPE_BUCKETS`` unset): sizes padded to powers of two from 16;
- exact (``TORCHTPU_SHAPE_BUCKETS=off``): one executable per length.

For each it prints the graphs compiled, the XLA programs compiled in the sweep (every one:
graphs, eager ops, copies), the wall time of the whole sweep (compiles included, the CPU
reference runs too) and the largest difference from PyTorch on the CPU (outputs, and with
``--train`` every parameter's gradient). A third process then times a step in steady state
at one length just under a bucket, padded and exact-size alternately (so both see the
same machine load): what padding costs per step once nothing compiles. The goal is
padded <= 1.15x exact.

    python bench/varying_lengths.py [--model block|gpt] [--train] [--d-model D] [--batch B]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch


class Block(torch.nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=x.device), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def setup(args: argparse.Namespace) -> tuple:
    """(CPU model, its twin on tpu, inputs(n), the step function of (model, x, y))."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    if args.model == "gpt":
        from compiled_vs_jax import GPT, Config

        cfg = Config(vocab_size=64, d_model=args.d_model, num_layers=2, num_heads=4,
                     seq_len=args.max_len, batch_size=args.batch)
        cpu, model = GPT(cfg), GPT(cfg)

        def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            tokens = torch.randint(0, cfg.vocab_size, (args.batch, n))
            return tokens, torch.roll(tokens, -1, 1)

        def loss_of(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(m(x).flatten(0, 1), y.flatten())
    else:
        cpu, model = Block(args.d_model, 4), Block(args.d_model, 4)

        def inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
            return torch.randn(args.batch, n, args.d_model), torch.randn(args.batch, n,
                                                                          args.d_model)

        def loss_of(m: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return ((m(x) - y) ** 2).mean()
    model = model.to("tpu")
    model.load_state_dict({k: v.to("tpu") for k, v in cpu.state_dict().items()})
    if not args.train:
        cpu.eval()
        model.eval()
    run = loss_of if args.train else (lambda m, x, y: m(x))
    return cpu, model, inputs, run


def sweep(args: argparse.Namespace) -> dict:
    import torchtpu

    cpu, model, inputs, run = setup(args)
    dynamic = True if args.model == "block" else None
    compiled = torch.compile(run, backend="tpu", dynamic=dynamic)

    def step(n: int, compare: bool) -> float:
        """One step at length n; with `compare`, the largest difference from the CPU."""
        x, y = inputs(n)
        out = compiled(model, x.to("tpu"), y.to("tpu"))
        if args.train:
            out.backward()
        torchtpu.synchronize()
        if not compare:
            for p in model.parameters():
                p.grad = None
            return 0.0
        ref = run(cpu, x, y)
        worst = (out.detach().cpu() - ref.detach()).abs().max().item()
        if args.train:
            ref.backward()
            for p, q in zip(model.parameters(), cpu.parameters()):
                worst = max(worst, (p.grad.cpu() - q.grad).abs().max().item())
                p.grad = q.grad = None
        return worst

    with torch.set_grad_enabled(args.train):
        programs = torchtpu.debug.metrics().get("num_compiles", 0)
        start = time.perf_counter()
        worst = max(step(n, compare=True) for n in range(args.min_len, args.max_len + 1))
        seconds = time.perf_counter() - start
        metrics = torchtpu.debug.metrics()
    return {"graphs": metrics["num_graphs_compiled"],
            "programs": metrics.get("num_compiles", 0) - programs, "seconds": seconds,
            "max_abs_diff": worst}


def steady(args: argparse.Namespace) -> dict:
    """Median step time at --steady-len, padded and exact-size, timed alternately."""
    import torchtpu

    cpu, model, inputs, run = setup(args)
    x, y = (t.to("tpu") for t in inputs(args.steady_len))
    dynamic = True if args.model == "block" else None
    steps = {}
    for policy, env in (("buckets", ""), ("exact", "off")):
        os.environ["TORCHTPU_SHAPE_BUCKETS"] = env  # read when the graphs compile, below
        # A function of its own per policy: Dynamo keeps compiled graphs per code object.
        fn = torch.compile(lambda m, a, b: run(m, a, b), backend="tpu", dynamic=dynamic)
        for n in (args.steady_len - 1, args.steady_len):  # past Dynamo's static first compile
            a, b = (t.to("tpu") for t in inputs(n))
            out = fn(model, a, b)
            if args.train:
                out.backward()
        steps[policy] = fn
    times: dict[str, list[float]] = {"buckets": [], "exact": []}
    with torch.set_grad_enabled(args.train):
        for rep in range(args.steady_reps + 2):
            for policy, fn in steps.items():
                t = time.perf_counter()
                out = fn(model, x, y)
                if args.train:
                    out.backward()
                torchtpu.synchronize()
                if rep >= 2:
                    times[policy].append(time.perf_counter() - t)
                for p in model.parameters():
                    p.grad = None
    return {policy: statistics.median(t) * 1000 for policy, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("block", "gpt"), default="block")
    parser.add_argument("--min-len", type=int, default=5)
    parser.add_argument("--max-len", type=int, default=104)
    parser.add_argument("--train", action="store_true",
                        help="a training step per length (forward and loss, backward)")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steady-len", type=int, default=None,
                        help="length timed in steady state (default: 60, bucket 64)")
    parser.add_argument("--steady-reps", type=int, default=20)
    parser.add_argument("--child", choices=("sweep", "steady"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steady_len is None:
        args.steady_len = min(60, args.max_len)
    if not 1 <= args.min_len <= args.max_len:
        parser.error(f"--min-len {args.min_len} must be in 1..{args.max_len}")
    if args.child:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        print(json.dumps(sweep(args) if args.child == "sweep" else steady(args)))
        return 0
    rows = {}
    for policy, buckets, child in (("buckets", "", "sweep"), ("exact", "off", "sweep"),
                                   ("steady", "", "steady")):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHTPU_SHAPE_BUCKETS=buckets, TORCHTPU_CACHE_DIR=cache)
            proc = subprocess.run([sys.executable, *sys.argv, "--child", child], env=env,
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{policy}: failed\n{proc.stderr[-2000:]}")
            return 1
        rows[policy] = json.loads(proc.stdout.strip().splitlines()[-1])
    for policy in ("buckets", "exact"):
        rows[policy]["steady_ms"] = rows["steady"][policy]
    del rows["steady"]
    what = "training step (forward + loss, backward)" if args.train else "forward only"
    load = os.getloadavg()
    print(f"{args.model}, d_model {args.d_model}, batch {args.batch}, lengths "
          f"{args.min_len}..{args.max_len}, {what}, empty compile cache; steady state: median "
          f"of {args.steady_reps} steps at length {args.steady_len}; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'policy':<10}{'graphs':>8}{'programs':>10}{'sweep s':>10}{'max |diff| vs cpu':>20}"
          f"{'steady ms':>12}")
    for policy, r in rows.items():
        print(f"{policy:<10}{r['graphs']:>8}{r['programs']:>10}{r['seconds']:>10.2f}"
              f"{r['max_abs_diff']:>20.2e}{r['steady_ms']:>12.2f}")
    exact, padded = rows["exact"], rows["buckets"]
    print(f"first sweep exact/buckets: {exact['seconds'] / padded['seconds']:.2f}x; programs "
          f"compiled {padded['programs']} against {exact['programs']}; steady step padded/exact: "
          f"{padded['steady_ms'] / exact['steady_ms']:.2f}x (goal <= 1.15x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
