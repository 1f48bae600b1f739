"""Where a serving step's time goes: decoder layers per shape, int8 projections, the fixed
cost of a compiled call, and a whole engine decode step.

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
   Every layer here shares one layer's weights, which fit in the last-level cache: this
   isolates the calls' cost, not the weights' reads;
4. whole engine decode steps at concurrency 1 with the model's own weights (an
   ``LLMEngine``, one request of a 256-token prompt, f32 and int8): where a step's time
   goes (the runner's compiled calls, the logits' transfer, sampling, detokenizing, the
   rest of the engine), and the weight bytes a step reads over its time against a plain
   streaming read of as many bytes on the host (one thread): how near a step is to the
   memory bandwidth that bounds it (--layers-per-call to compare groupings). Each
   quantization runs with the weights on 4 KiB pages (TORCHTPU_HUGE_PAGES=0), then on
   huge pages (the engine's default on CPU plugins), with the process's AnonHugePages
   (/proc/self/smaps_rollup) before and after the load, and the streaming read is timed
   on either kind of page too.

Figures are medians of --rounds rounds; a shared machine's other load moves them by tens
of percent, so compare rows of one run, not runs.

    python bench/serve_layer_bench.py [--model DIR] [--rounds N] [--sections 1,2,3,4]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import statistics
import time

import torch
from serve_bench import anon_huge_pages_kib  # beside this script (its directory is on the path)

import torchtpu  # noqa: F401  (registers the tpu device)
from torchtpu import _C
from torchtpu.ops import pack_int8
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
    w_q, scale = pack_int8(w_q).to("tpu"), scale.to("tpu")
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


class _Timer:
    """Adds the wall time of calls of `owner.name` (an attribute or a method) to
    `totals[key]`, and their number to `counts[key]`."""

    def __init__(self, owner, name: str, totals: dict, counts: dict, key: str) -> None:
        self.owner, self.name, self.fn = owner, name, getattr(owner, name)
        fn = self.fn

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[key] = totals.get(key, 0.0) + time.perf_counter() - t0
                counts[key] = counts.get(key, 0) + 1

        setattr(owner, name, timed)

    def close(self) -> None:
        if isinstance(self.owner, type):
            setattr(self.owner, self.name, self.fn)
        else:
            delattr(self.owner, self.name)


def _collapse_host(x: torch.Tensor) -> None:
    """A host tensor's memory onto huge pages (madvise MADV_COLLAPSE over its interior)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    huge = _C.huge_page_size()
    lo = -(-x.data_ptr() // huge) * huge
    hi = (x.data_ptr() + x.numel() * x.element_size()) // huge * huge
    if hi > lo:
        libc.madvise(lo, hi - lo, 25)  # MADV_COLLAPSE; a refusal leaves 4 KiB pages


def streaming_read_ms(nbytes: int, rounds: int, huge: bool = False) -> float:
    """The best ms of `rounds` sums of `nbytes` of f32 on the host with one thread: the
    memory bandwidth floor of a step that reads that many bytes of weights (the best, as
    for the steps: other load only ever adds); `huge`: from huge pages."""
    x = torch.ones(nbytes // 4)
    if huge:
        _collapse_host(x)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            x.sum()
            best = min(best, time.perf_counter() - t0)
        return 1000 * best
    finally:
        torch.set_num_threads(threads)


def engine_section(model: str | None, rounds: int, layers_per_call: int | None,
                   steps: int = 64) -> None:
    from torchtpu.serve.detokenizer import IncrementalDetokenizer
    from torchtpu.serve.engine import LLMEngine
    from torchtpu.serve.sampling import RequestSampler, SamplingParams

    print(f"\n4. engine decode steps at concurrency 1 (256-token prompt, {steps} steps), "
          "ms per step")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as `torchtpu serve` runs the host's PyTorch ops
    env = os.environ.get("TORCHTPU_HUGE_PAGES")
    # 4 KiB pages first: memory that an engine on huge pages freed stays huge for reuse.
    runs = [(q, pages) for pages in ("4k", "huge") for q in (None, "int8")]
    summary = []
    try:
        for quantization, pages in runs:
            os.environ["TORCHTPU_HUGE_PAGES"] = "0" if pages == "4k" else "1"
            huge_before = anon_huge_pages_kib()
            t_load = time.perf_counter()
            eng = LLMEngine(model, max_num_seqs=1, max_model_len=1280, enable_prefix_cache=False,
                            warmup=False, progress=False, quantization=quantization,
                            layers_per_call=layers_per_call)
            load_s = time.perf_counter() - t_load
            huge_after = anon_huge_pages_kib()
            hp = eng.decoder.huge_pages
            prompt = [100 + (7919 * i) % 19000 for i in range(256)]
            eng.add_request("r", prompt, SamplingParams(max_tokens=steps + 3, temperature=0.0,
                                                        ignore_eos=True))
            for _ in range(3):  # the prompt, then the first decodes compile their shapes
                eng.step()
            totals: dict = {}
            counts: dict = {}
            r = eng.runner
            timers = [_Timer(r, "_embed", totals, counts, "embedding call"),
                      _Timer(r, "_layers", totals, counts, "layer calls"),
                      _Timer(r, "_head", totals, counts, "head call"),
                      _Timer(r, "execute", totals, counts, "runner"),
                      _Timer(RequestSampler, "sample", totals, counts, "sampling"),
                      _Timer(IncrementalDetokenizer, "update", totals, counts, "detokenizing")]
            walls, t0, c0 = [], time.perf_counter(), cpu_seconds()
            try:
                for _ in range(steps):
                    t = time.perf_counter()
                    eng.step()
                    walls.append(time.perf_counter() - t)
            finally:
                for timer in reversed(timers):
                    timer.close()
            wall_ms = 1000 * (time.perf_counter() - t0) / steps
            cpu_ms = 1000 * (cpu_seconds() - c0) / steps
            per = {k: 1000 * v / steps for k, v in totals.items()}
            calls = sum(counts[k] for k in ("embedding call", "layer calls", "head call")) / steps
            parts = {k: per[k] for k in ("embedding call", "layer calls", "head call")}
            parts["host prep, logits to host"] = per["runner"] - sum(parts.values())
            parts["sampling"] = per["sampling"]
            parts["detokenizing"] = per["detokenizing"]
            parts["scheduler, rest of engine"] = wall_ms - per["runner"] - per["sampling"] - \
                per["detokenizing"]
            # A step reads every weight once, but of an embedding table stored apart from
            # the head only its tokens' rows.
            d = eng.decoder
            nbytes = eng.weight_bytes - (0 if d.embed_weight is d.head_weight else
                                         d.embed_weight.numel() * d.embed_weight.element_size())
            floor = streaming_read_ms(nbytes, 3 * rounds, huge=pages == "huge")
            best = 1000 * min(walls)
            print(f"  {quantization or 'f32'}, {pages} pages: {wall_ms:.1f} wall (best "
                  f"{best:.1f}), {cpu_ms:.1f} CPU; {calls:.0f} compiled calls per step; "
                  f"{nbytes / 1e6:.0f} MB of weights read per step: "
                  f"{nbytes / 1e6 / best:.1f} GB/s at the best step; a streaming read of "
                  f"as many bytes ({pages} pages) takes {floor:.1f} ms "
                  f"({nbytes / 1e6 / floor:.1f} GB/s)")
            print(f"    load {load_s:.1f} s; AnonHugePages {huge_before} -> {huge_after} KiB; "
                  f"weights: {hp.buffer_bytes / 2**20:.0f} MiB in {hp.buffers} buffers, "
                  f"{hp.huge_bytes / 2**20:.0f} MiB of huge pages in {hp.seconds:.2f} s, "
                  f"{hp.refused_bytes / 2**20:.0f} MiB refused {hp.first_refusal}")
            for k, v in parts.items():
                print(f"    {k:28s} {v:6.2f}  ({100 * v / wall_ms:4.1f}%)")
            summary.append((quantization or "f32", pages, wall_ms, cpu_ms, best,
                            nbytes / 1e6 / best))
            del eng
    finally:
        torch.set_num_threads(threads)
        if env is None:
            os.environ.pop("TORCHTPU_HUGE_PAGES", None)
        else:
            os.environ["TORCHTPU_HUGE_PAGES"] = env
    print("  side by side (ms per step: wall, CPU, best wall; GB/s of weights at the best):")
    for q in ("f32", "int8"):
        rows = {pages: (w, c, b, g) for name, pages, w, c, b, g in summary if name == q}
        if len(rows) == 2:
            (w4, c4, b4, g4), (wh, ch, bh, gh) = rows["4k"], rows["huge"]
            print(f"    {q:4s} 4k {w4:6.1f} {c4:6.1f} {b4:6.1f} {g4:5.1f}   huge {wh:6.1f} "
                  f"{ch:6.1f} {bh:6.1f} {gh:5.1f}   4k/huge CPU {c4 / ch:.2f}x, best wall "
                  f"{b4 / bh:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="a Hugging Face model folder (default: "
                    "SmolLM2-135M-Instruct's configuration)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sections", default="1,2,3,4")
    ap.add_argument("--layers-per-call", type=int, default=None,
                    help="section 4's decoder layers per compiled call (default: the runner's)")
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
    if "4" in sections:
        engine_section(args.model, args.rounds, args.layers_per_call)


if __name__ == "__main__":
    main()
