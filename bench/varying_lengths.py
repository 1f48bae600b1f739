"""Naturally varying sequence lengths under torch.compile(backend="tpu"): shape buckets
against exact sizes, side by side.

The GPT-style decoder of ``compiled_vs_jax.py`` (batched: tokens [batch, n]) runs forward
under ``torch.no_grad()`` for every length n in 1..max_len, or with ``--train`` a training
step (forward, next-token loss, backward: forward and backward graphs), without
``mark_dynamic`` (Dynamo makes n symbolic after the first change). Each policy runs in its
own process:

- default (``TORCHTPU_SHAPE_BUCKETS`` unset): every op of this model is checked under
  buckets (dynamo/checked_ops.py), so n is padded to powers of two from 16; the batched
  linears' merged [batch*n] rows are rewritten away (dynamo/merged_dims.py);
- off (``TORCHTPU_SHAPE_BUCKETS=off``): one executable per length;
- with ``--train`` also auto (``TORCHTPU_SHAPE_BUCKETS=auto``), which pads the training
  graphs the default keeps exact-size (their padded backward is slow: compare the sweep
  times).

For each it prints the graphs compiled, the wall time of the whole sweep (compiles
included, empty compile cache) and the largest difference from PyTorch on the CPU (outputs,
and with ``--train`` every parameter's gradient).

    python bench/varying_lengths.py [--max-len N] [--train]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def sweep(max_len: int, train: bool) -> dict:
    import torch
    import torch.nn.functional as F

    import torchtpu
    from compiled_vs_jax import GPT, Config

    cfg = Config(vocab_size=64, d_model=32, num_layers=2, num_heads=4, seq_len=max_len,
                 batch_size=2)
    torch.manual_seed(0)
    cpu = GPT(cfg)
    model = GPT(cfg).to("tpu")
    model.load_state_dict({k: v.to("tpu") for k, v in cpu.state_dict().items()})
    if not train:
        cpu.eval()
        model.eval()
    compiled = torch.compile(model, backend="tpu")
    worst = 0.0
    start = time.perf_counter()
    with torch.set_grad_enabled(train):
        for n in range(1, max_len + 1):
            tokens = torch.randint(0, cfg.vocab_size, (cfg.batch_size, n))
            out = compiled(tokens.to("tpu"))
            ref = cpu(tokens)
            worst = max(worst, (out.detach().cpu() - ref.detach()).abs().max().item())
            if train:
                # A next-token loss; gradients compared parameter by parameter.
                target = torch.roll(tokens, -1, 1)
                F.cross_entropy(out.flatten(0, 1), target.to("tpu").flatten()).backward()
                F.cross_entropy(ref.flatten(0, 1), target.flatten()).backward()
                for p, q in zip(model.parameters(), cpu.parameters()):
                    worst = max(worst, (p.grad.cpu() - q.grad).abs().max().item())
                    p.grad = q.grad = None
    seconds = time.perf_counter() - start
    return {"graphs": torchtpu.debug.metrics()["num_graphs_compiled"], "seconds": seconds,
            "max_abs_diff": worst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-len", type=int, default=64)
    parser.add_argument("--train", action="store_true",
                        help="a training step per length (forward, loss, backward)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(sweep(args.max_len, args.train)))
        return 0
    rows = {}
    # The default keeps training graphs exact-size; `auto` pads them.
    policies = [("default", ""), ("off", "off")] + ([("auto", "auto")] if args.train else [])
    for policy, buckets in policies:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHTPU_SHAPE_BUCKETS=buckets, TORCHTPU_CACHE_DIR=cache)
            proc = subprocess.run([sys.executable, __file__, "--child", "--max-len",
                                   str(args.max_len)] + (["--train"] if args.train else []),
                                  env=env, capture_output=True, text=True,
                                  cwd=os.path.dirname(os.path.abspath(__file__)))
        if proc.returncode != 0:
            print(f"{policy}: failed\n{proc.stderr[-2000:]}")
            return 1
        rows[policy] = json.loads(proc.stdout.strip().splitlines()[-1])
    what = "training step (forward + backward)" if args.train else "forward only"
    print(f"lengths 1..{args.max_len}, batch 2, {what}, empty compile cache")
    print(f"{'policy':<10}{'graphs':>8}{'sweep s':>10}{'max |diff| vs cpu':>20}")
    for policy, r in rows.items():
        print(f"{policy:<10}{r['graphs']:>8}{r['seconds']:>10.2f}{r['max_abs_diff']:>20.2e}")
    for policy in rows:
        if policy != "off":
            ratio = rows["off"]["seconds"] / rows[policy]["seconds"]
            print(f"off/{policy} sweep time: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
