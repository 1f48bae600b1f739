"""JAX and Pallas kernels as PyTorch ops on the tpu device (docs/kernels.md walks through it).

Two kernels: RMSNorm + rotary embedding written in jax.numpy, and a row softmax written
in Pallas (blocks of rows per grid step; its gradient is a jax.custom_vjp rule). Both
become torch ops with ``torchtpu.jax_op``, run inside a PyTorch module in eager mode and
under ``torch.compile(backend="tpu")``, and are checked against the same module written
in PyTorch, forward and gradients.

    .venv/bin/python examples/jax_kernel.py
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch
from jax.experimental import pallas as pl

import torchtpu

# 1. The kernels, in JAX. -------------------------------------------------------------------

def rms_rope(x, w, cos, sin, eps: float = 1e-6):
    """x [B, S, H, D]: RMSNorm over D (weight w [D]), then the rotary embedding of
    angles whose cosines and sines are cos, sin [S, D/2]."""
    x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def _softmax_kernel(x_ref, o_ref):
    x = x_ref[...]
    e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
    o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)


def _softmax_call(x, block_rows):
    block = pl.BlockSpec((block_rows, x.shape[1]), lambda i: (i, 0))
    return pl.pallas_call(_softmax_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                          grid=(x.shape[0] // block_rows,), in_specs=[block],
                          out_specs=block)(x)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def softmax(x, block_rows: int = 8):
    """Row softmax of x [R, C], `block_rows` rows per grid step."""
    return _softmax_call(x, block_rows)


def _softmax_fwd(x, block_rows):
    y = _softmax_call(x, block_rows)
    return y, y


def _softmax_bwd(block_rows, y, g):
    return (y * (g - jnp.sum(g * y, axis=-1, keepdims=True)),)


softmax.defvjp(_softmax_fwd, _softmax_bwd)


# 2. The ops. -------------------------------------------------------------------------------

RMS_ROPE = torchtpu.jax_op("example::rms_rope", rms_rope, static_argnames=("eps",))
SOFTMAX = torchtpu.jax_op("example::softmax", softmax, static_argnames=("block_rows",))


# 3. A PyTorch module that uses them, and its pure-PyTorch twin. ----------------------------

def rms_rope_torch(x, w, cos, sin, eps: float = 1e-6):
    x = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


class Mixer(torch.nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, use_jax: bool = True) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.Parameter(torch.linspace(0.5, 1.5, dim // heads))
        self.out = torch.nn.Linear(dim, dim)
        self.use_jax = use_jax

    def forward(self, x, cos, sin):
        b, s, d = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim)
        if self.use_jax:
            q = RMS_ROPE(q, self.norm, cos, sin)
            p = SOFTMAX(q.reshape(-1, self.head_dim), block_rows=16)
        else:
            q = rms_rope_torch(q, self.norm, cos, sin)
            p = torch.softmax(q.reshape(-1, self.head_dim), dim=-1)
        return self.out(p.view(b, s, d))


def main() -> None:
    torch.manual_seed(0)
    reference = Mixer(use_jax=False)
    model = Mixer(use_jax=True)
    model.load_state_dict(reference.state_dict())
    model.to("tpu")
    x = torch.randn(2, 8, 64)
    angles = torch.arange(8.0)[:, None] / 10000 ** (torch.arange(8.0) / 8)
    cos, sin = angles.cos(), angles.sin()
    inputs = [t.to("tpu") for t in (x, cos, sin)]

    want = reference(x, cos, sin)
    want.square().sum().backward()
    compiled = torch.compile(model, backend="tpu")
    for name, run in (("eager", model), ("compiled", compiled)):
        model.zero_grad()
        got = run(*inputs)
        got.square().sum().backward()
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
        for (n, p), (_, r) in zip(model.named_parameters(), reference.named_parameters()):
            torch.testing.assert_close(p.grad.cpu(), r.grad, rtol=1e-4, atol=1e-5, msg=n)
        print(f"{name}: output and gradients match PyTorch")
    print(f"graph breaks: {torchtpu.debug.metrics()['num_graph_breaks']}")


if __name__ == "__main__":
    main()
