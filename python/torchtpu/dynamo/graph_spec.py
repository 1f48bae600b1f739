"""FX graph of aten ops -> the torch-free graph description that C++ lowers.

Every call_function node must target an aten OpOverload; its arguments are normalized
to schema order and classified exactly like eager mode's boxed kernel does (tensors by
type, ``Scalar`` values as runtime scalars, ints/lists/bools/strings as structure). Result
types come from the node's ``meta["val"]`` (fake tensors recorded while tracing).

Graphs with symbolic sizes (``dynamic=True``, ``mark_dynamic``, or Dynamo's automatic
dynamic shapes) are described for one assignment of sizes to their size symbols: their
exact sizes, or their buckets for a graph padded by the buckets pass (buckets/). Padded,
every shape is static at the bucket sizes and a size used as data (a mask's bound, a
mean's divisor) is a runtime size value, so one program serves every size in the bucket.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from torchtpu import _C
from torchtpu._dtypes import DTYPES

# Meta key of a node whose random draws read the generator state another node computes
# (rng_states.py), naming that node: the GraphNode's rng_ref.
RNG_FROM = "torchtpu_rng_from"


class UnsupportedGraph(NotImplementedError):
    """The graph holds something the tpu backend cannot lower (says what and where)."""


def _dtype(dtype: torch.dtype, where: str) -> Any:
    if dtype not in DTYPES:
        raise UnsupportedGraph(f"tpu compile: dtype {dtype} is not supported ({where})")
    return DTYPES[dtype]


def size_expr(s: Any) -> sympy.Expr:
    """A size as a sympy expression (an int becomes a constant)."""
    if isinstance(s, (torch.SymInt, torch.SymFloat)):
        return s.node.expr
    return sympy.Integer(int(s))


def symbolic_dims(t: Any) -> set[int]:
    """The dims of a (fake) tensor whose sizes are symbolic; empty for anything else."""
    if not isinstance(t, torch.Tensor):
        return set()
    return {d for d, s in enumerate(t.shape) if isinstance(s, torch.SymInt)}


def insert_call(graph: torch.fx.Graph, fake_mode: Any, target: Any, args: tuple,
                kwargs: dict | None = None) -> torch.fx.Node:
    """A call_function node of `target` at the graph's insertion point, with its
    ``meta["val"]`` computed from its operands' under `fake_mode` (the graph's own, from
    ``torch._guards.detect_fake_mode``), as rewrites of traced graphs need."""
    node = graph.call_function(target, args, kwargs or {})
    vals = torch.fx.node.map_arg((args, kwargs or {}), lambda n: n.meta["val"])
    with fake_mode:
        node.meta["val"] = target(*vals[0], **vals[1])
    return node


def _number(expr: Any, values: dict[sympy.Symbol, int]) -> Any:
    """`expr` at the sizes `values`, a sympy number."""
    result = sympy.sympify(sympy.sympify(expr).xreplace(values))
    if not result.is_number:
        raise UnsupportedGraph(f"tpu compile: size {expr} depends on unbound symbols")
    return result


def _truth(expr: Any, values: dict[sympy.Symbol, int]) -> bool:
    """A condition on sizes (a SymBool's expression) at the sizes `values`."""
    result = sympy.sympify(expr).xreplace(values)
    if result not in (sympy.true, sympy.false):
        raise UnsupportedGraph(f"tpu compile: condition {expr} depends on unbound symbols")
    return bool(result)


def evaluate(expr: Any, values: dict[sympy.Symbol, int]) -> int:
    if isinstance(expr, (int, bool)):
        return int(expr)
    return int(_number(expr, values))


def output_value(expr: Any, kind: type, values: dict[sympy.Symbol, int]) -> Any:
    """A graph output computed from sizes, at the sizes `values`, as the Python value its
    `kind` (int, float or bool: a SymInt, SymFloat or SymBool) is."""
    if kind is bool:
        return _truth(expr, values)
    if kind is float:
        return float(_number(expr, values))
    return evaluate(expr, values)


def free_symbols(gm: torch.fx.GraphModule) -> list[sympy.Symbol]:
    """The size symbols of a graph's inputs, in a stable order."""
    found: set[sympy.Symbol] = set()
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt) and not node.users:
            continue  # a size input nothing reads (a jagged tensor's ragged size, say)
        sizes = [val] if isinstance(val, torch.SymInt) else (
            list(val.shape) if isinstance(val, torch.Tensor) else [])
        for s in sizes:
            found |= size_expr(s).free_symbols
    return sorted(found, key=lambda s: s.name)


@dataclass
class GraphPlan:
    """A lowered-graph description plus how to feed it and rebuild its outputs."""

    spec: Any
    # Index into the FX placeholders of each C++ input (tensor placeholders only).
    input_placeholders: list[int]
    # Size expression of each runtime size value (evaluated per call).
    slots: list[sympy.Expr] = field(default_factory=list)
    # Per FX output: ("tensor", k, shape exprs), ("size", expr, int|float|bool), ("arg", placeholder
    # position, None) or ("const", value).
    output_layout: list[tuple] = field(default_factory=list)
    # Static shape of each C++ input (its bucket shape when padded).
    input_bounds: list[list[int]] = field(default_factory=list)
    # Tensor constants of the graph (get_attr nodes: tensors an op built from Python
    # values while tracing), fed after the placeholders as extra C++ inputs.
    constants: list[torch.Tensor] = field(default_factory=list)
    constants_device: int | None = None  # the tpu index they were moved to (first run)
    # The FX node of each node of `spec` (what a lowering that refuses one names).
    fx_nodes: list[torch.fx.Node] = field(default_factory=list)
    # Per tuple of true sizes seen: (size values, per output_layout entry its evaluated
    # shape or size, None for constants). Sympy evaluation costs ~20 us a size, and a
    # training graph has a hundred of them; the sizes repeat from call to call.
    resolved: dict[tuple[int, ...], tuple[list[int], list[Any]]] = field(default_factory=dict)

    def resolve(self, symbols: list[sympy.Symbol], actual: dict[sympy.Symbol, int]
                ) -> tuple[list[int], list[Any]]:
        key = tuple(actual[s] for s in symbols)
        if key not in self.resolved:
            sizes = [evaluate(e, actual) for e in self.slots]
            layout: list[Any] = []
            for entry in self.output_layout:
                if entry[0] == "size":
                    layout.append(output_value(entry[1], entry[2], actual))
                elif entry[0] == "tensor":
                    layout.append([evaluate(e, actual) for e in entry[2]])
                else:
                    layout.append(None)
            self.resolved[key] = (sizes, layout)
        return self.resolved[key]


class _Builder:
    def __init__(self, values: dict[sympy.Symbol, int], bucketed: bool) -> None:
        self.values = values
        self.bucketed = bucketed
        self.slots: list[sympy.Expr] = []

    def concrete(self, s: Any) -> int:
        return evaluate(size_expr(s), self.values)

    def slot(self, expr: sympy.Expr) -> int:
        if expr not in self.slots:
            self.slots.append(expr)
        return self.slots.index(expr)

    def tensor_type(self, t: torch.Tensor, where: str) -> Any:
        return _C.TensorType(_dtype(t.dtype, where), [self.concrete(s) for s in t.shape])


_INT64_MAX = 2**63 - 1


def _scalar(value: Any) -> Any:
    s = _C.GraphScalar()
    if isinstance(value, bool):
        s.category = _C.ScalarCategory.bool
        s.int_value = int(value)
    elif isinstance(value, int):
        s.category = _C.ScalarCategory.int
        if value > _INT64_MAX:
            # PyTorch takes an int in [2**63, 2**64) as a uint64 Scalar (a larger one raises
            # at the call): its bits, marked unsigned.
            s.int_value = value - 2**64
            s.is_unsigned = True
        else:
            s.int_value = value
    elif isinstance(value, complex):
        s.category = _C.ScalarCategory.complex
        s.float_value = value.real
        s.imag_value = value.imag
    else:
        s.category = _C.ScalarCategory.float
        s.float_value = float(value)
    return s


def _normalized_args(node: torch.fx.Node) -> list[Any]:
    schema = node.target._schema
    values = []
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            values.append(node.args[i])
        elif a.name in node.kwargs:
            values.append(node.kwargs[a.name])
        elif a.has_default_value():
            values.append(a.default_value)
        else:
            values.append(None)
    return values


def build_plan(gm: torch.fx.GraphModule, values: dict[sympy.Symbol, int] | None = None,
               bucketed: bool = False) -> GraphPlan:
    """Describes `gm` with its size symbols bound to `values`: exact sizes, or bucket sizes
    when `bucketed` (the graph was rewritten by the buckets pass; sizes used as data are
    then runtime values)."""
    b = _Builder(values or {}, bucketed)
    spec = _C.GraphSpec()
    ids: dict[torch.fx.Node, Any] = {}
    inputs, input_placeholders, bounds = [], [], []
    position = 0
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and not node.meta.get("effect_token"):
            ids[node] = len(inputs)
            inputs.append(b.tensor_type(val, node.name))
            bounds.append([b.concrete(s) for s in val.shape])
            input_placeholders.append(position)
        elif isinstance(val, (torch.SymInt, int, torch.SymFloat)):
            # A size, or a float computed from sizes (the backward of SDPA at a symbolic head
            # dim takes its scale so): an expression in the size symbols the tensors bind.
            ids[node] = ("size", size_expr(val))
        elif _is_opaque(val) or node.meta.get("effect_token"):
            # An opaque object (the DeviceMesh a DTensor graph carries) or an effect token
            # (dynamo/effects.py; None at run time): no data; it may only be handed back
            # (saved for the backward, a token out), which returns the caller's object.
            ids[node] = _OPAQUE
        else:
            raise UnsupportedGraph(
                f"tpu compile: graph input {node.name} is {type(val).__name__}, not a tensor"
            )
        position += 1
    constants = []
    for node in gm.graph.nodes:
        if node.op != "get_attr":
            continue
        value = _attr(gm, node.target)
        if isinstance(value, torch.fx.GraphModule):
            _check_subgraph_users(node)
            continue  # a control-flow node's subgraph, lowered with that node
        if not isinstance(value, torch.Tensor):
            raise UnsupportedGraph(f"tpu compile: graph attribute {node.target} is "
                                   f"{type(value).__name__}, not a tensor")
        ids[node] = len(inputs)
        inputs.append(b.tensor_type(value, node.name))
        constants.append(value)
    spec.inputs = inputs
    next_id = len(inputs)

    nodes, outputs, layout, regions = [], [], [], []
    fx_nodes: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            continue
        if node.op == "output":
            results = node.args[0]
            placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
            for r in results if isinstance(results, (tuple, list)) else [results]:
                if isinstance(r, torch.fx.Node) and r.op == "placeholder":
                    # An input handed back (AOTAutograd saves inputs for the backward):
                    # the caller's tensor itself, not a program result.
                    layout.append(("arg", placeholders.index(r), None))
                elif isinstance(r, torch.fx.Node) and isinstance(ids.get(r), int):
                    layout.append(("tensor", len(outputs),
                                   [size_expr(s) for s in r.meta["val"].shape]))
                    outputs.append(ids[r])
                elif isinstance(r, torch.fx.Node) and isinstance(ids.get(r), tuple):
                    val = r.meta.get("val")
                    kind = (bool if isinstance(val, (bool, torch.SymBool))
                            else float if isinstance(val, (float, torch.SymFloat)) else int)
                    layout.append(("size", ids[r][1], kind))
                elif isinstance(r, torch.fx.Node):
                    raise UnsupportedGraph(f"tpu compile: output {r.name} is a tuple")
                else:
                    layout.append(("const", r))
            continue
        next_id = _add_node(gm, node, ids, next_id, b, nodes, regions)
        fx_nodes.extend([node] * (len(nodes) - len(fx_nodes)))
    spec.nodes = nodes
    spec.regions = regions
    spec.outputs = outputs
    spec.num_symbols = len(b.slots)
    spec.padded = bucketed
    return GraphPlan(
        spec=spec, input_placeholders=input_placeholders, slots=b.slots, output_layout=layout,
        input_bounds=bounds,
        constants=constants, fx_nodes=fx_nodes,
    )


_OPAQUE = object()  # the id of an opaque graph input

# Control-flow ops, lowered to stablehlo.case / stablehlo.while over their subgraphs (a map
# is a scan without a carry; a nested_compile_region's subgraph is lowered in place).
CONTROL_FLOW = {torch.ops.higher_order.cond: "higher_order::cond",
                torch.ops.higher_order.while_loop: "higher_order::while_loop",
                torch.ops.higher_order.scan: "higher_order::scan",
                torch.ops.higher_order.map_impl: "higher_order::scan",
                torch.ops.higher_order.invoke_subgraph: "higher_order::invoke_subgraph"}


def _check_subgraph_users(node: torch.fx.Node) -> None:
    """A subgraph attribute may only be read by a control-flow op we lower."""
    others = sorted({str(u.target) for u in node.users if u.target not in CONTROL_FLOW})
    if others:
        raise UnsupportedGraph(
            f"tpu compile: {', '.join(others)} (a higher-order op whose body is a subgraph) "
            "is not supported by the tpu backend (torch.cond, while_loop, scan, map and "
            "nested_compile_region are); call this code outside torch.compile")


def _add_node(gm: torch.fx.GraphModule, node: torch.fx.Node, ids: dict, next_id: int,
              b: _Builder, nodes: list, regions: list) -> int:
    """Describes one node of `gm` (not a placeholder, attribute or output) into `nodes`
    (and its subgraphs into `regions`); returns the next free value id."""
    if node.op != "call_function":
        raise UnsupportedGraph(f"tpu compile: unsupported FX node {node.op} {node.name}")
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        # Size arithmetic (sym_size, s0 * 2, ...): a size expression, not a tensor.
        ids[node] = ("size", val.node.expr)
        return next_id
    if node.target is operator.getitem:
        source, index = node.args
        ids[node] = ids[source][index]
        return next_id
    if node.target in CONTROL_FLOW:
        g, next_id = _control_flow_node(gm, node, ids, next_id, b, regions)
    elif isinstance(node.target, torch._ops.OpOverload):
        g, next_id = _lower_node(node, ids, next_id, b)
    else:
        raise UnsupportedGraph(f"tpu compile: {node.target} is not an aten op ({node.name})")
    nodes.append(g)
    return next_id


def _subgraph_attrs(gm: torch.fx.GraphModule, node: torch.fx.Node) -> list[torch.fx.Node]:
    return [a for a in node.args if isinstance(a, torch.fx.Node) and a.op == "get_attr"
            and isinstance(_attr(gm, a.target), torch.fx.GraphModule)]


def _tensor_constants(sub: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in sub.graph.nodes
            if n.op == "get_attr" and isinstance(_attr(sub, n.target), torch.Tensor)]


def lift_subgraph_constants(gm: torch.fx.GraphModule) -> None:
    """Tensor constants inside control-flow subgraphs (a `torch.tensor(...)` written in a
    branch or loop body) become operands of their node, read from graph constants of `gm`
    (fed as inputs, as its own constants are): a region reads values only through its
    inputs. Every subgraph of the node takes every lifted constant as a trailing input (a
    cond's branches take the same operands; a loop's or scan's trailing inputs are its
    loop-invariant ones). A node's subgraphs are copied before they are rewritten, as
    another node may share them; constants of nested nodes are first lifted into the
    subgraph that holds them (in place: that only adds operands read from constants)."""
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in CONTROL_FLOW:
            continue
        attrs = list(dict.fromkeys(_subgraph_attrs(gm, node)))
        for a in attrs:
            lift_subgraph_constants(_attr(gm, a.target))  # inner nodes' constants first
        if not any(_tensor_constants(_attr(gm, a.target)) for a in attrs):
            continue
        subs = [copy_graph_module(_attr(gm, a.target)) for a in attrs]
        lifted: list[tuple[int, torch.fx.Node, torch.fx.Node]] = []
        for k, sub in enumerate(subs):
            for const in _tensor_constants(sub):
                value = _attr(sub, const.target)
                name = _fresh_attr(gm, "_lifted_constant")
                gm.register_buffer(name, value)
                with gm.graph.inserting_before(node):
                    parent = gm.graph.get_attr(name)
                parent.meta["val"] = value
                lifted.append((k, const, parent))
        for k, sub in enumerate(subs):
            last = [n for n in sub.graph.nodes if n.op == "placeholder"][-1:]
            for j, (owner, const, parent) in enumerate(lifted):
                if last:
                    with sub.graph.inserting_after(last[0]):
                        ph = sub.graph.placeholder(f"lifted_constant_{j}")
                else:
                    with sub.graph.inserting_before(next(iter(sub.graph.nodes))):
                        ph = sub.graph.placeholder(f"lifted_constant_{j}")
                ph.meta["val"] = parent.meta["val"]
                last = [ph]
                if owner == k:
                    const.replace_all_uses_with(ph)
                    sub.graph.erase_node(const)
            sub.recompile()
        for a, sub in zip(attrs, subs):
            name = _fresh_attr(gm, "_lifted_subgraph")
            gm.add_submodule(name, sub)
            with gm.graph.inserting_before(node):
                fresh = gm.graph.get_attr(name)
            node.replace_input_with(a, fresh)
            if not a.users:
                gm.graph.erase_node(a)
        parents = tuple(p for _, _, p in lifted)
        args = list(node.args)
        if node.target is torch.ops.higher_order.invoke_subgraph:
            args.extend(parents)
        else:  # cond's operands, a loop's or scan's invariant inputs, map's extra args
            last_arg = 2 if node.target is torch.ops.higher_order.map_impl else 3
            args[last_arg] = type(args[last_arg])((*args[last_arg], *parents))
        node.args = tuple(args)
    gm.recompile()


def copy_graph_module(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A GraphModule of a copy of `gm`'s graph (nodes and their meta), sharing its
    attributes: rewriting the copy leaves `gm` as it was."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        env[node] = graph.node_copy(node, lambda a: env[a])
    return torch.fx.GraphModule(gm, graph)


def _fresh_attr(gm: torch.fx.GraphModule, stem: str) -> str:
    k = 0
    while hasattr(gm, f"{stem}{k}"):
        k += 1
    return f"{stem}{k}"


def _control_flow_node(gm: torch.fx.GraphModule, node: torch.fx.Node, ids: dict, next_id: int,
                       b: _Builder, regions: list) -> tuple[Any, int]:
    """A torch.cond (predicate, operands; true and false branch), while_loop (state,
    loop-invariant inputs; condition and body), scan / map (carry and xs counts, carry,
    xs, loop-invariant inputs; combine function) or invoke_subgraph (operands; the
    subgraph) node, its subgraphs appended to `regions`."""
    g = _C.GraphNode()
    g.op = CONTROL_FLOW[node.target]
    args, refs = [], []

    def add(a: Any, ref: int) -> None:
        args.append(a)
        refs.append(ref)

    def tensor(v: Any, what: str) -> None:
        if not (isinstance(v, torch.fx.Node) and isinstance(ids.get(v), int)
                and isinstance(v.meta.get("val"), torch.Tensor)):
            raise UnsupportedGraph(
                f"tpu compile: {node.target} ({node.name}) takes {v!r} as {what}, which is "
                "not a tensor; compiled control flow carries and scans tensors only")
        a = _C.OpArg()
        a.kind = _C.ArgKind.tensor
        a.type = b.tensor_type(v.meta["val"], v.name)
        add(a, ids[v])

    # fixed: the tensors the node carries or scans; loose: operands its subgraphs read,
    # which may be sizes (dynamic shapes): constants of this exact-size program, no
    # argument (the subgraph's placeholder of a size reads it the same way).
    if node.target is torch.ops.higher_order.cond:
        pred, true_graph, false_graph, operands = node.args[:4]
        fixed, loose, subgraphs = [], list(operands), [true_graph, false_graph]
        if _is_size(ids, pred) and b.bucketed:
            raise UnsupportedGraph(f"tpu compile: {node.name}'s predicate depends on sizes, "
                                   "which a graph padded to buckets does not know")
        if isinstance(pred, bool) or _is_size(ids, pred):
            # Known at this program's sizes (a comparison of sizes): a constant predicate.
            a = _C.OpArg()
            a.kind = _C.ArgKind.bool
            a.int_value = int(pred if isinstance(pred, bool) else _truth(ids[pred][1], b.values))
            add(a, -1)
        else:
            tensor(pred, "its predicate")
    elif node.target is torch.ops.higher_order.invoke_subgraph:
        subgraph, _identifier, *operands = node.args
        fixed, loose, subgraphs = [], list(operands), [subgraph]
    elif node.target is torch.ops.higher_order.while_loop:
        cond_graph, body_graph, state, invariant = node.args[:4]
        fixed, loose, subgraphs = list(state), list(invariant), [cond_graph, body_graph]
    else:  # scan over the leading dim of xs; map: the same without a carry
        if node.target is torch.ops.higher_order.scan:
            combine, init, xs, invariant = node.args[:4]
        else:
            (combine, xs, invariant), init = node.args[:3], []
        fixed, loose, subgraphs = [*init, *xs], list(invariant), [combine]
        for count in (len(init), len(xs)):
            a = _C.OpArg()
            a.kind = _C.ArgKind.int
            a.int_value = count
            add(a, -1)
    for v in fixed:
        tensor(v, "a carried or scanned value")
    for v in loose:
        if not _is_size(ids, v):
            tensor(v, "an operand")
    g.args = args
    g.tensor_refs = refs
    g.list_refs = [[] for _ in refs]
    g.scalars = [_C.GraphScalar() for _ in refs]
    own = []
    for attr in subgraphs:
        regions.append(_region_spec(_attr(gm, attr.target), b))
        own.append(len(regions) - 1)
    g.regions = own
    val = node.meta.get("val")
    out_types, out_ids, node_ids = [], [], []
    for v in (list(val) if isinstance(val, (tuple, list)) else [val]):
        if not isinstance(v, torch.Tensor):
            raise UnsupportedGraph(f"tpu compile: {node.target} ({node.name}) returns "
                                   f"{type(v).__name__}, not a tensor")
        out_types.append(b.tensor_type(v, node.name))
        out_ids.append(next_id)
        node_ids.append(next_id)
        next_id += 1
    g.out_types = out_types
    g.out_ids = out_ids
    ids[node] = node_ids
    return g, next_id


def _region_spec(sub: torch.fx.GraphModule, b: _Builder) -> Any:
    """The GraphSpec of a control-flow subgraph: its placeholders are its inputs."""
    spec = _C.GraphSpec()
    ids: dict[torch.fx.Node, Any] = {}
    inputs = []
    for node in sub.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, (torch.SymInt, int)) and not b.bucketed:
            ids[node] = ("size", size_expr(val))  # a size operand (see _control_flow_node)
            continue
        if not isinstance(val, torch.Tensor):
            raise UnsupportedGraph(f"tpu compile: a control-flow subgraph takes {node.name}, "
                                   f"a {type(val).__name__}, not a tensor")
        ids[node] = len(inputs)
        inputs.append(b.tensor_type(val, node.name))
    spec.inputs = inputs
    next_id = len(inputs)
    nodes, outputs, regions = [], [], []
    for node in sub.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            value = _attr(sub, node.target)
            if not isinstance(value, torch.fx.GraphModule):
                raise UnsupportedGraph(f"tpu compile: a control-flow subgraph holds the "
                                       f"constant {node.target}; pass it as an operand")
            _check_subgraph_users(node)
            continue
        if node.op == "output":
            results = node.args[0]
            for r in results if isinstance(results, (tuple, list)) else [results]:
                if not (isinstance(r, torch.fx.Node) and isinstance(ids.get(r), int)):
                    raise UnsupportedGraph(f"tpu compile: a control-flow subgraph returns "
                                           f"{r!r}, not a tensor")
                outputs.append(ids[r])
            continue
        next_id = _add_node(sub, node, ids, next_id, b, nodes, regions)
    spec.nodes = nodes
    spec.outputs = outputs
    spec.regions = regions
    return spec


def _is_opaque(val: Any) -> bool:
    from torch._library.fake_class_registry import FakeScriptObject

    return isinstance(val, (torch.ScriptObject, FakeScriptObject))


def _attr(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _is_scalar_slot(formal: Any) -> bool:
    """True for `Scalar` (printed "number") and `Tensor` formals, optional or not: a Python
    number there is runtime data (a wrapped number in a Tensor slot)."""
    t = formal.type
    if isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return isinstance(t, (torch.NumberType, torch.TensorType))


def _is_size(ids: dict, v: Any) -> bool:
    return isinstance(v, torch.fx.Node) and isinstance(ids.get(v), tuple)


def _lower_node(node: torch.fx.Node, ids: dict, next_id: int, b: _Builder) -> tuple[Any, int]:
    schema = node.target._schema
    g = _C.GraphNode()
    g.op = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    args, tensor_refs, list_refs, scalars = [], [], [], []
    for formal, value in zip(schema.arguments, _normalized_args(node)):
        a = _C.OpArg()
        ref, items, scalar = -1, [], _C.GraphScalar()
        type_str = str(formal.type)
        if _is_size(ids, value) and isinstance(value.meta.get("val"), torch.SymFloat):
            # A float computed from sizes (an interpolation's in/out size ratio): runtime
            # slots carry ints, so it is a constant of a program at exact sizes.
            if b.bucketed:
                raise UnsupportedGraph(
                    f"tpu compile: {g.op} argument {formal.name} is a float computed from "
                    f"sizes ({value.name} = {ids[value][1]}), which a padded program cannot "
                    "take as runtime data")
            number = float(_number(ids[value][1], b.values))
            if _is_scalar_slot(formal):
                a.kind = _C.ArgKind.scalar
                scalar = _scalar(number)
                a.scalar_category = scalar.category
            else:
                a.kind = _C.ArgKind.double
                a.double_value = number
        elif _is_size(ids, value):
            expr = ids[value][1]
            if _is_scalar_slot(formal):
                # A size used as data (x / x.shape[1]): its true value at run time.
                a.kind = _C.ArgKind.scalar
                a.scalar_category = _C.ScalarCategory.int
                scalar.category = _C.ScalarCategory.int
                if b.bucketed:
                    scalar.symbol = b.slot(expr)
                else:
                    scalar.int_value = evaluate(expr, b.values)
            else:
                a.kind = _C.ArgKind.int
                a.int_value = evaluate(expr, b.values)
        elif isinstance(value, torch.fx.Node):
            val = value.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise UnsupportedGraph(
                    f"tpu compile: {g.op} argument {formal.name} is a traced "
                    f"{type(val).__name__} ({value.name}) that is not lowered"
                )
            a.kind = _C.ArgKind.tensor
            a.type = b.tensor_type(val, value.name)
            ref = ids[value]
        elif isinstance(value, (list, tuple)) and any(
                isinstance(v, torch.fx.Node) and not _is_size(ids, v) for v in value):
            a.kind = _C.ArgKind.tensor_list
            types, positions = [], []
            for k, v in enumerate(value):
                if v is None:
                    continue
                types.append(b.tensor_type(v.meta["val"], v.name))
                items.append(ids[v])
                positions.append(k)
            a.list_types = types
            if "Optional" in type_str:
                a.ints = positions
        elif value is None or isinstance(value, (torch.device, torch.layout, torch.memory_format)):
            a.kind = _C.ArgKind.none
        elif isinstance(value, torch.dtype):
            a.kind = _C.ArgKind.dtype
            a.dtype = _dtype(value, g.op)
        elif (isinstance(value, (int, float)) and not isinstance(value, bool)
              and _C.is_structural_scalar_arg(g.op, formal.name)):
            # A Scalar that is structure (a norm's order), as eager calls describe it.
            a.kind = _C.ArgKind.double
            a.double_value = float(value)
        elif _is_scalar_slot(formal) and isinstance(value, (int, float, bool, complex)):
            # A Scalar, or a Python number in a Tensor slot (a wrapped number): runtime data.
            a.kind = _C.ArgKind.scalar
            scalar = _scalar(value)
            a.scalar_category = scalar.category
        elif isinstance(value, bool):
            a.kind = _C.ArgKind.bool
            a.int_value = int(value)
        elif isinstance(value, (int, torch.SymInt)):
            a.kind = _C.ArgKind.int
            a.int_value = b.concrete(value)
        elif isinstance(value, float):
            a.kind = _C.ArgKind.double
            a.double_value = value
        elif isinstance(value, (list, tuple)):
            ints = []
            for v in value:
                if _is_size(ids, v):
                    ints.append(evaluate(ids[v][1], b.values))
                elif isinstance(v, (int, bool, torch.SymInt)):
                    ints.append(b.concrete(v))
                else:
                    raise UnsupportedGraph(f"tpu compile: {g.op} argument {formal.name}={value!r}")
            a.kind = _C.ArgKind.int_list
            a.ints = ints
        elif isinstance(value, str):
            a.kind = _C.ArgKind.string
            a.string_value = value
        else:
            raise UnsupportedGraph(
                f"tpu compile: {g.op} argument {formal.name} has unsupported value {value!r}"
            )
        args.append(a)
        tensor_refs.append(ref)
        list_refs.append(items)
        scalars.append(scalar)
    g.args = args
    g.tensor_refs = tensor_refs
    g.list_refs = list_refs
    g.scalars = scalars
    if RNG_FROM in node.meta:  # by name: a padded graph is a copy with nodes of its own
        g.rng_ref = next(i for n, i in ids.items()
                         if isinstance(n, torch.fx.Node) and n.name == node.meta[RNG_FROM])

    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    out_types, out_ids, node_ids = [], [], []
    for v in vals:
        if isinstance(v, torch.Tensor):
            out_types.append(b.tensor_type(v, node.name))
            out_ids.append(next_id)
            node_ids.append(next_id)
            next_id += 1
        else:
            node_ids.append(-1)
    g.out_types = out_types
    g.out_ids = out_ids
    ids[node] = node_ids if isinstance(val, (tuple, list)) else node_ids[0]
    return g, next_id
