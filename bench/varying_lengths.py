"""Naturally varying sequence lengths under torch.compile(backend="tpu"): shape buckets
against exact sizes, side by side.

The GPT-style decoder of ``compiled_vs_jax.py`` (batched: tokens [batch, n]) runs forward
under ``torch.no_grad()`` for every length n in 1..max_len, or with ``--train`` a training
step (forward, next-token loss, backward: forward and backward graphs), without
``mark_dynamic`` (Dynamo makes n symbolic after the first change). Each policy runs in its
own process:

- default (``TORCHTPU_SHAPE_BUCKETS`` unset): every op of this model and of its training
  step is checked under buckets (dynamo/checked_ops.py), so n is padded to powers of two
  from 16; the batched linears' merged [batch*n] rows are rewritten away
  (dynamo/merged_dims.py);
- off (``TORCHTPU_SHAPE_BUCKETS=off``): one executable per length.

For each it prints the graphs compiled, the wall time of the whole sweep (compiles
included, empty compile cache, the CPU reference runs too), the largest difference from
PyTorch on the CPU (outputs, and with ``--train`` every parameter's gradient), and the
median time of a step in steady state at one length just under a bucket (padded by the
default, exact-size under off): what padding costs per step once nothing compiles.

    python bench/varying_lengths.py [--max-len N] [--train] [--d-model D] [--batch B]
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


def sweep(args: argparse.Namespace) -> dict:
    import torch
    import torch.nn.functional as F

    import torchtpu
    from compiled_vs_jax import GPT, Config

    max_len, train = args.max_len, args.train
    cfg = Config(vocab_size=64, d_model=args.d_model, num_layers=2, num_heads=4,
                 seq_len=max_len, batch_size=args.batch)
    torch.manual_seed(0)
    cpu = GPT(cfg)
    model = GPT(cfg).to("tpu")
    model.load_state_dict({k: v.to("tpu") for k, v in cpu.state_dict().items()})
    if not train:
        cpu.eval()
        model.eval()
    compiled = torch.compile(model, backend="tpu")

    def step(n: int, compare: bool) -> float:
        """One forward (and with `train` loss and backward) at length n; with `compare`,
        the largest difference from the CPU's outputs and gradients."""
        tokens = torch.randint(0, cfg.vocab_size, (cfg.batch_size, n))
        target = torch.roll(tokens, -1, 1)  # a next-token loss
        out = compiled(tokens.to("tpu"))
        if train:
            F.cross_entropy(out.flatten(0, 1), target.to("tpu").flatten()).backward()
        torchtpu.synchronize()
        if not compare:
            for p in model.parameters():
                p.grad = None
            return 0.0
        ref = cpu(tokens)
        worst = (out.detach().cpu() - ref.detach()).abs().max().item()
        if train:
            F.cross_entropy(ref.flatten(0, 1), target.flatten()).backward()
            for p, q in zip(model.parameters(), cpu.parameters()):
                worst = max(worst, (p.grad.cpu() - q.grad).abs().max().item())
                p.grad = q.grad = None
        return worst

    with torch.set_grad_enabled(train):
        start = time.perf_counter()
        worst = max(step(n, compare=True) for n in range(1, max_len + 1))
        seconds = time.perf_counter() - start
        graphs = torchtpu.debug.metrics()["num_graphs_compiled"]
        # Steady state at a length just under a bucket: every graph is compiled by now.
        times = []
        for _ in range(args.steady_reps):
            t = time.perf_counter()
            step(args.steady_len, compare=False)
            times.append(time.perf_counter() - t)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] == graphs, "steady state compiled"
    return {"graphs": graphs, "seconds": seconds, "max_abs_diff": worst,
            "steady_ms": statistics.median(times) * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--train", action="store_true",
                        help="a training step per length (forward, loss, backward)")
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steady-len", type=int, default=None,
                        help="length timed in steady state (default: max-len - max-len/16)")
    parser.add_argument("--steady-reps", type=int, default=20)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.steady_len is None:
        args.steady_len = args.max_len - max(1, args.max_len // 16)
    if not 1 <= args.steady_len <= args.max_len:
        parser.error(f"--steady-len {args.steady_len} is outside the swept 1..{args.max_len}")
    if args.child:
        print(json.dumps(sweep(args)))
        return 0
    rows = {}
    for policy, buckets in (("default", ""), ("off", "off")):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHTPU_SHAPE_BUCKETS=buckets, TORCHTPU_CACHE_DIR=cache)
            proc = subprocess.run([sys.executable, *sys.argv, "--child"], env=env,
                                  capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{policy}: failed\n{proc.stderr[-2000:]}")
            return 1
        rows[policy] = json.loads(proc.stdout.strip().splitlines()[-1])
    what = "training step (forward + backward)" if args.train else "forward only"
    print(f"d_model {args.d_model}, batch {args.batch}, lengths 1..{args.max_len}, {what}, "
          f"empty compile cache; steady state: median of {args.steady_reps} steps at length "
          f"{args.steady_len}")
    print(f"{'policy':<10}{'graphs':>8}{'sweep s':>10}{'max |diff| vs cpu':>20}"
          f"{'steady ms':>12}")
    for policy, r in rows.items():
        print(f"{policy:<10}{r['graphs']:>8}{r['seconds']:>10.2f}{r['max_abs_diff']:>20.2e}"
              f"{r['steady_ms']:>12.2f}")
    off, default = rows["off"], rows["default"]
    print(f"sweep time off/default: {off['seconds'] / default['seconds']:.2f}x; "
          f"steady step default/off (padded against exact): "
          f"{default['steady_ms'] / off['steady_ms']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
