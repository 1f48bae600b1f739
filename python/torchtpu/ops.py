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


INT8_BLOCK = 64  # output channels per block of packed int8 weights (csrc/kernels/int8_matmul.h)


def pack_int8(w: torch.Tensor) -> torch.Tensor:
    """int8 weights [K, N] (a column per output channel) in the layout ``torchtpu::int8_matmul``
    takes: [ceil(N / 64), K, 64], block b holding channels [64 b, 64 b + 64) as K rows of 64
    bytes, channels past N zero. The kernel then reads each block front to back (sequential
    lines), where the [K, N] layout has it read one line every N bytes. Done once, when a
    model is quantized."""
    if w.dim() != 2 or w.dtype != torch.int8:
        raise ValueError(f"torchtpu.ops.pack_int8: expected int8 weights [K, N]; got {w.dtype} "
                         f"{tuple(w.shape)}")
    k, n = w.shape
    blocks = -(-n // INT8_BLOCK)
    padded = torch.nn.functional.pad(w, (0, blocks * INT8_BLOCK - n))
    return padded.view(k, blocks, INT8_BLOCK).permute(1, 0, 2).contiguous()


def unpack_int8(w: torch.Tensor, n: int) -> torch.Tensor:
    """The [K, N] weights that `pack_int8` packed (traceable: the in-program path of platforms
    without the kernel unpacks with it)."""
    blocks, k, block = w.shape
    return w.permute(1, 0, 2).reshape(k, blocks * block)[:, :n]


def int8_columns(w: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Columns `cols` (int64 [T]) of packed weights as rows [T, K] (an int8 embedding table
    stored as a head: a token's embedding is its column), gathered without unpacking."""
    _, k, block = w.shape
    offsets = torch.arange(k, device=cols.device, dtype=cols.dtype) * block
    index = ((cols // block) * (k * block) + cols % block).unsqueeze(1) + offsets
    return w.reshape(-1).index_select(0, index.reshape(-1)).view(cols.shape[0], k)


@torch.library.custom_op("torchtpu::int8_matmul", mutates_args=(), device_types="cpu")
def int8_matmul(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x f32[M, K] times int8 weights packed by `pack_int8` (w [ceil(N/64), K, 64], from
    [K, N], a column per output channel) with per-channel scales f32[N]:
    out[m, n] = scale[n] * sum_k x[m, k] * unpack_int8(w, N)[k, n]. The ``tpu`` kernel is
    ``torchtpu_int8_matmul``, which reads each weight byte once."""
    if x.dim() != 2 or w.dim() != 3 or scale.dim() != 1 or w.dtype != torch.int8 \
            or w.shape[2] != INT8_BLOCK or w.shape[1] != x.shape[1] \
            or w.shape[0] != -(-scale.shape[0] // INT8_BLOCK):
        raise ValueError(f"torchtpu::int8_matmul: expected x [M, K], w int8 [ceil(N/64), K, 64] "
                         f"(packed by torchtpu.ops.pack_int8) and scale [N]; got "
                         f"{tuple(x.shape)}, {w.dtype} {tuple(w.shape)}, {tuple(scale.shape)}")
    return (x @ unpack_int8(w, scale.shape[0]).to(x.dtype)) * scale


@int8_matmul.register_fake
def _(x, w, scale):
    return x.new_empty([x.shape[0], scale.shape[0]])
