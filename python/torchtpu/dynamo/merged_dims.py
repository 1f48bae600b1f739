"""Shape buckets through reshapes that merge a dynamic dimension.

A batched linear on ``[b, s, k]`` runs as ``view -> [b*s, k]``, ``addmm``, ``view ->
[b, s, n]``. Padded to buckets, the merged dim holds ``b`` runs of ``S`` rows (the
bucket), not ``b*s`` true rows followed by padding; XLA's dynamic padder does not track a
true size through such a merge and gives wrong values. But the ops between the two views
work row by row (a matmul's rows, pointwise math, a softmax within a row, a batched
matmul's batch), so they give the same rows on the unmerged tensor: ``[b, s, k] @ [k, n]``
is the same product with ``b`` and ``s`` kept apart. `rewrite_merges` checks that every op
reading merged rows is such an op and rewrites the region onto the unmerged tensors
(``torchtpu::matmul_nd`` for the products), so XLA never merges a dynamic dim. A merged
value read any other way (a reduction over the rows, a graph output, ...) keeps the graph
exact-size, with the reason.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx

from torchtpu.dynamo.graph_spec import insert_call, size_expr

VIEWS = ("view", "_unsafe_view", "reshape", "view_copy")
# Ops that read each row of a merged operand on its own, besides pointwise ops.
_ROW_COPIES = {"clone", "_to_copy", "alias", "detach"}
_ROW_SOFTMAX = {"_softmax", "_log_softmax"}


def _shape(node: Any) -> list[sympy.Expr] | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return None
    return [size_expr(s) for s in val.shape]


def _dynamic(e: sympy.Expr) -> bool:
    return bool(e.free_symbols)


def _same(a: list[sympy.Expr], b: list[sympy.Expr]) -> bool:
    return len(a) == len(b) and all(sympy.expand(x - y) == 0 for x, y in zip(a, b))


def _static(dims: list[sympy.Expr]) -> bool:
    return not any(_dynamic(d) for d in dims)


def merged_prefix(src: list[sympy.Expr], out: list[sympy.Expr]) -> int | None:
    """m when `out` merges `src`'s first m dims (m >= 2, at least one dynamic) into its
    dim 0 and keeps the rest (the same dims, or static dims on both sides)."""
    if not out:
        return None
    product = sympy.Integer(1)
    for m in range(1, len(src) + 1):
        product = product * src[m - 1]
        if m < 2 or not any(_dynamic(d) for d in src[:m]):
            continue
        if sympy.expand(product - out[0]) != 0:
            continue
        rest_src, rest_out = src[m:], out[1:]
        if _same(rest_src, rest_out) or (_static(rest_src) and _static(rest_out)):
            return m
    return None


def _tensor_operands(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []

    def visit(a: Any) -> None:
        if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)

    for a in list(node.args) + list(node.kwargs.values()):
        visit(a)
    return found


def _row_wise(node: torch.fx.Node, name: str, merged: dict[torch.fx.Node, tuple],
              prefix: tuple) -> bool:
    """Whether `node` (reading merged values of `prefix`) works row by row on dim 0."""
    others = [a for a in _tensor_operands(node) if a not in merged]
    out = _shape(node)
    if out is None:
        return False

    def static_tensor(a: torch.fx.Node) -> bool:
        return _static(_shape(a) or [])

    if name == "mm":
        return node.args[0] in merged and node.args[1] not in merged and static_tensor(node.args[1])
    if name == "addmm":
        return (node.args[1] in merged and node.args[0] not in merged
                and node.args[2] not in merged and static_tensor(node.args[0])
                and static_tensor(node.args[2]) and len(_shape(node.args[0]) or []) <= 1
                and node.kwargs.get("beta", 1) == 1 and node.kwargs.get("alpha", 1) == 1)
    if name == "bmm":
        return node.args[0] in merged and node.args[1] in merged
    if name in _ROW_SOFTMAX:
        rank = len(out)
        dim = node.args[1] % rank if rank else 0
        return dim != 0
    if name in _ROW_COPIES or torch.Tag.pointwise in node.target.tags:
        # Other operands broadcast along the rows: none has a dim that meets the merged
        # one (a lower rank aligns with the trailing dims, whose true sizes XLA tracks).
        for a in others:
            shape = _shape(a) or []
            if len(shape) == len(out) and shape and shape[0] != 1:
                return False
        return True
    return False


def _plan(gm: torch.fx.GraphModule) -> tuple[list[torch.fx.Node], dict, str | None]:
    """The nodes to rewrite, in graph order, and the merged prefix of each merged value;
    or the reason the graph cannot be rewritten."""
    merged: dict[torch.fx.Node, tuple] = {}  # value -> the dims its dim 0 merges
    region: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op == "output":
            results = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
            for r in results:
                if r in merged:
                    return region, merged, f"graph output {r.name} has merged dynamic rows"
            continue
        if node.op != "call_function":
            continue
        reading = [a for a in node.all_input_nodes if a in merged]
        if not isinstance(node.target, torch._ops.OpOverload) or not isinstance(
                node.meta.get("val"), torch.Tensor):
            if reading:
                return region, merged, f"{node.name} reads the size of merged dynamic rows"
            continue
        name = node.target._schema.name.split("::")[-1]
        operands = _tensor_operands(node)
        out = _shape(node)
        if not reading:
            if name in VIEWS and operands:
                src = _shape(operands[0])
                in_dyn = sorted(str(d) for d in src if _dynamic(d))
                out_dyn = sorted(str(d) for d in out if _dynamic(d))
                if in_dyn == out_dyn:
                    continue
                m = merged_prefix(src, out)
                if m is None:
                    return region, merged, (f"{node.target} merges or splits a dynamic "
                                            f"dimension ({node.name})")
                merged[node] = tuple(operands[0].meta["val"].shape[:m])
                region.append(node)
            continue
        prefix = merged[reading[0]]
        key = [size_expr(d) for d in prefix]
        if any(not _same([size_expr(d) for d in merged[a]], key) for a in reading):
            return region, merged, (f"{node.target} mixes rows merged from different shapes "
                                    f"({node.name})")
        region.append(node)
        if name in VIEWS:
            src = _shape(reading[0])
            m = len(prefix)
            if (len(out) >= m and _same(out[:m], key)
                    and (_same(out[m:], src[1:]) or (_static(out[m:]) and _static(src[1:])))):
                continue  # splits the rows again: the region ends here
            if out and sympy.expand(out[0] - src[0]) == 0 and _static(out[1:]) and _static(src[1:]):
                merged[node] = prefix
                continue
            return region, merged, f"{node.target} reshapes merged dynamic rows ({node.name})"
        if name in ("mm", "addmm") and sum(_dynamic(d) for d in key) > 1:
            # Rewritten, the product's operand keeps several dynamic dims besides the
            # contracted one; XLA's dot merges them and returns garbage.
            return region, merged, (f"{node.target} multiplies rows merged from several "
                                    f"dynamic dims ({node.name})")
        if not _row_wise(node, name, merged, prefix):
            return region, merged, f"{node.target} reads across merged dynamic rows ({node.name})"
        merged[node] = prefix
    return region, merged, None


def merge_hazard(gm: torch.fx.GraphModule) -> str | None:
    """Why `gm`'s merging reshapes cannot be rewritten, or None."""
    return _plan(gm)[2]


def rewrite_merges(gm: torch.fx.GraphModule) -> int:
    """Rewrites every merged region of `gm` onto unmerged tensors (in place; call only
    when `merge_hazard` is None). Returns the number of merging reshapes removed."""
    region, merged, hazard = _plan(gm)
    if hazard is not None:
        raise ValueError(f"tpu compile: cannot rewrite merged dynamic rows: {hazard}")
    if not region:
        return 0
    fake_mode = torch._guards.detect_fake_mode(
        [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])
    graph = gm.graph
    unmerged: dict[torch.fx.Node, torch.fx.Node] = {}
    sizes: dict[tuple[torch.fx.Node, int], Any] = {}  # (source, dim) -> its size in the graph

    def add(target: Any, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
        return insert_call(graph, fake_mode, target, args, kwargs)

    def size_of(source: torch.fx.Node, dim: int) -> Any:
        s = source.meta["val"].shape[dim]
        if not isinstance(s, torch.SymInt):
            return int(s)
        if (source, dim) not in sizes:
            node = graph.call_function(torch.ops.aten.sym_size.int, (source, dim))
            node.meta["val"] = s
            sizes[(source, dim)] = node
        return sizes[(source, dim)]

    origin: dict[torch.fx.Node, torch.fx.Node] = {}  # merged value -> the merge's source
    view = torch.ops.aten.view.default
    merges = 0
    for node in region:
        name = node.target._schema.name.split("::")[-1]
        reading = [a for a in node.all_input_nodes if a in unmerged]
        with graph.inserting_before(node):
            if not reading:  # a merging reshape
                merges += 1
                src = node.args[0]
                m = len(merged[node])
                origin[node] = src
                if _same(_shape(src)[m:], _shape(node)[1:]):
                    unmerged[node] = src
                else:
                    unmerged[node] = add(view, (src, [size_of(src, d) for d in range(m)] +
                                                [int(d) for d in node.meta["val"].shape[1:]]))
                continue
            base = unmerged[reading[0]]
            src = origin[reading[0]]
            m = len(merged[reading[0]])
            if name in VIEWS and node not in merged:  # splits the rows again
                if _same(_shape(base), _shape(node)):
                    node.replace_all_uses_with(base)
                else:
                    node.replace_all_uses_with(add(view, (base, node.args[1])))
                continue
            origin[node] = src
            if name in VIEWS:
                tail = [int(d) for d in node.meta["val"].shape[1:]]
                new = add(view, (base, [size_of(src, d) for d in range(m)] + tail))
            elif name == "mm":
                new = add(torch.ops.torchtpu.matmul_nd.default, (base, node.args[1]))
            elif name == "addmm":
                product = add(torch.ops.torchtpu.matmul_nd.default, (base, node.args[2]))
                new = add(torch.ops.aten.add.Tensor, (product, node.args[0]))
            elif name == "bmm":
                new = add(torch.ops.torchtpu.matmul_nd.default,
                          (base, unmerged[node.args[1]]))
            elif name in _ROW_SOFTMAX:
                rank = node.meta["val"].dim()
                dim = node.args[1] % rank + m - 1
                new = add(node.target, (base, dim, *node.args[2:]), dict(node.kwargs))
            else:  # pointwise or a copy: the same op on the unmerged operands
                args, kwargs = torch.fx.node.map_arg(
                    (node.args, dict(node.kwargs)), lambda a: unmerged.get(a, a))
                new = add(node.target, args, kwargs)
            unmerged[node] = new
    graph.eliminate_dead_code()
    gm.recompile()
    return merges
