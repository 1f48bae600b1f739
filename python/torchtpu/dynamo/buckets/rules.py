"""What each op does to a padded dimension, and what it needs there: the one rule table.

A graph padded to buckets runs every op on static tensors whose padding holds whatever the
computation left there. `RULES` maps an aten overload to a `Rule`:

- ``exact``: every output element depends only on the inputs at its own position (the
  pointwise ops, copies, ``where``): padding stays in padding. Operands meeting at a dim
  must agree on its layout.
- ``view``: moves elements without reading them (view, permute, expand, select, slice,
  ...): the layouts move with them; a view that would split a dim where its true
  elements do not line up keeps the graph exact-size.
- ``factory``: makes new values of a size (arange, full, ``*_like``): true elements first.
- ``masked``: reads across a dim (a reduction, a product's contraction, a softmax, a
  cumulative sum over merged rows): the padding of that dim is set to the op's identity
  first (``where(valid, x, fill)``, `Rewriter.mask`), so it adds nothing.
- ``indexed``: reads or writes at positions held in an index tensor: padded index
  entries are set to a safe position (0) and what they would write is masked, so padding
  neither fails a bounds check nor writes a true element; true entries outside a padded
  dim's true size are moved past every bucket, so the op's bounds check (which compares
  with the bucket's size) fails as at exact sizes.
- ``rewritten``: depends on where a dim ends (cat and pad after a padded dim, a slice
  from its end, mean's divisor): replaced by ops that have rules, with the true sizes as
  runtime values.

An op without a rule keeps its graph at exact sizes, with the op named as the reason.
Each rule kind has FX-in/FX-out tests and padded-against-CPU cases
(tests/python/compile/buckets/).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx

from torchtpu.dynamo.buckets import layout as L
from torchtpu.dynamo.buckets.rewriter import Hazard, Rewriter

aten = torch.ops.aten


@dataclass(frozen=True)
class Rule:
    kind: str  # exact, view, factory, masked, indexed, rewritten
    apply: Callable[[Rewriter, torch.fx.Node], Any]


class RuleTable(dict):
    """Rules by aten overload. Ops PyTorch tags pointwise need no entry of their own: each
    output element is computed from the inputs at its position, the ``exact`` rule."""

    def get(self, op: Any, default: Any = None) -> Any:
        found = super().get(op)
        if found is None and isinstance(op, torch._ops.OpOverload) and (
                torch.Tag.pointwise in op.tags):
            return EXACT
        return found if found is not None else default


RULES = RuleTable()


def _register(kind: str, *ops: Any) -> Callable:
    def deco(fn: Callable) -> Callable:
        for op in ops:
            RULES[op] = Rule(kind, fn)
        return fn
    return deco


def _dim(d: int, rank: int) -> int:
    return d % rank if rank else 0


def _dims_arg(node: torch.fx.Node, index: int, rank: int) -> list[int]:
    """A dim-list argument (None or [] meaning every dim), normalized."""
    dims = node.args[index] if len(node.args) > index else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({_dim(d, rank) for d in dims})


def _keepdim(node: torch.fx.Node, index: int) -> bool:
    if len(node.args) > index:
        return bool(node.args[index])
    return bool(node.kwargs.get("keepdim", False))


def _tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    found = []

    def visit(a: Any) -> None:
        if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)

    for a in list(node.args) + list(node.kwargs.values()):
        visit(a)
    return found


def broadcast_layouts(rw: Rewriter, node: torch.fx.Node, operands: list[torch.fx.Node],
                      sizes: list[sympy.Expr]) -> tuple:
    """The layouts of an output of `sizes` whose dims come from `operands` broadcast
    (right-aligned; size-1 dims broadcast). Operands meeting at a padded dim must agree."""
    out: list[L.Layout] = []
    rank = len(sizes)
    for d, size in enumerate(sizes):
        found: L.Layout | None = None
        for a in operands:
            lays, a_sizes = rw.of(a), rw.sizes(a)
            k = len(a_sizes) - rank + d
            if k < 0 or a_sizes[k] == 1:
                continue
            if not L.equal(a_sizes[k], size):
                raise Hazard(f"{node.target} ({node.name}): operand {a.name} dim {k} has size "
                             f"{a_sizes[k]} against {size}")
            if found is None:
                found = lays[k]
            elif found != lays[k]:
                raise Hazard(f"{node.target} ({node.name}): operands lay out dim {d} "
                             f"differently ({found} against {lays[k]})")
        if found is None:
            found = L.prefix(size)  # from size-1 operands only: all positions equal
        out.append(found)
    return tuple(out)


# --- exact: pointwise ops and copies ------------------------------------------------------
def _exact(rw: Rewriter, node: torch.fx.Node) -> None:
    val = node.meta["val"]
    vals = list(val) if isinstance(val, (list, tuple)) else [val]
    operands = _tensor_args(node)
    outs = []
    for v in vals:
        if not isinstance(v, torch.Tensor):
            outs.append(None)
            continue
        outs.append(broadcast_layouts(rw, node, operands, [L.expr(s) for s in v.shape]))
    rw.set(node, outs if isinstance(val, (list, tuple)) else outs[0])


EXACT = Rule("exact", _exact)  # also every overload tagged pointwise (RuleTable.get)
_register("exact", aten.where.self, aten.clone.default,
          aten._to_copy.default, aten.alias.default, aten.detach.default,
          aten.lift_fresh_copy.default, aten.native_dropout.default,
          aten.native_dropout_backward.default, aten.copy.default,
          aten.masked_fill.Scalar, aten.masked_fill.Tensor, aten.fill.Scalar,
          aten.fill.Tensor)(_exact)


@_register("masked", aten.div.Tensor_mode, aten.remainder.Tensor, aten.remainder.Scalar_Tensor,
           aten.fmod.Tensor, aten.floor_divide.default)
def _integer_division(rw: Rewriter, node: torch.fx.Node) -> None:
    """Pointwise, but integer division checks every divisor element for zero (PyTorch
    raises ZeroDivisionError): the divisor's padding reads as 1, so that only true elements
    are checked."""
    _exact(rw, node)
    d = node.args[1]
    if isinstance(d, torch.fx.Node) and isinstance(d.meta.get("val"), torch.Tensor) and not (
            d.meta["val"].is_floating_point() or d.meta["val"].is_complex()):
        node.update_arg(1, rw.mask(d, list(range(d.meta["val"].dim())), "one"))


# --- factories ----------------------------------------------------------------------------
@_register("factory", aten.arange.start_step, aten.arange.start, aten.arange.default,
           aten.full.default, aten.zeros.default, aten.ones.default, aten.empty.memory_format,
           aten.empty_strided.default, aten.empty_permuted.default, aten.scalar_tensor.default,
           aten.rand.default, aten.randn.default, aten.new_zeros.default,
           aten.new_ones.default, aten.new_full.default, aten.new_empty.default,
           aten.new_empty_strided.default)
def _factory(rw: Rewriter, node: torch.fx.Node) -> None:
    # (arange's bounds are values, runtime scalars when they are sizes: only its length,
    # the output's static size, comes from the bucket.)
    rw.set(node, tuple(L.prefix(s) for s in node.meta["val"].shape))


@_register("factory", aten.full_like.default, aten.zeros_like.default, aten.ones_like.default,
           aten.empty_like.default, aten.rand_like.default, aten.randn_like.default)
def _like(rw: Rewriter, node: torch.fx.Node) -> None:
    rw.set(node, rw.of(node.args[0]))


# --- views --------------------------------------------------------------------------------
@_register("view", aten.view.default, aten._unsafe_view.default, aten.reshape.default,
           aten.view_copy.default)
def _view(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    out = L.reshape(rw.of(src), rw.sizes(src), rw.sizes(node))
    if out is None:
        raise Hazard(f"{node.target} ({node.name}) splits a padded dim where its true "
                     f"elements do not line up ({rw.of(src)} as {rw.sizes(node)})")
    rw.set(node, tuple(out))


@_register("view", aten.permute.default)
def _permute(rw: Rewriter, node: torch.fx.Node) -> None:
    lays = rw.of(node.args[0])
    rw.set(node, tuple(lays[_dim(d, len(lays))] for d in node.args[1]))


@_register("view", aten.transpose.int)
def _transpose(rw: Rewriter, node: torch.fx.Node) -> None:
    lays = list(rw.of(node.args[0]))
    a, b = (_dim(d, len(lays)) for d in node.args[1:3])
    lays[a], lays[b] = lays[b], lays[a]
    rw.set(node, tuple(lays))


@_register("view", aten.t.default)
def _t(rw: Rewriter, node: torch.fx.Node) -> None:
    rw.set(node, tuple(reversed(rw.of(node.args[0]))))


@_register("view", aten.expand.default)
def _expand(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    lays, sizes, out = rw.of(src), rw.sizes(src), rw.sizes(node)
    shift = len(out) - len(sizes)
    new: list[L.Layout] = []
    for d in range(len(out)):
        k = d - shift
        if k >= 0 and L.equal(sizes[k], out[d]):
            new.append(lays[k])
        elif k < 0 or sizes[k] == 1:  # a new or size-1 dim: every position holds the same
            new.append(L.prefix(out[d]))
        else:  # 2 * (s // 2) expanded to s: equal at run time, laid out differently
            raise Hazard(f"{node.target} ({node.name}) expands dim {k} of size {sizes[k]} "
                         f"to {out[d]}")
    rw.set(node, tuple(new))


@_register("view", aten.unsqueeze.default)
def _unsqueeze(rw: Rewriter, node: torch.fx.Node) -> None:
    lays = list(rw.of(node.args[0]))
    lays.insert(_dim(node.args[1], len(lays) + 1), L.STATIC)
    rw.set(node, tuple(lays))


@_register("view", aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default)
def _squeeze(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    lays, sizes = rw.of(src), rw.sizes(src)
    if node.target is aten.squeeze.default:
        dims = range(len(sizes))
    else:
        dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
    gone = {_dim(d, len(sizes)) for d in dims if sizes[_dim(d, len(sizes))] == 1}
    rw.set(node, tuple(lay for d, lay in enumerate(lays) if d not in gone))


def _true_position(rw: Rewriter, pos: Any, size: sympy.Expr, device: Any) -> torch.fx.Node:
    """A position along a dim of true size `size`, counted from the front, as a 0-d int64
    tensor of the graph: PyTorch's negative positions count from the true end. A symbolic
    position whose sign the symbols' assumptions do not settle (`x[i]`, `x[i:]` with an int
    `i` that may be negative) is wrapped at run time."""
    e = L.expr(pos)
    if e.is_negative:
        e = sympy.expand(size + e)
    at = rw.call(aten.scalar_tensor.default, (rw.size(e),), {"dtype": torch.int64,
                                                              "device": device})
    if e.is_nonnegative:
        return at
    from_end = rw.call(aten.add.Tensor, (at, rw.size(size)))
    return rw.call(aten.where.self, (rw.call(aten.lt.Scalar, (at, 0)), from_end, at))


@_register("view", aten.select.int)
def _select(rw: Rewriter, node: torch.fx.Node) -> Any:
    src, dim, index = node.args[0], node.args[1], node.args[2]
    lays, sizes = rw.of(src), rw.sizes(src)
    dim = _dim(dim, len(lays))
    e = L.expr(index)
    if not lays[dim] and L.is_static(e):
        rw.set(node, tuple(lay for d, lay in enumerate(lays) if d != dim))
        return None
    if not lays[dim] or L.is_prefix(lays[dim]):
        if L.is_static(e) and int(e) >= 0:
            rw.set(node, tuple(lay for d, lay in enumerate(lays) if d != dim))
            return None
        # From the true end, or at a size: read at the runtime position.
        at = rw.call(aten.unsqueeze.default,
                     (_true_position(rw, index, sizes[dim], src.meta["val"].device), 0))
        picked = rw.call(aten.index_select.default, (src, dim, at))
        return rw.call(aten.squeeze.dims, (picked, [dim]))
    raise Hazard(f"{node.target} ({node.name}) picks one position of merged padded rows")


def _step(node: torch.fx.Node, given: dict) -> int:
    """A slice's step, which the rules need as a number: one that varies with the sizes
    (an FX node: a SymInt argument) keeps the graph at exact sizes."""
    step = given.get("step") if given.get("step") is not None else 1
    if not isinstance(step, int):
        raise Hazard(f"{node.target} ({node.name}): its step varies with the sizes")
    return step


@_register("view", aten.slice.Tensor)
def _slice(rw: Rewriter, node: torch.fx.Node) -> Any:
    src = node.args[0]
    lays, sizes = rw.of(src), rw.sizes(src)
    given = dict(zip(("dim", "start", "end", "step"), node.args[1:]), **node.kwargs)
    dim = _dim(given.get("dim", 0), len(lays))
    start = L.expr(given.get("start") if given.get("start") is not None else 0)
    step = _step(node, given)
    out_len = rw.sizes(node)[dim]
    static_start = L.is_static(start) and int(start) >= 0
    if L.equal(out_len, sizes[dim]):
        rw.set(node, lays)
        return None
    if lays[dim] and not L.is_prefix(lays[dim]):
        raise Hazard(f"{node.target} ({node.name}) slices merged padded rows")
    if static_start and (lays[dim] or L.is_static(out_len)):
        # From a fixed position: the static slice holds the true elements first, and a
        # slice that reaches a padded dim's true end ends in its padding.
        new = list(lays)
        new[dim] = L.prefix(out_len)
        rw.set(node, tuple(new))
        return None
    # From a size or from the true end, or a static dim cut at a size (its bucket may
    # pass the dim's end): gather the true positions, counted at run time.
    device = src.meta["val"].device
    first = _true_position(rw, start, sizes[dim], device)
    positions = rw.call(aten.arange.start_step, (0, rw.size(out_len)),
                        {"dtype": torch.int64, "device": device})
    if step != 1:
        positions = rw.call(aten.mul.Tensor, (positions, step))
    positions = rw.call(aten.add.Tensor, (positions, first))
    positions = rw.call(aten.clamp.default, (positions, 0, rw.size(sympy.expand(sizes[dim] - 1))))
    return rw.call(aten.index_select.default, (src, dim, positions))


@_register("view", aten.split_with_sizes.default, aten.split.Tensor, aten.unbind.int)
def _split(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    lays = rw.of(src)
    dim = _dim(node.args[1] if node.target is aten.unbind.int and len(node.args) > 1 else
               node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0), len(lays))
    if lays[dim]:
        raise Hazard(f"{node.target} ({node.name}) splits a padded dim")
    keep = lays if node.target is not aten.unbind.int else tuple(
        lay for d, lay in enumerate(lays) if d != dim)
    rw.set(node, [keep for _ in node.meta["val"]])


# --- masked: reads across a dim -----------------------------------------------------------
def _reduction(fill: str, dims_at: int = 1, keep_at: int = 2, all_dims: bool = False
               ) -> Callable:
    def apply(rw: Rewriter, node: torch.fx.Node) -> None:
        src = node.args[0]
        lays = rw.of(src)
        dims = list(range(len(lays))) if all_dims else _dims_arg(node, dims_at, len(lays))
        keep = False if all_dims else _keepdim(node, keep_at)
        masked = rw.mask(src, dims, fill)
        if masked is not src:
            node.update_arg(0, masked)
        out = tuple(L.STATIC if d in dims else lay for d, lay in enumerate(lays)
                    if keep or d not in dims)
        val = node.meta["val"]
        rw.set(node, [out for _ in val] if isinstance(val, (list, tuple)) else out)
    return apply


_register("masked", aten.sum.dim_IntList)(_reduction("zero"))
_register("masked", aten.sum.default)(_reduction("zero", all_dims=True))
_register("masked", aten.amax.default)(_reduction("low"))
_register("masked", aten.amin.default)(_reduction("high"))
_register("masked", aten.any.dim, aten.any.dims)(_reduction("zero"))
_register("masked", aten.any.default)(_reduction("zero", all_dims=True))
_register("masked", aten.all.dim, aten.all.dims)(_reduction("one"))
_register("masked", aten.all.default)(_reduction("one", all_dims=True))
_register("masked", aten.prod.dim_int)(_reduction("one"))
_register("masked", aten.logsumexp.default)(_reduction("low"))
@_register("masked", aten.argmax.default, aten.argmin.default, aten.max.dim, aten.min.dim)
def _argext(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    lays = rw.of(src)
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    # Positions along a prefix are true positions; over every dim (flattened) or along
    # merged rows they are not.
    if any(lays) and (dim is None or (lays[_dim(dim, len(lays))]
                                      and not L.is_prefix(lays[_dim(dim, len(lays))]))):
        raise Hazard(f"{node.target} ({node.name}) returns positions in merged padded rows")
    fill = "low" if node.target in (aten.argmax.default, aten.max.dim) else "high"
    _reduction(fill)(rw, node)


@_register("rewritten", aten.mean.dim, aten.mean.default)
def _mean(rw: Rewriter, node: torch.fx.Node) -> Any:
    src = node.args[0]
    lays, sizes = rw.of(src), rw.sizes(src)
    dims = _dims_arg(node, 1, len(lays)) if node.target is aten.mean.dim else list(
        range(len(lays)))
    if not any(lays[d] for d in dims):
        rw.set(node, _reduced(lays, dims, node.target is aten.mean.dim and _keepdim(node, 2)))
        return None
    keep = node.target is aten.mean.dim and _keepdim(node, 2)
    dtype = node.kwargs.get("dtype") or node.meta["val"].dtype
    # Half-precision means sum and divide in float32 and round once, as PyTorch's do (a
    # float16 sum of 40 values of 2000 overflows; bfloat16 sums round at every step).
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    total = rw.call(aten.sum.dim_IntList, (src, dims, keep), {"dtype": wide})
    count = sympy.Integer(1)
    for d in dims:
        count = count * sizes[d]
    out = rw.call(aten.div.Tensor, (total, rw.size(sympy.expand(count))))
    return out if wide == dtype else rw.call(aten._to_copy.default, (out,), {"dtype": dtype})


def _reduced(lays: tuple, dims: list[int], keep: bool) -> tuple:
    return tuple(L.STATIC if d in dims else lay for d, lay in enumerate(lays)
                 if keep or d not in dims)


@_register("masked", aten.cumsum.default, aten.cumprod.default)
def _cumulative(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    lays = rw.of(src)
    dim = _dim(node.args[1], len(lays))
    if lays[dim] and not L.is_prefix(lays[dim]):
        fill = "zero" if node.target is aten.cumsum.default else "one"
        node.update_arg(0, rw.mask(src, [dim], fill))
    rw.set(node, lays)


@_register("masked", aten._softmax.default, aten._log_softmax.default)
def _softmax(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    lays = rw.of(src)
    dim = _dim(node.args[1], len(lays))
    node.update_arg(0, rw.mask(src, [dim], "low"))
    rw.set(node, lays)


@_register("masked", aten._softmax_backward_data.default,
           aten._log_softmax_backward_data.default)
def _softmax_backward(rw: Rewriter, node: torch.fx.Node) -> None:
    grad, out = node.args[0], node.args[1]
    dim = _dim(node.args[2], len(rw.of(grad)))
    node.update_arg(0, rw.mask(grad, [dim], "zero"))
    if node.target is aten._softmax_backward_data.default:
        node.update_arg(1, rw.mask(out, [dim], "zero"))
    rw.set(node, broadcast_layouts(rw, node, [grad, out], rw.sizes(node)))


def _contract(rw: Rewriter, node: torch.fx.Node, a_at: int, b_at: int) -> None:
    """Masks the contracted dim (a's last, b's second-to-last) of operands args[a_at] and
    args[b_at] with zeros; batch dims must agree."""
    a, b = node.args[a_at], node.args[b_at]
    la, lb = rw.of(a), rw.of(b)
    ka, kb = len(la) - 1, len(lb) - 2
    if la[ka] != lb[kb]:
        raise Hazard(f"{node.target} ({node.name}) contracts dims laid out differently "
                     f"({la[ka]} against {lb[kb]})")
    if la[ka]:
        node.update_arg(a_at, rw.mask(a, [ka], "zero"))
        node.update_arg(b_at, rw.mask(b, [kb], "zero"))
    for d in range(len(la) - 2):
        if la[d] != lb[d]:
            raise Hazard(f"{node.target} ({node.name}) batch dim {d} laid out differently")
    out = tuple(la[:-1]) + (lb[-1],)
    if node.target in (aten.addmm.default, aten.baddbmm.default):
        bias = node.args[0]
        out = broadcast_layouts(rw, node, [bias], rw.sizes(node)) if rw.padded_dims(bias) \
            else out
        if out != tuple(la[:-1]) + (lb[-1],) and rw.padded_dims(bias):
            raise Hazard(f"{node.target} ({node.name}): bias laid out unlike the product")
    rw.set(node, out)


@_register("masked", aten.mm.default, aten.bmm.default)
def _mm(rw: Rewriter, node: torch.fx.Node) -> None:
    _contract(rw, node, 0, 1)


@_register("masked", aten.addmm.default, aten.baddbmm.default)
def _addmm(rw: Rewriter, node: torch.fx.Node) -> None:
    _contract(rw, node, 1, 2)


@_register("exact", aten.native_layer_norm.default)
def _layer_norm(rw: Rewriter, node: torch.fx.Node) -> None:
    src = node.args[0]
    lays = rw.of(src)
    k = len(node.args[1])
    if any(lays[len(lays) - k:]):
        raise Hazard(f"{node.target} ({node.name}) normalizes over a padded dim")
    rows = tuple(lays[:len(lays) - k]) + (L.STATIC,) * k
    rw.set(node, [lays, rows, rows])


from torchtpu.dynamo.buckets import rules_index  # noqa: E402,F401  (registers its rules)
