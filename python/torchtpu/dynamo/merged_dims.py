"""Shape buckets through reshapes that merge a dynamic dimension.

A batched linear on ``[b, s, k]`` runs as ``view -> [b*s, k]``, ``addmm``, ``view ->
[b, s, n]``. Padded to buckets, the merged dim holds ``b`` runs of ``S`` rows (the
bucket), not ``b*s`` true rows followed by padding; XLA's dynamic padder does not track a
true size through such a merge and gives wrong values. But the ops between the two views
work row by row (a matmul's rows, pointwise math, a softmax within a row, a batched
matmul's batch), so they give the same rows on the unmerged tensor: ``[b, s, k] @ [k, n]``
is the same product with ``b`` and ``s`` kept apart. `rewrite_merges` checks that every op
reading merged rows is such an op, or one of the reads across rows a backward graph makes
(a weight gradient ``permute(g) @ x`` and a bias gradient ``sum(g, 0)``, done per leading
dim and summed), and rewrites the region onto the unmerged tensors (``torchtpu::matmul_nd``
for the products), so XLA never merges a dynamic dim. Any other read of merged rows keeps
the graph exact-size, with the reason.

Training graphs pass merged rows between the forward and the backward (the activations a
weight gradient needs). A forward output with merged rows is returned unmerged (the same
compact bytes: the true rows are the first ``b*s`` either way) and its prefix recorded by
name; the backward, given those prefixes, declares the saved input unmerged.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import sympy
import torch
import torch.fx

from torchtpu.dynamo.graph_spec import insert_call, size_expr

VIEWS = ("view", "_unsafe_view", "reshape", "view_copy")
# Ops that read each row of a merged operand on its own, besides pointwise ops.
_ROW_COPIES = {"clone", "_to_copy", "alias", "detach"}
_ROW_SOFTMAX = {"_softmax", "_log_softmax"}
# Ops with a dim argument (args[1]) that work within each row when it is not dim 0: the
# same op on the unmerged tensors along the dim shifted past the merged ones. (gather and
# scatter: every tensor operand holds the same merged rows; a loss's label lookup.)
_ROW_DIM_OPS = {"unsqueeze", "squeeze", "gather", "scatter"}


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
    if name in _ROW_DIM_OPS:
        return not others and len(node.args) > 1 and 0 not in _dim_arg(node)
    if name.endswith("_like"):  # full_like, zeros_like, ...: a new value of the same shape
        return not others
    if name in _ROW_COPIES or torch.Tag.pointwise in node.target.tags:
        # Other operands broadcast along the rows: none has a dim that meets the merged
        # one (a lower rank aligns with the trailing dims, whose true sizes XLA tracks).
        for a in others:
            shape = _shape(a) or []
            if len(shape) == len(out) and shape and shape[0] != 1:
                return False
        return True
    return False


def _prefix_exprs(prefix: tuple) -> list[sympy.Expr]:
    return [size_expr(d) for d in prefix]


def _reduced_dims(node: torch.fx.Node) -> list[int]:
    rank = node.args[0].meta["val"].dim()
    dims = node.args[1] if len(node.args) > 1 else None
    return sorted(d % rank for d in (dims or range(rank)))  # [] and None: every dim


def _dim_arg(node: torch.fx.Node) -> list[int]:
    """The dims named by args[1] of a `_ROW_DIM_OPS` node, normalized (unsqueeze's
    against its result's rank)."""
    name = node.target._schema.name.split("::")[-1]
    rank = node.meta["val"].dim() if name == "unsqueeze" else node.args[0].meta["val"].dim()
    dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
    return [d % max(rank, 1) for d in dims]


def _plan(gm: torch.fx.GraphModule, saved: dict[str, tuple] | None = None,
          ) -> tuple[list[torch.fx.Node], dict, dict, str | None]:
    """The nodes to rewrite, in graph order, the merged prefix of each merged value and of
    each transposed one (``permute(merged, [1, 0])``, read only as a weight gradient's
    left operand); or the reason the graph cannot be rewritten. `saved` names placeholders
    holding merged rows and their prefix (a backward graph's saved activations)."""
    merged: dict[torch.fx.Node, tuple] = {}  # value -> the dims its dim 0 merges
    transposed: dict[torch.fx.Node, tuple] = {}
    region: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            prefix = (saved or {}).get(node.name)
            shape = _shape(node)
            if prefix is not None and shape and sympy.expand(
                    sympy.Mul(*_prefix_exprs(prefix)) - shape[0]) == 0:
                merged[node] = prefix
                region.append(node)
            continue
        if node.op == "output":
            continue  # merged results are returned unmerged (same compact bytes)
        if node.op != "call_function":
            continue
        reading = [a for a in node.all_input_nodes if a in merged]
        flipped = [a for a in node.all_input_nodes if a in transposed]
        if isinstance(node.meta.get("val"), (torch.SymInt, int)):
            continue  # a size (the graph reads it from shapes, not from the rows)
        if not isinstance(node.target, torch._ops.OpOverload) or not isinstance(
                node.meta.get("val"), torch.Tensor):
            if reading or flipped:
                return region, merged, transposed, (
                    f"{node.name} reads the size of merged dynamic rows")
            continue
        name = node.target._schema.name.split("::")[-1]
        operands = _tensor_operands(node)
        out = _shape(node)
        if flipped:
            # permute(g) @ x: a weight gradient, a sum over every merged row.
            a, b = node.args[0], node.args[1]
            if not (name == "mm" and a in transposed and b in merged and not reading[1:]
                    and _same(_prefix_exprs(transposed[a]), _prefix_exprs(merged[b]))):
                return region, merged, transposed, (
                    f"{node.target} reads transposed merged dynamic rows ({node.name})")
            region.append(node)
            continue
        if not reading:
            if name in VIEWS and operands:
                src = _shape(operands[0])
                in_dyn = sorted(str(d) for d in src if _dynamic(d))
                out_dyn = sorted(str(d) for d in out if _dynamic(d))
                if in_dyn == out_dyn:
                    continue
                m = merged_prefix(src, out)
                if m is None:
                    return region, merged, transposed, (
                        f"{node.target} merges or splits a dynamic dimension ({node.name})")
                merged[node] = tuple(operands[0].meta["val"].shape[:m])
                region.append(node)
            continue
        prefix = merged[reading[0]]
        key = _prefix_exprs(prefix)
        if any(not _same(_prefix_exprs(merged[a]), key) for a in reading):
            return region, merged, transposed, (
                f"{node.target} mixes rows merged from different shapes ({node.name})")
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
            return region, merged, transposed, (
                f"{node.target} reshapes merged dynamic rows ({node.name})")
        if name == "permute" and len(out) == 2 and list(node.args[1]) == [1, 0]:
            transposed[node] = prefix
            continue
        if name == "sum" and node.target == torch.ops.aten.sum.dim_IntList:
            if 0 not in _reduced_dims(node):
                merged[node] = prefix  # within each row
            continue  # else over every row (a bias gradient): the result is not merged
        if not _row_wise(node, name, merged, prefix):
            return region, merged, transposed, (
                f"{node.target} reads across merged dynamic rows ({node.name})")
        merged[node] = prefix
    return region, merged, transposed, None


def merge_hazard(gm: torch.fx.GraphModule, saved: dict[str, tuple] | None = None) -> str | None:
    """Why `gm`'s merging reshapes cannot be rewritten, or None."""
    return _plan(gm, saved)[3]


class Rewritten(NamedTuple):
    nodes: int  # nodes of merged regions rewritten
    outputs: dict[str, tuple]  # outputs returned unmerged: name -> merged prefix


def rewrite_merges(gm: torch.fx.GraphModule, saved: dict[str, tuple] | None = None,
                   ) -> Rewritten:
    """Rewrites every merged region of `gm` onto unmerged tensors (in place; call only
    when `merge_hazard` is None). Placeholders named in `saved` are declared unmerged
    (their caller's value stays in ``meta["caller_val"]``); graph outputs with merged
    rows are returned unmerged, their shape as the caller sees it in
    ``gm.meta["output_shapes"]``. Their prefixes by name are the `saved` of the graph
    that takes them as inputs."""
    region, merged, transposed, hazard = _plan(gm, saved)
    if hazard is not None:
        raise ValueError(f"tpu compile: cannot rewrite merged dynamic rows: {hazard}")
    if not region:
        return Rewritten(0, {})
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
    for node in region:
        if node.op == "placeholder":  # saved merged rows, declared unmerged
            val = node.meta["val"]
            node.meta["caller_val"] = val
            with fake_mode:
                node.meta["val"] = val.view(list(merged[node]) + list(val.shape[1:]))
            unmerged[node] = origin[node] = node
            continue
        name = node.target._schema.name.split("::")[-1]
        reading = [a for a in node.all_input_nodes if a in unmerged]
        with graph.inserting_before(node):
            if node in transposed:  # [p..., n] -> [p[:-1]..., n, p[-1]]
                m = len(transposed[node])
                unmerged[node] = add(torch.ops.aten.permute.default,
                                     (unmerged[reading[0]], [*range(m - 1), m, m - 1]))
                continue
            if not reading:  # a merging reshape
                src = node.args[0]
                m = len(merged[node])
                origin[node] = src
                if _same(_shape(src)[m:], _shape(node)[1:]):
                    unmerged[node] = src
                else:
                    unmerged[node] = add(view, (src, [size_of(src, d) for d in range(m)] +
                                                [int(d) for d in node.meta["val"].shape[1:]]))
                continue
            merged_in = next((a for a in reading if a in merged), reading[0])
            base = unmerged[merged_in]
            src = origin[merged_in]
            m = len(merged[merged_in])
            if name in VIEWS and node not in merged:  # splits the rows again
                if _same(_shape(base), _shape(node)):
                    node.replace_all_uses_with(base)
                else:
                    node.replace_all_uses_with(add(view, (base, node.args[1])))
                continue
            if node not in merged:  # a sum over every row: a weight or bias gradient
                if name == "mm":
                    product = add(torch.ops.torchtpu.matmul_nd.default,
                                  (unmerged[node.args[0]], base))
                    total = add(torch.ops.aten.sum.dim_IntList, (product, list(range(m - 1))))
                else:
                    dims = list(range(m)) + [d + m - 1 for d in _reduced_dims(node) if d != 0]
                    dtype = node.kwargs.get("dtype")
                    total = add(torch.ops.aten.sum.dim_IntList, (base, dims),
                                {"dtype": dtype} if dtype else None)
                if list(total.meta["val"].shape) != list(node.meta["val"].shape):
                    total = add(view, (total, [int(d) for d in node.meta["val"].shape]))
                node.replace_all_uses_with(total)
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
            elif name == "sum":  # within each row
                dims = [d + m - 1 for d in _reduced_dims(node)]
                new = add(node.target, (base, dims, *node.args[2:]), dict(node.kwargs))
            elif name in _ROW_DIM_OPS:
                dims = [d + m - 1 for d in _dim_arg(node)]
                args = torch.fx.node.map_arg(node.args, lambda a: unmerged.get(a, a))
                dim = dims if isinstance(node.args[1], (list, tuple)) else dims[0]
                new = add(node.target, (args[0], dim, *args[2:]), dict(node.kwargs))
            else:  # pointwise or a copy: the same op on the unmerged operands
                args, kwargs = torch.fx.node.map_arg(
                    (node.args, dict(node.kwargs)), lambda a: unmerged.get(a, a))
                new = add(node.target, args, kwargs)
            unmerged[node] = new
    output = next(n for n in graph.nodes if n.op == "output")
    results = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [
        output.args[0]]
    shapes, returned = {}, {}
    for k, r in enumerate(results):
        if isinstance(r, torch.fx.Node) and r in merged:
            shapes[k] = [size_expr(d) for d in r.meta["val"].shape]
            returned[r.name] = merged[r]
            results[k] = unmerged[r]
    if shapes:
        output.args = (tuple(results) if isinstance(output.args[0], (list, tuple))
                       else results[0],)
        gm.meta["output_shapes"] = shapes
    graph.eliminate_dead_code()
    gm.recompile()
    return Rewritten(len(region), returned)
