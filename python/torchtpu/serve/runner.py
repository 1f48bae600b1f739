"""Turns one schedule into padded, bucketed forward calls of a ``PagedDecoder``.

Each scheduled item is either a decode-shaped one (one new token) or a prefill chunk.
All one-token items run together as one batch of S sequences (S padded to a bucket);
each prefill chunk runs alone with its Q tokens padded to a bucket. The context length C
that attention reads is padded to a bucket too. So every forward call has one of a small,
fixed set of shapes, all compiled by ``warmup()``; a compile after that is a bug and is
counted and logged as one.
"""

from __future__ import annotations

import logging
import sys
import time
import types
from dataclasses import dataclass
from typing import Sequence

import torch

from torchtpu.serve.model import (PagedDecoder, attention_kernel_available, decoder_layer, embed,
                                  lm_head)

log = logging.getLogger("torchtpu.serve")


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


def _own_copy(fn):
    """`fn` with its own code object. Dynamo keeps compiled graphs per code object, so each
    runner gets its own cache (and recompile limit) instead of sharing one with every other
    engine in the process."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


@dataclass
class StepItem:
    """What the runner needs of one scheduled request (a view of the scheduler's item)."""
    request_id: str
    token_ids: list[int]
    start_pos: int
    page_ids: list[int]
    sample: bool


class ModelRunner:
    def __init__(self, decoder: PagedDecoder, *, num_pages: int, page_size: int,
                 max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int,
                 min_prefill_bucket: int = 16, min_context_bucket: int = 256,
                 attention_kernel: bool | None = None) -> None:
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
        self.page_size = page_size
        self.num_pages = num_pages
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
        self.decode_buckets = _powers_of_two(1, max_num_seqs)
        self.prefill_buckets = _powers_of_two(min(min_prefill_bucket, max_num_batched_tokens),
                                              max_num_batched_tokens)
        # Whole pages: attention gathers a sequence's context page by page. Attention cost
        # grows with C, and decode steps are dominated by it, so C gets finer steps.
        self.context_buckets = sorted({-(-c // page_size) * page_size for c in
                                       _powers_of_two_and_halves(min(min_context_bucket, max_ctx),
                                                                 max_ctx)})
        self.window = shape.sliding_window or 0
        if self.window >= max_ctx:
            self.window = 0
        n_shapes = (len(self.decode_buckets) + len(self.prefill_buckets)) * len(self.context_buckets)
        cfg = torch._dynamo.config
        if hasattr(cfg, "recompile_limit"):
            cfg.recompile_limit = max(cfg.recompile_limit, n_shapes + 8)
        else:
            cfg.cache_size_limit = max(cfg.cache_size_limit, n_shapes + 8)
        opts = dict(backend="tpu", dynamic=False, fullgraph=True)
        self._layer = torch.compile(_own_copy(decoder_layer), **opts)
        self._embed = torch.compile(_own_copy(embed), **opts)
        self._head = torch.compile(_own_copy(lm_head), **opts)
        self._warm_graphs: int | None = None
        self.num_recompiles_after_warmup = 0

    # --- shapes -------------------------------------------------------------------------
    def bucket_shapes(self) -> list[tuple[int, int, int]]:
        """Every (S, Q, C) a forward call can take."""
        shapes = [(s, 1, c) for s in self.decode_buckets for c in self.context_buckets]
        shapes += [(1, q, c) for q in self.prefill_buckets for c in self.context_buckets]
        return shapes

    def warmup(self, progress: bool = True) -> float:
        """Compiles (or loads from the disk cache) every bucket. Returns seconds taken."""
        from torchtpu.dynamo import backend

        t0 = time.perf_counter()
        shapes = self.bucket_shapes()
        with backend.expected_recompiles():
            for i, (s, q, c) in enumerate(shapes):
                self._forward(s, q, c, [], [])
                if progress:
                    done = int(30 * (i + 1) / len(shapes))
                    print(f"\rserve: warm-up [{'#' * done}{'.' * (30 - done)}] {i + 1}/"
                          f"{len(shapes)} shapes (S={s}, Q={q}, C={c})", end="",
                          file=sys.stderr, flush=True)
        if progress:
            print(file=sys.stderr)
        torch.tpu.synchronize()
        self._warm_graphs = backend.compile_stats()["num_dynamo_compiles"]
        return time.perf_counter() - t0

    def _check_no_compile(self) -> None:
        if self._warm_graphs is None:
            return
        from torchtpu.dynamo import backend

        now = backend.compile_stats()["num_dynamo_compiles"]
        if now != self._warm_graphs:
            self.num_recompiles_after_warmup += now - self._warm_graphs
            log.error("serve: BUG: %d graph compile(s) after warm-up; recent reasons: %s",
                      now - self._warm_graphs, backend.compile_stats()["recompile_reasons"][-3:])
            self._warm_graphs = now

    # --- execution ----------------------------------------------------------------------
    def execute(self, items: Sequence[StepItem]) -> dict[str, torch.Tensor]:
        """Runs the forward pass of one schedule. Returns, for each item with ``sample``,
        the f32 logits (on the CPU) of its last token."""
        decodes = [it for it in items if len(it.token_ids) == 1]
        prefills = [it for it in items if len(it.token_ids) > 1]
        logits: dict[str, torch.Tensor] = {}
        for group in self._split(decodes, self.decode_buckets[-1]):
            s = _bucket(len(group), self.decode_buckets)
            c = _bucket(max(it.start_pos + 1 for it in group), self.context_buckets)
            logits.update(self._forward(s, 1, c, group, [it.sample for it in group]))
        for it in prefills:
            q = _bucket(len(it.token_ids), self.prefill_buckets)
            c = _bucket(it.start_pos + len(it.token_ids), self.context_buckets)
            logits.update(self._forward(1, q, c, [it], [it.sample]))
        self._check_no_compile()
        return logits

    @staticmethod
    def _split(items: list[StepItem], size: int) -> list[list[StepItem]]:
        return [items[i:i + size] for i in range(0, len(items), size)]

    def _page_table(self, page_ids: list[int], c: int) -> list[int]:
        n = c // self.page_size
        return page_ids[:n] + [self.num_pages] * (n - min(n, len(page_ids)))

    def _forward(self, s: int, q: int, c: int, group: Sequence[StepItem],
                 sample: Sequence[bool]) -> dict[str, torch.Tensor]:
        ps, scratch = self.page_size, self.scratch_slot
        tokens = [0] * (s * q)
        positions = [0] * (s * q)
        slots = [scratch] * (s * q)
        pages = [[self.num_pages] * (c // ps) for _ in range(s)]
        rows = [0] * s
        for i, it in enumerate(group):
            n = len(it.token_ids)
            for j, tok in enumerate(it.token_ids):
                pos = it.start_pos + j
                tokens[i * q + j] = tok
                positions[i * q + j] = pos
                slots[i * q + j] = it.page_ids[pos // ps] * ps + pos % ps
            pages[i] = self._page_table(it.page_ids, c)
            rows[i] = i * q + n - 1
        dev = self.decoder.device
        as_dev = lambda v: torch.tensor(v, dtype=torch.int64).to(dev)  # noqa: E731
        t_tokens, t_slots, t_rows = as_dev(tokens), as_dev(slots), as_dev(rows)
        t_pos = as_dev(positions).view(s, q)
        t_pages = as_dev(pages)
        d, shape = self.decoder, self.decoder.shape
        h = self._embed(t_tokens, d.embed_weight)
        for i, w in enumerate(d.layers):
            h = self._layer(
                h, t_pos, t_slots, t_pages, self.k_caches[i], self.v_caches[i], d.inv_freq,
                d.rope_scale, num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads,
                page_size=ps, eps=shape.rms_eps, window=self.window,
                attention_kernel=self.attention_kernel, **w)
        out = self._head(h, t_rows, d.norm_weight, d.head_weight, shape.rms_eps)
        if not any(sample):
            return {}
        out = out.cpu()
        return {it.request_id: out[i] for i, it in enumerate(group) if sample[i]}
