"""torchtpu's own ops, as ``torch.library`` custom ops over host kernels (csrc/kernels).

A host kernel is a typed XLA FFI handler that the XLA CPU plugin runs as a custom call
inside a compiled program. On ``tpu`` the op lowers to that custom call (eager: its own
executable; compiled: inlined into the graph's module); on the CPU the reference
implementation below runs, which tests compare against. Call an op only where
``has_host_kernel`` says the running plugin registered it; other platforms (GPU, TPU) have
no host kernels, and callers keep a StableHLO formulation for them.
"""

from __future__ import annotations

import functools

import torch

from torchtpu import _C


@functools.cache
def host_kernels() -> frozenset[str]:
    """Custom-call targets the running plugin registered (empty off the CPU platform)."""
    return frozenset(_C.host_kernels())


def has_host_kernel(target: str) -> bool:
    return target in host_kernels()


@torch.library.custom_op("torchtpu::paged_attention", mutates_args=(), device_types="cpu")
def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    pages: torch.Tensor, positions: torch.Tensor, query_start: torch.Tensor,
                    page_size: int, scale: float, window: int) -> torch.Tensor:
    """Attention of a ragged batch of queries to their sequences' context in a paged KV pool.

    q [T, H, D]; k_cache, v_cache [N, KV, D] (N slots, H a multiple of KV); pages [S, P]
    (int64: context position j of sequence s is slot pages[s, j // page_size] * page_size
    + j % page_size); positions [T] (int64: a query sees keys j <= its position, and
    j > position - window when window > 0, j < P * page_size); query_start [S + 1] (int64,
    non-decreasing: sequence s owns queries [query_start[s], query_start[s + 1])). Returns
    [T, H, D]; a query that sees no key, or past query_start[S] (padding), gets zeros. The
    ``tpu`` kernel is ``torchtpu_paged_attention``.
    """
    heads = q.shape[1]
    kv_heads = k_cache.shape[1]
    ctx = pages.shape[1] * page_size
    out = torch.zeros_like(q)
    key_pos = torch.arange(ctx)
    starts = query_start.tolist()
    for s in range(pages.shape[0]):
        lo, hi = starts[s], starts[s + 1]
        if lo == hi:
            continue
        slots = (pages[s].unsqueeze(-1) * page_size + torch.arange(page_size)).reshape(ctx)
        keys = k_cache[slots].repeat_interleave(heads // kv_heads, dim=1)    # [C, H, D]
        values = v_cache[slots].repeat_interleave(heads // kv_heads, dim=1)
        scores = torch.einsum("qhd,chd->hqc", q[lo:hi], keys) * scale
        query_pos = positions[lo:hi].view(1, -1, 1)
        visible = key_pos <= query_pos
        if window > 0:
            visible = visible & (key_pos > query_pos - window)
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # no visible key: zeros
        out[lo:hi] = torch.einsum("hqc,chd->qhd", probs, values)
    return out


@paged_attention.register_fake
def _(q, k_cache, v_cache, pages, positions, query_start, page_size, scale, window):
    return torch.empty_like(q)


@torch.library.custom_op("torchtpu::int8_matmul", mutates_args=(), device_types="cpu")
def int8_matmul(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x f32[M, K] times int8 weights w [K, N] (a column per output channel) with
    per-channel scales f32[N]: out[m, n] = scale[n] * sum_k x[m, k] * w[k, n]. The ``tpu``
    kernel is ``torchtpu_int8_matmul``, which reads each weight byte once (for few rows)."""
    if x.dim() != 2 or w.dim() != 2 or scale.dim() != 1 or w.dtype != torch.int8 \
            or w.shape[0] != x.shape[1] or scale.shape[0] != w.shape[1]:
        raise ValueError(f"torchtpu::int8_matmul: expected x [M, K], w int8 [K, N] and scale "
                         f"[N]; got {tuple(x.shape)}, {w.dtype} {tuple(w.shape)}, "
                         f"{tuple(scale.shape)}")
    return (x @ w.to(x.dtype)) * scale


@int8_matmul.register_fake
def _(x, w, scale):
    return x.new_empty([x.shape[0], w.shape[1]])
