"""Functional collectives in compiled graphs (``_c10d_functional::*``: what
``torch.distributed._functional_collectives``, DTensor, tensor parallelism and FSDP2 put in
the graphs ``torch.compile(backend="tpu")`` compiles).

Two ways to run such a graph, chosen per graph when it is compiled (the same choice on
every rank: it depends only on the graph and on its groups' transport):

- **In the program** (``InPluginCollectives``): every group of the graph is in-plugin (its
  ranks are threads of this process, each on its own device). The graph becomes one
  program replicated over the devices of the ranks that run it, its collectives lowered
  with the rest (``lowering/functional_collectives.cc``): each rank's call meets the other
  ranks' in the group's rendezvous, the last one runs the program on every device at once.
  A graph with one group spans that group; a graph with several (a 2-D DeviceMesh) spans
  the default group, whose ranks all run it, and learns once, on its first run, which
  ranks share each group (every rank's groups, exchanged through the default group).
- **Between compiled pieces** (``split.SplitGraph``): anywhere else (ranks in other processes,
  host-staged; an op, reduce op or split the lowering does not take). The graph is cut at
  its collectives; the pieces between them compile as usual and the collectives run
  eagerly through the process group. Never silent: a warning per distinct reason, and
  ``torchtpu.debug.metrics()`` counts ``num_graph_collective_splits`` (graphs cut, by
  reason in ``graph_collective_splits``) and ``num_out_of_graph_collectives`` (collectives
  run that way); ``num_graph_collectives_lowered`` counts those compiled into programs.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from torchtpu.dynamo.split import SplitGraph, counted

log = logging.getLogger("torchtpu.compile")

_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd")
# Ops lowered into programs (lowering/functional_collectives.cc), by name.
_LOWERED = {
    "all_reduce", "all_reduce_coalesced", "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced", "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced", "all_to_all_single", "broadcast", "wait_tensor",
}
_REDUCE_OPS = {"sum", "avg", "product", "min", "max"}

stats: Counter = Counter()
split_reasons: Counter = Counter()
_warned: set[str] = set()


def is_collective(node: torch.fx.Node) -> bool:
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target.namespace in _NAMESPACES)


def collective_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if is_collective(n)]


def _arg(node: torch.fx.Node, name: str) -> Any:
    schema = node.target._schema
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            return node.args[i] if i < len(node.args) else node.kwargs.get(name, a.default_value)
    return None


def _set_arg(node: torch.fx.Node, name: str, value: Any) -> None:
    schema = node.target._schema
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            if i < len(node.args):
                args = list(node.args)
                args[i] = value
                node.args = tuple(args)
            else:
                node.kwargs = {**node.kwargs, name: value}
            return


def _group(group_name: Any) -> Any:
    """The process group a graph names: by name (in the calling rank's registry), or the
    group itself (``torch.distributed.config.compile_on_one_rank``)."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _resolve_process_group

    return group_name if isinstance(group_name, dist.ProcessGroup) else \
        _resolve_process_group(group_name)


def _tpu_backend(group_name: Any) -> Any:
    """The tpu backend of the group a graph names, or a string saying why there is none."""
    import torch.distributed as dist

    try:
        pg = _group(group_name)
        backend = pg._get_backend(torch.device("tpu"))
    except (RuntimeError, ValueError, KeyError) as e:  # no tpu backend, an unknown name
        return f"group {group_name} has no tpu backend ({str(e).splitlines()[0]})"
    if getattr(backend, "transport", None) != "in_plugin":
        return (f"group {pg.group_name} ({dist.get_world_size(pg)} ranks) stages through the "
                "host (ranks in other processes)")
    return backend


def _unlowered_reason(node: torch.fx.Node) -> str | None:
    name = node.target._schema.name.split("::")[-1]
    if node.target.namespace != "_c10d_functional" or name not in _LOWERED:
        return f"{node.target} has no lowering"
    reduce_op = _arg(node, "reduce_op")
    if reduce_op is not None and reduce_op not in _REDUCE_OPS:
        return f"{node.target} with reduce op {reduce_op!r} has no lowering"
    if name == "all_to_all_single":
        val = node.args[0].meta["val"]
        rows = val.shape[0] if val.dim() else None
        for key in ("output_split_sizes", "input_split_sizes"):
            splits = _arg(node, key) or []
            if splits and (not all(isinstance(s, int) for s in splits)
                           or len(set(splits)) != 1 or rows is None
                           or splits[0] * len(splits) != rows):
                return f"{node.target} with uneven or symbolic split sizes {splits}"
    return None


class InPluginCollectives:
    """Lowers a graph's collectives into its program (see the module docstring)."""

    def __init__(self, gm: torch.fx.GraphModule, nodes: list[torch.fx.Node],
                 backends: dict[str, Any]) -> None:
        self.gm = gm
        self.nodes = [n for n in nodes if _arg(n, "group_name") is not None]
        self.names = [_arg(n, "group_name") for n in self.nodes]
        self.backends = backends
        self.span: Any = None  # the TpuBackend whose ranks run the program
        self.resolved = False

    def resolve(self) -> str | None:
        """On the first run (in the rank's thread): rewrites every group name into the
        replica groups of the program; None, or why the collectives cannot be lowered
        (the same answer on every rank: it comes from data every rank exchanged)."""
        import torch.distributed as dist

        from torchtpu import _C

        self.resolved = True
        distinct = list(dict.fromkeys(self.names))
        if len(distinct) == 1:
            self.span = self.backends[distinct[0]]
            n = dist.get_world_size(_group(distinct[0]))
            encoded = {distinct[0]: _C.encode_replica_groups([list(range(n))])}
        else:
            world = dist.group.WORLD
            self.span = _tpu_backend(world.group_name)
            if isinstance(self.span, str):
                return f"a graph over several groups spans the default group, but {self.span}"
            meta: list[int] = []
            mine = {}
            for name in distinct:
                ranks = dist.get_process_group_ranks(_group(name))
                mine[name] = ranks
                meta += [len(ranks), *ranks]
            everyone = self.span.exchange_meta("graph collective groups", meta)
            world_size = dist.get_world_size(world)
            encoded = {}
            for k, name in enumerate(distinct):
                partition = set()
                for m in everyone:
                    pos = 0
                    for _ in range(k):
                        pos += 1 + m[pos]
                    partition.add(tuple(m[pos + 1:pos + 1 + m[pos]]))
                members = sorted(r for g in partition for r in g)
                if members != list(range(world_size)) or len({len(g) for g in partition}) != 1:
                    return (f"the ranks' groups of collective group {name} "
                            f"({sorted(partition)}) do not partition the default group's "
                            f"{world_size} ranks into equal groups")
                encoded[name] = _C.encode_replica_groups([list(g) for g in sorted(partition)])
        for node, name in zip(self.nodes, self.names):
            _set_arg(node, "group_name", encoded[name])
        self.gm.recompile()
        return None


def plan(gm: torch.fx.GraphModule) -> InPluginCollectives | str | None:
    """None for a graph without collectives; an InPluginCollectives for one whose
    collectives compile into its program; else the reason they run between pieces."""
    nodes = collective_nodes(gm)
    if not nodes:
        return None
    backends: dict[str, Any] = {}
    for node in nodes:
        reason = _unlowered_reason(node)
        if reason:
            return reason
        name = _arg(node, "group_name")
        if name is None or any(name is k or name == k for k in backends):
            continue
        backend = _tpu_backend(name)
        if isinstance(backend, str):
            return backend
        backends[name] = backend
    return InPluginCollectives(gm, nodes, backends)


def note_lowered(num: int) -> None:
    stats["num_graph_collectives_lowered"] += num


def split_at_collectives(gm: torch.fx.GraphModule, reason: str,
                         compile_piece: Callable[[torch.fx.GraphModule, dict], Callable[..., Any]],
                         bind_sizes: Callable[[list, tuple], dict]) -> SplitGraph:
    """`gm` cut at its collectives: compiled pieces between eager collectives."""
    split = SplitGraph(gm, is_collective, compile_piece, bind_sizes,
                       wrap=lambda op: counted(op, stats, "num_out_of_graph_collectives"))
    stats["num_graph_collective_splits"] += 1
    split_reasons[reason] += 1
    message = (f"torchtpu: a compiled graph runs its {split.num_eager} collectives through "
               f"the tpu process group between compiled pieces: {reason}")
    log.info(message)
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(message, stacklevel=2)
    return split


def compile_stats() -> dict[str, Any]:
    return {
        "num_graph_collectives_lowered": stats["num_graph_collectives_lowered"],
        "num_graph_collective_splits": stats["num_graph_collective_splits"],
        "num_out_of_graph_collectives": stats["num_out_of_graph_collectives"],
        "graph_collective_splits": dict(split_reasons),
    }
