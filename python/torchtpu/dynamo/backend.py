"""``torch.compile(backend="tpu")``: Dynamo -> AOTAutograd (core ATen decompositions,
functionalized) -> FX graph of aten ops -> one StableHLO module through the eager lowering
table -> one executable per graph (memory and disk caches apply).

Every graph compile is counted; a recompile of the same function is logged with what
changed in its inputs, and a warning is raised once a function has compiled more than
``TORCHTPU_RECOMPILE_LIMIT`` (default 8) graphs.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections import defaultdict
from typing import Any, Callable

import torch
import torch.fx
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd

from torchtpu import _C
from torchtpu.dynamo.graph_spec import build_plan

log = logging.getLogger("torchtpu.compile")

# Per Dynamo frame: (signature of its inputs, number of graphs compiled for it).
_frames: dict[str, list[tuple[str, ...]]] = defaultdict(list)
_recompile_reasons: list[str] = []
_warned: set[str] = set()


def _signature(inputs: list[Any]) -> tuple[str, ...]:
    sig = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            sig.append(f"{x.dtype}{list(x.shape)}@{x.device}")
        else:
            sig.append(repr(x))
    return tuple(sig)


def _explain_change(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    if len(old) != len(new):
        return f"number of inputs {len(old)} -> {len(new)}"
    changed = [f"input {i}: {a} -> {b}" for i, (a, b) in enumerate(zip(old, new)) if a != b]
    return "; ".join(changed) if changed else "same inputs (a guard on other state failed)"


def _frame_name() -> str:
    compile_id = torch._guards.CompileContext.current_compile_id()
    return f"frame {compile_id.frame_id}" if compile_id is not None else "frame ?"


def _note_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    frame = _frame_name()
    sig = _signature(example_inputs)
    history = _frames[frame]
    if history:
        reason = f"recompiling {frame} ({gm.__class__.__name__}): {_explain_change(history[-1], sig)}"
        _recompile_reasons.append(reason)
        log.warning("torchtpu: %s", reason)
    history.append(sig)
    limit = int(os.environ.get("TORCHTPU_RECOMPILE_LIMIT", "8"))
    if len(history) > limit and frame not in _warned:
        _warned.add(frame)
        warnings.warn(
            f"torchtpu: {frame} has compiled {len(history)} graphs (limit {limit}); inputs whose "
            "shapes keep changing cause a recompilation storm. Last change: "
            f"{_explain_change(history[-2], sig)}",
            stacklevel=2,
        )


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    plan = build_plan(gm)
    device = 0
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            device = x.device.index or 0
            break
    compiled = _C.CompiledGraph(plan.spec, device)
    dump_dir = os.environ.get("TORCHTPU_DUMP_DIR")
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
        with open(os.path.join(dump_dir, f"graph_{id(compiled):x}.fx.txt"), "w") as f:
            f.write(gm.print_readable(print_output=False))
    layout = plan.output_layout

    def run(*args: Any) -> Any:
        tensors = compiled.run(list(args))
        return tuple(tensors[v] if kind == "tensor" else v for kind, v in layout)

    run._boxed_call = False  # type: ignore[attr-defined]
    return run


_aot = aot_autograd(
    fw_compiler=_compile_graph,
    bw_compiler=_compile_graph,
    decompositions=core_aten_decompositions(),
)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """The Dynamo backend registered as ``"tpu"`` (through the package's
    ``torch_dynamo_backends`` entry point)."""
    _note_compile(gm, example_inputs)
    return _aot(gm, example_inputs)


def compile_stats() -> dict[str, Any]:
    """Graphs compiled per Dynamo frame, recompilation reasons and graph breaks."""
    from torch._dynamo.utils import counters

    breaks = dict(counters["graph_break"])
    return {
        "num_dynamo_compiles": sum(len(h) for h in _frames.values()),
        "num_recompiles": len(_recompile_reasons),
        "recompile_reasons": list(_recompile_reasons),
        "num_graph_breaks": sum(breaks.values()),
        "graph_breaks": breaks,
    }
