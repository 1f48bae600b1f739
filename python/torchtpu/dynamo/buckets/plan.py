"""One graph's padding plan: `plan` rewrites a graph for padded execution and says how its
inputs arrive and its outputs leave.

Inputs are padded to their bucket shapes, true elements first in each dim; an input the
forward graph saved for the backward arrives in the forward's own bucket layout (possibly
merged rows), as the plan of the forward says (`BucketPlan.saved`, handed to the backward's
`plan` as `carried`). Outputs the caller sees leave compact: a static buffer whose prefix is
the true tensor in row-major order, which the runner views at the true shape (no copy).
Outputs only the backward reads (saved activations) leave in bucket layout, so the
backward takes them as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from torchtpu.dynamo.buckets import layout as L
from torchtpu.dynamo.buckets.rewriter import Hazard, Rewriter
from torchtpu.dynamo.buckets.rules import RULES

aten = torch.ops.aten


@dataclass(frozen=True)
class OutputForm:
    """How a padded graph output leaves: ``compact`` (its flat prefix is the true tensor of
    `shape`) or ``padded`` (in bucket layout, `shape` its true sizes)."""

    kind: str
    shape: tuple


@dataclass
class BucketPlan:
    """How one graph runs padded. Made once per graph, symbolically: every bucket
    assignment compiles the same rewritten graph."""

    # Per placeholder: its layouts (tensors), else None.
    inputs: list[Any] = field(default_factory=list)
    # Placeholders that arrive in bucket layout (activations the forward saved).
    carried: frozenset = frozenset()
    # Per graph output: how it leaves, or None when it is not a padded tensor.
    outputs: list[OutputForm | None] = field(default_factory=list)
    # Outputs the backward takes in bucket layout, by name, with their layouts.
    saved: dict[str, tuple] = field(default_factory=dict)


def plan(gm: torch.fx.GraphModule, carried: dict[str, tuple] | None = None,
         first_saved: int | None = None) -> BucketPlan:
    """Rewrites `gm` (in place) to run padded to buckets and returns its plan. Outputs from
    position `first_saved` on are saved for the backward and leave in bucket layout.
    Raises Hazard when padding could change a result; `gm` is then not usable."""
    _require_growing_sizes(gm)
    _require_no_size_floats(gm)
    rw = Rewriter(gm, RULES, carried)
    env = getattr(rw.fake_mode, "shape_env", None)
    before = dict(env.replacements) if env is not None else {}
    rw.run()
    fixed = {s: v for s, v in (env.replacements if env is not None else {}).items()
             if before.get(s) != v and v.is_number}
    if fixed:  # the graph's symbols were read before: it stays at exact sizes
        raise Hazard("padding it made Dynamo specialize " +
                     ", ".join(f"{s} = {v}" for s, v in sorted(fixed.items(), key=str)))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    result = BucketPlan(
        inputs=[rw.layouts.get(p) for p in placeholders],
        carried=frozenset(i for i, p in enumerate(placeholders) if p.name in (carried or {})))
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [
        output.args[0]]
    for k, r in enumerate(results):
        val = r.meta.get("val") if isinstance(r, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or not any(rw.of(r)):
            result.outputs.append(None)
            continue
        shape = tuple(rw.sizes(r))
        if first_saved is not None and k >= first_saved:
            result.saved[r.name] = rw.of(r)
            result.outputs.append(OutputForm("padded", shape))
            continue
        if r.op != "placeholder":
            rw._cursor = output
            results[k] = compact(rw, r)
        result.outputs.append(OutputForm("compact", shape))
    output.args = (tuple(results) if isinstance(output.args[0], (list, tuple)) else results[0],)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return result


def _require_growing_sizes(gm: torch.fx.GraphModule) -> None:
    """Raises Hazard when a tensor size of `gm` can shrink as a symbol grows (`4 - s` of
    `x[i:]` with an int `i`, `-s` of a negative one): padding the symbol up to its bucket
    would make that dim smaller than its true size, or negative."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for size in val.shape:
            e = L.expr(size)
            if not L.is_static(e) and not _grows_with_symbols(e):
                raise Hazard(f"{node.name} has size {e}, which shrinks as "
                             f"{', '.join(sorted(map(str, e.free_symbols)))} grows")


def _require_no_size_floats(gm: torch.fx.GraphModule) -> None:
    """Raises Hazard when an ATen op takes a float computed from sizes (an interpolation's
    in/out ratio): a padded program's runtime sizes are ints, so such a float is a constant
    of a program at exact sizes (graph_spec refuses it in a padded one). Size arithmetic
    through floats (floor(s * 1.5)) is not an op's argument and stays."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        for a in (*node.args, *node.kwargs.values()):
            if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.SymFloat):
                raise Hazard(f"{node.name} takes {a.name}, a float computed from sizes")


def _grows_with_symbols(e: sympy.Expr) -> bool:
    """Whether `e` never decreases when a symbol increases: every term holding a symbol,
    at every level, has a positive coefficient, and no symbol divides."""
    for sub in sympy.preorder_traversal(e):
        terms = sub.args if isinstance(sub, sympy.Add) else (sub,) if sub is e else ()
        if any(t.free_symbols and t.as_coeff_Mul()[0] < 0 for t in terms):
            return False
        if type(sub).__name__ == "FloorDiv" and sub.args[1].free_symbols:
            return False
        if isinstance(sub, sympy.Pow) and sub.base.free_symbols and not (
                sub.exp.is_Integer and int(sub.exp) > 0):
            return False
    return True


def compact(rw: Rewriter, value: torch.fx.Node) -> torch.fx.Node:
    """`value` flattened so that its true elements come first in row-major order.

    The padded value is viewed as its components (layout.py); a row is one index tuple up
    to the last dynamic component, and row r of the result is the r-th true tuple, read by
    one gather at indices computed from the true sizes. When only the outermost component
    is dynamic the padded buffer already is compact, and this is a view."""
    lays, sizes = rw.of(value), rw.sizes(value)
    comps: list[sympy.Expr] = []
    for lay, size in zip(lays, sizes):
        comps += L.components(lay, size)
    dynamic = [k for k, c in enumerate(comps) if not L.is_static(c)]
    numel = sympy.expand(sympy.Mul(*sizes))
    value = rw.contiguous(value)
    if dynamic == [0]:
        return rw.call(aten.view.default, (value, [rw.size(numel)]))
    last = dynamic[-1]
    run = int(sympy.Mul(*comps[last + 1:]))
    rows = comps[:last + 1]
    grid = rw.call(aten.view.default, (value, [rw.size(c) for c in rows] + [run]))
    count = sympy.expand(sympy.Mul(*rows))
    r = rw.call(aten.arange.start_step, (0, rw.size(count)),
                {"dtype": torch.int64, "device": value.meta["val"].device})
    coords: list[Any] = [None] * len(rows)
    stride: sympy.Expr = sympy.Integer(1)
    for k in range(last, -1, -1):
        q = r if stride == 1 else rw.call(aten.div.Tensor_mode,
                                          (r, rw.size(stride)), {"rounding_mode": "floor"})
        if k > 0:
            q = rw.call(aten.remainder.Scalar, (q, rw.size(rows[k])))
        else:
            q = rw.call(aten.clamp.default, (q, 0, rw.size(sympy.expand(rows[0] - 1))))
        coords[k] = q
        stride = sympy.expand(stride * rows[k])
    picked = rw.call(aten.index.Tensor, (grid, coords))
    return rw.call(aten.view.default, (picked, [rw.size(numel)]))


__all__ = ["BucketPlan", "Hazard", "OutputForm", "plan"]
