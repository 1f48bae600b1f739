"""The default backward of a jax_op: ``jax.vjp`` of its function, itself a jax_op.

For ``mylib::f`` this defines ``mylib::f_jax_vjp(Tensor[] args, <f's static arguments>)
-> Tensor[]``, whose arrays are f's arrays followed by the cotangents of f's inexact
(floating or complex) outputs, and whose results are the gradients of f's inexact
inputs. It is exported per signature like any jax_op, so in a compiled training step the
backward graph holds its module too. JAX computes the vjp, so a ``jax.custom_vjp`` rule on
``f`` is honoured. Integer inputs get no gradient. The vjp op itself has no backward
(double backward raises).

Complex values: PyTorch's gradient is the conjugate of JAX's cotangent convention (for
``f(z) = a*z`` PyTorch gives ``g * conj(a)``, JAX's vjp ``g * a``), so the backward is
``conj(vjp(conj(g)))``, the identity change for real values.
"""

from __future__ import annotations

from typing import Any

import torch

from torchtpu.kernels.jax_op import JaxOp, Param


def _inexact(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def register_vjp(op: JaxOp) -> JaxOp:
    """Defines ``<op>_jax_vjp`` and registers it as `op`'s autograd formula."""
    import jax
    import jax.numpy as jnp

    tensors = [p for p in op.params if p.kind == "Tensor"]
    statics = [p for p in op.params if not p.is_tensor]
    n = len(tensors)
    fn = op.fn

    def vjp(arrays: list[Any], /, **static: Any) -> Any:  # a static may be named anything
        primals, cotangents = arrays[:n], arrays[n:]
        diff = [i for i, a in enumerate(primals) if jnp.issubdtype(a.dtype, jnp.inexact)]

        def inexact_outputs(*dp: Any) -> list[Any]:
            full = list(primals)
            for i, v in zip(diff, dp):
                full[i] = v
            pos = [full[tensors.index(p)] if p.kind == "Tensor" else static[p.name]
                   for p in op.params if not p.keyword_only]
            kw = {p.name: static[p.name] for p in op.params if p.keyword_only}
            leaves = jax.tree_util.tree_leaves(fn(*pos, **kw))
            return [o for o in leaves if jnp.issubdtype(o.dtype, jnp.inexact)]

        _, pullback = jax.vjp(inexact_outputs, *[primals[i] for i in diff])
        return [jnp.conj(g) for g in pullback([jnp.conj(c) for c in cotangents])]

    # The arrays' schema name, unlike any of f's static arguments' names.
    arrays = "args"
    while any(p.name == arrays for p in statics):
        arrays = "_" + arrays
    params = [Param(arrays, "Tensor[]")] + [
        Param(p.name, p.kind, p.default, keyword_only=True) for p in statics]
    vjp_op = JaxOp(f"{op.qualname}_jax_vjp", vjp, params)

    positional = [p for p in op.params if not p.keyword_only]

    def setup_context(ctx: Any, inputs: tuple, output: list[torch.Tensor],
                      keyword_only_inputs: dict[str, Any] | None = None) -> None:
        # torch.library passes keyword-only arguments apart (only for an op that has them).
        values = list(inputs)
        ctx.static = {p.name: v for p, v in zip(positional, values) if not p.is_tensor}
        ctx.static.update({k: v for k, v in (keyword_only_inputs or {}).items()
                           if any(p.name == k and not p.is_tensor for p in op.params)})
        # A donated argument takes the op's output in place after this (jax_op's call):
        # the backward reads its value from before the call, a copy.
        donated = {op.params[i].name for i in op.donated}
        ctx.save_for_backward(*[v.clone() if p.name in donated else v
                                for p, v in zip(positional, values) if p.kind == "Tensor"])
        ctx.outputs = [(o.shape, o.dtype, o.device) for o in output]

    def backward(ctx: Any, grads: list[torch.Tensor | None]) -> tuple:
        primals = list(ctx.saved_tensors)
        cotangents = [g if g is not None else torch.zeros(s, dtype=d, device=dev)
                      for g, (s, d, dev) in zip(grads, ctx.outputs) if _inexact(d)]
        results = iter(vjp_op.overload(primals + cotangents, **ctx.static))
        grad_of = {i: next(results) for i, t in enumerate(primals) if _inexact(t.dtype)}
        out, k = [], 0
        for p in op.params:
            if p.keyword_only:
                continue
            if p.kind == "Tensor":
                out.append(grad_of.get(k))
                k += 1
            else:
                out.append(None)
        # One gradient per argument the call passed: the dispatcher drops trailing
        # arguments equal to their defaults, and needs_input_grad lists what was passed.
        return tuple(out[:len(ctx.needs_input_grad)])

    op.custom_op.register_autograd(backward, setup_context=setup_context)
    return vjp_op
