"""Runs one AOTAutograd graph on tpu: one executable for a static graph; for a graph with
symbolic sizes, one per bucket assignment (padded, buckets/) or per exact size.

A padded graph's inputs are brought to their bucket shapes (`_to_bucket`: free for a
tensor already laid out so, one program keyed by the bucket otherwise, see
compile/bucket_io.h) and its outputs are views of the program's results at the true sizes,
so a new size inside a known bucket compiles nothing.

A graph holding functional collectives (dynamo/collectives.py) runs at exact sizes:
collectives see whole tensors. Its program spans the devices of its group's ranks where
every group is in-plugin; anywhere else it runs cut at its collectives, each piece between
them a runner of its own.
"""

from __future__ import annotations

import logging
import operator
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from torchtpu import _C
from torchtpu.dynamo import collectives as graph_collectives
from torchtpu.dynamo.buckets import (
    BucketPlan,
    Hazard,
    bucket_policy,
    bucket_size,
    plan,
    recompile_limit,
)
from torchtpu.dynamo.buckets import layout as L
from torchtpu.dynamo.effects import unwrap_effects
from torchtpu.dynamo.graph_spec import (
    GraphPlan,
    UnsupportedGraph,
    build_plan,
    copy_graph_module,
    evaluate,
    free_symbols,
    lift_subgraph_constants,
)
from torchtpu.dynamo.rng_states import unwrap_rng_states
from torchtpu.dynamo.split import (
    REFUSED,
    SplitGraph,
    data_dependent_ops,
    split_at_eager_ops,
    unlowered_ops,
)

log = logging.getLogger("torchtpu.compile")


@dataclass
class Session:
    """One AOTAutograd compile: what its forward tells its backward. `saved`: the layouts
    of the outputs the forward saves in bucket layout, by name (the backward's
    placeholders of those names); empty while the forward runs at exact sizes."""

    saved: dict[str, tuple] = field(default_factory=dict)
    forward: GraphRunner | None = None


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]


def _is_laid_out(t: torch.Tensor, bound: list[int]) -> bool:
    """Whether `t` views a storage that holds exactly a contiguous tensor of `bound` (from
    offset 0, strides of `bound`): a padded value at its true sizes."""
    numel = 1
    for n in bound:
        numel *= n
    if t.storage_offset() != 0 or t.untyped_storage().nbytes() != numel * t.element_size():
        return False
    full = _contiguous_strides(bound)
    return all(n <= 1 or s == f for n, s, f in zip(t.shape, t.stride(), full))


def bind_sizes(placeholders: list[torch.fx.Node], args: tuple[Any, ...]
               ) -> dict[sympy.Symbol, int]:
    """The value of every size symbol a placeholder holds alone (a SymInt input, or a
    tensor dim), read from the call's arguments."""
    values: dict[sympy.Symbol, int] = {}

    def bind(s: Any, n: int) -> None:
        # A symbol Dynamo later found equal to another reads as that one from then on;
        # expressions made before then (this graph's) may hold either.
        if isinstance(n, torch.SymInt) and n.node.is_nested_int():
            return  # a jagged tensor's ragged size: a tag, not a number (held by its offsets)
        if isinstance(s, torch.SymInt):
            for e in (getattr(s.node, "_expr", None), s.node.expr):
                if isinstance(e, sympy.Symbol):
                    values[e] = int(n)

    for node, arg in zip(placeholders, args):
        val = node.meta.get("val")
        if node.meta.get("effect_token") or arg is None:
            continue  # an effect token: None at run time
        if isinstance(val, torch.SymInt):
            bind(val, arg)
        elif isinstance(val, torch.Tensor):
            for s, n in zip(val.shape, arg.shape):
                bind(s, n)
    return values


def _on_cpu(node: Any) -> bool:
    """Whether an FX value is a tensor on the CPU (effect tokens, None at run time, are
    not)."""
    if not isinstance(node, torch.fx.Node) or node.meta.get("effect_token"):
        return False
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.device.type == "cpu"


def _results(gm: torch.fx.GraphModule) -> list[Any]:
    """The values `gm` returns, in order."""
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    args = out_node.args[0]
    return list(args) if isinstance(args, (list, tuple)) else [args]


def _device_of(example_inputs: list[Any]) -> int:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "tpu":
            return x.device.index or 0
    return 0


class _Refused(Exception):
    """Lowering the graph failed at `node` (of the graph lowered), whose lowering does not
    take its call: `reason`."""

    def __init__(self, node: torch.fx.Node, reason: str, error: Exception) -> None:
        super().__init__(reason)
        self.node, self.reason, self.error = node, reason, error


class GraphRunner:
    """Runs one AOT graph. `role`: "inference", "forward" (outputs from `first_saved` on
    are saved for the backward) or "backward". `known_sizes`: for a piece of a graph cut
    at its collectives, the sizes of the whole graph's call (a piece's inputs may have
    sizes such as s0 + s1 that name no symbol alone)."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], *,
                 role: str = "inference", session: Session | None = None,
                 first_saved: int | None = None,
                 mutated: list[tuple[int, int]] | None = None,
                 device: int | None = None,
                 known_sizes: dict[sympy.Symbol, int] | None = None) -> None:
        unwrap_effects(gm)
        unwrap_rng_states(gm)
        lift_subgraph_constants(gm)
        self.gm = gm
        self.role = role
        self.session = session or Session()
        self.first_saved = first_saved
        self.known_sizes = known_sizes
        # (placeholder, graph output) pairs: the output is the placeholder's new value,
        # which the backend writes back into the caller's tensor (backend._writing_back).
        self.mutated = mutated or []
        self.device = _device_of(example_inputs) if device is None else device
        # Ops with no lowering: the graph runs cut at them (`fallback`, a SplitGraph), they
        # run eagerly. Functional collectives: compiled into the program
        # (InPluginCollectives, built on the first run) or the graph runs cut at them.
        self.unlowered = unlowered_ops(gm, graph_collectives.is_collective)
        # Sizes known only from data (nonzero, item()): those nodes run eagerly too.
        self.runs_eager_ops = bool(self.unlowered or data_dependent_ops(gm))
        found = None if self.runs_eager_ops else graph_collectives.plan(gm)
        self.collectives = found if isinstance(found, graph_collectives.InPluginCollectives) \
            else None
        self.fallback: Any = None
        self.symbols = free_symbols(gm)
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # CPU tensors among the inputs: 0-dim ones mix with device tensors in PyTorch (an
        # optimizer's step count), others are moved by the graph (`w.to(x.device)` of a
        # captured CPU tensor) or computed on. The program runs every node on the device:
        # such inputs are copied to it on each call (as the eager `.to` would be), and
        # outputs the graph gives on the CPU are copied back.
        self.cpu_inputs = {i for i, n in enumerate(self.placeholders) if _on_cpu(n)}
        self.cpu_outputs = {k for k, r in enumerate(_results(gm)) if _on_cpu(r)}
        # Inputs with a conjugate or negative bit (x.conj() passed in; the conjugated views
        # AOTAutograd saves for a backward): fixed per graph (Dynamo guards on a tensor's
        # dispatch keys), so only these are looked at on each call (_physical).
        self.math_bit_inputs = {i for i, n in enumerate(self.placeholders)
                                if _has_math_bit(n.meta.get("val"))}
        # Backward: the forward's saved outputs it takes, with their layouts.
        self.carried = dict(self.session.saved) if role == "backward" else {}
        self.hazard: str | None = None
        self.padded_gm: torch.fx.GraphModule | None = None
        self.bucket_plan: BucketPlan | None = None
        # Collectives see whole tensors: no padded dims in graphs that hold them.
        policy = "off" if found is not None or self.runs_eager_ops else bucket_policy()
        if self.symbols and policy != "off":
            padded = copy_graph_module(gm)
            try:
                self.bucket_plan = plan(padded, self.carried, first_saved)
                self.padded_gm = padded
            except Hazard as e:
                self.hazard = str(e)
                log.info("torchtpu: graph compiles per exact size: %s", self.hazard)
        if role == "forward":
            self.session.forward = self
            self.session.saved = dict(self.bucket_plan.saved) if self.bucket_plan else {}
        forward = self.session.forward
        if role == "backward" and self.hazard and forward is not None and forward.bucketed \
                and not forward.ran:
            # Padding the forward alone would only add copies at its boundary.
            forward.use_exact_sizes(f"its backward compiles per exact size: {self.hazard}")
            self.carried = {}
        self.output_views = _output_views(gm, first_saved, self.padded_gm is not None)
        self.compiled: dict[tuple[int, ...], tuple[Any, GraphPlan]] = {}
        self.forms: dict[tuple[int, ...], list[Any]] = {}
        self.ran = False
        self.warned_exact = False  # past TORCHTPU_RECOMPILE_LIMIT programs at exact sizes
        if self.runs_eager_ops:
            self.fallback = split_at_eager_ops(gm, self.unlowered, self._compile_piece,
                                               bind_sizes)
        elif isinstance(found, str):
            self.fallback = self._split(found)
        elif not self.symbols and found is None:
            try:
                self._get(())
            except _Refused as r:
                self._cut_at(r)

    @property
    def bucketed(self) -> bool:
        return self.padded_gm is not None

    def use_exact_sizes(self, reason: str) -> None:
        """Runs this graph at exact sizes from now on (a forward whose backward cannot pad
        has not run yet; a program XLA refused)."""
        if not self.bucketed:
            return
        self.hazard = reason
        log.warning("torchtpu: graph compiles per exact size: %s", reason)
        self.padded_gm = None
        self.bucket_plan = None
        self.compiled.clear()
        if self.role == "forward":
            self.session.saved = {}

    def _get(self, key: tuple[int, ...]) -> tuple[Any, GraphPlan]:
        if key not in self.compiled:
            gm = self.padded_gm if self.bucketed else self.gm
            built = build_plan(gm, dict(zip(self.symbols, key)), bucketed=self.bucketed)
            if self.collectives is not None:
                graph = _C._distributed.replicated_graph(built.spec, self.device,
                                                         self.collectives.span)
            else:
                if not self.symbols:
                    built.spec.donations = _donations(built, self.mutated)
                try:
                    graph = _C.CompiledGraph(built.spec, self.device)
                except NotImplementedError as e:
                    refused = _C.refused_node(built.spec)
                    if refused is None or not 0 <= refused[0] < len(built.fx_nodes):
                        raise
                    raise _Refused(built.fx_nodes[refused[0]], refused[1], e) from None
            self.compiled[key] = (graph, built)
            if self.symbols:
                log.info("torchtpu: compiled graph for sizes %s", dict(zip(self.symbols, key)))
            if self.symbols and not self.bucketed:
                self._warn_exact_sizes()
            dump_dir = os.environ.get("TORCHTPU_DUMP_DIR")
            if dump_dir:
                path = os.path.join(dump_dir, f"graph_{id(graph):x}.fx.txt")
                try:
                    os.makedirs(dump_dir, exist_ok=True)
                    with open(path, "w") as f:
                        f.write(gm.print_readable(print_output=False))
                except OSError as e:  # as the C++ side does for the modules: say so, go on
                    log.warning("torchtpu: could not write %s (TORCHTPU_DUMP_DIR): %s", path, e)
        return self.compiled[key]

    def _warn_exact_sizes(self) -> None:
        """Past TORCHTPU_RECOMPILE_LIMIT programs of this graph at exact sizes, once: each
        new size compiles another."""
        limit = recompile_limit()
        if self.warned_exact or len(self.compiled) <= limit:
            return
        self.warned_exact = True
        why = self.hazard or ("TORCHTPU_SHAPE_BUCKETS=off" if bucket_policy() == "off"
                              else "it is not padded to buckets")
        warnings.warn(
            f"torchtpu: a compiled graph has compiled {len(self.compiled)} programs, one per "
            f"exact size (limit {limit}; {why}); every new size compiles another. Sizes of "
            f"the last: {dict(zip(self.symbols, next(reversed(self.compiled))))}",
            stacklevel=2)

    def _key(self, actual: dict[sympy.Symbol, int]) -> tuple[int, ...]:
        return tuple(bucket_size(actual[s]) if self.bucketed else actual[s] for s in self.symbols)

    def _constants(self, built: GraphPlan) -> list[Any]:
        """The graph's tensor constants on the device. They live on the CPU in the graph
        module and move on the first run (compiling happens under fake-tensor tracing,
        where a copy would be fake), then stay. Each moves on its own: a graph can hold
        constants made on the device beside CPU ones."""
        if built.constants_device != self.device:
            built.constants = [c.to(f"tpu:{self.device}") for c in built.constants]
            built.constants_device = self.device
        return built.constants

    def _bind(self, args: tuple[Any, ...]) -> dict[sympy.Symbol, int]:
        values = dict(self.known_sizes) if self.known_sizes is not None else {}
        values.update(bind_sizes(self.placeholders, args))
        missing = [s for s in self.symbols if s not in values]
        if missing:
            raise UnsupportedGraph(f"tpu compile: cannot read sizes {missing} from the inputs")
        return values

    def _cut_at(self, r: _Refused) -> None:
        """Runs this graph cut at the node whose lowering refused its call: that node runs
        as eager mode runs it (on the CPU), the pieces around it compiled (each a runner that
        does the same at a node its lowering refuses)."""
        node = next((n for n in self.gm.graph.nodes if n.name == r.node.name), None)
        if node is None or not isinstance(node.target, torch._ops.OpOverload):
            raise r.error
        node.meta[REFUSED] = r.reason.removeprefix("lowering: ")
        self.use_exact_sizes(f"it runs {node.name} eagerly")
        self.compiled.clear()
        self.unlowered = unlowered_ops(self.gm, graph_collectives.is_collective)
        self.runs_eager_ops = True
        self.fallback = split_at_eager_ops(self.gm, self.unlowered, self._compile_piece,
                                           bind_sizes)

    def _compile_piece(self, sub: torch.fx.GraphModule, sizes: dict) -> GraphRunner:
        return GraphRunner(sub, [], device=self.device, known_sizes=sizes)

    def _split(self, reason: str) -> SplitGraph:
        """This graph cut at its collectives, each piece between them a runner."""
        return graph_collectives.split_at_collectives(self.gm, reason, self._compile_piece,
                                                      bind_sizes)

    def _resolve_collectives(self) -> None:
        """First run of a graph with collectives: resolve its groups with the other ranks;
        where they cannot be lowered after all, run it cut at its collectives."""
        assert self.collectives is not None
        reason = self.collectives.resolve()
        if reason is None:
            graph_collectives.note_lowered(len(graph_collectives.collective_nodes(self.gm)))
            return
        self.fallback = self._split(reason)

    def __call__(self, *args: Any) -> Any:
        if self.collectives is not None and not self.collectives.resolved:
            self._resolve_collectives()
        if self.fallback is not None:
            if self.carried and self.symbols:
                # Saved activations the forward returned in bucket layout, as true tensors.
                actual = self._bind(args)
                args = tuple(self._uncarried(i, a, actual) for i, a in enumerate(args))
            return self.fallback(*args)
        original = args  # inputs handed back as outputs are the caller's own tensors
        if self.cpu_inputs:
            device = f"tpu:{self.device}"
            args = tuple(a.to(device) if i in self.cpu_inputs else a for i, a in enumerate(args))
        if self.math_bit_inputs:
            args = tuple(_physical(a) if i in self.math_bit_inputs else a
                         for i, a in enumerate(args))
        try:
            out = self._run_program(args, original)
        except _Refused as r:
            self._cut_at(r)
            return self(*original)
        if self.cpu_outputs:
            out = tuple(o.cpu() if k in self.cpu_outputs else o for k, o in enumerate(out))
        return out

    def _run_program(self, args: tuple, original: tuple) -> tuple:
        if not self.symbols:
            graph, built = self._get(())
            tensors = graph.run([args[i] for i in built.input_placeholders] +
                                self._constants(built))
            return self._with_output_views(
                [tensors[v[1]] if v[0] == "tensor" else original[v[1]] if v[0] == "arg"
                 else v[1] for v in built.output_layout], original)
        self.ran = True
        actual = self._bind(args)
        try:
            graph, built = self._get(self._key(actual))
        except (RuntimeError, _Refused) as e:
            if not self.bucketed:
                raise
            # A program XLA refuses padded (none known), or a lowering refusing a padded
            # call: exact sizes, with the reason (a call refused at exact sizes too is cut).
            why = f"{e.node.name}'s lowering refused it padded: " if isinstance(e, _Refused) \
                else "XLA did not compile it padded: "
            self.use_exact_sizes(why + str(e).splitlines()[0])
            graph, built = self._get(self._key(actual))
        if self.bucketed:
            return self._run_padded(graph, built, args, original, actual)
        inputs = [self._uncarried(i, args[i], actual) for i in built.input_placeholders]
        tensors = graph.run(inputs + self._constants(built), built.resolve(self.symbols,
                                                                           actual)[0])
        out = [tensors[e[1]] if e[0] == "tensor" else original[e[1]] if e[0] == "arg"
               else v if e[0] == "size" else e[1]
               for e, v in zip(built.output_layout, built.resolve(self.symbols, actual)[1])]
        return self._with_output_views(out, original)

    def _run_padded(self, graph: Any, built: GraphPlan, args: tuple, original: tuple,
                    actual: dict[sympy.Symbol, int]) -> tuple:
        buckets = dict(zip(self.symbols, self._key(actual)))
        assert self.bucket_plan is not None
        fed = {i: self._to_bucket(i, args[i], bound, actual, buckets)
               for i, bound in zip(built.input_placeholders, built.input_bounds)}
        sizes, resolved = built.resolve(self.symbols, actual)
        tensors = graph.run([fed[i] for i in built.input_placeholders] + self._constants(built),
                            sizes)
        forms = self._forms(actual)
        out: list[Any] = []
        for k, (entry, value) in enumerate(zip(built.output_layout, resolved)):
            form = self.bucket_plan.outputs[k] if k < len(self.bucket_plan.outputs) else None
            if entry[0] == "tensor":
                out.append(_as_output(tensors[entry[1]], form, forms[k]))
            elif entry[0] == "arg":
                j = entry[1]
                padded = form is not None and form.kind == "padded" and j in fed
                out.append(_as_output(fed[j], form, forms[k]) if padded else original[j])
            elif entry[0] == "size":
                out.append(value)
            else:
                out.append(entry[1])
        return self._with_output_views(out, original)

    def _forms(self, actual: dict[sympy.Symbol, int]) -> list[Any]:
        """Each output's true shape at `actual` (cached per tuple of sizes)."""
        key = tuple(actual[s] for s in self.symbols)
        if key not in self.forms:
            assert self.bucket_plan is not None
            self.forms[key] = [None if f is None else [evaluate(e, actual) for e in f.shape]
                               for f in self.bucket_plan.outputs]
        return self.forms[key]

    def _to_bucket(self, i: int, arg: torch.Tensor, bound: list[int],
                   actual: dict[sympy.Symbol, int], buckets: dict[sympy.Symbol, int]) -> Any:
        """Input `i` in its bucket layout (`bound` its static shape)."""
        if list(arg.shape) == bound:
            return arg
        if _is_laid_out(arg, bound):
            return arg.as_strided(bound, _contiguous_strides(bound), 0)
        assert self.bucket_plan is not None
        lays = self.bucket_plan.inputs[i]
        sizes = [L.expr(s) for s in self.placeholders[i].meta["val"].shape]
        true_parts, padded_parts = [], []
        for lay, size in zip(lays, sizes):
            for c in L.components(lay, size):
                true_parts.append(evaluate(c, actual))
                padded_parts.append(evaluate(c, buckets))
        if true_parts != list(arg.shape):
            arg = arg.reshape(true_parts)
        return _C.pad_to_bucket(arg, padded_parts, bound)

    def _uncarried(self, i: int, arg: Any, actual: dict[sympy.Symbol, int]) -> Any:
        """At exact sizes: a saved activation that the forward returned in bucket layout,
        as its true tensor (merged rows are not a view of the padded storage)."""
        name = self.placeholders[i].name
        if name not in self.carried or not isinstance(arg, torch.Tensor):
            return arg
        lays = self.carried[name]
        sizes = [L.expr(s) for s in self.placeholders[i].meta["val"].shape]
        buckets = {s: bucket_size(n) for s, n in actual.items()}
        bound = [evaluate(s, buckets) for s in sizes]
        if not _is_laid_out(arg, bound):
            return arg
        parts = [(evaluate(c, actual), evaluate(c, buckets))
                 for lay, size in zip(lays, sizes) for c in L.components(lay, size)]
        view = arg.as_strided([t for t, _ in parts], _contiguous_strides([p for _, p in parts]), 0)
        return view.reshape([evaluate(s, actual) for s in sizes])

    def _with_output_views(self, out: list[Any], original: tuple) -> tuple:
        if self.output_views is not None:
            picked, bases, views = self.output_views
            for k, view in zip(picked, views(*original, *[out[b] for b in bases])):
                out[k] = view
        return tuple(out)


def _as_output(t: torch.Tensor, form: Any, shape: list[int] | None) -> torch.Tensor:
    """A program result at its true size: the compact prefix; a padded one with the padded
    strides (what the backward takes back as is). Either is a tensor of its own over the
    result's storage, not a view of the bucket-sized result: AOTAutograd replays an
    output that aliases an input from the returned tensor's base when it has one, and the
    bucket-sized base does not fit the caller's smaller input."""
    if form is None or shape is None:
        return t
    strides = _contiguous_strides(list(t.shape) if form.kind == "padded" else shape)
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(
        t.untyped_storage(), 0, shape, strides)


def _output_views(gm: torch.fx.GraphModule, first_saved: int | None, padded: bool
                  ) -> tuple[list[int], list[int], torch.fx.GraphModule] | None:
    """The outputs of `gm` that are views (view ops and size arithmetic only) of its inputs
    or of other outputs it returns; the indices of those other outputs (the bases); and a
    graph module computing the views from (the arguments..., the bases...). None if none.
    Outputs from `first_saved` on (saved for the backward) are never bases or rebuilt
    views of one; a padded graph leaves their views of inputs alone too (only the backward
    reads them, in bucket layout).

    A view of an input: AOTAutograd rebuilds such an output from the caller's tensor, and
    where it cannot replay the view ops themselves (symbolic sizes; an int argument
    specialized to a negative position) it replays the view the returned tensor has, so
    the runner returns real views of the inputs (free: metadata only), not program results
    (fresh buffers, whose view of their own storage would be replayed on the input's
    storage). A view of another output (y, y.view(-1), y[::2] returned together): the
    program returns each as a buffer of its own, so a write into one would not show in
    the others; they are rebuilt as views of the returned base, as eager gives them."""
    results = _results(gm)
    user = len(results) if first_saved is None else first_saved
    returned: dict[torch.fx.Node, int] = {}  # a user output's first index
    for k, r in enumerate(results[:user]):
        if isinstance(r, torch.fx.Node):
            returned.setdefault(r, k)
    bases: dict[torch.fx.Node, int] = {}
    pure: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            pure.add(node)
        elif node.op == "call_function" and node.all_input_nodes and \
                all(a in pure for a in node.all_input_nodes):
            val = node.meta.get("val")
            # A view op, or an item of one returning several views (split, chunk, unbind).
            is_view = node.target is operator.getitem or (
                isinstance(node.target, torch._ops.OpOverload) and node.target.is_view)
            if is_view or isinstance(val, (torch.SymInt, int)):
                pure.add(node)
        if node not in pure and node in returned and \
                isinstance(node.meta.get("val"), torch.Tensor):
            bases[node] = returned[node]
            pure.add(node)  # a leaf of the views module: the returned tensor

    def from_input(r: torch.fx.Node) -> bool:
        return not any(a in bases for a in _ancestors(r, pure))

    picked = [k for k, r in enumerate(results)
              if isinstance(r, torch.fx.Node) and r in pure and r not in bases
              and r.op != "placeholder" and isinstance(r.meta.get("val"), torch.Tensor)
              and (k < user if not from_input(r) else not padded or k < user)]
    if not picked:
        return None
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = graph.node_copy(node, lambda a: env[a])
    for node in bases:
        env[node] = graph.placeholder(f"base_{node.name}")
        env[node].meta = dict(node.meta)
    for node in gm.graph.nodes:
        if node in pure and node not in env:
            env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(tuple(env[results[k]] for k in picked))
    graph.eliminate_dead_code()
    return picked, list(bases.values()), torch.fx.GraphModule(gm, graph)


def _ancestors(node: torch.fx.Node, within: set[torch.fx.Node]) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    stack = [node]
    while stack:
        for a in stack.pop().all_input_nodes:
            if a in within and a not in seen:
                seen.add(a)
                stack.append(a)
    return seen


def _has_math_bit(a: Any) -> bool:
    return isinstance(a, torch.Tensor) and (a.is_conj() or a.is_neg())


def _physical(a: Any) -> Any:
    """`a` with its conjugate and negative bits applied: the program reads a tensor's
    stored values, and `x.conj()` (or `x.conj().imag`) stores x's. AOTAutograd saves such
    views for the backward (of a @ b.mH, a * b.conj()). A resolved input is a copy: the
    backend writes a mutated input back through the caller's own view (_writing_back)."""
    return a.resolve_conj().resolve_neg() if _has_math_bit(a) else a


def _donations(built: GraphPlan, mutated: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Spec (input, output) pairs whose input buffer the output may take over: a mutated
    input is dead once its new value is written back, so XLA can update it in place (an
    index_copy_ into a large KV cache then costs the rows written, not the whole cache)."""
    pairs = []
    for placeholder, out in mutated:
        if placeholder not in built.input_placeholders or out >= len(built.output_layout):
            continue
        entry = built.output_layout[out]
        if entry[0] == "tensor":
            pairs.append((built.input_placeholders.index(placeholder), entry[1]))
    return pairs
