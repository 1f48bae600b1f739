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
import os
import sys
import warnings
import weakref
from collections import defaultdict
from typing import Any, Callable, Iterator

import sympy
import torch
import torch.fx
from torch._decomp import core_aten_decompositions
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from torchtpu import _C
from torchtpu.dynamo.graph_spec import (
    GraphPlan,
    UnsupportedGraph,
    build_plan,
    evaluate,
    free_symbols,
    size_expr,
    symbolic_dims,
)
from torchtpu.dynamo import collectives as graph_collectives
from torchtpu.dynamo.checked_ops import unchecked_op
from torchtpu.dynamo.compile_options import check_compile_kwargs
from torchtpu.dynamo.fixed_slices import rewrite_fixed_slices
from torchtpu.dynamo.merged_dims import merge_hazard, rewrite_merges

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
    limit = int(os.environ.get("TORCHTPU_RECOMPILE_LIMIT", "8"))
    if len(history) > limit and frame not in _warned:
        _warned.add(frame)
        warnings.warn(
            f"torchtpu: {frame} has compiled {len(history)} graphs (limit {limit}); inputs whose "
            "shapes keep changing cause a recompilation storm. Last change: "
            f"{_explain_change(history[-2], sig)}",
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


def bucket_policy() -> str:
    """Which graphs with symbolic sizes are padded to shape buckets (TORCHTPU_SHAPE_BUCKETS).

    - unset (the default): ``"checked"``, graphs (inference, or a training step's forward
      and backward) whose ops on dynamic dims are all checked under buckets
      (checked_ops.py) and that have no hazard;
    - ``auto``, or a bucket list such as ``16,32,64``: ``"all"``, every graph without a
      known hazard (experimental for ops outside the checked list);
    - ``off``: ``"off"``, every graph compiles once per exact size.

    A graph that is not padded compiles per exact size: exact results, and every new size
    is a counted, explained recompilation.
    """
    value = os.environ.get("TORCHTPU_SHAPE_BUCKETS", "").strip()
    if not value:
        return "checked"
    if value == "off":
        return "off"
    if value != "auto":
        _listed_buckets(value)  # raises on a malformed list
    return "all"


def _listed_buckets(value: str) -> list[int]:
    try:
        sizes = sorted(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        sizes = []
    if not sizes or sizes[0] < 1:
        raise ValueError(f"TORCHTPU_SHAPE_BUCKETS={value!r}: expected 'auto', 'off' or a "
                         "comma-separated list of positive sizes such as '16,32,64'")
    return sizes


def bucket_size(n: int) -> int:
    """The padded size for a true size `n` of a dynamic dimension.

    ``TORCHTPU_SHAPE_BUCKETS="16,32,64,128"`` lists the buckets explicitly (sizes above
    the largest round up to a power of two); otherwise powers of two from
    ``TORCHTPU_MIN_BUCKET`` (default 16). Lengths 1..100 thus need 4 executables.
    """
    listed = os.environ.get("TORCHTPU_SHAPE_BUCKETS", "").strip()
    if listed and listed not in ("auto", "off"):
        for b in _listed_buckets(listed):
            if n <= b:
                return b
    b = max(1, int(os.environ.get("TORCHTPU_MIN_BUCKET", "16")))
    while b < n:
        b *= 2
    return b


# Ops whose result depends on where a dynamic dimension ends (negative or end-relative
# positions, reversal, sorting, repeats along it): padding would change their result, so
# graphs holding them on a dynamic dimension compile per exact size. (cat and
# constant_pad_nd are not: along a padded dim they come out exact, see
# test_bucket_checked_ops.py; a pad that crops a dynamic dim's end is checked below.)
_SIZE_RELATIVE = {
    "flip", "roll", "sort", "argsort", "topk", "repeat",
    "kthvalue", "median", "cumprod", "_log_softmax_backward_data",
}
# Windowed ops over (N, C, *spatial) inputs: padding a spatial dim would change the
# windows at its end (pooling is not exact there), so they keep such graphs exact-size.
_SPATIAL_PREFIXES = ("convolution", "avg_pool", "max_pool", "adaptive_", "upsample",
                     "_adaptive", "_upsample", "reflection_pad", "replication_pad", "im2col",
                     "col2im", "grid_sampler")


def bucketing_hazard(gm: torch.fx.GraphModule, saved: dict[str, tuple] | None = None,
                     ) -> str | None:
    """Why `gm` cannot run padded to buckets, or None when padding keeps it exact.
    `saved`: placeholders holding merged rows, by name (see merged_dims.py)."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = node.target._schema.name.split("::")[-1]
        src = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
        dyn = symbolic_dims(src.meta.get("val")) if src is not None else set()
        if not dyn:
            continue
        rank = src.meta["val"].dim()
        if name in _SIZE_RELATIVE:
            return f"{node.target} on a dynamic dimension ({node.name})"
        if name == "constant_pad_nd":
            pads = node.args[1]
            for i in range(len(pads) // 2):
                if rank - 1 - i in dyn and pads[2 * i + 1] < 0:
                    return f"{node.target} crops the end of a dynamic dimension ({node.name})"
        if name.startswith(_SPATIAL_PREFIXES) and any(d >= 2 for d in dyn):
            return f"{node.target} on a dynamic spatial dimension ({node.name})"
        if name in ("select", "slice", "narrow"):
            dim = node.args[1] if len(node.args) > 1 else 0
            dim = dim + rank if dim < 0 else dim
            if dim not in dyn:
                continue
            bounds = [a for a in node.args[2:] if isinstance(a, int)]
            if any(a < 0 for a in bounds):
                return f"{node.target} with a negative position on a dynamic dimension ({node.name})"
            out = node.meta.get("val")
            if name != "select" and isinstance(out, torch.Tensor) and dim not in symbolic_dims(out):
                # A fixed-length window of a dynamic dim: XLA sizes the result from the
                # dim's true size and returns it with corrupt size metadata. Inference
                # graphs have these rewritten as gathers first (fixed_slices.py).
                return f"{node.target} takes a fixed length of a dynamic dimension ({node.name})"
    # Reshapes that merge a dynamic dim (a batched linear's [b, s, k] -> [b*s, k]) are
    # rewritten away when only row-wise ops read the merged rows (merged_dims.py).
    return merge_hazard(gm, saved)


def bind_sizes(placeholders: list[torch.fx.Node], args: tuple[Any, ...]
               ) -> dict[sympy.Symbol, int]:
    """The value of every size symbol a placeholder holds alone (a SymInt input, or a
    tensor dim), read from the call's arguments."""
    values: dict[sympy.Symbol, int] = {}
    for node, arg in zip(placeholders, args):
        val = node.meta.get("caller_val", node.meta.get("val"))
        if isinstance(val, torch.SymInt) and isinstance(val.node.expr, sympy.Symbol):
            values[val.node.expr] = int(arg)
        elif isinstance(val, torch.Tensor):
            for s, n in zip(val.shape, arg.shape):
                if isinstance(s, torch.SymInt) and isinstance(s.node.expr, sympy.Symbol):
                    values[s.node.expr] = int(n)
    return values


class _GraphRunner:
    """Runs one AOT graph; with size symbols, one executable per bucket assignment."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list[Any],
                 mutated: list[tuple[int, int]] | None = None,
                 saved: dict[str, tuple] | None = None,
                 collectives: graph_collectives.InPluginCollectives | None = None,
                 device: int | None = None,
                 known_sizes: dict[sympy.Symbol, int] | None = None) -> None:
        self.gm = gm
        # A piece of a graph cut at its collectives: the sizes of the whole graph's call
        # (its inputs may have sizes such as s0 + s1 that name no symbol alone).
        self.known_sizes = known_sizes
        # Functional collectives compiled into the program (dynamo/collectives.py): the
        # program then spans several devices and is built on the first run.
        self.collectives = collectives
        self.fallback: Any = None
        self.saved = saved
        # (placeholder, graph output) pairs: the output is the placeholder's new value,
        # which AOTAutograd's epilogue copies back into the caller's tensor.
        self.mutated = mutated or []
        self.device = _device_of(example_inputs) if device is None else device
        self.symbols = free_symbols(gm)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # 0-dim CPU tensors mix with device tensors in PyTorch (an optimizer's step count
        # lives on the CPU): such inputs are copied to the device on each call.
        self.cpu_scalars = {i for i, n in enumerate(self.placeholders)
                            if isinstance(n.meta.get("val"), torch.Tensor)
                            and n.meta["val"].device.type == "cpu" and n.meta["val"].dim() == 0}
        self.hazard = None
        # Forward graphs: outputs returned unmerged, by name, with their merged prefix.
        self.merged_outputs: dict[str, tuple] = {}
        # Collectives see whole tensors: no padded dims in graphs that hold them.
        policy = "off" if collectives is not None else bucket_policy()
        if self.symbols and policy != "off":
            # Same values at any size, so harmless if the graph ends up exact-size.
            if rewrite_fixed_slices(gm):
                log.info("torchtpu: fixed-length slices of a dynamic dim rewritten as gathers")
            self.hazard = bucketing_hazard(gm, saved)
            if self.hazard is None and policy == "checked":
                self.hazard = unchecked_op(gm)
            if self.hazard is None:
                rewritten = rewrite_merges(gm, saved)
                self.merged_outputs = rewritten.outputs
                if rewritten.nodes:
                    log.info("torchtpu: merged dynamic rows rewritten for shape buckets")
            if self.hazard:
                # Asked-for buckets that do not apply are worth a warning; the default
                # policy's exact-size graphs are what it promises, so only logged.
                level = logging.INFO if policy == "checked" else logging.WARNING
                log.log(level, "torchtpu: graph compiles per exact size: %s", self.hazard)
        self.bucketed = bool(self.symbols) and policy != "off" and self.hazard is None
        self.input_views = _input_views(gm) if self.symbols else None
        self.compiled: dict[tuple[int, ...], tuple[Any, GraphPlan]] = {}
        if not self.symbols and collectives is None:
            self._get(())

    def _get(self, key: tuple[int, ...]) -> tuple[Any, GraphPlan]:
        if key not in self.compiled:
            plan = build_plan(self.gm, dict(zip(self.symbols, key)), bucketed=self.bucketed)
            if self.collectives is not None:
                graph = _C._distributed.replicated_graph(plan.spec, self.device,
                                                         self.collectives.span)
            else:
                if not self.symbols:
                    plan.spec.donations = _donations(plan, self.mutated)
                graph = _C.CompiledGraph(plan.spec, self.device)
            self.compiled[key] = (graph, plan)
            if self.symbols:
                log.info("torchtpu: compiled graph for sizes %s", dict(zip(self.symbols, key)))
            dump_dir = os.environ.get("TORCHTPU_DUMP_DIR")
            if dump_dir:
                os.makedirs(dump_dir, exist_ok=True)
                path = os.path.join(dump_dir, f"graph_{id(graph):x}.fx.txt")
                with open(path, "w") as f:
                    f.write(self.gm.print_readable(print_output=False))
        return self.compiled[key]

    def _key(self, actual: dict[sympy.Symbol, int]) -> tuple[int, ...]:
        return tuple(bucket_size(actual[s]) if self.bucketed else actual[s] for s in self.symbols)

    def _constants(self, plan: GraphPlan) -> list[Any]:
        """The graph's tensor constants on the device. They live on the CPU in the graph
        module and move on the first run (compiling happens under fake-tensor tracing,
        where a copy would be fake), then stay."""
        if plan.constants and plan.constants[0].device.type != "tpu":
            plan.constants = [c.to(f"tpu:{self.device}") for c in plan.constants]
        return plan.constants

    def _bind(self, args: tuple[Any, ...]) -> dict[sympy.Symbol, int]:
        values = dict(self.known_sizes) if self.known_sizes is not None else {}
        values.update(bind_sizes(self.placeholders, args))
        missing = [s for s in self.symbols if s not in values]
        if missing:
            raise UnsupportedGraph(f"tpu compile: cannot read sizes {missing} from the inputs")
        return values

    def _as_declared(self, i: int, arg: Any, actual: dict[sympy.Symbol, int]) -> Any:
        """An exact-size input as its placeholder declares it: saved merged rows that the
        graph declared unmerged (merged_dims.py) are viewed so; compact inputs need not."""
        node = self.placeholders[i]
        if "caller_val" not in node.meta:
            return arg
        return arg.view([evaluate(size_expr(d), actual) for d in node.meta["val"].shape])

    def _resolve_collectives(self) -> None:
        """First run of a graph with collectives: resolve its groups with the other ranks;
        where they cannot be lowered after all, run it cut at its collectives."""
        reason = self.collectives.resolve()
        if reason is None:
            graph_collectives.note_lowered(len(graph_collectives.collective_nodes(self.gm)))
            return
        self.fallback = _split(self.gm, reason, self.device, self.saved)

    def __call__(self, *args: Any) -> Any:
        if self.collectives is not None and not self.collectives.resolved:
            self._resolve_collectives()
        if self.fallback is not None:
            return self.fallback(*args)
        original = args  # inputs handed back as outputs are the caller's own tensors
        if self.cpu_scalars:
            device = f"tpu:{self.device}"
            args = tuple(a.to(device) if i in self.cpu_scalars else a for i, a in enumerate(args))
        if not self.symbols:
            graph, plan = self._get(())
            tensors = graph.run([args[i] for i in plan.input_placeholders] +
                                self._constants(plan))
            return tuple(tensors[v[1]] if v[0] == "tensor" else original[v[1]] if v[0] == "arg"
                         else v[1] for v in plan.output_layout)
        actual = self._bind(args)
        try:
            graph, plan = self._get(self._key(actual))
        except RuntimeError as e:
            if not self.bucketed:
                raise
            # XLA's dynamic padder rejects some programs (several dynamic dims meeting in
            # one op): this graph then compiles per exact size, with the reason.
            self.hazard = "XLA did not compile it padded: " + str(e).splitlines()[0]
            log.warning("torchtpu: graph compiles per exact size: %s", self.hazard)
            self.bucketed = False
            self.compiled.clear()
            graph, plan = self._get(self._key(actual))
        inputs = [_compact(args[i], bound) if i in plan.compact_inputs
                  else self._as_declared(i, args[i], actual)
                  for i, bound in zip(plan.input_placeholders, plan.input_bounds)]
        inputs += self._constants(plan)
        sizes, resolved = plan.resolve(self.symbols, actual)
        tensors = graph.run(inputs, sizes)
        out, handed_out = [], set()
        for entry, value in zip(plan.output_layout, resolved):
            if entry[0] == "tensor":
                # Dynamic results come back compact: the true tensor is the buffer's prefix.
                t = tensors[entry[1]]
                if entry[1] in handed_out:
                    t = t.clone()  # one program result for two outputs (build_plan)
                handed_out.add(entry[1])
                if list(t.shape) != value:
                    numel = 1
                    for n in value:
                        numel *= n
                    t = t.reshape(-1)[:numel].view(value)
                out.append(t)
            elif entry[0] == "size":
                out.append(value)
            elif entry[0] == "arg":
                arg = original[entry[1]]
                out.append(arg if value is None else arg.view(value))
            else:
                out.append(entry[1])
        if self.input_views is not None:
            for k, view in zip(self.input_views[0], self.input_views[1](*original)):
                out[k] = view
        return tuple(out)


def _input_views(gm: torch.fx.GraphModule) -> tuple[list[int], torch.fx.GraphModule] | None:
    """The outputs of `gm` that are views of its inputs (view ops and size arithmetic
    only), and a graph module computing just them from the same arguments; None if none.

    AOTAutograd rebuilds such an output from the caller's tensor. With symbolic sizes it
    cannot replay the view ops themselves and replays the view the returned tensor has
    instead, so the runner returns real views of the inputs (free: metadata only), not
    program results (fresh compact buffers, whose view of their own storage would be
    replayed on the input's storage)."""
    pure: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            pure.add(node)
        elif node.op == "call_function" and all(a in pure for a in node.all_input_nodes):
            val = node.meta.get("val")
            is_view = isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
            if is_view or isinstance(val, (torch.SymInt, int)):
                pure.add(node)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else [
        out_node.args[0]]
    picked = [k for k, r in enumerate(results) if isinstance(r, torch.fx.Node) and r in pure
              and r.op != "placeholder" and isinstance(r.meta.get("val"), torch.Tensor)]
    if not picked:
        return None
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node in pure:
            env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(tuple(env[results[k]] for k in picked))
    graph.eliminate_dead_code()
    return picked, torch.fx.GraphModule(gm, graph)


def _compact(t: Any, bound: list[int]) -> Any:
    """`t` as the flat compact buffer a dynamic graph input takes (lowering/graph.h): its
    elements first, row-major, then zeros up to the bound's element count. Free when `t`
    is the leading window of a storage that large (graph outputs are exactly that)."""
    numel = 1
    for n in bound:
        numel *= n
    if (t.is_contiguous() and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == numel * t.element_size()):
        return t.as_strided([numel], [1], 0)
    # On the device (one pad program): through the host, every call would wait for the
    # work queued before it.
    flat = t.reshape(-1)
    return torch.nn.functional.pad(flat, (0, numel - flat.numel()))


def _donations(plan: GraphPlan, mutated: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spec (input, output) pairs whose input buffer the output may take over: a mutated
    input is dead once its new value is written back, so XLA can update it in place (an
    index_copy_ into a large KV cache then costs the rows written, not the whole cache)."""
    pairs = []
    for placeholder, out in mutated:
        if placeholder not in plan.input_placeholders or out >= len(plan.output_layout):
            continue
        entry = plan.output_layout[out]
        if entry[0] == "tensor":
            pairs.append((plan.input_placeholders.index(placeholder), entry[1]))
    return pairs


def _mutated_inputs(gm: torch.fx.GraphModule) -> list[tuple[int, int]]:
    """For an inference graph: which placeholders AOTAutograd mutates (data only) and
    which graph output holds each new value (mutated inputs' values come first)."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return []
    n_placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    pairs = []
    for out, idx in enumerate(meta.mutated_inp_runtime_indices):
        info = meta.input_info[idx]
        if info.mutates_data and not info.mutates_metadata and idx < n_placeholders:
            pairs.append((idx, out))
    return pairs


# Per AOTAutograd compile (its TracingContext, shared by the forward and the backward
# compile): the forward's outputs returned unmerged, by name, with their merged prefix.
# The backward takes them as placeholders of the same names.
_merged_saves: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _runner(gm: torch.fx.GraphModule, example_inputs: list[Any],
            mutated: list[tuple[int, int]] | None = None,
            saved: dict[str, tuple] | None = None) -> Any:
    """The runner of one AOT graph: a _GraphRunner, whose program also holds the graph's
    collectives where they run in-plugin, or the graph cut at its collectives
    (dynamo/collectives.py)."""
    found = graph_collectives.plan(gm)
    if found is None or isinstance(found, graph_collectives.InPluginCollectives):
        return _GraphRunner(gm, example_inputs, mutated=mutated, saved=saved, collectives=found)
    return _split(gm, found, _device_of(example_inputs), saved)


def _split(gm: torch.fx.GraphModule, reason: str, device: int,
           saved: dict[str, tuple] | None) -> graph_collectives.SplitGraph:
    """`gm` cut at its collectives, each piece between them a _GraphRunner."""
    return graph_collectives.SplitGraph(
        gm, reason,
        lambda sub, sizes: _GraphRunner(sub, [], saved=saved, device=device, known_sizes=sizes),
        bind_sizes)


def _device_of(example_inputs: list[Any]) -> int:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return x.device.index or 0
    return 0


def _compile_forward_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    runner = _runner(gm, example_inputs)
    ctx = torch._guards.TracingContext.try_get()
    if ctx is not None and runner.merged_outputs:
        _merged_saves.setdefault(ctx, {}).update(runner.merged_outputs)
    # AOTAutograd calls compiled graphs with one list of arguments ("boxed"), so it can
    # free inputs early; the runner only reads them.
    return make_boxed_func(runner)


def _compile_backward_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    ctx = torch._guards.TracingContext.try_get()
    saved = _merged_saves.get(ctx) if ctx is not None else None
    return make_boxed_func(_runner(gm, example_inputs, saved=saved))


def _compile_inference_graph(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    return make_boxed_func(_runner(gm, example_inputs, mutated=_mutated_inputs(gm)))


_aot = aot_autograd(
    fw_compiler=_compile_forward_graph,
    bw_compiler=_compile_backward_graph,
    inference_compiler=_compile_inference_graph,
    decompositions=core_aten_decompositions(),
)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any], *,
                mode: str | None = None, options: dict[str, Any] | None = None) -> Callable:
    """The Dynamo backend registered as ``"tpu"`` (through the package's
    ``torch_dynamo_backends`` entry point). ``mode`` and ``options`` are those of
    ``torch.compile``: checked like Inductor's and ignored (compile_options.py)."""
    check_compile_kwargs(mode, options)
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
        **graph_collectives.compile_stats(),
    }
