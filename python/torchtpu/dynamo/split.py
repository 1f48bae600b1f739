"""A graph cut where parts of it must run eagerly: compiled pieces between eager calls.

Three kinds of node run that way: functional collectives that cannot go into the program
(dynamo/collectives.py decides, and counts them); ops the lowering table has no entry for
(`unlowered_ops`: ``special.*`` functions, ``linalg.eig``, ``segment_reduce``, a user's
custom op, and higher-order ops other than control flow: a mutating custom op's
``auto_functionalized``, ``print``) or whose call eager mode refuses before lowering it
(`eager_refusal`), which then run as they do in eager mode (a counted CPU fallback, with its
warning; or eager mode's error) instead of failing the whole compile or computing; and
nodes that make or read a size known only from data
(`data_dependent_ops`: ``nonzero``, a boolean-mask index, ``.item()`` and the size
arithmetic and runtime asserts on such values), which a program of static shapes cannot
hold. The graph is cut with FX's ``split_module`` into runs of eager nodes and runs of
compiled ones, in the graph's order; each compiled run is a runner of its own, its size
symbols bound from the whole graph's inputs and from its own (a data-dependent size is
read from the shape of the tensor an eager run made).
"""

from __future__ import annotations

import copy
import logging
import operator
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from torchtpu import _C
from torchtpu.dynamo.graph_spec import CONTROL_FLOW

log = logging.getLogger("torchtpu.compile")

# Graphs cut at ops with no lowering, by op; eager calls of such ops made that way.
stats: Counter = Counter()
unlowered_splits: Counter = Counter()
_warned: set[str] = set()


def op_name(target: Any) -> str:
    schema = target._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


class _NoStandIn(Exception):
    """An argument a meta stand-in cannot take the place of (a size known only from data)."""


def _meta_stand_in(a: Any) -> Any:
    """What a node argument is at the graph's example sizes, as eager mode would see it: a
    meta tensor (its dtype, sizes and strides), a size's value."""
    if isinstance(a, torch.fx.Node):
        a = a.meta.get("val")
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = a.node.hint
        if hint is None:
            raise _NoStandIn
        return hint
    if isinstance(a, torch.device):
        raise _NoStandIn  # a factory's device: the call would go there
    if isinstance(a, torch.Tensor):
        sizes = [_meta_stand_in(s) for s in a.shape]
        strides = [_meta_stand_in(s) for s in a.stride()]
        return torch.empty_strided(sizes, strides, dtype=a.dtype, device="meta")
    if isinstance(a, (list, tuple)):
        return type(a)(_meta_stand_in(x) for x in a)
    return a


def eager_refusal(node: torch.fx.Node) -> str | None:
    """Why eager mode refuses `node`'s call before lowering it (the dtypes its CPU kernel
    refuses: softmax of an int64 tensor; its C++ meta kernel's error: argmax of a bool
    one), which Dynamo's fake tensors, running Python meta functions, let through: such a
    node runs as eager mode runs it (which raises, or for a few meta refusals runs the CPU
    kernel) instead of its lowering computing a value. Only calls with a bool, integer or
    complex tensor are checked: a check the fake tensors skip is a dtype check, and a graph
    of float tensors pays nothing."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    values = [a.meta.get("val") for a in node.all_input_nodes]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if not tensors or all(t.dtype.is_floating_point for t in tensors):
        return None  # a factory, or float tensors only
    from torch.utils._python_dispatch import _disable_current_modes

    schema = node.target._schema
    try:
        with _disable_current_modes():
            args = _meta_stand_in(tuple(node.args))
            kwargs = {k: _meta_stand_in(v) for k, v in node.kwargs.items()}
            return _C.eager_refusal(schema.name, schema.overload_name, args, kwargs)
    except _NoStandIn:
        return None


def _complex_refused(node: torch.fx.Node, name: str) -> bool:
    """Whether `node` takes or gives a complex tensor its lowering does not take (complex
    linalg.inv, solve, eigh, ...): eager mode runs such a call on the CPU, so the graph
    runs it eagerly too instead of failing to lower."""
    values = [a.meta.get("val") for a in node.all_input_nodes]
    out = node.meta.get("val")
    values += list(out) if isinstance(out, (tuple, list)) else [out]
    return any(isinstance(v, torch.Tensor) and v.is_complex() for v in values) and \
        not _C.accepts_complex(name)


# The meta key of a node whose lowering refused its call when its graph was lowered (an
# unimplemented case: a dtype or mode the lowering leaves to the CPU, as eager mode runs
# it): its reason. The graph is then cut there (runner.py).
REFUSED = "torchtpu_lowering_refused"


def _unlowered(node: torch.fx.Node, name: str) -> bool:
    """Whether op node `node` (op `name`) runs eagerly: no lowering, a complex call its
    lowering does not take, arguments eager mode refuses before lowering, or a call its
    lowering refused."""
    return not _C.has_lowering(name) or REFUSED in node.meta or \
        _complex_refused(node, name) or _cpu_draw(node) or bool(eager_refusal(node))


def _cpu_draw(node: torch.fx.Node) -> bool:
    """Whether `node` is a random op drawing a CPU tensor (`torch.rand(3)` with no device in
    a graph over tpu tensors): it draws from the CPU's generator, as in eager mode, not from
    the device's, which the graph's program would use."""
    val = node.meta.get("val")
    return isinstance(node.target, torch._ops.OpOverload) and \
        torch.Tag.nondeterministic_seeded in node.target.tags and \
        isinstance(val, torch.Tensor) and val.device.type == "cpu"


def unlowered_higher_order(target: Any) -> str | None:
    """The name of higher-order op `target` when it is one no graph holds (not control
    flow, which is lowered): it runs eagerly, as its own Python implementation does."""
    if isinstance(target, torch._ops.HigherOrderOperator) and target not in CONTROL_FLOW:
        return f"higher_order::{target.name()}"
    return None


def unlowered_ops(gm: torch.fx.GraphModule,
                  handled: Callable[[torch.fx.Node], bool] = lambda node: False) -> list[str]:
    """The ops of `gm` with no lowering (neither in the lowering table nor a module call
    such as a jax_op function), in graph order, each once; nodes `handled` (collectives,
    cut by their own rule) are left out."""
    names: list[str] = []
    for node in gm.graph.nodes:
        if isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
            continue  # size arithmetic (sym_size, ...): not a program op (graph_spec)
        if handled(node):
            continue
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            name = op_name(node.target)
            if name not in names and _unlowered(node, name):
                names.append(name)
        elif node.op == "call_function" and unlowered_higher_order(node.target):
            name = unlowered_higher_order(node.target)
            if name not in names:
                names.append(name)
        elif node.op == "call_function" and node.target in CONTROL_FLOW:
            inner = eager_control_flow(gm, node)
            name = f"{CONTROL_FLOW[node.target]} ({', '.join(inner)})"
            if inner and name not in names:
                names.append(name)
    return names


def eager_control_flow(gm: torch.fx.GraphModule, node: torch.fx.Node) -> list[str]:
    """Why control-flow node `node` of `gm` runs eagerly as a whole (its subgraphs then run
    as eager ops): the ops of its subgraphs, nested ones included, that have no lowering or
    draw random numbers (one generator state cannot serve a loop's iterations or only the
    branch taken); empty when it is compiled."""
    reasons: list[str] = []
    for a in node.args:
        if not (isinstance(a, torch.fx.Node) and a.op == "get_attr"):
            continue
        sub = getattr(gm, a.target)
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        for n in sub.graph.nodes:
            if n.op != "call_function":
                continue
            if n.target in CONTROL_FLOW:
                found = eager_control_flow(sub, n)
            elif isinstance(n.target, torch._ops.OpOverload):
                name = op_name(n.target)
                found = [name] if _unlowered(n, name) else (
                    [f"{name}, random"] if torch.Tag.nondeterministic_seeded in n.target.tags
                    else [])
            else:
                hop = unlowered_higher_order(n.target)
                found = [hop] if hop else []
            reasons += [r for r in found if r not in reasons]
    return reasons


def _unbacked(value: Any) -> bool:
    """Whether an FX value (a node's ``val``) is a size, float or bool that data decides."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    return isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)) and bool(
        free_unbacked_symbols(value))


def _writes_through_a_mask(node: torch.fx.Node) -> bool:
    """index_put with a boolean mask that the decompositions left (its values are not one
    per row: the backward of x[mask] puts a gradient of the mask's count): which positions
    take which value is known only from data, as for nonzero."""
    if node.target not in (torch.ops.aten.index_put.default, torch.ops.aten.index_put_.default):
        return False
    indices = node.args[1] if len(node.args) > 1 else []
    return any(isinstance(i, torch.fx.Node) and isinstance(i.meta.get("val"), torch.Tensor)
               and i.meta["val"].dtype in (torch.bool, torch.uint8) for i in indices)


def is_data_dependent(node: torch.fx.Node) -> bool:
    """A node that makes a size from data (nonzero, item(): Dynamo's unbacked bindings), is
    such a size (its arithmetic, sym_size of a tensor it shapes), or takes one as an
    argument (arange(n), a runtime assert, an index). Tensors shaped by such sizes are not:
    a compiled piece reads the size from their shape."""
    if node.op != "call_function":
        return False
    if node.meta.get("unbacked_bindings") or _unbacked(node.meta.get("val")):
        return True
    if _writes_through_a_mask(node):
        return True
    args: list[Any] = []
    torch.fx.node.map_arg((node.args, node.kwargs), args.append)
    return any(_unbacked(a.meta.get("val")) for a in args)


def data_dependent_ops(gm: torch.fx.GraphModule, producers_only: bool = False) -> list[str]:
    """The ops of `gm`'s data-dependent nodes (`is_data_dependent`), each once; with
    `producers_only`, those that make such a size (nonzero, item(), a mask index) or
    write through a mask."""
    names: list[str] = []
    for node in gm.graph.nodes:
        if not is_data_dependent(node) or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if producers_only and not (node.meta.get("unbacked_bindings") or
                                   _writes_through_a_mask(node)):
            continue
        if op_name(node.target) not in names:
            names.append(op_name(node.target))
    return names


def counted(op: Any, counter: Counter, key: str) -> Callable[..., Any]:
    """`op`, counting its calls under `key` of `counter` (an eager node of a cut graph)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        counter[key] += 1
        return op(*args, **kwargs)

    name = op._schema.name if isinstance(op, torch._ops.OpOverload) else op.name()
    run.__name__ = f"out_of_graph_{name.split('::')[-1]}"
    return run


class SplitGraph:
    """Runs `gm` cut at the nodes `runs_eagerly` picks (each called through `wrap(op)`)."""

    def __init__(self, gm: torch.fx.GraphModule, runs_eagerly: Callable[[torch.fx.Node], bool],
                 compile_piece: Callable[[torch.fx.GraphModule, dict], Callable[..., Any]],
                 bind_sizes: Callable[[list, tuple], dict],
                 wrap: Callable[[Any], Callable[..., Any]] = lambda op: op) -> None:
        """`compile_piece(sub, sizes)` compiles a piece; `sizes` is filled, before each
        call, with the size symbols of the whole graph (`bind_sizes` reads them)."""
        from torch.fx.passes.split_module import split_module

        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.bind_sizes = bind_sizes
        self.sizes: dict = {}
        counter = [0]
        kind: list[bool | None] = [None]

        def part_of(node: torch.fx.Node) -> int:
            if node.target is operator.getitem:  # an item of the result it reads
                return parts[node.args[0]]
            eager = runs_eagerly(node)
            if kind[0] is not None and eager != kind[0]:
                counter[0] += 1
            kind[0] = eager
            return counter[0]

        # A constant the graph returns as it is (the effect token a graph holding linalg.inv
        # gives back) belongs to no piece, and split_module cannot place it: it is left out
        # of the split graph and put back into each call's results.
        self.constants: dict[int, Any] = {}
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        results = output.args[0]
        if isinstance(results, (tuple, list)) and any(
                isinstance(r, torch.fx.Node) and r.op == "get_attr" for r in results):
            gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
            output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
            kept = []
            for i, r in enumerate(output.args[0]):
                if isinstance(r, torch.fx.Node) and r.op == "get_attr":
                    self.constants[i] = getattr(gm, r.target)
                else:
                    kept.append(r)
            output.args = (tuple(kept),)
            gm.graph.eliminate_dead_code()
            gm.recompile()
        parts: dict[torch.fx.Node, int] = {}
        for node in gm.graph.nodes:
            if node.op == "call_function":
                parts[node] = part_of(node)
        split = split_module(gm, gm, lambda node: parts[node], keep_original_order=True)
        self.num_eager = 0
        for node in split.graph.nodes:
            if node.op != "call_module":
                continue
            sub = getattr(split, node.target)
            ops = [n for n in sub.graph.nodes if n.op == "call_function"]
            if ops and all(runs_eagerly(n) or n.target is operator.getitem for n in ops):
                for n in ops:
                    if n.target is not operator.getitem:
                        n.target = wrap(n.target)
                        self.num_eager += 1
                sub.recompile()
            else:
                setattr(split, node.target, _Piece(sub, compile_piece(sub, self.sizes)))
        self.split = split

    def __call__(self, *args: Any) -> Any:
        self.sizes.clear()
        self.sizes.update(self.bind_sizes(self.placeholders, args))
        out = self.split(*args)
        out = out if isinstance(out, tuple) else (out,)
        if self.constants:
            rest = iter(out)
            out = tuple(self.constants[i] if i in self.constants else next(rest)
                        for i in range(len(out) + len(self.constants)))
        return out


def split_at_eager_ops(gm: torch.fx.GraphModule, names: list[str],
                       compile_piece: Callable[[torch.fx.GraphModule, dict], Callable[..., Any]],
                       bind_sizes: Callable[[list, tuple], dict]) -> SplitGraph:
    """`gm` cut at its ops with no lowering (`names`) and its data-dependent nodes, which
    run eagerly."""
    unlowered = set(names)

    def runs_eagerly(node: torch.fx.Node) -> bool:
        if is_data_dependent(node):
            return True
        if node.op == "call_function" and node.target in CONTROL_FLOW:
            return bool(eager_control_flow(gm, node))
        if node.op == "call_function" and unlowered_higher_order(node.target):
            return True
        return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
                and op_name(node.target) in unlowered and _unlowered(node, op_name(node.target)))

    def wrap(op: Any) -> Callable[..., Any]:
        # Size arithmetic (operator.ge on sizes, ...) is Python, not an op to count.
        return counted(op, stats, "num_out_of_graph_ops") \
            if isinstance(op, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)) else op

    split = SplitGraph(gm, runs_eagerly, compile_piece, bind_sizes, wrap=wrap)
    stats["num_graph_unlowered_splits"] += 1
    for name in names:
        unlowered_splits[name] += 1
    dependent = data_dependent_ops(gm, producers_only=True)
    shown = [n for n in names if n != "aten::_assert_scalar" and n not in dependent]
    complex_calls = {op_name(n.target) for n in gm.graph.nodes
                     if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                     and _complex_refused(n, op_name(n.target))}
    not_taken = {op_name(n.target): n.meta[REFUSED] for n in gm.graph.nodes
                 if REFUSED in n.meta}
    not_taken.update({op_name(n.target): "CPU draws take the CPU's generator"
                      for n in gm.graph.nodes if n.op == "call_function" and _cpu_draw(n)})
    lowered = [n for n in shown if _C.has_lowering(n)]
    complex_only = [n for n in lowered if n in complex_calls and n not in not_taken]
    refused = [n for n in lowered if n not in complex_calls and n not in not_taken]
    reasons = (["no lowering"] if len(lowered) < len(shown) else []) + (
        [f"{', '.join(complex_only)} not lowered for complex dtypes (eager mode runs them on "
         "the CPU)"] if complex_only else []) + (
        [f"eager mode refuses the arguments of {', '.join(refused)} before lowering them"]
        if refused else []) + [why for why in not_taken.values()] + (
        ["sizes or positions known only from data"] if dependent else [])
    message = (f"torchtpu: a compiled graph runs {', '.join(shown + dependent)} eagerly "
               f"between compiled pieces ({'; '.join(reasons)}): each call runs one program "
               "per piece and those ops as eager mode runs them")
    log.info(message)
    fresh = [n for n in shown + dependent if n not in _warned]
    if fresh:
        _warned.update(fresh)
        warnings.warn(message, stacklevel=2)
    return split


class _Piece(torch.nn.Module):
    """A compiled piece called as the FX submodule it replaces (one value or a tuple)."""

    def __init__(self, sub: torch.fx.GraphModule, runner: Callable[..., Any]) -> None:
        super().__init__()
        out = next(n for n in sub.graph.nodes if n.op == "output")
        self.single = not isinstance(out.args[0], (tuple, list))
        self.runner = runner

    def forward(self, *args: Any) -> Any:
        out = self.runner(*args)
        return out[0] if self.single else tuple(out)


def compile_stats() -> dict[str, Any]:
    return {
        "num_graph_unlowered_splits": stats["num_graph_unlowered_splits"],
        "num_out_of_graph_ops": stats["num_out_of_graph_ops"],
        "graph_unlowered_splits": dict(unlowered_splits),
    }
