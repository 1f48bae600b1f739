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


_COMPLEX_SCALE = torchtpu.jax_op("tpu_grad_test::complex_scale", lambda z: z * (2 + 3j))
_COMPLEX_NORM = torchtpu.jax_op("tpu_grad_test::complex_norm",
                                lambda z: jnp.sum(jnp.abs(z) ** 2))


@pytest.mark.parametrize("compiled", [False, True])
def test_complex_gradients_follow_pytorchs_convention(compiled: bool) -> None:
    # PyTorch's gradient of a complex value is the conjugate of JAX's cotangent: for
    # f(z) = a*z it is g*conj(a), where JAX's vjp gives g*a.
    z = torch.tensor([1 + 1j, 2 - 1j], dtype=torch.complex64)
    g = torch.tensor([1, 1j], dtype=torch.complex64)
    torch._dynamo.reset()
    scale = torch.compile(_COMPLEX_SCALE, backend="tpu") if compiled else _COMPLEX_SCALE
    for op, torch_fn, upstream in ((scale, lambda t: t * (2 + 3j), g),
                                   (_COMPLEX_NORM, lambda t: t.abs().pow(2).sum(), None)):
        z_cpu, z_tpu = z.clone().requires_grad_(), z.to("tpu").requires_grad_()
        torch_fn(z_cpu).backward(upstream)
        op(z_tpu).backward(None if upstream is None else upstream.to("tpu"))
        torch.testing.assert_close(z_tpu.grad.cpu(), z_cpu.grad, **TOL)


def _scaled(x, *, k: float = 2.0):
    return x * k


def _shifted(x, args: int = 2):  # a static named like the vjp op's own arrays
    return x + args * x


_SCALED = torchtpu.jax_op("tpu_grad_test::scaled", _scaled, static_argnames="k")
_SHIFTED = torchtpu.jax_op("tpu_grad_test::shifted", _shifted, static_argnames="args")


def test_static_arguments_keyword_only_or_named_args_have_gradients() -> None:
    x = torch.randn(3)
    for op, torch_fn in ((lambda t: _SCALED(t, k=3.0), lambda t: t * 3.0),
                         (lambda t: _SHIFTED(t, 3), lambda t: t + 3 * t)):
        x_cpu, x_tpu = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
        (torch_fn(x_cpu) ** 2).sum().backward()
        (op(x_tpu) ** 2).sum().backward()
        torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad, **TOL)


_SCALE_BY = torchtpu.jax_op("tpu_grad_test::scale_by", lambda x, k=2: x * k,
                            static_argnames=("k",))
_SCALE_BY.register_autograd(lambda ctx, g: (g[0] * ctx.k, None),
                            setup_context=lambda ctx, inputs, output: setattr(
                                ctx, "k", inputs[1] if len(inputs) > 1 else 2))


def test_a_pytorch_backward_with_a_static_at_its_default() -> None:
    # The docs' one gradient per positional argument: the dispatcher drops a trailing
    # argument equal to its default, and torch.library refused the extra None.
    for k in (3, 2):
        x = torch.ones(3, device="tpu", requires_grad=True)
        _SCALE_BY(x, k=k).sum().backward()
        assert x.grad.cpu().tolist() == [float(k)] * 3
