"""Gradients of JAX ops: jax.vjp of the function (exported as its own op), a JAX
custom_vjp rule (the Pallas softmax), and a PyTorch backward given with
register_autograd; eager and compiled, against PyTorch autograd on the CPU."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
import torch
from _jax_kernels import (
    RMS_ROPE,
    ROW_STATS,
    SOFTMAX,
    rms_rope_torch,
    rope_tables,
    row_stats_torch,
)

import torchtpu

TOL = {"rtol": 1e-4, "atol": 1e-5}


def _grads(fn, inputs, device):
    leaves = [t.detach().to(device).requires_grad_(t.requires_grad) for t in inputs]
    loss = fn(*leaves)
    loss.backward()
    return loss.detach().cpu(), [t.grad.cpu() if t.grad is not None else None for t in leaves]


def _check(fn_tpu, fn_cpu, inputs, compiled: bool) -> None:
    torch._dynamo.reset()
    run = torch.compile(fn_tpu, backend="tpu") if compiled else fn_tpu
    for _ in range(2 if compiled else 1):
        want_loss, want = _grads(fn_cpu, inputs, "cpu")
        got_loss, got = _grads(run, inputs, "tpu")
        torch.testing.assert_close(got_loss, want_loss, **TOL)
        for g, w in zip(got, want):
            if w is None:
                assert g is None
            else:
                torch.testing.assert_close(g, w, **TOL)


MODES = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])


@MODES
def test_rms_rope_gradients_through_jax_vjp(compiled: bool) -> None:
    cos, sin = rope_tables(4, 16)
    weights = torch.randn(2, 4, 3, 16)

    def loss(rope, device):
        c, s, wt = cos.to(device), sin.to(device), weights.to(device)
        return lambda x, w: (rope(x, w, c, s) * wt).sum()

    x = torch.randn(2, 4, 3, 16, requires_grad=True)
    w = (torch.rand(16) + 0.5).requires_grad_()
    _check(loss(RMS_ROPE, "tpu"), loss(rms_rope_torch, "cpu"), [x, w], compiled)


@MODES
def test_multi_output_gradients_skip_the_integer_output(compiled: bool) -> None:
    def loss(stats):
        def f(x):
            top, index, moments = stats(x)
            return (top * 2 + moments["mean"] - moments["var"]).sum() + index.sum() * 0
        return f

    x = torch.randn(5, 7, requires_grad=True)
    _check(loss(ROW_STATS), loss(row_stats_torch), [x], compiled)


@MODES
def test_pallas_softmax_gradient_from_its_custom_vjp(compiled: bool) -> None:
    weights = torch.randn(16, 8)

    def loss(softmax, device):
        wt = weights.to(device)
        return lambda x: (softmax(x) * wt).sum()

    x = torch.randn(16, 8, requires_grad=True)
    _check(loss(lambda t: SOFTMAX(t, block_rows=4), "tpu"),
           loss(lambda t: torch.softmax(t, -1), "cpu"), [x], compiled)


def _scaled_square(x, scale: float = 1.0):
    return jnp.square(x) * scale


SQUARE = torchtpu.jax_op("jaxtest::scaled_square", _scaled_square, static_argnames=("scale",))
_backward_calls = []


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


def _backward(ctx, grads):
    _backward_calls.append(1)
    (x,) = ctx.saved_tensors
    return grads[0] * 2 * ctx.scale * x, None


SQUARE.register_autograd(_backward, setup_context=_setup)


@MODES
def test_a_pytorch_backward_replaces_jax_vjp(compiled: bool) -> None:
    _backward_calls.clear()
    x = torch.randn(6, requires_grad=True)
    _check(lambda t: SQUARE(t, scale=3.0).sum(), lambda t: (t * t * 3.0).sum(), [x], compiled)
    assert _backward_calls  # the registered backward ran (while tracing, when compiled)
