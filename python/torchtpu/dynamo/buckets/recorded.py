"""A recorded graph: the aten calls fused eager mode recorded between two host reads, in the
few fields shape classes read of an FX graph (`op`, `target`, `args`, `kwargs`, and a
placeholder's `meta["val"]`).

A fused graph arrives at every new size of a loop (a context growing by one token), and
only its class key and ints are read before it joins a class already made symbolic; an
FX graph costs a node object with name bookkeeping per call and a fake tensor per input.
This graph costs a slotted object per call and a `TensorMeta` per input. Shape classes
also read `torch.fx.Graph`s (the same fields), so tests can build them with FX.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx


class TensorMeta:
    """What a placeholder's value is: the metadata of a tensor (`shape`, `dtype`, `device`,
    `dim()`), without a tensor."""

    __slots__ = ("shape", "dtype", "device")

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device

    def dim(self) -> int:
        return len(self.shape)


class Node:
    """A call (or placeholder, or the output) of a recorded graph."""

    __slots__ = ("op", "target", "args", "kwargs", "meta", "name")

    def __init__(self, op: str, target: Any, args: tuple, kwargs: dict, name: str = ""):
        self.op, self.target, self.args, self.kwargs = op, target, args, kwargs
        self.meta: dict[str, Any] = {}
        self.name = name

    def __repr__(self) -> str:
        return f"%{self.name or self.op}"


class Graph:
    """Nodes in call order, built with FX's `placeholder` / `call_function` / `output`."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def placeholder(self, name: str) -> Node:
        n = Node("placeholder", name, (), {}, name)
        self.nodes.append(n)
        return n

    def call_function(self, target: Any, args: tuple, kwargs: dict | None = None) -> Node:
        n = Node("call_function", target, tuple(args), dict(kwargs or {}))
        self.nodes.append(n)
        return n

    def output(self, value: Any) -> Node:
        n = Node("output", "output", (value,), {})
        self.nodes.append(n)
        return n


# The node types a graph shape classes read may hold.
NODE_TYPES = (Node, torch.fx.Node)

__all__ = ["Graph", "NODE_TYPES", "Node", "TensorMeta"]
