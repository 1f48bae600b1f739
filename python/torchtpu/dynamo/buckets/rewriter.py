"""The pass driver: walks an FX graph once, applying each op's rule (rules.py).

A graph padded to buckets is lowered with every size at its bucket (a static program);
true sizes reach it only as runtime scalars. Rules keep the true elements exact on that
program: they record each value's layout (layout.py), mask padding with an op's identity
before it reaches across a padded dim (``where(valid, x, fill)``), or replace an op with
ones that have rules. Every node a rule adds is itself an aten op of the true computation
(a mask is all-true at the true sizes), so the rewritten graph still computes the same
values when run unpadded, and each node it adds goes through its own rule.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx
from torch._prims_common import is_contiguous_or_false

from torchtpu.dynamo.buckets import layout as L
from torchtpu.dynamo.graph_spec import insert_call

Layouts = tuple  # tuple[Layout, ...]: one per dim of a tensor


class Hazard(Exception):
    """Padding would change this graph's results (or no rule says it would not): it runs
    at exact sizes. The message says which op and why."""


class Rewriter:
    def __init__(self, gm: torch.fx.GraphModule, rules: dict[Any, Callable],
                 carried: dict[str, Layouts] | None = None) -> None:
        self.gm = gm
        self.graph = gm.graph
        self.rules = rules
        self.carried = carried or {}
        self.placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self.fake_mode = torch._guards.detect_fake_mode(
            [n.meta["val"] for n in self.graph.nodes
             if isinstance(n.meta.get("val"), torch.Tensor)])
        self.layouts: dict[torch.fx.Node, Any] = {}
        self._cursor: torch.fx.Node | None = None
        self._size_nodes: dict[sympy.Expr, Any] = {}
        self._size_anchor = self.placeholders[-1] if self.placeholders else None
        self._masks: dict[tuple, torch.fx.Node] = {}
        self._valid: dict[tuple, torch.fx.Node] = {}

    # --- layouts ------------------------------------------------------------------------
    def of(self, a: Any) -> Layouts:
        """The layouts of tensor node `a` (all static for a tensor without symbolic dims)."""
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            raise Hazard(f"{a} is not a tensor")
        got = self.layouts.get(a)
        if got is None:
            if any(not L.is_static(L.expr(s)) for s in val.shape):
                raise Hazard(f"internal: {a.name} has symbolic dims and no layout")
            return (L.STATIC,) * val.dim()
        return tuple(L.canonical([self._current(c) for c in lay]) if lay else lay
                     for lay in got)

    def _current(self, e: sympy.Expr) -> sympy.Expr:
        """`e` with the symbols Dynamo has since found equal to others replaced, as sizes
        read now show them (s.node.expr)."""
        env = getattr(self.fake_mode, "shape_env", None)
        return env.replace(e) if env is not None else e

    def padded_dims(self, a: Any) -> list[int]:
        return [d for d, lay in enumerate(self.of(a)) if lay]

    @staticmethod
    def sizes(a: Any) -> list[sympy.Expr]:
        return [L.expr(s) for s in a.meta["val"].shape]

    # --- building nodes -----------------------------------------------------------------
    def call(self, target: Any, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
        """A new node of `target` before the node being rewritten, through its own rule."""
        with self.graph.inserting_before(self._cursor):
            node = insert_call(self.graph, self.fake_mode, target, args, kwargs)
        return self.visit(node)

    def size(self, e: Any) -> Any:
        """A graph value (int, or a node computing a SymInt) equal to size expression `e`."""
        e = L.expr(e)
        if L.is_static(e):
            return int(e)
        if e in self._size_nodes:
            return self._size_nodes[e]
        if isinstance(e, sympy.Symbol):
            node = self._symbol_node(e)
        elif isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) > 0:
            base = self.size(e.base)
            node = base
            for _ in range(int(e.exp) - 1):
                node = self._size_op(operator.mul, node, base)
        else:
            args = [self.size(a) for a in e.args]
            ops = {sympy.Add: operator.add, sympy.Mul: operator.mul}
            name = type(e).__name__
            if type(e) in ops:
                fn = ops[type(e)]
            elif name == "FloorDiv":
                fn = operator.floordiv
            elif name in ("Mod", "PythonMod"):
                fn = operator.mod
            else:
                raise Hazard(f"size {e} uses {name}, which the bucket pass cannot compute")
            node = args[0]
            for a in args[1:]:
                node = self._size_op(fn, node, a)
        self._size_nodes[e] = node
        return node

    def _size_op(self, fn: Callable, a: Any, b: Any) -> Any:
        if not isinstance(a, torch.fx.Node) and not isinstance(b, torch.fx.Node):
            return fn(a, b)
        with self.graph.inserting_after(self._size_anchor):
            node = self.graph.call_function(fn, (a, b))
        va = a.meta["val"] if isinstance(a, torch.fx.Node) else a
        vb = b.meta["val"] if isinstance(b, torch.fx.Node) else b
        node.meta["val"] = fn(va, vb)
        self._size_anchor = node
        return node

    def _symbol_node(self, s: sympy.Symbol) -> torch.fx.Node:
        for p in self.placeholders:
            val = p.meta.get("val")
            if isinstance(val, torch.SymInt) and L.expr(val) == s:
                return p
        for p in self.placeholders:
            val = p.meta.get("val")
            if not isinstance(val, torch.Tensor):
                continue
            for d, dim in enumerate(val.shape):
                if L.expr(dim) == s:
                    with self.graph.inserting_after(self._size_anchor):
                        node = self.graph.call_function(torch.ops.aten.sym_size.int, (p, d))
                    node.meta["val"] = dim
                    self._size_anchor = node
                    return node
        raise Hazard(f"size {s} is not the size of any graph input")

    # --- masks --------------------------------------------------------------------------
    def valid(self, layout: L.Layout, size: sympy.Expr, device: Any) -> torch.fx.Node:
        """A bool vector over a dim of `size` laid out as `layout`: True at true elements."""
        key = (layout, device)
        if key in self._valid:
            return self._valid[key]
        comps = L.components(layout, size)
        parts = []
        for k, c in enumerate(comps):
            if L.is_static(c):
                continue
            n = self.size(c)
            pos = self.call(torch.ops.aten.arange.start_step, (0, n),
                            {"dtype": torch.int64, "device": device})
            vec = self.call(torch.ops.aten.lt.Scalar, (pos, n))
            if len(comps) > 1:
                shape = [1] * len(comps)
                shape[k] = n
                vec = self.call(torch.ops.aten.view.default, (vec, shape))
            parts.append(vec)
        mask = parts[0]
        for p in parts[1:]:
            mask = self.call(torch.ops.aten.logical_and.default, (mask, p))
        if len(comps) > 1:
            mask = self.call(torch.ops.aten.expand.default,
                             (mask, [self.size(c) for c in comps]))
            mask = self.call(torch.ops.aten.view.default,
                             (self.contiguous(mask), [self.size(size)]))
        self._valid[key] = mask
        return mask

    def contiguous(self, a: torch.fx.Node) -> torch.fx.Node:
        """`a` as a contiguous tensor (a view needs one; the static program is the same).
        A size known only at run time (nonzero's row count) leaves contiguity unknown, and
        asking would guard on the data: then it is copied."""
        if is_contiguous_or_false(a.meta["val"]):
            return a
        return self.call(torch.ops.aten.clone.default, (a,),
                         {"memory_format": torch.contiguous_format})

    def mask(self, a: torch.fx.Node, dims: Sequence[int], fill: Any) -> torch.fx.Node:
        """`a` with its padding along `dims` (those of them that are padded) set to `fill`:
        "zero", "one", "low" (-inf, the smallest integer, False), "high", or a number."""
        lays = self.of(a)
        dims = sorted({d % max(len(lays), 1) for d in dims if lays[d % max(len(lays), 1)]})
        if not dims:
            return a
        key = (a, tuple(dims), fill)
        if key in self._masks:
            return self._masks[key]
        val = a.meta["val"]
        sizes = self.sizes(a)
        mask = None
        for d in dims:
            vec = self.valid(lays[d], sizes[d], val.device)
            if val.dim() > 1:
                shape = [1] * val.dim()
                shape[d] = self.size(sizes[d])
                vec = self.call(torch.ops.aten.view.default, (vec, shape))
            mask = vec if mask is None else self.call(torch.ops.aten.logical_and.default,
                                                      (mask, vec))
        value = self.call(torch.ops.aten.scalar_tensor.default, (fill_value(fill, val.dtype),),
                          {"dtype": val.dtype, "device": val.device})
        out = self.call(torch.ops.aten.where.self, (mask, a, value))
        self._masks[key] = out
        return out

    # --- the walk -----------------------------------------------------------------------
    def run(self) -> None:
        for node in list(self.graph.nodes):
            if node.op == "placeholder":
                val = node.meta.get("val")
                if isinstance(val, torch.Tensor):
                    self.layouts[node] = self.carried.get(node.name) or tuple(
                        L.prefix(s) for s in val.shape)
            elif node.op == "call_function" and node.graph is self.graph:
                self.visit(node)

    def visit(self, node: torch.fx.Node) -> torch.fx.Node:
        """Applies `node`'s rule; returns the node that now holds its value."""
        val = node.meta.get("val")
        target = node.target
        if target is operator.getitem:
            src = self.layouts.get(node.args[0])
            if isinstance(src, list):
                self.layouts[node] = src[node.args[1]]
            return node
        if isinstance(target, torch._ops.HigherOrderOperator):
            # Control flow (torch.cond, while_loop, scan, ...): its subgraphs and a
            # predicate on sizes would see bucket sizes.
            raise Hazard(f"{target} ({node.name}) is control flow, which runs at exact sizes")
        if not isinstance(target, torch._ops.OpOverload) or not _is_tensor_op(val):
            return node  # size arithmetic: graph_spec evaluates it
        if not _touches_symbolic(node):
            self.layouts[node] = _static_layouts(val)
            return node
        rule = self.rules.get(target)
        if rule is None:
            raise Hazard(f"{target} ({node.name}) has no rule for padded dims")
        saved, self._cursor = self._cursor, node
        try:
            result = rule.apply(self, node)
        finally:
            self._cursor = saved
        if isinstance(result, torch.fx.Node) and result is not node:
            node.replace_all_uses_with(result)
            self.graph.erase_node(node)
            return result
        if node not in self.layouts:
            raise Hazard(f"internal: rule for {target} set no layout ({node.name})")
        return node

    def set(self, node: torch.fx.Node, layouts: Any) -> None:
        self.layouts[node] = layouts


def fill_value(fill: Any, dtype: torch.dtype) -> Any:
    """The value `fill` names for `dtype` (a number stands for itself)."""
    if not isinstance(fill, str):
        return fill
    if fill == "zero":
        return False if dtype == torch.bool else 0
    if fill == "one":
        return True if dtype == torch.bool else 1
    if dtype == torch.bool:
        return fill == "high"
    if dtype.is_floating_point:
        return float("-inf") if fill == "low" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if fill == "low" else info.max


def _is_tensor_op(val: Any) -> bool:
    if isinstance(val, torch.Tensor):
        return True
    return isinstance(val, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in val)


def _static_layouts(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        return (L.STATIC,) * val.dim()
    return [(L.STATIC,) * v.dim() if isinstance(v, torch.Tensor) else None for v in val]


def _symbolic(v: Any) -> bool:
    if isinstance(v, torch.Tensor):
        return any(isinstance(s, torch.SymInt) and not L.is_static(L.expr(s)) for s in v.shape)
    if isinstance(v, (list, tuple)):
        return any(_symbolic(x) for x in v)
    return isinstance(v, torch.SymInt) and not L.is_static(L.expr(v))


def _touches_symbolic(node: torch.fx.Node) -> bool:
    """Whether an op reads or makes a tensor with a symbolic dim, or takes a size."""
    if _symbolic(node.meta.get("val")):
        return True
    return any(_symbolic(a.meta.get("val")) for a in node.all_input_nodes)
