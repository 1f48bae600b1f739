"""Fixed-length slices of a dynamic dimension, rewritten as gathers for shape buckets.

``x[:, :1]`` on a padded dim (Hugging Face's mask code takes ``position_ids[:, :1]``) has a
static result, but XLA's dynamic padder sizes it from the dim's true size and returns it
with corrupt size metadata: reading it aborted the process (CpuRawBuffer::ReadDynamicShape,
``size >= 0``). The same positions read by ``index_select`` with constant indices come back
static and exact, so such slices are rewritten into that form before a graph is bucketed.
"""

from __future__ import annotations

import torch
import torch.fx

from torchtpu.dynamo.graph_spec import insert_call, symbolic_dims

_SLICE = torch.ops.aten.slice.Tensor


def _fixed_window(node: torch.fx.Node) -> tuple[int, int, int, int] | None:
    """(dim, start, length, step) when `node` slices a fixed number of elements, from a
    non-negative start, out of a dimension with a symbolic size; None otherwise."""
    if node.op != "call_function" or node.target is not _SLICE:
        return None
    src, out = node.args[0], node.meta.get("val")
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    given = dict(zip(("dim", "start", "end", "step"), node.args[1:]), **node.kwargs)
    dim = given.get("dim", 0) % val.dim()
    start = given.get("start") if given.get("start") is not None else 0
    step = given.get("step") if given.get("step") is not None else 1
    if (dim not in symbolic_dims(val) or dim in symbolic_dims(out) or not isinstance(start, int)
            or not isinstance(step, int) or start < 0 or step < 1):
        return None
    return dim, start, int(out.shape[dim]), step


def rewrite_fixed_slices(gm: torch.fx.GraphModule) -> int:
    """Rewrites every fixed-length slice of a dynamic dim in `gm` as ``index_select`` with a
    constant ``arange`` of the same positions (identical values at any size). Returns how
    many were rewritten."""
    windows = [(n, w) for n in gm.graph.nodes if (w := _fixed_window(n)) is not None]
    if not windows:
        return 0
    fake_mode = torch._guards.detect_fake_mode(
        [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"])
    for node, (dim, start, length, step) in windows:
        src = node.args[0]
        with gm.graph.inserting_before(node):
            index = insert_call(gm.graph, fake_mode, torch.ops.aten.arange.start_step,
                                (start, start + length * step, step),
                                {"dtype": torch.int64, "device": src.meta["val"].device})
            picked = insert_call(gm.graph, fake_mode, torch.ops.aten.index_select.default,
                                 (src, dim, index))
        node.replace_all_uses_with(picked)
        gm.graph.erase_node(node)
    gm.recompile()
    return len(windows)
