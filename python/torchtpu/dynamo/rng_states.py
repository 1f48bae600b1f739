"""Random ops a backward recomputes (activation checkpointing).

AOTAutograd's partitioner makes a random op that the backward recomputes draw the same
values twice: in the forward it becomes ``run_and_save_rng_state(op, *args)``, which
returns ``(state, result)`` and saves the state for the backward, and in the backward
``run_with_rng_state(state, op, *args)`` (a fused eager graph run by its shape class
calls its random ops so too, each with the ui64[2] state its eager call took, an input).
Here a node's random draws read a generator
state (seed, offset) that the program gets at run time; the state becomes a value of the
graph: ``torchtpu::rng_state(device)`` gives it as an int64[2] tensor (the forward saves
it), and the op's node reads it instead of a state of its own (``RNG_FROM`` in its meta
names the state's node; the GraphNode's ``rng_ref``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from torchtpu.dynamo.graph_spec import RNG_FROM, UnsupportedGraph

torch.library.define("torchtpu::rng_state", "(Device device) -> Tensor")


@torch.library.register_fake("torchtpu::rng_state")
def _rng_state_fake(device: torch.device) -> torch.Tensor:
    return torch.empty(2, dtype=torch.int64, device=device)


def _fake_result(op: Any, args: tuple, kwargs: dict) -> Any:
    """`op`'s result on the fake values of its arguments (the partitioner's wrapper nodes
    carry none)."""
    fake_args, fake_kwargs = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
    mode = torch._guards.detect_fake_mode((fake_args, fake_kwargs))
    if mode is None:
        raise UnsupportedGraph(f"tpu compile: the recomputed random op {op} has no traced "
                               "argument values")
    with mode:
        return op(*fake_args, **fake_kwargs)


def _device(val: Any) -> torch.device:
    for v in val if isinstance(val, (tuple, list)) else (val,):
        if isinstance(v, torch.Tensor):
            return v.device
    raise UnsupportedGraph("tpu compile: a recomputed random op returns no tensor")


def _state_value(like: Any, device: torch.device) -> torch.Tensor:
    """A fake int64[2] state on `device`, in the fake mode of `like` (the op's result)."""
    with torch._guards.detect_fake_mode(like):
        return torch.empty(2, dtype=torch.int64, device=device)


def unwrap_rng_states(gm: torch.fx.GraphModule) -> None:
    """Rewrites (in place) every run_and_save_rng_state node of `gm` into a
    torchtpu::rng_state node and its op reading that state, and every run_with_rng_state
    node into its op reading the state it is given."""
    graph = gm.graph
    save = torch._prims.rng_prims.run_and_save_rng_state
    replay = torch._prims.rng_prims.run_with_rng_state
    nodes = [n for n in graph.nodes if n.op == "call_function" and n.target in (save, replay)]
    for node in nodes:
        if node.target is save:
            op, *args = node.args
            result = _fake_result(op, tuple(args), dict(node.kwargs))
            device = _device(result)
            with graph.inserting_before(node):
                state = graph.call_function(torch.ops.torchtpu.rng_state.default, (device,))
                call = graph.call_function(op, tuple(args), dict(node.kwargs))
            state.meta = {"val": _state_value(result, device)}
            call.meta = {"val": result, RNG_FROM: state.name}
            for user in list(node.users):
                if user.op != "call_function" or user.target is not operator.getitem:
                    raise UnsupportedGraph(f"tpu compile: {user.name} reads {node.name} "
                                           f"(run_and_save_rng_state of {op}) other than by "
                                           "index")
                user.replace_all_uses_with(state if user.args[1] == 0 else call)
                graph.erase_node(user)
        else:
            state, op, *args = node.args
            result = _fake_result(op, tuple(args), dict(node.kwargs))
            with graph.inserting_before(node):
                call = graph.call_function(op, tuple(args), dict(node.kwargs))
            call.meta = {"val": result, RNG_FROM: state.name}
            if state.meta["val"].dtype not in (torch.int64, torch.uint64):
                # The backward's input for the forward's saved state.
                state.meta["val"] = _state_value(result, _device(result))
            node.replace_all_uses_with(call)
        graph.erase_node(node)
    if nodes:
        gm.recompile()
