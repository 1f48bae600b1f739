"""Rules of the ops that index, and of those rewritten because they depend on where a
padded dim ends (see rules.py for the kinds)."""

from __future__ import annotations

from typing import Any

import sympy
import torch
import torch.fx

from torchtpu.dynamo.buckets import layout as L
from torchtpu.dynamo.buckets.rewriter import Hazard, Rewriter
from torchtpu.dynamo.buckets.rules import (
    _dim,
    _register,
    _step,
    _true_position,
    broadcast_layouts,
)

aten = torch.ops.aten


def _check_positions(rw: Rewriter, node: torch.fx.Node, x: torch.fx.Node, dims: list[int]
                     ) -> None:
    """Index values are true positions: along a dim of merged rows they are not positions
    of the padded tensor."""
    lays = rw.of(x)
    for d in dims:
        if lays[d] and not L.is_prefix(lays[d]):
            raise Hazard(f"{node.target} ({node.name}) indexes merged padded rows")


def _true_index(rw: Rewriter, index: torch.fx.Node, x: torch.fx.Node, dim: int,
                wrap: bool) -> torch.fx.Node:
    """`index`, positions along dim `dim` of `x`, as the op's bounds check must see them
    when that dim is padded: the check compares with the bucket's size, so entries outside
    the true size (negative ones counted from the true end first, for ops that `wrap`
    them) are moved past every bucket (the dtype's largest value), which fails the check
    and names the op as at exact sizes."""
    lays, val = rw.of(x), index.meta["val"]
    if not lays or not lays[dim] or val.dtype not in (torch.int32, torch.int64):
        return index
    n = rw.size(rw.sizes(x)[dim])
    if wrap:
        from_end = rw.call(aten.add.Tensor, (index, n))
        index = rw.call(aten.where.self, (rw.call(aten.lt.Scalar, (index, 0)), from_end, index))
    inside = rw.call(aten.logical_and.default, (rw.call(aten.ge.Scalar, (index, 0)),
                                                rw.call(aten.lt.Scalar, (index, n))))
    past = rw.call(aten.scalar_tensor.default, (torch.iinfo(val.dtype).max,),
                   {"dtype": val.dtype, "device": val.device})
    return rw.call(aten.where.self, (inside, index, past))


def _safe_index(rw: Rewriter, node: torch.fx.Node, at: int, x: torch.fx.Node, dim: int
                ) -> torch.fx.Node:
    """Index tensor args[at] (positions along `x`'s dim `dim`) checked against the dim's
    true size, with its padding set to position 0 (in range: no bounds check fails on
    padding)."""
    index = node.args[at]
    masked = _true_index(rw, index, x, dim, wrap=False)
    masked = rw.mask(masked, list(range(index.meta["val"].dim())), "zero")
    if masked is not index:
        node.update_arg(at, masked)
    return masked


@_register("indexed", aten.embedding.default)
def _embedding(rw: Rewriter, node: torch.fx.Node) -> None:
    weight, index = node.args[0], node.args[1]
    _check_positions(rw, node, weight, [0])
    _safe_index(rw, node, 1, weight, 0)
    rw.set(node, tuple(rw.of(index)) + (rw.of(weight)[1],))


@_register("indexed", aten.index_select.default)
def _index_select(rw: Rewriter, node: torch.fx.Node) -> None:
    x, dim, index = node.args[0], node.args[1], node.args[2]
    lays = list(rw.of(x))
    dim = _dim(dim, len(lays))
    _check_positions(rw, node, x, [dim])
    _safe_index(rw, node, 2, x, dim)
    if lays:
        lays[dim] = rw.of(index)[0] if rw.of(index) else L.STATIC
    rw.set(node, tuple(lays))


def _rows(rw: Rewriter, node: torch.fx.Node, x: torch.fx.Node, index: torch.fx.Node,
          dim: int) -> list[int]:
    """gather/scatter pair index[i][j] with x[i][...]: along every dim but `dim` the index's
    positions are x's, so both must be laid out as true positions first (prefixes). Returns
    the dims where the index's padded rows are rows of x that may be true (its true size
    may be below x's)."""
    lx, li = rw.of(x), rw.of(index)
    loose = []
    for d in range(len(li)):
        if d == dim or not li[d] or li[d] == lx[d]:
            continue
        if not (L.is_prefix(li[d]) and (not lx[d] or L.is_prefix(lx[d]))):
            raise Hazard(f"{node.target} ({node.name}): index dim {d} laid out unlike "
                         "its tensor's")
        loose.append(d)
    return loose


@_register("indexed", aten.gather.default)
def _gather(rw: Rewriter, node: torch.fx.Node) -> None:
    x, dim, index = node.args[0], node.args[1], node.args[2]
    dim = _dim(dim, len(rw.of(x)))
    _check_positions(rw, node, x, [dim])
    _rows(rw, node, x, index, dim)  # padded index rows read rows of x: padding out
    _safe_index(rw, node, 2, x, dim)
    rw.set(node, rw.of(index))


@_register("indexed", aten.scatter.value, aten.scatter.src, aten.scatter_add.default,
           aten.scatter_reduce.two)
def _scatter(rw: Rewriter, node: torch.fx.Node) -> Any:
    x, dim, index = node.args[0], node.args[1], node.args[2]
    dim = _dim(dim, len(rw.of(x)))
    _check_positions(rw, node, x, [dim])
    loose = _rows(rw, node, x, index, dim)
    fill = {aten.scatter_add.default: "zero"}.get(node.target)
    if node.target is aten.scatter_reduce.two:
        fill = {"sum": "zero", "prod": "one", "amax": "low", "amin": "high"}.get(node.args[4])
        include_self = node.args[5] if len(node.args) > 5 else node.kwargs.get(
            "include_self", True)
        if not include_self:
            # A position a padded entry lands on would count as written: it would lose
            # self's value to the reduction's identity.
            fill = None
    src = node.args[3]
    if isinstance(src, torch.fx.Node):
        # XLA reads the source in the index's (padded) shape: a source not padded with it
        # is smaller than the padded index, and the program is refused.
        unpadded = [d for d in rw.padded_dims(index) if not rw.of(src)[d]]
        if unpadded:
            raise Hazard(f"{node.target} ({node.name}): index dim {unpadded[0]} is padded "
                         "but its source's is not")
    padded_rows = [d for d in rw.padded_dims(index) if d == dim or d in loose]
    if padded_rows and fill is not None:
        # Padded entries add the reduction's identity wherever they land.
        node.update_arg(3, rw.mask(node.args[3], padded_rows, fill))
        loose = []
    elif rw.of(index) and rw.of(index)[dim]:
        raise Hazard(f"{node.target} ({node.name}) overwrites at padded index positions")
    _safe_index(rw, node, 2, x, dim)
    rw.set(node, rw.of(x))
    if not loose:
        return None
    # Padded index rows would overwrite rows of x that may be true: those rows keep x.
    kept = None
    sizes_x, sizes_i = rw.sizes(x), rw.sizes(index)
    for d in loose:
        pos = rw.call(aten.arange.start_step, (0, rw.size(sizes_x[d])),
                      {"dtype": torch.int64, "device": x.meta["val"].device})
        rows = rw.call(aten.lt.Scalar, (pos, rw.size(sizes_i[d])))
        shape = [1] * len(sizes_x)
        shape[d] = rw.size(sizes_x[d])
        rows = rw.call(aten.view.default, (rows, shape))
        kept = rows if kept is None else rw.call(aten.logical_and.default, (kept, rows))
    with rw.graph.inserting_after(node):
        new = rw.graph.call_function(aten.where.self, (kept, node, x))
    new.meta["val"] = node.meta["val"]
    node.replace_all_uses_with(new, delete_user_cb=lambda user: user is not new)
    rw.set(new, rw.of(x))
    return None


def _index_positions(node: torch.fx.Node) -> list[int]:
    return [k for k, i in enumerate(node.args[1]) if i is not None]


@_register("indexed", aten.index.Tensor)
def _index(rw: Rewriter, node: torch.fx.Node) -> None:
    x, indices = node.args[0], list(node.args[1])
    at = _index_positions(node)
    if at != list(range(at[0], at[0] + len(at))) and len(at) > 1:
        raise Hazard(f"{node.target} ({node.name}) with indices apart")
    _check_positions(rw, node, x, at)
    for k in at:
        checked = _true_index(rw, indices[k], x, k, wrap=True)
        indices[k] = rw.mask(checked, list(range(indices[k].meta["val"].dim())), "zero")
    node.update_arg(1, indices)
    lays, out = rw.of(x), rw.sizes(node)
    rank = len(out) - (len(lays) - len(at))
    middle = broadcast_layouts(rw, node, [indices[k] for k in at], out[at[0]:at[0] + rank])
    rw.set(node, tuple(lays[:at[0]]) + middle + tuple(lays[at[-1] + 1:]))


@_register("indexed", aten.index_put.default)
def _index_put(rw: Rewriter, node: torch.fx.Node) -> Any:
    x, indices, values = node.args[0], list(node.args[1]), node.args[2]
    accumulate = bool(node.args[3]) if len(node.args) > 3 else bool(
        node.kwargs.get("accumulate", False))
    at = _index_positions(node)
    _check_positions(rw, node, x, at)
    for k in at:
        indices[k] = _true_index(rw, indices[k], x, k, wrap=True)
    node.update_arg(1, indices)
    padded = [k for k in at if rw.padded_dims(indices[k])]
    if not padded:
        rw.set(node, rw.of(x))
        return None
    if accumulate:
        # Padded entries add zeros at position 0: the values, broadcast to one per index
        # entry, are masked along the index dims.
        shapes = {tuple(rw.sizes(indices[k])) for k in at}
        if len(shapes) > 1:
            raise Hazard(f"{node.target} ({node.name}) with index tensors of several shapes")
        lead = list(shapes.pop())
        # The values' dims, as PyTorch lays them out: index tensors next to each other put
        # their dims in place of the indexed ones (x[:, idx]), apart they put them first
        # (x[i, :, j]); x's other dims keep their order. None marks an index dim.
        rank = x.meta["val"].dim()
        others = [d for d in range(rank) if d not in at]
        before = [d for d in others if d < at[0]] if at == list(range(at[0], at[-1] + 1)) else []
        behind = before + [None] * len(lead) + [d for d in others if d not in before]
        # Each of x's dims takes the values' own size where they have one (a symbol equal to
        # x's size at run time; naming x's would make Dynamo specialize it).
        x_sizes, x_lays = rw.sizes(x), rw.of(x)
        v_sizes, v_lays = rw.sizes(values), rw.of(values)
        skip = len(behind) - len(v_sizes)  # the values broadcast from the right
        full = []
        for j, d in enumerate(behind):
            if d is None:
                full.append(rw.size(lead[j - len(before)]))
                continue
            own = v_sizes[j - skip] if j >= skip else None
            if own is not None and own != 1 and v_lays[j - skip] != x_lays[d]:
                raise Hazard(f"{node.target} ({node.name}): values dim {own} laid out "
                             f"unlike self's {x_sizes[d]}")
            full.append(rw.size(own if own is not None and own != 1 else x_sizes[d]))
        values = rw.call(aten.expand.default, (values, full))
        index_dims = list(range(len(before), len(before) + len(lead)))
        node.update_arg(2, rw.mask(rw.contiguous(values), index_dims, "zero"))
        for k in at:
            indices[k] = rw.mask(indices[k], list(range(indices[k].meta["val"].dim())), "zero")
        node.update_arg(1, indices)
        rw.set(node, rw.of(x))
        return None
    if at != [0] or indices[0].meta["val"].dim() != 1:
        raise Hazard(f"{node.target} ({node.name}) writes at padded positions of "
                     "several index tensors")
    # Each row takes the value of its last writer (PyTorch's CPU order for repeated
    # indices), found as the largest writer position per row: a scatter's amax, to which
    # padded writers add nothing.
    index = indices[0]
    device = x.meta["val"].device
    rows = rw.size(rw.sizes(x)[0])
    count = rw.size(rw.sizes(index)[0])
    writer = rw.call(aten.arange.start_step, (0, count), {"dtype": torch.int64,
                                                           "device": device})
    none = rw.call(aten.full.default, ([rows], -1), {"dtype": torch.int64, "device": device})
    last = rw.call(aten.scatter_reduce.two, (none, 0, index, writer, "amax"))
    hit = rw.call(aten.ge.Scalar, (last, 0))
    source = rw.call(aten.clamp.default, (last, 0))
    shape = [rw.size(s) for s in rw.sizes(index)] + [rw.size(s) for s in rw.sizes(x)[1:]]
    full_values = rw.call(aten.expand.default, (values, shape))
    picked = rw.call(aten.index_select.default, (full_values, 0, source))
    rank = x.meta["val"].dim()
    hit = rw.call(aten.view.default, (hit, [rows] + [1] * (rank - 1)))
    return rw.call(aten.where.self, (hit, picked, x))


# --- rewritten: ops that depend on where a padded dim ends --------------------------------
def _positions(rw: Rewriter, like: torch.fx.Node, dim: int, size: sympy.Expr) -> torch.fx.Node:
    """0, 1, ... along `dim` of a dim of `size`, shaped to broadcast against `like`."""
    pos = rw.call(aten.arange.start_step, (0, rw.size(size)),
                  {"dtype": torch.int64, "device": like.meta["val"].device})
    rank = like.meta["val"].dim()
    if rank > 1:
        shape = [1] * rank
        shape[dim] = rw.size(size)
        pos = rw.call(aten.view.default, (pos, shape))
    return pos


def _place(rw: Rewriter, acc: torch.fx.Node, src: torch.fx.Node, dim: int, offset: Any,
           length: sympy.Expr) -> torch.fx.Node:
    """`acc` with positions [offset, offset + length) of `dim` taken from `src` (a true
    offset: a size expression, or a 0-d int64 tensor of the graph)."""
    size = rw.sizes(acc)[dim]
    pos = rw.call(aten.arange.start_step, (0, rw.size(size)),
                  {"dtype": torch.int64, "device": acc.meta["val"].device})
    at_offset = offset if isinstance(offset, torch.fx.Node) else rw.size(offset)
    rel = rw.call(aten.sub.Tensor, (pos, at_offset))
    inside = rw.call(aten.logical_and.default, (rw.call(aten.ge.Scalar, (rel, 0)),
                                                rw.call(aten.lt.Scalar, (rel, rw.size(length)))))
    at = rw.call(aten.clamp.default, (rel, 0, rw.size(sympy.expand(length - 1))))
    picked = rw.call(aten.index_select.default, (src, dim, at))
    rank = acc.meta["val"].dim()
    if rank > 1:
        shape = [1] * rank
        shape[dim] = rw.size(size)
        inside = rw.call(aten.view.default, (inside, shape))
    return rw.call(aten.where.self, (inside, picked, acc))


@_register("rewritten", aten.cat.default)
def _cat(rw: Rewriter, node: torch.fx.Node) -> Any:
    rank = node.meta["val"].dim()
    dim = _dim(node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0), rank)
    tensors = [t for t in node.args[0] if t.meta["val"].dim() == rank]  # (legacy empty [0])
    out = rw.sizes(node)
    if not any(rw.of(t)[dim] for t in tensors):
        lays = []
        for d in range(rank):
            if d == dim:
                lays.append(L.prefix(out[d]))
                continue
            found = {rw.of(t)[d] for t in tensors}
            if len(found) > 1:
                raise Hazard(f"{node.target} ({node.name}) joins tensors laid out "
                             f"differently along dim {d}")
            found_lay = found.pop()
            lays.append(found_lay)
        rw.set(node, tuple(lays))
        return None
    # The pieces meet at true sizes: each is placed at the true end of those before it.
    val = node.meta["val"]
    acc = rw.call(aten.full.default, ([rw.size(s) for s in out], 0),
                  {"dtype": val.dtype, "device": val.device})
    offset: sympy.Expr = sympy.Integer(0)
    for t in tensors:
        n = rw.sizes(t)[dim]
        piece = t if t.meta["val"].dtype == val.dtype else rw.call(
            aten._to_copy.default, (t,), {"dtype": val.dtype})
        acc = _place(rw, acc, piece, dim, offset, n)
        offset = sympy.expand(offset + n)
    return acc


@_register("rewritten", aten.constant_pad_nd.default)
def _pad(rw: Rewriter, node: torch.fx.Node) -> None:
    x, pads = node.args[0], list(node.args[1])
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    lays = rw.of(x)
    rank = len(lays)
    fill_dims, padded_dims = [], set()
    for i in range(len(pads) // 2):
        d = rank - 1 - i
        lo, hi = L.expr(pads[2 * i]), L.expr(pads[2 * i + 1])
        if lo == 0 and hi == 0:
            continue
        padded_dims.add(d)
        if not L.is_static(lo):
            raise Hazard(f"{node.target} ({node.name}) pads a size before a dim")
        if lays[d] and not L.is_prefix(lays[d]):
            raise Hazard(f"{node.target} ({node.name}) pads merged padded rows")
        if lays[d] and not (L.is_static(hi) and int(hi) <= 0):
            fill_dims.append(d)  # the pad starts at the true end, inside the padding
    if fill_dims:
        value = value if value is not None else 0
        node.update_arg(0, rw.mask(x, fill_dims, value))
    rw.set(node, tuple(L.prefix(s) if d in padded_dims else lays[d]
                       for d, s in enumerate(rw.sizes(node))))


@_register("rewritten", aten.slice_scatter.default)
def _slice_scatter(rw: Rewriter, node: torch.fx.Node) -> Any:
    base, src = node.args[0], node.args[1]
    given = dict(zip(("dim", "start", "end", "step"), node.args[2:]), **node.kwargs)
    rank = base.meta["val"].dim()
    dim = _dim(given.get("dim", 0), rank)
    start = L.expr(given.get("start") if given.get("start") is not None else 0)
    step = _step(node, given)
    lb, ls = rw.of(base), rw.of(src)
    for d in range(rank):
        if d != dim and ls[d] and ls[d] != lb[d]:
            raise Hazard(f"{node.target} ({node.name}): src dim {d} laid out unlike self's")
    base_size, length = rw.sizes(base)[dim], rw.sizes(src)[dim]
    if (lb[dim] and not L.is_prefix(lb[dim])) or (ls[dim] and not L.is_prefix(ls[dim])):
        raise Hazard(f"{node.target} ({node.name}) writes merged padded rows")
    fixed = L.is_static(start) and int(start) >= 0
    to_end = L.equal(sympy.expand(start + length * step), base_size) or L.equal(
        sympy.expand(start + length), base_size)
    if fixed and (not ls[dim] or (step == 1 and to_end)):
        # A fixed-length window, or one reaching the true end: the static write covers
        # exactly the true positions (and padding after them).
        rw.set(node, lb)
        return None
    if step != 1:
        raise Hazard(f"{node.target} ({node.name}) writes a strided padded window")
    # A negative start counts from the true end (-s, or an int that is negative at run
    # time), as the read of the same slice does.
    first = start if L.is_static(start) and int(start) >= 0 else _true_position(
        rw, start, base_size, base.meta["val"].device)
    out = _place(rw, base, src, dim, first, length)
    return out


@_register("rewritten", aten.select_scatter.default)
def _select_scatter(rw: Rewriter, node: torch.fx.Node) -> Any:
    base, src, dim, index = node.args[0], node.args[1], node.args[2], node.args[3]
    rank = base.meta["val"].dim()
    dim = _dim(dim, rank)
    lb = rw.of(base)
    e = L.expr(index)
    if lb[dim] and not L.is_prefix(lb[dim]):
        raise Hazard(f"{node.target} ({node.name}) writes merged padded rows")
    if L.is_static(e) and int(e) >= 0 or not lb[dim] and L.is_static(e):
        rw.set(node, broadcast_layouts(rw, node, [base], rw.sizes(node)))
        return None
    where = sympy.expand(rw.sizes(base)[dim] + e) if L.is_static(e) else e
    pos = _positions(rw, base, dim, rw.sizes(base)[dim])
    hit = rw.call(aten.eq.Scalar, (pos, rw.size(where)))
    return rw.call(aten.where.self, (hit, rw.call(aten.unsqueeze.default, (src, dim)), base))
