"""FX graph of aten ops -> the torch-free graph description that C++ lowers.

Every call_function node must target an aten OpOverload; its arguments are normalized
to schema order and classified exactly like eager mode's boxed kernel does (tensors by
type, ``Scalar`` values as runtime scalars, ints/lists/bools/strings as structure). Result
types come from the node's ``meta["val"]`` (fake tensors recorded while tracing).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from torchtpu import _C

_DTYPES = {
    torch.bool: _C.DType.bool,
    torch.int8: _C.DType.int8,
    torch.uint8: _C.DType.uint8,
    torch.int16: _C.DType.int16,
    torch.int32: _C.DType.int32,
    torch.int64: _C.DType.int64,
    torch.float16: _C.DType.float16,
    torch.bfloat16: _C.DType.bfloat16,
    torch.float32: _C.DType.float32,
    torch.float64: _C.DType.float64,
}


class UnsupportedGraph(NotImplementedError):
    """The graph holds something the tpu backend cannot lower (says what and where)."""


def _dtype(dtype: torch.dtype, where: str) -> Any:
    if dtype not in _DTYPES:
        raise UnsupportedGraph(f"tpu compile: dtype {dtype} is not supported ({where})")
    return _DTYPES[dtype]


def tensor_type(t: torch.Tensor, where: str) -> Any:
    for s in t.shape:
        if not isinstance(s, int):
            raise UnsupportedGraph(
                f"tpu compile: symbolic shape {tuple(t.shape)} at {where}; dynamic shapes are "
                "bucketed by torchtpu, compile with dynamic=False"
            )
    return _C.TensorType(_dtype(t.dtype, where), list(t.shape))


@dataclass
class GraphPlan:
    """A lowered-graph description plus how to rebuild the FX output structure."""

    spec: Any
    # Per FX output: ("tensor", k) for the k-th C++ output, ("const", value) otherwise.
    output_layout: list[tuple[str, Any]]


def _scalar(value: Any) -> Any:
    s = _C.GraphScalar()
    if isinstance(value, bool):
        s.category = _C.ScalarCategory.bool
        s.int_value = int(value)
    elif isinstance(value, int):
        s.category = _C.ScalarCategory.int
        s.int_value = value
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


def build_plan(gm: torch.fx.GraphModule) -> GraphPlan:
    spec = _C.GraphSpec()
    ids: dict[torch.fx.Node, list[int] | int] = {}
    inputs = []
    next_id = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise UnsupportedGraph(
                    f"tpu compile: graph input {node.name} is {type(val).__name__}, not a tensor"
                )
            inputs.append(tensor_type(val, node.name))
            ids[node] = next_id
            next_id += 1
    spec.inputs = inputs

    nodes = []
    output_layout: list[tuple[str, Any]] = []
    outputs: list[int] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            results = node.args[0]
            for r in results if isinstance(results, (tuple, list)) else [results]:
                if isinstance(r, torch.fx.Node):
                    ref = ids[r]
                    if isinstance(ref, list):
                        raise UnsupportedGraph(f"tpu compile: output {r.name} is a tuple")
                    output_layout.append(("tensor", len(outputs)))
                    outputs.append(ref)
                else:
                    output_layout.append(("const", r))
            continue
        if node.op != "call_function":
            raise UnsupportedGraph(f"tpu compile: unsupported FX node {node.op} {node.name}")
        if node.target is operator.getitem:
            source, index = node.args
            ids[node] = ids[source][index]
            continue
        if not isinstance(node.target, torch._ops.OpOverload):
            raise UnsupportedGraph(f"tpu compile: {node.target} is not an aten op ({node.name})")
        nodes.append(_lower_node(node, ids, next_id))
        produced = nodes[-1].out_ids
        next_id = max([next_id, *[i + 1 for i in produced]])
    spec.nodes = nodes
    spec.outputs = outputs
    return GraphPlan(spec=spec, output_layout=output_layout)


def _lower_node(node: torch.fx.Node, ids: dict, next_id: int) -> Any:
    schema = node.target._schema
    g = _C.GraphNode()
    g.op = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    args, tensor_refs, list_refs, scalars = [], [], [], []
    for formal, value in zip(schema.arguments, _normalized_args(node)):
        a = _C.OpArg()
        ref, items, scalar = -1, [], _C.GraphScalar()
        type_str = str(formal.type)
        if isinstance(value, torch.fx.Node):
            val = value.meta.get("val")
            if isinstance(val, torch.Tensor):
                a.kind = _C.ArgKind.tensor
                a.type = tensor_type(val, value.name)
                ref = ids[value]
            else:
                raise UnsupportedGraph(
                    f"tpu compile: {g.op} argument {formal.name} is a traced "
                    f"{type(val).__name__} ({value.name}); dynamic values are not lowered"
                )
        elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in value):
            a.kind = _C.ArgKind.tensor_list
            types, positions = [], []
            for k, v in enumerate(value):
                if v is None:
                    continue
                types.append(tensor_type(v.meta["val"], v.name))
                items.append(ids[v])
                positions.append(k)
            a.list_types = types
            if "?" in type_str:
                a.ints = positions
        elif value is None or isinstance(value, (torch.device, torch.layout, torch.memory_format)):
            a.kind = _C.ArgKind.none
        elif isinstance(value, torch.dtype):
            a.kind = _C.ArgKind.dtype
            a.dtype = _dtype(value, g.op)
        elif type_str.startswith("Scalar") or type_str.startswith("Tensor"):
            # A Scalar, or a Python number in a Tensor slot (a wrapped number): runtime data.
            a.kind = _C.ArgKind.scalar
            scalar = _scalar(value)
            a.scalar_category = scalar.category
        elif isinstance(value, bool):
            a.kind = _C.ArgKind.bool
            a.int_value = int(value)
        elif isinstance(value, int):
            a.kind = _C.ArgKind.int
            a.int_value = value
        elif isinstance(value, float):
            a.kind = _C.ArgKind.double
            a.double_value = value
        elif isinstance(value, (list, tuple)):
            if not all(isinstance(v, (int, bool)) for v in value):
                raise UnsupportedGraph(f"tpu compile: {g.op} argument {formal.name}={value!r}")
            a.kind = _C.ArgKind.int_list
            a.ints = [int(v) for v in value]
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

    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    out_types, out_ids, node_ids = [], [], []
    for k, v in enumerate(vals):
        if isinstance(v, torch.Tensor):
            out_types.append(tensor_type(v, node.name))
            out_ids.append(next_id)
            node_ids.append(next_id)
            next_id += 1
        else:
            node_ids.append(-1)
    g.out_types = out_types
    g.out_ids = out_ids
    ids[node] = node_ids if isinstance(val, (tuple, list)) else node_ids[0]
    return g
