"""Where a serving step's time goes: one decoder layer per shape bucket, and the per-call cost.

The serving runner calls one compiled ``decoder_layer`` per layer per forward pass, for a
bucket (S sequences, Q tokens each, C context). This script times that call for the
shapes that matter (decode at S = 1 and 16 over several C, prefill chunks), with the
model's dimensions and random weights. Every shape is timed twice, side by side:
attention as gathered pages and batched matmuls in StableHLO, and with the host kernel
``torchtpu::paged_attention`` (what the runner uses where the plugin registered it). Then
the same 30 layers run as 1 layer per call against 2 layers per call: the difference is the fixed cost of a compiled call
(Dynamo's guards, AOTAutograd's wrapper, our runtime), which is not hidden behind the
computation because a call that donates its KV cache blocks until its inputs are ready.

Figures are medians of --rounds rounds; a shared machine's other load moves them by tens
of percent, so compare rows of one run, not runs.

    python bench/serve_layer_bench.py [--model DIR] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import torchtpu  # noqa: F401  (registers the tpu device)
from torchtpu.serve.model import attention_kernel_available, decoder_layer

PAGE = 16


class Layer:
    """Random weights and a KV pool with a model's dimensions, on tpu."""

    def __init__(self, config, num_pages: int) -> None:
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        hidden, inter = config.hidden_size, config.intermediate_size
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim

        def rand(*shape):
            return (torch.randn(*shape) * 0.05).to("tpu")

        self.hidden = hidden
        self.num_pages = num_pages
        self.weights = dict(w_in_norm=rand(hidden), w_qkv=rand(hidden, qkv), b_qkv=None,
                            w_q_norm=None, w_k_norm=None, w_o=rand(self.heads * self.head_dim, hidden),
                            w_post_norm=rand(hidden), w_gate_up=rand(hidden, 2 * inter),
                            w_down=rand(inter, hidden))
        slots = (num_pages + 1) * PAGE
        self.caches = [torch.zeros(slots, self.kv_heads, self.head_dim).to("tpu")
                       for _ in range(4)]
        self.inv_freq = rand(self.head_dim // 2)
        self.rope_scale = torch.tensor(1.0).to("tpu")
        self.static = dict(num_heads=self.heads, num_kv_heads=self.kv_heads, page_size=PAGE,
                           eps=1e-5, window=0)

    def inputs(self, s: int, q: int, c: int):
        g = torch.Generator().manual_seed(0)
        h = (torch.randn(s * q, self.hidden, generator=g) * 0.05).to("tpu")
        start = c - q
        pos = (torch.arange(q) + start).repeat(s, 1).to("tpu")
        slots = torch.randperm(self.num_pages * PAGE, generator=g)[: s * q].to("tpu")
        pages = torch.randperm(self.num_pages, generator=g)[: s * (c // PAGE)].view(s, -1).to("tpu")
        return h, pos, slots, pages


def median_ms(fn, rounds: int, reps: int = 1) -> float:
    """Median over `rounds` of the mean time of `reps` back-to-back calls of `fn`."""
    fn()
    torch.tpu.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        torch.tpu.synchronize()
        times.append((time.perf_counter() - t0) * 1000 / reps)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="a Hugging Face model folder (default: "
                    "SmolLM2-135M-Instruct's configuration)")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from transformers import AutoConfig

    from torchtpu.serve.engine import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(args.model))
    layer = Layer(config, num_pages=1024)
    torch._dynamo.config.recompile_limit = 64
    one = torch.compile(decoder_layer, backend="tpu", dynamic=False, fullgraph=True)

    kernel = attention_kernel_available("tpu", torch.float32)

    def two(h, pos, slots, pages, k0, v0, k1, v1, inv, scale, w):
        h = decoder_layer(h, pos, slots, pages, k0, v0, inv, scale, **layer.static, **w,
                          attention_kernel=kernel)
        return decoder_layer(h, pos, slots, pages, k1, v1, inv, scale, **layer.static, **w,
                             attention_kernel=kernel)

    two = torch.compile(two, backend="tpu", dynamic=False, fullgraph=True)
    k0, v0, k1, v1 = layer.caches
    print(f"model dims: hidden={layer.hidden} heads={layer.heads} kv_heads={layer.kv_heads} "
          f"head_dim={layer.head_dim} layers={config.num_hidden_layers}; page={PAGE}")
    print("ms/layer with attention as gathered pages and batched matmuls (StableHLO), and "
          "with the host kernel torchtpu::paged_attention" +
          ("" if kernel else " (not registered by this plugin: not measured)"))
    print(f"{'S':>3} {'Q':>4} {'C':>5}  {'gathered':>9}  {'kernel':>7}  {'gathered/kernel':>15}")
    for s, q, c in [(1, 1, 256), (1, 1, 384), (1, 1, 512), (16, 1, 256), (16, 1, 384),
                    (16, 1, 512), (16, 1, 1024), (1, 256, 256), (1, 512, 1024)]:
        h, pos, slots, pages = layer.inputs(s, q, c)
        row = f"{s:>3} {q:>4} {c:>5}"
        times = []
        for use_kernel in (False, True) if kernel else (False,):
            times.append(median_ms(
                lambda: one(h, pos, slots, pages, k0, v0, layer.inv_freq, layer.rope_scale,
                            **layer.static, **layer.weights, attention_kernel=use_kernel),
                args.rounds, reps=10))
        row += f"  {times[0]:9.2f}"
        if len(times) == 2:
            row += f"  {times[1]:7.2f}  {times[0] / times[1]:15.2f}"
        print(row, flush=True)

    print("30 decode layers per forward (attention as the runner does it): 1 layer per call "
          "against 2 layers per call")
    for s in (1, 16):
        h, pos, slots, pages = layer.inputs(s, 1, 384)

        def by_one():
            x = h
            for i in range(30):
                x = one(x, pos, slots, pages, layer.caches[i % 2 * 2],
                        layer.caches[i % 2 * 2 + 1], layer.inv_freq, layer.rope_scale,
                        **layer.static, **layer.weights, attention_kernel=kernel)

        def by_two():
            x = h
            for _ in range(15):
                x = two(x, pos, slots, pages, k0, v0, k1, v1, layer.inv_freq,
                        layer.rope_scale, layer.weights)

        a, b = median_ms(by_one, args.rounds), median_ms(by_two, args.rounds)
        print(f"  S={s:>2} C=384: {a:7.1f} ms against {b:7.1f} ms: "
              f"{(a - b) / 15:.2f} ms per compiled call", flush=True)


if __name__ == "__main__":
    main()
