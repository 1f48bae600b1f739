"""Where a serving step's time goes: decoder layers per shape, int8 projections, and the
fixed cost of a compiled call.

The serving runner computes one ragged batch per step (decodes and prefill chunks
together, T tokens) with the decoder layers in groups, one compiled call per group. With
the model's dimensions and random weights this script times, side by side:

1. one decoder layer for the shapes that matter (S decodes over a C-token context, a
   prefill chunk), attention as gathered pages and batched matmuls in StableHLO against
   the host kernel ``torchtpu::paged_attention`` (what the runner uses where the plugin
   registered it);
2. an int8 projection (the MLP's gate/up, w8a16) for M rows: the host kernel
   ``torchtpu::int8_matmul`` (what the runner uses) against converting the weight in the
   program (what platforms without the kernel do), and the f32 matmul;
3. all layers of a decode step run as 1, 10 and all layers per call: the difference is the
   fixed cost of a compiled call (Dynamo's guards, AOTAutograd's wrapper, our runtime),
   which is not hidden behind the computation because a call that donates its KV cache
   blocks until its inputs are ready. Wall and process CPU time (the CPU time moves less
   with other load), and the first call of each (its trace and compile: warm-up cost).

Figures are medians of --rounds rounds; a shared machine's other load moves them by tens
of percent, so compare rows of one run, not runs.

    python bench/serve_layer_bench.py [--model DIR] [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import time

import torch

import torchtpu  # noqa: F401  (registers the tpu device)
from torchtpu.serve.model import (
    attention_kernel_available,
    decoder_layer,
    decoder_layers,
    int8_kernel_available,
    linear,
    quantize_int8,
)

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

        self.hidden, self.inter = hidden, inter
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
        """S sequences of Q new tokens each at the end of a C-token context, ragged."""
        g = torch.Generator().manual_seed(0)
        h = (torch.randn(s * q, self.hidden, generator=g) * 0.05).to("tpu")
        pos = (torch.arange(q) + c - q).repeat(s).to("tpu")
        slots = torch.randperm(self.num_pages * PAGE, generator=g)[: s * q].to("tpu")
        pages = torch.randperm(self.num_pages, generator=g)[: s * (c // PAGE)].view(s, -1).to("tpu")
        starts = (torch.arange(s + 1) * q).to("tpu")
        return h, pos, slots, pages, starts


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def median_ms(fn, rounds: int, reps: int = 1) -> tuple[float, float]:
    """Medians over `rounds` of the mean wall and CPU time of `reps` back-to-back calls."""
    fn()
    torch.tpu.synchronize()
    wall, cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), cpu_seconds()
        for _ in range(reps):
            fn()
        torch.tpu.synchronize()
        wall.append((time.perf_counter() - t0) * 1000 / reps)
        cpu.append((cpu_seconds() - c0) * 1000 / reps)
    return statistics.median(wall), statistics.median(cpu)


def attention_section(layer: Layer, rounds: int) -> None:
    one = torch.compile(decoder_layer, backend="tpu", dynamic=False, fullgraph=True)
    kernel = attention_kernel_available("tpu", torch.float32)
    k0, v0 = layer.caches[:2]
    print("1. ms/layer with attention as gathered pages and batched matmuls (StableHLO), and "
          "with the host kernel torchtpu::paged_attention" +
          ("" if kernel else " (not registered by this plugin: not measured)"))
    print(f"{'S':>3} {'Q':>4} {'C':>5}  {'gathered':>9}  {'kernel':>7}  {'gathered/kernel':>15}")
    for s, q, c in [(1, 1, 256), (1, 1, 512), (16, 1, 256), (16, 1, 512), (16, 1, 1024),
                    (1, 5, 512), (1, 256, 256), (1, 512, 1024)]:
        h, pos, slots, pages, starts = layer.inputs(s, q, c)
        row = f"{s:>3} {q:>4} {c:>5}"
        times = []
        for use_kernel in (False, True) if kernel else (False,):
            times.append(median_ms(
                lambda: one(h, pos, slots, pages, starts, k0, v0, layer.inv_freq,
                            layer.rope_scale, **layer.static, **layer.weights,
                            attention_kernel=use_kernel), rounds, reps=5)[0])
        row += f"  {times[0]:9.2f}"
        if len(times) == 2:
            row += f"  {times[1]:7.2f}  {times[0] / times[1]:15.2f}"
        print(row, flush=True)


def int8_section(layer: Layer, rounds: int) -> None:
    kernel = int8_kernel_available("tpu")
    w_f32 = layer.weights["w_gate_up"]                     # [in, out]
    w_q, scale = quantize_int8(w_f32.cpu().t())            # [out, in]
    w_q, scale = w_q.to("tpu"), scale.to("tpu")
    fn = torch.compile(lambda x, w, s, k: linear(x, w, s, int8_kernel=k), backend="tpu",
                       dynamic=False, fullgraph=True)
    f32 = torch.compile(lambda x, w: linear(x, w), backend="tpu", dynamic=False,
                        fullgraph=True)
    print(f"\n2. int8 projection [{layer.hidden} -> {2 * layer.inter}], ms per call: the host "
          "kernel, dequantized in the program, f32 weights" +
          ("" if kernel else " (kernel not registered by this plugin: not measured)"))
    print(f"{'M':>4}  {'kernel':>7}  {'dequant':>8}  {'f32':>7}  {'dequant/kernel':>14}")
    for m in (1, 4, 16, 32, 64, 128, 256):
        x = (torch.randn(m, layer.hidden) * 0.1).to("tpu")
        k_ms = median_ms(lambda: fn(x, w_q, scale, True), rounds, reps=10)[0] if kernel else 0
        d_ms = median_ms(lambda: fn(x, w_q, scale, False), rounds, reps=10)[0]
        f_ms = median_ms(lambda: f32(x, w_f32), rounds, reps=10)[0]
        ratio = f"{d_ms / k_ms:14.2f}" if kernel else f"{'-':>14}"
        print(f"{m:>4}  {k_ms:7.3f}  {d_ms:8.3f}  {f_ms:7.3f}  {ratio}", flush=True)


def calls_section(layer: Layer, config, rounds: int) -> None:
    n = config.num_hidden_layers
    kernel = attention_kernel_available("tpu", torch.float32)
    caches = [torch.zeros_like(layer.caches[0]) for _ in range(2 * n)]
    print(f"\n3. {n} decode layers per step (S=1, C=512) by layers per compiled call: wall and "
          "CPU ms per step, first call (trace + compile) in s")
    h, pos, slots, pages, starts = layer.inputs(1, 1, 512)
    for g in sorted({1, min(10, n), n}):
        f = torch.compile(decoder_layers, backend="tpu", dynamic=False, fullgraph=True)

        def step():
            x = h
            for i in range(0, n, g):
                j = min(i + g, n)
                x = f(x, pos, slots, pages, starts, caches[i:j], caches[n + i:n + j],
                      layer.inv_freq, layer.rope_scale, [layer.weights] * (j - i),
                      **layer.static, attention_kernel=kernel)
            return x

        t0 = time.perf_counter()
        step()
        torch.tpu.synchronize()
        first = time.perf_counter() - t0
        wall, cpu = median_ms(step, rounds)
        print(f"  {g:>2} per call ({-(-n // g):>2} calls): {wall:7.1f} wall  {cpu:7.1f} CPU ms; "
              f"first call {first:5.1f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="a Hugging Face model folder (default: "
                    "SmolLM2-135M-Instruct's configuration)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sections", default="1,2,3")
    args = ap.parse_args()
    from transformers import AutoConfig

    from torchtpu.dynamo import backend
    from torchtpu.serve.engine import resolve_model

    config = AutoConfig.from_pretrained(resolve_model(args.model))
    layer = Layer(config, num_pages=1024)
    torch._dynamo.config.recompile_limit = 64
    # Every shape here is compiled on purpose: no recompilation warnings.
    stack = contextlib.ExitStack()
    stack.enter_context(backend.expected_recompiles())
    print(f"model dims: hidden={layer.hidden} heads={layer.heads} kv_heads={layer.kv_heads} "
          f"head_dim={layer.head_dim} layers={config.num_hidden_layers}; page={PAGE}; load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    sections = args.sections.split(",")
    if "1" in sections:
        attention_section(layer, args.rounds)
    if "2" in sections:
        int8_section(layer, args.rounds)
    if "3" in sections:
        calls_section(layer, config, args.rounds)


if __name__ == "__main__":
    main()
