"""``torch.compile(backend="tpu")``: Dynamo -> AOTAutograd (core ATen decompositions,
functionalized) -> FX graph of aten ops -> one StableHLO module through the eager lowering
table -> one executable per graph (memory and disk caches apply).

Every graph compile is counted; a recompile of the same function is logged with what
changed in its inputs, and a warning is raised once a function has compiled more than
``TORCHTPU_RECOMPILE_LIMIT`` (default 8) graphs.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.fx
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from torchtpu import _C
from torchtpu.dynamo import collectives as graph_collectives
from torchtpu.dynamo import split as graph_split
from torchtpu.dynamo.buckets import (  # noqa: F401 (bucket_policy, bucket_size re-exported)
    bucket_policy,
    bucket_size,
    recompile_limit,
)
from torchtpu.dynamo.compile_options import check_compile_kwargs
from torchtpu.dynamo.decompositions import decompositions
from torchtpu.dynamo.runner import GraphRunner, Session

log = logging.getLogger("torchtpu.compile")

# Per Dynamo frame: (signature of its inputs, number of graphs compiled for it).
_frames: dict[str, list[tuple[str, ...]]] = defaultdict(list)
_recompile_reasons: list[str] = []
_warned: set[str] = set()
# Depth of `expected_recompiles()` blocks: compiles inside them are counted but not warned.
_expected_depth = 0


@contextlib.contextmanager
def expected_recompiles() -> Iterator[None]:
    """Compiles inside this block are planned (a server warming up its shape buckets):
    they are counted as usual but neither logged as recompilations nor warned about."""
    global _expected_depth
    _expected_depth += 1
    try:
        yield
    finally:
        _expected_depth -= 1


def _signature(inputs: list[Any]) -> tuple[str, ...]:
    sig = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            sig.append(f"{x.dtype}{list(x.shape)}@{x.device}")
        else:
            sig.append(repr(x))
    return tuple(sig)


def _dynamo_guard_failure() -> str | None:
    """The guard whose failure made Dynamo compile this frame again, as Dynamo words it,
    or None where it recorded none (a first compile, or a torch that keeps it elsewhere:
    this reads its compile metrics, which are not a public API)."""
    try:
        metrics = torch._dynamo.utils.get_metrics_context()
        reason = metrics._metrics.get("recompile_reason") if metrics.in_progress() else None
    except Exception:
        return None
    return reason.strip() if isinstance(reason, str) and reason.strip() else None


def _explain_change(old: tuple[str, ...], new: tuple[str, ...]) -> str:
    if len(old) != len(new):
        return f"number of inputs {len(old)} -> {len(new)}"
    changed = [f"input {i}: {a} -> {b}" for i, (a, b) in enumerate(zip(old, new)) if a != b]
    if changed:
        return "; ".join(changed)
    guard = _dynamo_guard_failure()
    if guard is None:
        return "same inputs (a guard on other state failed)"
    return f"same inputs; Dynamo's failed guard: {guard}"


def _note_compile(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> None:
    compile_id = torch._guards.CompileContext.current_compile_id()
    frame = f"frame {compile_id.frame_id}" if compile_id is not None else "frame ?"
    if compile_id is not None and compile_id.frame_compile_id == 0:
        # A frame's first compile (Dynamo calls the backend once per compile): after
        # torch._dynamo.reset() frames are numbered from 0 again, so what an earlier frame
        # left under this name is not this frame's history.
        _frames[frame].clear()
        _warned.discard(frame)
    sig = _signature(example_inputs)
    history = _frames[frame]
    if _expected_depth:
        history.append(sig)
        return
    if history:
        reason = f"recompiling {frame} ({gm.__class__.__name__}): {_explain_change(history[-1], sig)}"
        _recompile_reasons.append(reason)
        log.warning("torchtpu: %s", reason)
    history.append(sig)
    limit = recompile_limit()
    if len(history) > limit and frame not in _warned:
        _warned.add(frame)
        last = f" Last change: {_explain_change(history[-2], sig)}" if len(history) > 1 else ""
        warnings.warn(
            f"torchtpu: {frame} has compiled {len(history)} graphs (limit {limit}); inputs whose "
            f"shapes keep changing cause a recompilation storm.{last}",
            stacklevel=2,
        )


@atexit.register
def _report_unread_checks() -> None:
    """Graph data checks are read at the next host read; a process that ends without one
    still hears about a failed check (an out-of-range index) here."""
    try:
        _C.flush_data_checks()
    except Exception as e:  # at exit there is no caller left to raise to
        print(f"torchtpu: {e}", file=sys.stderr)


def _lift_input_mutations(gm: torch.fx.GraphModule) -> list[int]:
    """AOTAutograd keeps an input's data mutation in the graph as a trailing
    ``copy_(placeholder, value)`` (keep_inference_input_mutations, as Inductor and
    aot_eager compile; in a forward too, for inputs that do not require grad: BatchNorm's
    running statistics). Removes those copies and returns each value as a leading output
    instead; the returned placeholder indices are the inputs `_writing_back` updates from
    them. A copy the graph also returns (a function that updates its argument in place and
    returns it) is returned as its input, which holds the value once written back."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    copies = [n for n in gm.graph.nodes
              if n.op == "call_function" and n.target is torch.ops.aten.copy_.default
              and n.args[0] in placeholders and all(u is output for u in n.users)]
    if not copies:
        return []
    values = [n.args[1] for n in copies]
    targets = [placeholders.index(n.args[0]) for n in copies]
    for n in copies:
        n.replace_all_uses_with(n.args[0])
        gm.graph.erase_node(n)
    output.args = ((*values, *output.args[0]),)
    gm.recompile()
    return targets


def _writing_back(run: Callable, targets: list[int]) -> Callable:
    """`run`, whose first outputs are new values of the inputs at `targets`: writes them
    into the caller's tensors (a donated input's storage already holds its new buffer, and
    the copy then moves nothing) and returns the rest."""
    if not targets:
        return run

    def call(*args: Any) -> Any:
        out = run(*args)
        with torch.no_grad():
            for k, i in enumerate(targets):
                args[i].copy_(out[k])
        return out[len(targets):]

    return call


def _first_saved() -> int | None:
    """In a forward compile: the position of its first output saved for the backward."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    return getattr(meta, "num_forward", None)


def _aot(session: Session) -> Callable:
    """AOTAutograd whose forward and backward compiles share `session`: the forward's
    plan tells the backward which saved activations arrive padded (runner.Session)."""

    def forward(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        targets = _lift_input_mutations(gm)
        first_saved = _first_saved()
        runner = GraphRunner(gm, example_inputs, role="forward", session=session,
                             first_saved=None if first_saved is None
                             else first_saved + len(targets),
                             mutated=[(i, k) for k, i in enumerate(targets)])
        # AOTAutograd calls compiled graphs with one list of arguments ("boxed"), so it
        # can free inputs early; the runner only reads them.
        return make_boxed_func(_writing_back(runner, targets))

    def backward(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        return make_boxed_func(GraphRunner(gm, example_inputs, role="backward",
                                           session=session))

    def inference(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        targets = _lift_input_mutations(gm)
        runner = GraphRunner(gm, example_inputs, mutated=[(i, k) for k, i in enumerate(targets)])
        return make_boxed_func(_writing_back(runner, targets))

    return aot_autograd(fw_compiler=forward, bw_compiler=backward,
                        inference_compiler=inference,
                        decompositions=decompositions(),
                        keep_inference_input_mutations=True)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], *,
                mode: str | None = None, options: dict[str, Any] | None = None) -> Callable:
    """The Dynamo backend registered as ``"tpu"`` (through the package's
    ``torch_dynamo_backends`` entry point). ``mode`` and ``options`` are those of
    ``torch.compile``: checked like Inductor's and ignored (compile_options.py)."""
    check_compile_kwargs(mode, options)
    _note_compile(gm, example_inputs)
    return _aot(Session())(gm, example_inputs)


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
        **graph_collectives.compile_stats(),
        **graph_split.compile_stats(),
    }
