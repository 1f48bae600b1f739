"""Fused eager graphs through shape classes: a pending graph that fused eager mode has not
compiled for its exact sizes comes here (``torchtpu._C.set_fused_graph_hook``) before it is
compiled; when its shape class (shape_class.py) is symbolic it runs padded to buckets, so a
new length inside a known bucket compiles nothing.

The graph arrives as the recorder holds it: inputs (tensors over the captured buffers), ops
with their arguments, view reads, ``as_strided(base, sizes, strides, offset)`` of a whole
value, and writes into views (``as_strided_scatter``). A view read becomes the view ops it
is (a reshape of the base into a box, a slice or select per dim, a permute, unsqueezes and
an expand), a write those view ops and their scatters, which the rule table knows; a view
that is none of these keeps the graph at its exact sizes. The padded graph's
outputs come back as row-major prefixes of bucket-sized buffers, which the recorder's
storages take as they are (no copy, no program per length).
"""

from __future__ import annotations

import hashlib
import logging
import math
import operator
from collections.abc import Callable
from typing import Any

import torch

from torchtpu.dynamo.buckets.policy import bucket_policy
from torchtpu.dynamo.buckets.recorded import Graph, Node, TensorMeta
from torchtpu.dynamo.buckets.shape_class import ShapeClasses

log = logging.getLogger("torchtpu")

_classes: dict[int, ShapeClasses] = {}
# Exported graphs (by their exact structure) that a symbolic class runs: its runner and
# what its placeholders take.
_symbolic: dict[bytes, tuple[Any, list]] = {}


class NotAView(Exception):
    """A view read that no chain of view ops expresses."""


# A factory's arguments its out= variant takes from the out tensor.
_FACTORY_KWARGS = ("dtype", "layout", "device", "pin_memory")


class Target:
    """How a recorded op runs in the exported graph: `op`, given the recorded arguments
    `keep` (in order); `writes`: `op` is the functional form of an op writing an argument,
    whose results take the written tensors' dtypes and sizes; `typed_by`: an out= variant's
    out tensor argument, whose dtype and device a factory (``arange.start_out``) takes."""

    __slots__ = ("op", "keep", "writes", "typed_by")

    def __init__(self, op: Any, keep: list[int], writes: bool = False,
                 typed_by: int | None = None) -> None:
        self.op, self.keep, self.writes, self.typed_by = op, keep, writes, typed_by


_targets: dict[str, Target | str] = {}


def _functional(packet: Any, want: list[tuple[str, str]], returns: int,
                factory: bool) -> Any:
    """The overload of `packet` that writes nothing, returns `returns` values and takes the
    arguments `want` (names and types), then, when `factory`, only a factory's keywords."""
    for o in packet.overloads() if packet is not None else []:
        candidate = getattr(packet, o)
        schema = candidate._schema
        args = [(a.name, str(a.type)) for a in schema.arguments]
        rest = schema.arguments[len(want):]
        if args[:len(want)] == want and len(schema.returns) == returns and all(
                a.alias_info is None or not a.alias_info.is_write for a in schema.arguments) \
                and (not rest or factory and all(a.kwarg_only and a.name in _FACTORY_KWARGS
                                                 for a in rest)):
            return candidate
    return None


def _target(name: str) -> Target:
    """How the op `name` ("aten::add.Tensor") runs: itself, taking all its recorded
    arguments. An op writing an argument wrote a whole storage (the recorder made its result
    a new value): its functional form computes that value, from the arguments it writes
    when in place ("aten::fill_.Scalar": "aten::fill.Scalar"), without them for an out
    variant ("aten::where.self_out": "aten::where.self"; a factory's, "aten::arange.start_out":
    "aten::arange.start_step" of the out tensor's dtype and device). Raises NotAView when it
    has none."""
    hit = _targets.get(name)
    if isinstance(hit, str):
        raise NotAView(hit)
    if hit is not None:
        return hit
    op, _, overload = name.partition(".")
    namespace, _, base = op.partition("::")
    ops = getattr(torch.ops, namespace)
    target = getattr(getattr(ops, base), overload or "default")
    formals = target._schema.arguments
    written = [a.alias_info is not None and a.alias_info.is_write for a in formals]
    found = Target(target, list(range(len(formals))))
    if any(written):
        returns = len(target._schema.returns)
        functional = None
        if base.endswith("_") and not base.endswith("__"):  # in place
            functional = _functional(getattr(ops, base[:-1], None),
                                     [(a.name, str(a.type)) for a in formals], returns, False)
        elif all(a.kwarg_only for a, w in zip(formals, written) if w):  # out= variant
            keep = [k for k, w in enumerate(written) if not w]
            want = [(formals[k].name, str(formals[k].type)) for k in keep]
            outs = [k for k, w in enumerate(written) if w]
            functional = _functional(getattr(ops, base, None), want, returns, len(outs) == 1)
            found = Target(functional, keep, True, outs[0] if len(outs) == 1 else None)
        if functional is None:
            why = _targets[name] = (f"{name} writes an argument and has no functional form of "
                                    "its other arguments")
            raise NotAView(why)
        found.op, found.writes = functional, True
    _targets[name] = found
    return found


def _call(g: Graph, target: Any, args: tuple, kwargs: dict | None = None) -> Node:
    return g.call_function(target, args, kwargs or {})


def _box(chain: list[int], unit: set[int], sizes: list[int], strides: list[int], numel: int,
         offset: int) -> tuple[list[int], list[int]] | str:
    """The box of view dims `chain` (outermost first): each dim's extent (1 for the dims in
    `unit`, whatever their stride), the elements below the innermost stride, and the view's
    start in each; or why the view is no such box."""
    box: list[int] = []
    outer = numel
    for d in chain:
        if d in unit:
            box.append(1)
            continue
        if outer % strides[d]:
            return f"stride {strides[d]} does not divide {outer}"
        box.append(outer // strides[d])
        outer = strides[d]
    if outer > 1 or not chain:
        box.append(outer)  # the elements below the innermost stride (one is kept)
    starts = []
    rest = offset
    for k in range(len(box) - 1, -1, -1):
        starts.append(rest % box[k])
        rest //= box[k]
    starts.reverse()
    if rest:
        return f"offset {offset} is past the base"
    for k, d in enumerate(chain):
        if starts[k] + sizes[d] > box[k]:
            return f"dim {d} wraps"
    return box, starts


def _view_box(shape: list[int], sizes: list[int], strides: list[int], offset: int
              ) -> tuple[list[int], list[int], list[int]]:
    """The box a view of the row-major value of `shape` reads (view_read): its view dims
    (outermost first), the box's extents and the view's start in each. Raises NotAView
    when the view is no such box."""
    numel = math.prod(shape)
    base_strides = {math.prod(shape[k + 1:]) for k in range(len(shape))}
    dims = sorted((d for d, n in enumerate(sizes) if n != 1 and strides[d] != 0),
                  key=lambda d: -strides[d])
    if any(strides[a] <= strides[b] for a, b in zip(dims, dims[1:])):
        raise NotAView(f"strides {strides} repeat")
    unit: set[int] = set()
    fit = _box(dims, unit, sizes, strides, numel, offset)
    if isinstance(fit, str):
        raise NotAView(fit)
    for d, n in enumerate(sizes):  # size-1 dims
        if n != 1 or strides[d] == 0:
            continue
        fits: tuple[list[int], list[int]] | str = "not a stride of the base"
        if strides[d] in base_strides:  # among the dims of its stride in order
            at = sum(1 for e in dims if strides[e] > strides[d]
                     or (strides[e] == strides[d] and e < d))
            chain = dims[:at] + [d] + dims[at:]
            fits = _box(chain, unit, sizes, strides, numel, offset)
        if isinstance(fits, str):  # extent 1, before the dims of its stride
            at = sum(1 for e in dims if strides[e] > strides[d]
                     or (strides[e] == strides[d] and sizes[e] == 1))
            chain = dims[:at] + [d] + dims[at:]
            unit.add(d)
            fits = _box(chain, unit, sizes, strides, numel, offset)
        assert not isinstance(fits, str), fits  # an extent-1 dim fits anywhere
        dims, fit = chain, fits
    box, starts = fit
    return dims, box, starts


def view_read(g: Graph, base: Node, shape: list[int], sizes: list[int],
              strides: list[int], offset: int) -> Node:
    """``as_strided(base, sizes, strides, offset)`` of the whole row-major value `base` as
    view ops: the base reshaped into a box whose dims have the view's strides, a slice (or
    select) per box dim, a permute into the view's order, unsqueezes for its stride-0
    size-1 dims and an expand for its stride-0 ones. Raises NotAView when the view is not
    such a box (overlapping or wrapping strides). `shape`: the base's.

    A size-1 dim is a box dim too, placed by its stride: sliced to one element of the
    extent its stride gives when that stride is one of the base's (a one-row window of a
    longer parameter; among the dims of its stride in their order), else of an extent-1 dim
    (PyTorch gives size-1 dims any stride; before the dims of its stride). A dim that is 1
    at one length and longer at another (a context of one token) then mostly reads through
    the same view ops at both, so both lengths share a structure. A guess: the
    size-1 dim's place only decides the structure, never the values read.""" 
    numel = math.prod(shape)
    if numel == 0:  # a view of an empty value is empty: the value in the view's shape
        if math.prod(sizes):
            raise NotAView(f"a view of {sizes} of an empty value")
        return _call(g, torch.ops.aten.reshape.default, (base, list(sizes)))
    dims, box, starts = _view_box(shape, sizes, strides, offset)
    # A reshape: the recorder's values are row-major, a retraced op's fake result need not be
    # (mul of a transposed view keeps its strides), where a view would fail.
    x = _call(g, torch.ops.aten.reshape.default, (base, box))
    kept = len(dims)
    for k, d in enumerate(dims):
        # Also a slice covering its box dim: a window read whole is then the same
        # structure as a window read in part (one shape class for all its lengths).
        x = _call(g, torch.ops.aten.slice.Tensor, (x, k, starts[k], starts[k] + sizes[d]))
    # The inner box dim (and the whole box when the view has no dim of a stride): one element.
    for k in range(len(box) - 1, kept - 1, -1):
        x = _call(g, torch.ops.aten.select.int, (x, k, starts[k]))
    order = sorted(range(len(dims)), key=lambda k: dims[k])
    if order != list(range(len(dims))):
        x = _call(g, torch.ops.aten.permute.default, (x, order))
    placed = sorted(dims)
    for d in range(len(sizes)):
        if d not in placed:
            x = _call(g, torch.ops.aten.unsqueeze.default, (x, d))
    if any(sizes[d] != 1 and strides[d] == 0 for d in range(len(sizes))):
        x = _call(g, torch.ops.aten.expand.default, (x, list(sizes)))
    return x


def view_write(g: Graph, base: Node, value: Node, shape: list[int], sizes: list[int],
               strides: list[int], offset: int) -> Node:
    """``as_strided_scatter(base, value, sizes, strides, offset)``, the new value of `base`
    (row-major, of `shape`) after a write of `value` into its view, as view_read's view ops
    and their scatters: the base reshaped into the view's box, a slice (or select) per box
    dim, `value` permuted back into box order, then a slice_scatter (or select_scatter) per
    box dim from the innermost out and the reshape back, which the rule table knows under
    padding. Raises NotAView for a view that is no box, or a broadcast one (several of its
    elements one element of the base)."""
    if not math.prod(sizes):
        return base  # writes nothing
    if any(n != 1 and st == 0 for n, st in zip(sizes, strides)):
        raise NotAView(f"a write through a broadcast view (strides {strides})")
    dims, box, starts = _view_box(shape, sizes, strides, offset)
    chain = [_call(g, torch.ops.aten.reshape.default, (base, box))]
    steps: list[tuple[Any, tuple]] = []  # (scatter, its arguments after base and src)
    for k, d in enumerate(dims):
        where = (k, starts[k], starts[k] + sizes[d])
        chain.append(_call(g, torch.ops.aten.slice.Tensor, (chain[-1], *where)))
        steps.append((torch.ops.aten.slice_scatter.default, where))
    for k in range(len(box) - 1, len(dims) - 1, -1):
        chain.append(_call(g, torch.ops.aten.select.int, (chain[-1], k, starts[k])))
        steps.append((torch.ops.aten.select_scatter.default, (k, starts[k])))
    # The value in the read's view order without its unplaced (stride-0, size-1) dims, then
    # in box order.
    y = _call(g, torch.ops.aten.reshape.default, (value, [sizes[d] for d in sorted(dims)]))
    order = sorted(range(len(dims)), key=lambda k: dims[k])
    if order != list(range(len(dims))):
        back = [0] * len(order)
        for i, k in enumerate(order):
            back[k] = i
        y = _call(g, torch.ops.aten.permute.default, (y, back))
    for (scatter, where), outer in zip(reversed(steps), reversed(chain[:-1])):
        y = _call(g, scatter, (outer, y, *where))
    return _call(g, torch.ops.aten.reshape.default, (y, list(shape)))


def _row_major_prefix(sizes: list[int], strides: list[int], offset: int) -> bool:
    """Whether the view (sizes, strides, offset) is the row-major first elements of its
    storage: offset 0, contiguous."""
    if offset != 0:
        return False
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _reshaped(g: Graph, x: Node, shape: list[int], sizes: list[int]) -> Node:
    """`x` (of `shape`) in `sizes`: itself when they are equal (a graph writing a padded
    output's prefix then has the structure of one writing the whole output)."""
    if list(shape) == list(sizes):
        return x
    return _call(g, torch.ops.aten.reshape.default, (x, list(sizes)))


def _prefix_of(n: tuple, inputs: list[torch.Tensor]) -> tuple[int, tuple[int, ...]] | None:
    """The flat input and sizes of node `n` when it reads (a view) or writes
    (``as_strided_scatter``) a row-major prefix of a 1-d input: a padded graph's output at its
    true size."""
    if n[0] == "":
        base, sizes, strides, offset = n[1], n[2], n[3], n[4]
    elif n[0] == "aten::as_strided_scatter":
        base, (sizes, strides, offset) = n[2][0][2], n[1][2:5]
    else:
        return None
    if base >= 0 or inputs[-base - 1].dim() != 1 or not _row_major_prefix(sizes, strides, offset):
        return None
    return -base - 1, tuple(sizes)


def feed(inputs: list[torch.Tensor], fed: list[tuple[int, list[int] | None]]
         ) -> list[torch.Tensor]:
    """The tensors a graph's placeholders take: input k, or its row-major prefix of `sizes`."""
    return [inputs[k] if sizes is None else inputs[k].view(-1)[:math.prod(sizes)].view(sizes)
            for k, sizes in fed]


def build_graph(inputs: list[torch.Tensor], nodes: list[tuple], outputs: list[int],
                dims: list[list[int]], dtypes: list[torch.dtype] | None = None
                ) -> tuple[Graph, list[tuple[int, list[int] | None]]]:
    """The exported pending graph as a graph of aten ops at its recorded sizes (recorded.py:
    its shape class reads it and retraces it, nothing runs it), and the tensors its
    placeholders take. A row-major prefix of an input (a padded graph's output
    read at its true size, a parameter's first rows) is a placeholder of its own, the view
    of the input: its true size is what varies, not the storage's. `dims` and `dtypes`:
    each node value's sizes and dtype."""
    g = Graph()
    env: dict[int, Node] = {}
    fed: list[tuple[int, list[int] | None]] = []
    # Only of a flat input: a padded graph's output (a parameter's rows are sliced in the
    # graph, whose rule reads them out of the whole parameter). Written too: a graph cut
    # between an op and its in-place update (SDPA's softmax and its where(..., out=)).
    prefixes = {n[5] if n[0] == "" else n[3]: p for n in nodes
                if (p := _prefix_of(n, inputs)) is not None}
    # A write over a prefix keeps only the prefix (the padding after it is never read), so
    # not when a value written from it is returned or read whole (a buffer of the caller's,
    # written at its start).
    written = {n[3]: n[2][0][2] for n in nodes if n[0] == "aten::as_strided_scatter"}

    def root(v: int) -> int | None:
        """The prefix write whose storage value `v` is (through later writes into it)."""
        while v in written and v not in prefixes:
            v = written[v]
        return v if v in written else None

    whole = set(outputs) | {r[2] for n in nodes if n[0] != "" for r in n[2]
                            if n[0] != "aten::as_strided_scatter" or r[0] != 0}
    # So is a view reaching past the prefix (buf[:n] written, buf[n:] read).
    for n in nodes:
        if n[0] == "" and (w := root(n[1])) is not None and math.prod(n[2]):
            last = n[4] + sum((size - 1) * stride for size, stride in zip(n[2], n[3]))
            if last >= math.prod(prefixes[w][1]):
                whole.add(n[1])
    for v in whole:
        if (w := root(v)) is not None:
            prefixes.pop(w)
    used = {r[2] for n in nodes if n[0] != "" for r in n[2]
            if not (r[0] == 0 and n[3] in prefixes)} | set(outputs) | {
        n[1] for n in nodes if n[0] == "" and n[5] not in prefixes} | {
        -(n[5] + 1) for n in nodes if n[0] != "" and n[5] >= 0}

    def placeholder(k: int, sizes: list[int] | None) -> Node:
        p = g.placeholder(f"in{len(fed)}")
        fed.append((k, sizes))
        t = inputs[k]
        p.meta["val"] = TensorMeta(t.shape if sizes is None else sizes, t.dtype, t.device)
        return p

    # A prefix in its input's place: a graph reading a whole padded output (a length equal
    # to its bucket) and one reading a prefix of it have the same placeholders.
    fed_prefix: dict[tuple[int, tuple[int, ...]], Node] = {}
    for k in range(len(inputs)):
        if -(k + 1) in used:
            env[-(k + 1)] = placeholder(k, None)
        for vid, p in prefixes.items():  # (a write's new value needs no placeholder)
            if p[0] == k and p not in fed_prefix and vid not in written:
                fed_prefix[p] = placeholder(k, list(p[1]))
    # The values that are a prefix's new contents: their shape is the prefix's, the rest of
    # their storage (padding) is neither read nor returned.
    cut: dict[int, list[int]] = {}

    def shape_of(v: int) -> list[int]:
        if v in cut:
            return cut[v]
        return list(dims[v] if v >= 0 else inputs[-v - 1].shape)

    for n in nodes:
        if n[0] == "":
            _, base, sizes, strides, offset, first, _num = n
            if first in prefixes:
                env[first] = fed_prefix[prefixes[first]]
            elif base in cut and _row_major_prefix(sizes, strides, offset) and \
                    math.prod(sizes) == math.prod(cut[base]):
                env[first] = _reshaped(g, env[base], cut[base], sizes)  # the whole prefix
            else:
                env[first] = view_read(g, env[base], shape_of(base), list(sizes),
                                       list(strides), offset)
            continue
        name, args, reads, first, num, rng = n
        if name == "aten::as_strided_scatter":  # a write into a view of a value
            (_, _, base), (_, _, value) = reads
            if first in prefixes:  # the whole prefix: the value is its new contents
                cut[first] = list(prefixes[first][1])
                env[first] = _reshaped(g, env[value], shape_of(value), cut[first])
                continue
            if base in cut:
                cut[first] = cut[base]
            env[first] = view_write(g, env[base], env[value], shape_of(base), list(args[2]),
                                    list(args[3]), args[4])
            continue
        how = _target(name)
        target = how.op
        args = list(args)
        lists: dict[int, list[Node]] = {}
        for arg, item, vid in reads:
            if item < 0:
                args[arg] = env[vid]
            else:
                lists.setdefault(arg, []).append(env[vid])
        # A host scalar tensor (a Python number PyTorch wrapped) is the number it holds.
        args = [a.item() if isinstance(a, torch.Tensor) and a.device.type == "cpu"
                and a.dim() == 0 else a for a in args]
        for arg, present in lists.items():
            it = iter(present)
            args[arg] = [next(it) if m else None for m in args[arg]]
        typed = next((vid for arg, item, vid in reads if arg == how.typed_by), None)
        args = [args[k] for k in how.keep]
        schema = target._schema.arguments
        pos = tuple(a for a, s in zip(args, schema) if not s.kwarg_only)
        kw = {s.name: a for a, s in zip(args, schema) if s.kwarg_only}
        if len(schema) > len(args):  # a factory's out= variant: the out tensor's type
            if typed is None or (typed >= 0 and dtypes is None):
                raise NotAView(f"{name}: its out tensor's dtype is unknown")
            kw["dtype"] = inputs[-typed - 1].dtype if typed < 0 else dtypes[typed]
            kw["device"] = inputs[0].device
        if rng >= 0:
            # A random op draws from the generator state its call took (an input): the
            # shape class's program then draws what the exact program would
            # (dynamo/rng_states.py reads run_with_rng_state).
            call = _call(g, torch._prims.rng_prims.run_with_rng_state,
                         (env[-(rng + 1)], target, *pos), kw)
        else:
            call = _call(g, target, pos, kw)
        returns = target._schema.returns
        if num == 1 and len(returns) == 1:
            env[first] = call
        elif num != len(returns) or any(str(r.type) != "Tensor" for r in returns):
            raise NotAView(f"{name}: its {num} results are not its {len(returns)} returns")
        else:
            for i in range(num):
                env[first + i] = g.call_function(operator.getitem, (call, i))
        if how.writes:
            # The written tensors' types: an in-place op keeps self's dtype (h_f16.add_(x_f32)
            # adds in float32, then casts), a range factory out's shape (arange into 2x2).
            if dtypes is None:
                raise NotAView(f"{name}: the dtypes of the tensors it writes are unknown")
            for v in range(first, first + num):
                if how.typed_by is not None:  # (a reshape: see view_read)
                    env[v] = _call(g, torch.ops.aten.reshape.default, (env[v], list(dims[v])))
                env[v] = _call(g, torch.ops.aten._to_copy.default, (env[v],),
                               {"dtype": dtypes[v]})
    g.output(tuple(env[v] for v in outputs))
    return g, fed


def run(inputs: list[torch.Tensor], nodes: list[tuple] | Callable[[], list[tuple]],
        outputs: list[int], dims: list[list[int]], key: bytes | None = None,
        dtypes: list[torch.dtype] | None = None) -> list[torch.Tensor] | None:
    """The hook: the outputs' values when the graph's shape class runs it padded, else None
    (the recorder compiles it at its exact sizes). `nodes` is the node list or builds it;
    `key`, where the recorder could make one, is the graph exactly (equal keys: equal
    graphs at equal sizes)."""
    # Inside a backward pass (the autograd engine's thread) graphs stay exact: tracing
    # there would run inside the engine's own graph task.
    if bucket_policy() == "off" or not inputs or torch._C._current_graph_task_id() != -1:
        return None
    device = inputs[0].device.index or 0
    build = nodes if callable(nodes) else None
    if build is not None:
        nodes = None if key is not None else build()
    # A structure seen before at these exact sizes skips building its FX graph (and, with
    # the recorder's key, its node list). Kept as a digest: a large model's key is long.
    if key is None:
        key = repr((nodes, outputs, [(t.shape, t.dtype) for t in inputs])).encode()
    seen = hashlib.sha256(key).digest()
    hit = _symbolic.get(seen)
    if hit is not None:
        with torch.no_grad():
            return list(hit[0](*feed(inputs, hit[1])))
    if nodes is None:
        assert build is not None
        nodes = build()
    try:
        graph, fed = build_graph(inputs, nodes, outputs, dims, dtypes)
    except NotAView as e:
        log.info("torchtpu: fused graph compiles per exact size: %s", e)
        return None
    except Exception as e:  # a torchtpu bug in reading the graph: the exact program runs
        log.warning("torchtpu: fused graph compiles per exact size: reading it failed: %s: %s",
                    type(e).__name__, e)
        return None
    classes = _classes.setdefault(device, ShapeClasses(device))
    evictions = classes.evictions
    try:
        runner, why = classes.runner(graph)
    except Exception as e:  # a torchtpu bug in making it symbolic: the exact program runs
        log.warning("torchtpu: fused graph compiles per exact size: its shape class failed: "
                    "%s: %s", type(e).__name__, e)
        return None
    if classes.evictions != evictions:
        _symbolic.clear()  # it would keep the dropped classes' runners alive
    if runner is None:
        return None
    if len(_symbolic) >= 4096:
        _symbolic.clear()
    _symbolic[seen] = (runner, fed)
    with torch.no_grad():
        return list(runner(*feed(inputs, fed)))


__all__ = ["NotAView", "build_graph", "feed", "run", "view_read", "view_write"]
