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
                    pages: torch.Tensor, positions: torch.Tensor, page_size: int, scale: float,
                    window: int) -> torch.Tensor:
    """Attention of queries to their sequences' context in a paged KV pool.

    q [S, Q, H, D]; k_cache, v_cache [N, KV, D] (N slots, H a multiple of KV); pages [S, P]
    (int64: context position j of sequence s is slot pages[s, j // page_size] * page_size
    + j % page_size); positions [S, Q] (int64: a query sees keys j <= its position, and
    j > position - window when window > 0, j < P * page_size). Returns [S, Q, H, D]; a query
    that sees no key gets zeros. The ``tpu`` kernel is ``torchtpu_paged_attention``.
    """
    s, q_len, heads, dim = q.shape
    kv_heads = k_cache.shape[1]
    ctx = pages.shape[1] * page_size
    slots = (pages.unsqueeze(-1) * page_size + torch.arange(page_size)).reshape(s, ctx)
    keys = k_cache[slots].repeat_interleave(heads // kv_heads, dim=2)    # [S, C, H, D]
    values = v_cache[slots].repeat_interleave(heads // kv_heads, dim=2)
    scores = torch.einsum("sqhd,schd->shqc", q, keys) * scale
    key_pos = torch.arange(ctx)
    query_pos = positions.view(s, 1, q_len, 1)
    visible = key_pos <= query_pos
    if window > 0:
        visible = visible & (key_pos > query_pos - window)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # no visible key: zeros
    return torch.einsum("shqc,schd->sqhd", probs, values)


@paged_attention.register_fake
def _(q, k_cache, v_cache, pages, positions, page_size, scale, window):
    return torch.empty_like(q)
