"""The JAX and Pallas kernels the kernel tests register as ops, each with its PyTorch
reference. Imported once per process (op names are process-wide)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torchtpu

# -- RMSNorm + rotary embedding (plain JAX) ---------------------------------------------------

def rms_rope(x, w, cos, sin, eps: float = 1e-6):
    """x [B, S, H, D] normalized over D (weight w [D]), then rotated: the halves
    (x1, x2) become (x1 cos - x2 sin, x2 cos + x1 sin), cos and sin [S, D/2]."""
    x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def rms_rope_torch(x, w, cos, sin, eps: float = 1e-6):
    x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


# -- blocked softmax (Pallas; a JAX custom_vjp gives its gradient) ---------------------------

def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def _softmax_call(x, block_rows):
    rows, cols = x.shape
    block = pl.BlockSpec((block_rows, cols), lambda i: (i, 0))
    return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(rows // block_rows,), in_specs=[block], out_specs=block)(x)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def blocked_softmax(x, block_rows: int = 8):
    """Row softmax of x [R, C], block_rows rows per grid step (R a multiple of it)."""
    return _softmax_call(x, block_rows)


def _softmax_fwd(x, block_rows):
    y = _softmax_call(x, block_rows)
    return y, y


def _softmax_bwd(block_rows, y, g):
    return (y * (g - jnp.sum(g * y, axis=-1, keepdims=True)),)


blocked_softmax.defvjp(_softmax_fwd, _softmax_bwd)


# -- a donated in-place update ----------------------------------------------------------------

def write_rows(cache, rows, start):
    """cache [N, D] with rows [n, D] written at row start[0] (start: int32 [1])."""
    return jax.lax.dynamic_update_slice(cache, rows, (start[0], jnp.int32(0)))


# -- several outputs, one of them integer, in a nested structure -----------------------------

def row_stats(x):
    """(max, argmax as int32, {"mean", "var"}) over the last dim."""
    mean = jnp.mean(x, axis=-1)
    return (jnp.max(x, axis=-1), jnp.argmax(x, axis=-1).astype(jnp.int32),
            {"mean": mean, "var": jnp.mean((x - mean[..., None]) ** 2, axis=-1)})


def row_stats_torch(x):
    mean = x.mean(-1)
    return (x.max(-1).values, x.argmax(-1).to(torch.int32),
            {"mean": mean, "var": ((x - mean[..., None]) ** 2).mean(-1)})


RMS_ROPE = torchtpu.jax_op("jaxtest::rms_rope", rms_rope, static_argnames=("eps",))
SOFTMAX = torchtpu.jax_op("jaxtest::blocked_softmax", blocked_softmax,
                          static_argnames=("block_rows",))
WRITE_ROWS = torchtpu.jax_op("jaxtest::write_rows", write_rows, donate_argnums=(0,))
ROW_STATS = torchtpu.jax_op("jaxtest::row_stats", row_stats)


def rope_tables(seq: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = 1.0 / (10000 ** (torch.arange(0, dim // 2, dtype=torch.float32) / (dim // 2)))
    angles = torch.arange(seq, dtype=torch.float32)[:, None] * freqs[None, :]
    return angles.cos(), angles.sin()
