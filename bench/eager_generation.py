"""Eager generation on ``tpu`` against PyTorch on the CPU: a loop growing its context by one
token compiles how many programs, and how long does it take?

A GPT written in plain PyTorch (the decoder of ``compiled_vs_jax.py``: 4 layers, d_model
128, context window 64, a 65-character vocabulary) samples ``--tokens`` tokens from an
empty context (a single start token) in eager mode, with no KV cache: every step runs the
model on the whole context so far (the last 64 tokens), so the context length takes every
value 1..64. Each device runs in its own process:

- cold: an empty compile cache (memory and disk), the first sampling loop;
- warm: the same loop again in that process (every program already compiled).

``--model nanogpt`` runs the same sizes written as nanoGPT writes them (positions from
``torch.arange`` of the length, ``F.scaled_dot_product_attention(is_causal=True)``): tensors
made at every length, which fused mode must not compile per length either. ``--model
kvcache`` decodes with nanoGPT's weights and a fixed-size KV cache per layer instead (one
token per step, its keys and values written at the step's slot, ``k_cache[:, :, slot] =
k``, attention over the whole cache under a mask of the slots written; a ring of
``--window`` slots): every step has the same sizes, only the position moves. ``--model kvgrow`` attends over
the slots written so far instead (``k_cache[:, :, :n]``, as Meta's Llama reference model
reads its cache): the length read grows with the position until the ring is full.

On ``tpu`` it runs once per mode (``--modes``, default all three): eager ``op`` (each op runs at
its call) and ``fused`` (ops recorded and run as one graph at each host read,
``TORCHTPU_EAGER=fused``), each in its own process with its own empty cache; ``compiled``
runs the same loop through ``torch.compile(backend="tpu", dynamic=True)``, whose graphs are
padded to shape buckets: the reference for what eager mode should compile. It prints
programs compiled (compiled or loaded from the disk cache) per loop, the wall time of each
loop on ``tpu`` and on the CPU, their ratios (goal: <= 5x the CPU's time cold, <= 1.5x
warm), and the seconds the cold loop spent compiling.
Both devices pick tokens greedily (argmax); it prints how many of the tokens agree before
the first difference (rounding can flip a near tie).

    python bench/eager_generation.py [--tokens N] [--layers L] [--d-model D]
        [--modes op,fused,compiled] [--model gpt|nanogpt|kvcache|kvgrow]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch


class NanoBlock(torch.nn.Module):
    """nanoGPT's block: pre-norm causal self-attention (SDPA) and a GELU MLP."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(c, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class NanoGPT(torch.nn.Module):
    """nanoGPT's model: token and position embeddings (positions from torch.arange)."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, window: int) -> None:
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(vocab, d), torch.nn.Embedding(window, d)
        self.blocks = torch.nn.ModuleList(NanoBlock(d, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.shape[1], dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class KVCacheDecoder(torch.nn.Module):
    """NanoGPT's weights decoding one token per step against a fixed-size KV cache per
    layer: a ring of `window` slots, each step's keys and values written at its slot.
    Attention covers the whole cache under a mask of the slots written, or, when `grow`
    (as Meta's Llama reference model does), the slots written so far only: a slice whose
    length grows with the position until the ring is full."""

    def __init__(self, model: NanoGPT, window: int, grow: bool = False) -> None:
        super().__init__()
        self.model, self.window, self.grow = model, window, grow
        d = model.wte.embedding_dim
        heads = model.blocks[0].heads
        shape = (len(model.blocks), 1, heads, window, d // heads)
        self.register_buffer("k_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape), persistent=False)
        self.register_buffer("slots", torch.arange(window), persistent=False)

    def reset(self) -> None:
        self.k_cache.zero_()
        self.v_cache.zero_()

    def forward(self, token: torch.Tensor, position: int) -> torch.Tensor:
        slot = position % self.window
        x = self.model.wte(token) + self.model.wpe.weight[slot]
        mask = (self.slots <= position).view(1, 1, 1, -1)  # the slots written so far
        for layer, block in enumerate(self.model.blocks):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, block.heads, c // block.heads).transpose(1, 2)
                       for z in block.qkv(block.ln1(x)).split(c, dim=2))
            self.k_cache[layer, :, :, slot] = k[:, :, 0]
            self.v_cache[layer, :, :, slot] = v[:, :, 0]
            if self.grow:
                n = min(position + 1, self.window)
                y = torch.nn.functional.scaled_dot_product_attention(
                    q, self.k_cache[layer, :, :, :n], self.v_cache[layer, :, :, :n])
            else:
                y = torch.nn.functional.scaled_dot_product_attention(
                    q, self.k_cache[layer], self.v_cache[layer], attn_mask=mask)
            x = x + block.proj(y.transpose(1, 2).reshape(b, t, c))
            x = x + block.out(torch.nn.functional.gelu(block.fc(block.ln2(x))))
        return self.model.head(self.model.ln(x))


def sample(model: torch.nn.Module, device: str, tokens: int,
           window: int) -> tuple[list[int], float]:
    """Greedy tokens from a start token, and the loop's wall time in seconds."""
    context = [0]
    kv = getattr(model, "_orig_mod", model)  # torch.compile's wrapper holds the module
    kv = kv if isinstance(kv, KVCacheDecoder) else None
    start = time.perf_counter()
    with torch.no_grad():
        if kv is not None:
            kv.reset()
        for position in range(tokens):
            if kv is not None:
                logits = model(torch.tensor([[context[-1]]], device=device), position)[0, -1]
            else:
                idx = torch.tensor([context[-window:]], device=device)
                logits = model(idx)[0, -1]
            context.append(int(logits.argmax()))
    return context[1:], time.perf_counter() - start


def child(args: argparse.Namespace) -> dict:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compiled_vs_jax import GPT, Config

    cfg = Config(vocab_size=65, d_model=args.d_model, num_layers=args.layers, num_heads=4,
                 seq_len=args.window, batch_size=1)
    torch.manual_seed(0)
    if args.model == "nanogpt":
        model = NanoGPT(65, args.d_model, args.layers, 4, args.window).eval()
    elif args.model in ("kvcache", "kvgrow"):
        model = KVCacheDecoder(NanoGPT(65, args.d_model, args.layers, 4, args.window),
                               args.window, grow=args.model == "kvgrow").eval()
    else:
        model = GPT(cfg).eval()
    if args.child == "cpu":
        cold_tokens, cold = sample(model, "cpu", args.tokens, args.window)
        _, warm = sample(model, "cpu", args.tokens, args.window)
        return {"tokens": cold_tokens, "cold_s": cold, "warm_s": warm}
    import torchtpu

    model = model.to("tpu")
    if args.compiled:
        model = torch.compile(model, backend="tpu", dynamic=True)
    m0 = torchtpu.debug.metrics()
    cold_tokens, cold = sample(model, "tpu", args.tokens, args.window)
    m1 = torchtpu.debug.metrics()
    _, warm = sample(model, "tpu", args.tokens, args.window)
    m2 = torchtpu.debug.metrics()

    def delta(a: dict, b: dict, key: str) -> int:
        return b.get(key, 0) - a.get(key, 0)

    return {"tokens": cold_tokens, "cold_s": cold, "warm_s": warm,
            "programs_cold": delta(m0, m1, "num_compiles")
            + delta(m0, m1, "num_compile_cache_hits_disk"),
            "programs_warm": delta(m1, m2, "num_compiles")
            + delta(m1, m2, "num_compile_cache_hits_disk"),
            "compile_s": m1.get("compile_time_s", 0.0) - m0.get("compile_time_s", 0.0)}


_CACHES = {"kvcache": "a fixed-size KV cache", "kvgrow": "a KV cache read up to the position"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--model", choices=("gpt", "nanogpt", "kvcache", "kvgrow"),
                        default="gpt",
                        help="gpt: compiled_vs_jax.py's decoder (a mask buffer, a position "
                        "parameter sliced); nanogpt: arange positions and SDPA; kvcache: "
                        "nanogpt decoding against a fixed-size KV cache; kvgrow: the same "
                        "cache attended up to the position")
    parser.add_argument("--modes", default="op,fused,compiled",
                        help="modes to run on tpu, comma-separated: op, fused (eager), "
                        "compiled (torch.compile, shape buckets)")
    parser.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=("cpu", "tpu"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tokens < 1 or args.window < 1:
        parser.error("--tokens and --window must be at least 1")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("op", "fused", "compiled") for m in modes):
        parser.error(f"--modes {args.modes!r}: expected a comma-separated list of op, fused, "
                     "compiled")
    if args.child:
        print(json.dumps(child(args)))
        return 0
    rows = {}
    for device, mode in [("cpu", "op")] + [("tpu", m) for m in modes]:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHTPU_CACHE_DIR=cache,
                       TORCHTPU_EAGER="fused" if mode == "fused" else "op")
            child_argv = [os.path.abspath(__file__), "--tokens", str(args.tokens), "--layers",
                          str(args.layers), "--d-model", str(args.d_model), "--window",
                          str(args.window), "--model", args.model, "--child", device]
            if mode == "compiled":
                child_argv.append("--compiled")
            proc = subprocess.run([sys.executable, *child_argv], env=env, capture_output=True,
                                  text=True)
        name = "cpu" if device == "cpu" else f"tpu {mode}"
        if proc.returncode != 0:
            print(f"{name}: failed\n{proc.stderr[-2000:]}")
            return 1
        rows[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    cpu = rows["cpu"]
    load = os.getloadavg()
    print(f"{args.model} {args.layers} layers, d_model {args.d_model}, {args.tokens} tokens "
          f"from an empty context (window {args.window}), "
          f"{_CACHES.get(args.model, 'no KV cache')}; "
          f"load average {load[0]:.1f} "
          f"{load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'device':<14}{'cold s':>10}{'warm s':>10}{'programs cold':>16}{'programs warm':>16}"
          f"{'cold/cpu':>10}{'warm/cpu':>10}{'tokens equal':>14}{'s compiling':>13}")
    print(f"{'cpu':<14}{cpu['cold_s']:>10.2f}{cpu['warm_s']:>10.2f}{'-':>16}{'-':>16}"
          f"{'-':>10}{'-':>10}{'-':>14}{'-':>13}")
    for name, row in rows.items():
        if name == "cpu":
            continue
        agree = next((i for i, (a, b) in enumerate(zip(cpu["tokens"], row["tokens"]))
                      if a != b), len(cpu["tokens"]))
        equal = f"{agree}/{len(cpu['tokens'])}"
        print(f"{name:<14}{row['cold_s']:>10.2f}{row['warm_s']:>10.2f}"
              f"{row['programs_cold']:>16}{row['programs_warm']:>16}"
              f"{row['cold_s'] / cpu['cold_s']:>9.1f}x{row['warm_s'] / cpu['warm_s']:>9.2f}x"
              f"{equal:>14}{row['compile_s']:>13.2f}")
    print("goal: cold <= 5x the CPU's time, warm <= 1.5x; tokens equal: those equal to the "
          "CPU's before the first difference (rounding can flip a near tie)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
