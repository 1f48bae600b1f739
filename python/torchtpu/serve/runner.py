"""Turns one schedule into one forward pass of a ``PagedDecoder``: a ragged batch.

Every scheduled item (a decode's one token, a speculative verification's few, a prefill
chunk's many) puts its tokens one after another into one batch of T tokens, padded to a
bucket; each sequence's page table is a row of a [S, P] table (S = max_num_seqs) and
``query_start`` says which tokens are whose. So a step with many prefill chunks costs what
its tokens cost, not a forward call per chunk, and every call has one of a small, fixed set
of shapes, all compiled by ``warmup()``; a compile after that is a bug and is counted and
logged as one.

A forward pass is a few compiled calls: the embedding, the decoder layers in groups of
``layers_per_call`` (each call has a fixed cost, about a millisecond on the CPU plugin,
that a decode step pays in full: a call that donates its KV caches returns only once its
inputs are ready, so calls do not overlap; fewer, larger calls cost less per step but take
longer to trace at warm-up), and the head over the rows that are sampled. The step's
integer inputs go to the device as one tensor, sliced inside each call.

Buckets: T is a power of two up to max_num_batched_tokens; sampled rows R a power of two
up to T; with the attention kernel, the page table always has the longest context's pages
(the kernel reads only what each query sees, so padding the context costs nothing), while
the gathered formulation's cost grows with the context, so there C (= P pages) has
buckets too.
"""

from __future__ import annotations

import logging
import sys
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from torchtpu.serve.model import (
    PagedDecoder,
    attention_kernel_available,
    decoder_layers,
    embed,
    int8_kernel_available,
    lm_head,
)

log = logging.getLogger("torchtpu.serve")

# The most decoder layers one compiled call runs, by default. Measured on SmolLM2-135M (30
# layers) at one sequence: a decode step took 44 ms of CPU time with one layer per call,
# 28 with 10 and 26 with 30, while tracing a call at warm-up grows with its layers (0.6 s
# per layer per shape); 10 keeps warm-up about what one layer per call with separate
# decode and prefill shapes took.
DEFAULT_MAX_LAYERS_PER_CALL = 10


def _powers_of_two(lo: int, hi: int) -> list[int]:
    sizes, n = [], lo
    while n < hi:
        sizes.append(n)
        n *= 2
    sizes.append(hi)
    return sizes


def _powers_of_two_and_halves(lo: int, hi: int) -> list[int]:
    """lo, 1.5 lo, 2 lo, 3 lo, 4 lo, ... up to hi (and hi): at most a third of a padded
    context is padding, against half with powers of two alone."""
    sizes = []
    for n in _powers_of_two(lo, hi):
        sizes += [n, n + n // 2]
    return sorted({n for n in sizes if n < hi} | {hi})


def _bucket(n: int, sizes: Sequence[int]) -> int:
    for b in sizes:
        if n <= b:
            return b
    raise ValueError(f"serve: size {n} exceeds the largest bucket {sizes[-1]}")


def layer_groups(num_layers: int, layers_per_call: int | None) -> list[range]:
    """Consecutive layer ranges, one per compiled call. None: at most
    DEFAULT_MAX_LAYERS_PER_CALL layers per call, as even as divisors allow (every group of
    one size shares one compiled program per shape)."""
    if layers_per_call is None:
        cap = min(num_layers, DEFAULT_MAX_LAYERS_PER_CALL)
        fewest = -(-num_layers // cap)
        even = max(g for g in range(1, cap + 1) if num_layers % g == 0)
        layers_per_call = even if num_layers // even <= 2 * fewest else -(-num_layers // fewest)
    if not isinstance(layers_per_call, int) or layers_per_call < 1:
        raise ValueError(f"serve: layers_per_call must be a positive integer, got "
                         f"{layers_per_call!r}")
    g = min(layers_per_call, num_layers)
    return [range(i, min(i + g, num_layers)) for i in range(0, num_layers, g)]


def _own_copy(fn):
    """`fn` with its own code object. Dynamo keeps compiled graphs per code object, so each
    runner gets its own cache (and recompile limit) instead of sharing one with every other
    engine in the process."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


# on_rows(item, first token index in the item, f32 CPU logits [n, vocab])
RowsCallback = Callable[["StepItem", int, torch.Tensor], None]


@dataclass
class StepItem:
    """What the runner needs of one scheduled request (a view of the scheduler's item)."""
    request_id: str
    token_ids: list[int]
    start_pos: int
    page_ids: list[int]
    num_logits: int = 0  # logits rows wanted: those of the last num_logits tokens
    # More logits rows (prompt logprobs): tokens [a, b) of token_ids, handed to execute's
    # on_rows a group of rows at a time instead of being returned.
    row_span: tuple[int, int] | None = None
    # False: the tokens' keys and values go to the scratch page, and attention reads their
    # context, these positions included, from page_ids (positions already computed, as
    # in a prefix cache hit): a forward pass for logits only, which writes no page.
    write_kv: bool = True


@dataclass(frozen=True)
class _Layout:
    """Where each integer input sits in the step's one int64 tensor. The row list always
    has room for the most rows, so the tensor's shape (which every call of the step is
    compiled for) does not depend on r."""
    t: int  # tokens (padded)
    s: int  # sequences (page table rows)
    p: int  # pages per sequence
    r: int  # sampled rows (padded)
    max_r: int  # room for rows

    @property
    def size(self) -> int:
        return 3 * self.t + self.s + 1 + self.s * self.p + self.max_r


def _inputs(meta: torch.Tensor, t: int, s: int, p: int):
    """(tokens, positions, slots, query_start, pages) sliced from the step's tensor."""
    o = 3 * t
    return (meta[:t], meta[t:2 * t], meta[2 * t:o], meta[o:o + s + 1],
            meta[o + s + 1:o + s + 1 + s * p].view(s, p))


def _embed_step(meta: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None,
                t: int, columns: bool) -> torch.Tensor:
    return embed(meta[:t], weight, scale, columns)


def _layers_step(h: torch.Tensor, meta: torch.Tensor, k_caches: list[torch.Tensor],
                 v_caches: list[torch.Tensor], inv_freq: torch.Tensor,
                 rope_scale: torch.Tensor, layers: list[dict], t: int, s: int, p: int,
                 **static) -> torch.Tensor:
    _, positions, slots, query_start, pages = _inputs(meta, t, s, p)
    return decoder_layers(h, positions, slots, pages, query_start, k_caches, v_caches,
                          inv_freq, rope_scale, layers, **static)


def _head_step(h: torch.Tensor, meta: torch.Tensor, w_norm: torch.Tensor, w_head: torch.Tensor,
               s_head: torch.Tensor | None, t: int, s: int, p: int, r: int, eps: float,
               int8_kernel: bool) -> torch.Tensor:
    o = 3 * t + s + 1 + s * p
    return lm_head(h, meta[o:o + r], w_norm, w_head, s_head, eps, int8_kernel)


class ModelRunner:
    def __init__(self, decoder: PagedDecoder, *, num_pages: int, page_size: int,
                 max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                 min_context_bucket: int = 256, attention_kernel: bool | None = None,
                 layers_per_call: int | None = None, max_logits_per_seq: int = 1) -> None:
        self.decoder = decoder
        # Attention runs as the host kernel where the plugin has it (None: decide here):
        # for a decode step, gathering pages in StableHLO costs several times what reading
        # them does; for prefill chunks the kernel matches XLA's batched matmuls on short
        # contexts and beats them on long ones (bench/serve_layer_bench.py).
        available = attention_kernel_available(decoder.device, decoder.dtype)
        if attention_kernel and not available:
            raise ValueError("serve: attention_kernel=True, but the torchtpu_paged_attention "
                             "host kernel is not registered for this device and dtype (it "
                             "is f32-only, on the XLA CPU plugin); pass None or False")
        self.attention_kernel = available if attention_kernel is None else attention_kernel
        self.int8_kernel = (decoder.quantization == "int8"
                            and int8_kernel_available(decoder.device))
        self.page_size = page_size
        self.num_pages = num_pages
        self.max_num_seqs = max_num_seqs
        # One extra page past the pool: padding tokens write there and padded context
        # reads it; the scheduler never hands it out.
        self.scratch_slot = num_pages * page_size
        shape = decoder.shape
        num_slots = (num_pages + 1) * page_size
        kv = (num_slots, shape.num_kv_heads, shape.head_dim)
        self.k_caches = [torch.zeros(kv, dtype=decoder.dtype, device=decoder.device)
                         for _ in range(shape.num_layers)]
        self.v_caches = [torch.zeros(kv, dtype=decoder.dtype, device=decoder.device)
                         for _ in range(shape.num_layers)]
        max_ctx = -(-max_model_len // page_size) * page_size
        self.token_buckets = _powers_of_two(1, max_num_batched_tokens)
        if self.attention_kernel:
            self.context_buckets = [max_ctx]
        else:
            self.context_buckets = sorted({-(-c // page_size) * page_size for c in
                                           _powers_of_two_and_halves(
                                               min(min_context_bucket, max_ctx), max_ctx)})
        max_rows = min(max_num_batched_tokens, max_num_seqs * max(1, max_logits_per_seq))
        self.row_buckets = _powers_of_two(1, max_rows)
        self.groups = layer_groups(shape.num_layers, layers_per_call)
        self.window = shape.sliding_window or 0
        if self.window >= max_ctx:
            self.window = 0
        group_sizes = {len(g) for g in self.groups}
        n_shapes = len(self.token_buckets) * len(self.context_buckets) * len(group_sizes)
        n_shapes = max(n_shapes, len(self.token_buckets) * len(self.row_buckets))
        # Each step function compiles once per bucket shape: its own recompile limit, so
        # no other code's setting of Dynamo's process-wide limit can stop the engine.
        opts = dict(backend="tpu", dynamic=False, fullgraph=True,
                    recompile_limit=n_shapes + 8)
        steps = [_own_copy(f) for f in (_layers_step, _embed_step, _head_step)]
        self._codes = [f.__code__ for f in steps]
        self._layers, self._embed, self._head = (torch.compile(f, **opts) for f in steps)
        self._warm_graphs: int | None = None
        self.num_recompiles_after_warmup = 0

    # --- shapes -------------------------------------------------------------------------
    def bucket_shapes(self) -> list[tuple[int, int, int]]:
        """Every (T, C, R) a forward pass can take."""
        return [(t, c, r) for t in self.token_buckets for c in self.context_buckets
                for r in self.row_buckets if r <= t]

    def warmup(self, progress: bool = True) -> float:
        """Compiles (or loads from the disk cache) every bucket. Returns seconds taken."""
        from torchtpu.dynamo import backend

        t0 = time.perf_counter()
        shapes = self.bucket_shapes()
        with backend.expected_recompiles():
            done_tc = set()
            for i, (t, c, r) in enumerate(shapes):
                if (t, c) not in done_tc:  # the layers once per (T, C), the head per R
                    done_tc.add((t, c))
                    self._forward(t, c, r, [])
                else:
                    lay = _Layout(t, self.max_num_seqs, c // self.page_size, r,
                                  self.row_buckets[-1])
                    self._run_head(self._hidden(t), self._meta(lay), lay)
                if progress:
                    done = int(30 * (i + 1) / len(shapes))
                    print(f"\rserve: warm-up [{'#' * done}{'.' * (30 - done)}] {i + 1}/"
                          f"{len(shapes)} shapes (T={t}, C={c}, R={r})", end="",
                          file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)
        torch.tpu.synchronize()
        self._warm_graphs = self._graphs_held()
        return time.perf_counter() - t0

    def _graphs_held(self) -> int:
        """Graphs Dynamo holds for this runner's own step functions: another engine's
        warm-up in the same process compiles for its own code objects, not these."""
        from torch._dynamo.eval_frame import _debug_get_cache_entry_list

        return sum(len(_debug_get_cache_entry_list(code)) for code in self._codes)

    def _hidden(self, t: int) -> torch.Tensor:
        return torch.zeros(t, self.decoder.shape.hidden, dtype=self.decoder.dtype,
                           device=self.decoder.device)

    def _check_no_compile(self) -> None:
        if self._warm_graphs is None:
            return
        from torchtpu.dynamo import backend

        now = self._graphs_held()
        if now != self._warm_graphs:
            self.num_recompiles_after_warmup += now - self._warm_graphs
            log.error("serve: BUG: %d graph compile(s) after warm-up; recent reasons: %s",
                      now - self._warm_graphs, backend.compile_stats()["recompile_reasons"][-3:])
            self._warm_graphs = now

    # --- execution ----------------------------------------------------------------------
    def execute(self, items: Sequence[StepItem], on_rows: RowsCallback | None = None
                ) -> dict[str, torch.Tensor]:
        """Runs the forward pass of one schedule. Returns, for each item with num_logits,
        the f32 logits (on the CPU) of its last num_logits tokens, [num_logits, vocab].
        The rows of items' row_span go to `on_rows(item, first, logits)`: logits
        [n, vocab] (f32, CPU) of the item's tokens first .. first + n - 1, at most the
        largest row bucket at a time (the head runs again on the step's hidden states
        for each group, in the shapes warm-up compiled), so a long span never holds
        [span, vocab] at once."""
        if not items:
            return {}
        n_tokens = sum(len(it.token_ids) for it in items)
        n_rows = sum(it.num_logits for it in items)
        if (len(items) > self.max_num_seqs or n_tokens > self.token_buckets[-1]
                or n_rows > self.row_buckets[-1]):
            raise ValueError(f"serve: a step of {len(items)} sequences, {n_tokens} tokens and "
                             f"{n_rows} sampled rows exceeds the runner's limits "
                             f"({self.max_num_seqs}, {self.token_buckets[-1]}, "
                             f"{self.row_buckets[-1]})")
        t = _bucket(n_tokens, self.token_buckets)
        c = _bucket(max(it.start_pos + len(it.token_ids) for it in items), self.context_buckets)
        r = _bucket(max(1, n_rows), self.row_buckets)
        if self._warm_graphs is None:  # not warmed up: shapes compile on first use, as planned
            from torchtpu.dynamo import backend

            with backend.expected_recompiles():
                return self._forward(t, c, r, items, on_rows)
        logits = self._forward(t, c, r, items, on_rows)
        self._check_no_compile()
        return logits

    def _forward(self, t: int, c: int, r: int, items: Sequence[StepItem],
                 on_rows: RowsCallback | None = None) -> dict[str, torch.Tensor]:
        ps, s, p = self.page_size, self.max_num_seqs, c // self.page_size
        tokens, positions, slots = [0] * t, [0] * t, [self.scratch_slot] * t
        query_start = [0] * (s + 1)
        pages = [self.num_pages] * (s * p)
        rows = [0] * self.row_buckets[-1]
        n = k = 0
        spans = []  # (item, its first token's row in the step) of items with a row_span
        for i, it in enumerate(items):
            for j, tok in enumerate(it.token_ids):
                pos = it.start_pos + j
                tokens[n + j] = tok
                positions[n + j] = pos
                if it.write_kv:
                    slots[n + j] = it.page_ids[pos // ps] * ps + pos % ps
            if it.row_span is not None and it.row_span[1] > it.row_span[0]:
                spans.append((it, n))
            used = it.page_ids[:p]
            pages[i * p:i * p + len(used)] = used
            n += len(it.token_ids)
            for j in range(it.num_logits):
                rows[k + j] = n - it.num_logits + j
            k += it.num_logits
            query_start[i + 1] = n
        for i in range(len(items) + 1, s + 1):
            query_start[i] = n
        lay = _Layout(t, s, p, r, self.row_buckets[-1])
        meta = self._meta(lay, tokens + positions + slots + query_start + pages + rows)
        d, shape = self.decoder, self.decoder.shape
        static = dict(num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
                      page_size=ps, eps=shape.rms_eps, window=self.window,
                      hidden_act=shape.hidden_act,
                      attention_kernel=self.attention_kernel, int8_kernel=self.int8_kernel)
        h = self._embed(meta, d.embed_weight, d.embed_scale, t, d.embed_columns)
        for g in self.groups:
            h = self._layers(h, meta, self.k_caches[g.start:g.stop],
                             self.v_caches[g.start:g.stop], d.inv_freq, d.rope_scale,
                             d.layers[g.start:g.stop], t, s, p, **static)
        if spans:
            self._span_rows(h, lay, tokens + positions + slots + query_start + pages, spans,
                            on_rows)
        if k == 0 and items:  # nothing to sample (warm-up, items=[], compiles the head)
            return {}
        out = self._run_head(h, meta, lay)
        if k == 0:
            return {}
        out = out.cpu()
        result, k = {}, 0
        for it in items:
            if it.num_logits:
                result[it.request_id] = out[k:k + it.num_logits]
                k += it.num_logits
        return result

    def _span_rows(self, h: torch.Tensor, lay: _Layout, inputs: list[int],
                   spans: list[tuple[StepItem, int]], on_rows: RowsCallback | None) -> None:
        """The head over the row_span rows of `spans`, in groups of at most the largest
        row bucket; each group's logits go to `on_rows` per item, then are dropped."""
        if on_rows is None:
            raise ValueError("serve: StepItem.row_span needs execute(on_rows=...)")
        wanted = [(it, j, base + j) for it, base in spans for j in range(*it.row_span)]
        most = self.row_buckets[-1]
        for g in range(0, len(wanted), most):
            group = wanted[g:g + most]
            r = _bucket(len(group), self.row_buckets)
            glay = _Layout(lay.t, lay.s, lay.p, r, most)
            rows = [row for _, _, row in group] + [0] * (most - len(group))
            out = self._run_head(h, self._meta(glay, inputs + rows), glay).cpu()
            i = 0
            while i < len(group):  # consecutive rows of one item go out together
                it, first = group[i][0], group[i][1]
                e = i + 1
                while e < len(group) and group[e][0] is it:
                    e += 1
                on_rows(it, first, out[i:e])
                i = e

    def _meta(self, lay: _Layout, values: list[int] | None = None) -> torch.Tensor:
        """The step's integer inputs as one device tensor (one host transfer per step)."""
        if values is None:  # warm-up: everything padding
            values = [0] * lay.size
        return torch.tensor(values, dtype=torch.int64).to(self.decoder.device)

    def _run_head(self, h: torch.Tensor, meta: torch.Tensor, lay: _Layout) -> torch.Tensor:
        d = self.decoder
        return self._head(h, meta, d.norm_weight, d.head_weight, d.head_scale, lay.t, lay.s,
                          lay.p, lay.r, d.shape.rms_eps, self.int8_kernel)
