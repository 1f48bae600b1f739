"""Shape classes: graphs recorded at concrete sizes that differ only in their sizes share one
symbolic graph, which runs padded to buckets exactly as a ``torch.compile`` graph does.

A recorded graph is a graph of aten ops (what fused eager mode records between two host
reads: recorded.py's `Graph`, or an FX graph) whose placeholders carry their values'
metadata (``meta["val"]``) and whose size arguments are plain ints. Its class key is its
structure with every int erased: the ops, which values each reads, the inputs' dtypes,
ranks and devices.

The first graph of a class runs at its exact sizes (the caller's own path). The second, at
other sizes, makes the class symbolic, as Dynamo's automatic dynamic shapes do after a size
change: every input dim whose sizes differ becomes a symbol (dims with equal pairs of
sizes share one), every int argument that differs becomes an expression in those symbols
fitted to both graphs (``s``, ``c*s``, ``c*s + d``, ``c*s*r``), and the graph is retraced on
fake tensors with those symbols into one symbolic graph. That graph runs through the
compiled mode's `GraphRunner`: the rule table (rules.py) pads it to buckets, or an op
without a rule keeps it at exact sizes with the reason, one program per size. A later graph
joins the class when every one of its ints equals its expression at the sizes its inputs
bind (the guard); one that does not runs at its exact sizes.

A class's first graph is made symbolic at once when the last graph over the same inputs
(their dtypes, ranks, devices) had other sizes and shares most of its structure (a loop
whose first length records a few other ops): that graph's ints, aligned op by op
(`sibling`), are the second point. Ints of ops it lacks are taken for a length when they
sit in a SymInt slot of the schema and equal a size that changed, else for constants. It is
a guess: an int that equals a length only by chance gets the length's expression, so the
next graph of the class fails the guard and the class is made symbolic again from its own
two graphs; a graph never runs padded unless every int equals its expression.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from torchtpu.dynamo.buckets.recorded import NODE_TYPES, Graph, Node, TensorMeta
from torchtpu.dynamo.decompositions import decompositions

log = logging.getLogger("torchtpu")


class _QuietMetaFailures(logging.Filter):
    """Drops FakeTensor's ERROR log of a meta kernel that refuses symbolic arguments
    (constant_pad_nd with symbolic pads) while this thread retraces: the failure is
    expected, and `_trace` keeps such a graph at exact sizes with the reason."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(self.local, "on", False)

    @contextlib.contextmanager
    def on(self):
        self.local.on = True
        try:
            yield
        finally:
            self.local.on = False


_quiet = _QuietMetaFailures()
logging.getLogger("torch._subclasses.fake_tensor").addFilter(_quiet)

_INT = "#"  # an int's place in a class key


def _is_int(a: Any) -> bool:
    """An int that may be a size: a Python int past int64's range (a uint64 scalar) is
    structure, as a float is, never a runtime size value."""
    return isinstance(a, int) and not isinstance(a, bool) and -2**63 <= a < 2**63


def _flat(a: Any, ints: list[int], nodes: dict[Node, int],
          sizes: list[bool] | None = None, size: bool = False) -> Any:
    """`a` with ints replaced by their place (collected into `ints`, and into `sizes`
    whether the place is a size slot, `size`) and nodes by index."""
    if _is_int(a):
        ints.append(a)
        if sizes is not None:
            sizes.append(size)
        return _INT
    if isinstance(a, NODE_TYPES):
        return ("%", nodes[a])
    if isinstance(a, (list, tuple)):  # FX's immutable_list is a list
        return ("list" if isinstance(a, list) else "tuple",
                tuple(_flat(x, ints, nodes, sizes, size) for x in a))
    if isinstance(a, dict):
        return tuple((k, _flat(v, ints, nodes, sizes, size)) for k, v in sorted(a.items()))
    return (type(a).__name__, repr(a))


_size_args: dict[Any, frozenset[str]] = {}


def _size_arguments(target: Any) -> frozenset[str]:
    """The names of `target`'s arguments that its schema types SymInt (a size, a length,
    an index or offset along a dim: what may vary with the inputs' sizes), not int (a dim,
    a flag)."""
    names = _size_args.get(target)
    if names is None:
        names = frozenset()
        schema = getattr(target, "_schema", None)
        if schema is not None:
            from torchgen.model import FunctionSchema

            names = frozenset(a.name for a in FunctionSchema.parse(str(schema)).arguments.flat_all
                              if str(a.type).startswith("SymInt"))
        _size_args[target] = names
    return names


def key_ints_sizes(graph: Graph) -> tuple[tuple, list[int], list[bool]]:
    """`key_and_ints`, and per int place whether it is an input's dim or an argument its
    op's schema types SymInt."""
    ints: list[int] = []
    sizes: list[bool] = []
    nodes: dict[Node, int] = {}
    key: list[Any] = []
    for k, n in enumerate(graph.nodes):
        nodes[n] = k
        if n.op == "placeholder":
            val = n.meta.get("val")
            if not isinstance(val, (torch.Tensor, TensorMeta)):
                raise TypeError(f"shape class: placeholder {n.name} has no tensor value")
            ints.extend(int(s) for s in val.shape)
            sizes.extend(True for _ in val.shape)
            key.append(("in", str(val.dtype), val.dim(), str(val.device)))
        elif n.op in ("call_function", "output"):
            names = _size_arguments(n.target)
            schema = getattr(n.target, "_schema", None)
            positional = [a.name for a in schema.arguments] if schema is not None else []
            args = tuple(_flat(a, ints, nodes, sizes, i < len(positional)
                               and positional[i] in names) for i, a in enumerate(n.args))
            kwargs = tuple((k, _flat(v, ints, nodes, sizes, k in names))
                           for k, v in sorted(n.kwargs.items()))
            key.append((n.op, str(n.target), ("tuple", args), kwargs))
        else:
            raise TypeError(f"shape class: node {n.name} ({n.op}) is not an aten op")
    return tuple(key), ints, sizes


def key_and_ints(graph: Graph) -> tuple[tuple, list[int]]:
    """The class key of `graph` (its structure, ints erased) and its ints in key order: the
    placeholders' dims, then each node's int arguments."""
    key, ints, _ = key_ints_sizes(graph)
    return key, ints


def _fit(x: int, y: int, pairs: dict[tuple[int, int], sympy.Symbol]) -> sympy.Expr | None:
    """An expression in the symbols (each with its pair of sizes) that is `x` at the first
    graph's sizes and `y` at the second's."""
    for (a, b), s in pairs.items():
        if (x, y) == (a, b):
            return s
    for (a, b), s in pairs.items():
        if a and b and x % a == 0 and y % b == 0 and x // a == y // b:
            return (x // a) * s
    for (a, b), s in pairs.items():  # c*s + d (a view's offset: c*(s - 1))
        if a != b and (y - x) % (b - a) == 0:
            c = (y - x) // (b - a)
            return c * s + (x - c * a)
    items = list(pairs.items())
    for i, ((a1, b1), s1) in enumerate(items):
        for (a2, b2), s2 in items[i:]:
            pa, pb = a1 * a2, b1 * b2
            if pa and pb and x % pa == 0 and y % pb == 0 and x // pa == y // pb:
                return (x // pa) * s1 * s2
    return None


@dataclass
class ShapeClass:
    """The graphs of one class key: the first at its sizes, then (once another size was
    seen) the symbolic graph and its runner."""

    first: Graph  # aten calls only (no module attributes)
    first_ints: list[int]
    device: int
    exprs: list[sympy.Expr] | None = None  # per int place: its expression (or constant)
    symbols: list[sympy.Symbol] = field(default_factory=list)
    # The int place (key order) that binds each symbol: a placeholder's dim, or an int
    # argument (a size no input has: a slice's length; the graph takes it as a SymInt).
    binders: dict[sympy.Symbol, int] = field(default_factory=dict)
    extra: list[sympy.Symbol] = field(default_factory=list)  # symbols no input dim binds
    runner: Callable | None = None
    # What tracing the symbolic graph assumed of the sizes (ShapeEnv guards, in symbols).
    guards: list[sympy.Expr] = field(default_factory=list)
    reason: str | None = None  # why the class cannot be symbolic (its graphs run exact)
    # Symbolic from its first graph alone (`speculate`), no other graph has passed its guard
    # yet: the next graph that fails the guard makes it symbolic from the two (`generalize`).
    speculative: bool = False
    # The ints `exprs` give at the binders' values (`_evaluator`), made at the first guard.
    _expected: Callable[..., list[int]] | None = None

    def matches(self, ints: list[int]) -> bool:
        """The guard: every int of a graph of this key equals its expression at the sizes
        the graph binds, and those sizes satisfy what tracing assumed."""
        assert self.exprs is not None
        if self._expected is None:
            self._expected = _evaluator(self.exprs, list(self.binders))
        expected = self._expected(*(ints[k] for k in self.binders.values()))
        if expected != ints:
            return False
        values = {s: ints[k] for s, k in self.binders.items()}
        # The retrace's shape environment takes every symbol for at least 2 (PyTorch
        # specializes 0 and 1), so what a size of 1 decides left no guard: `squeeze()`
        # drops such a dim. A graph binding a 0 or 1 keeps its own, exact program.
        if any(v < 2 for v in values.values()):
            return False
        return all(bool(g.xreplace(values)) for g in self.guards)

    def call(self, ints: list[int]) -> Callable:
        """The symbolic runner bound to a matching graph's int arguments."""
        assert self.runner is not None
        runner, extra = self.runner, [ints[self.binders[s]] for s in self.extra]

        def run(*tensors: Any) -> Any:
            out = runner(*tensors, *extra)
            if not runner.bucketed:  # XLA refused it padded: the recorder's exact programs
                self.reason, self.runner = runner.hazard or "not padded", None
            return out

        return run

    def _placeholders(self) -> list[Node]:
        return [n for n in self.first.nodes if n.op == "placeholder"]

    def speculate(self, sibling_ints: list[int]) -> str | None:
        """Makes the class symbolic from its first graph and `sibling_ints` (`sibling`: the
        ints of a graph of another structure over the same inputs, at other sizes, placed
        as this class's ints) as `generalize` does from two graphs. A guess, which the
        guard checks on every later graph (the next that fails it makes the class symbolic
        from itself and the first graph); returns why it cannot."""
        why = self.generalize(sibling_ints)
        if why is None and not self.matches(self.first_ints):
            why = "the first graph fails the guard of the guessed sizes"
        if why is None:
            self.speculative = True
        else:
            self.reset()
        return why

    def reset(self) -> None:
        """Back to a class of one graph at its exact sizes."""
        self.exprs, self.symbols, self.binders, self.extra = None, [], {}, []
        self.runner, self.guards, self.speculative = None, [], False
        self._expected = None

    def generalize(self, ints: list[int]) -> str | None:
        """Makes the class symbolic from its first graph and one at the sizes `ints`;
        returns why it cannot (the class then stays exact)."""
        pairs: dict[tuple[int, int], sympy.Symbol] = {}

        def symbol(x: int, y: int, place: int) -> sympy.Symbol:
            s = sympy.Symbol(f"s{len(pairs)}", positive=True, integer=True)
            pairs[(x, y)] = s
            self.binders[s] = place
            return s

        num_dims = sum(n.meta["val"].dim() for n in self._placeholders())
        for k in range(num_dims):
            x, y = self.first_ints[k], ints[k]
            if x != y and (x, y) not in pairs:
                symbol(x, y, k)
        # Ints no input's size gives are fitted smallest change first, those that are 0 or
        # negative last (no symbol: a position from 0), so the symbol a length binds gives
        # the rest (a cache write's offset 8*(t - 1) or position t - 1 after the read's end
        # t), not the other way round.
        def order(k: int) -> tuple[bool, int]:
            x, y = self.first_ints[k], ints[k]
            return x <= 0 or y <= 0, abs(y - x)

        exprs: list[Any] = [None] * len(ints)
        for k in sorted(range(len(ints)), key=order):
            x, y = self.first_ints[k], ints[k]
            if x == y:
                exprs[k] = x
                continue
            e = _fit(x, y, pairs)
            if e is None:
                if x <= 0 or y <= 0:
                    return (f"int {k} of its structure ({x}, then {y}) is no affine function "
                            "or product of its inputs' sizes")
                e = symbol(x, y, k)
                self.extra.append(e)
            exprs[k] = e
        self.exprs = exprs
        self._expected = None
        self.symbols = list(pairs.values())
        return self._trace([max(x, y) for x, y in zip(self.first_ints, ints)])

    def _trace(self, hints: list[int]) -> str | None:
        """Retraces the first graph with `exprs` and makes its runner; returns why not."""
        assert self.exprs is not None
        try:
            gm, self.guards = retrace(self.first, self.exprs, self.symbols, hints, self.extra)
        except Exception as e:  # a graph the fake tensors refuse symbolic: exact sizes
            self.exprs = None
            return f"retracing it with symbolic sizes failed: {type(e).__name__}: {e}"
        from torchtpu.dynamo.graph_spec import free_symbols
        from torchtpu.dynamo.runner import GraphRunner  # the runner imports buckets

        if len(free_symbols(gm)) != len(self.symbols):
            return "tracing specialized a size (a size of 1 on one of the two graphs)"
        why = _random_over_a_size(gm)
        if why is not None:
            return why

        runner = GraphRunner(gm, [], device=self.device)
        if runner.hazard:  # no padding rule: exact sizes, the recorder's own programs
            return runner.hazard
        self.runner = runner
        return None


def _random_over_a_size(gm: torch.fx.GraphModule) -> str | None:
    """Why `gm` cannot run padded: a random op whose arguments or results vary in size (its
    draws at a bucket's size are other numbers than at the true size); None when none."""
    replay = torch._prims.rng_prims.run_with_rng_state
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not replay:
            continue
        vals = [n.meta.get("val")] + [a.meta.get("val") for a in n.args[2:]
                                      if isinstance(a, torch.fx.Node)]
        for v in vals:
            for t in v if isinstance(v, (tuple, list)) else (v,):
                if isinstance(t, torch.Tensor) and any(
                        isinstance(d, torch.SymInt) for d in t.shape):
                    return f"the random op {n.args[1]} draws at a size that varies"
    return None


def _evaluator(exprs: list[Any], symbols: list[sympy.Symbol]) -> Callable[..., list[int]]:
    """A function of the symbols' values giving every int of `exprs`: the guard runs at
    every graph, where substituting into each expression costs ~0.1 ms. `_fit` makes
    constants and polynomials with integer coefficients, which compiled Python evaluates
    exactly on ints; anything else is substituted."""
    exact = all(not isinstance(e, sympy.Expr) or e.is_Integer or (
        e.is_polynomial(*symbols) and all(c.is_Integer for c in sympy.Poly(e, *symbols).coeffs()))
        for e in exprs)
    if exact:
        return sympy.lambdify(symbols, [int(e) if not isinstance(e, sympy.Expr) or e.is_Integer
                                        else e for e in exprs], modules=[{}])

    def substituted(*values: int) -> list[int]:
        at = dict(zip(symbols, values))
        return [int(e.subs(at)) if isinstance(e, sympy.Expr) else e for e in exprs]

    return substituted


def retrace(graph: Graph, exprs: list[Any], symbols: list[sympy.Symbol],
            hints: list[int], extra: list[sympy.Symbol]) -> tuple[torch.fx.GraphModule, list[sympy.Expr]]:
    """`graph` traced again on fake tensors whose dims and int arguments are `exprs` (in key
    order): a graph with symbolic sizes, as Dynamo hands the compiled mode, and what the
    tracing assumed of the sizes (in `symbols`). The symbols `extra` are SymInt inputs
    after the tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    env = ShapeEnv(duck_shape=False)
    fake_mode = FakeTensorMode(shape_env=env)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    # Each symbol's SymInt, backed by the first graph's size (its hint).
    sym_ints: dict[sympy.Symbol, Any] = {}
    from torch._dynamo.source import ConstantSource

    for place, e in enumerate(exprs):
        if isinstance(e, sympy.Symbol) and e not in sym_ints:
            source = ConstantSource(f"{e}")
            raw = env.create_symbol(hints[place], source=source, dynamic_dim=DimDynamic.DYNAMIC)
            sym_ints[e] = env.create_symintnode(raw, hint=hints[place], source=source)

    def value(e: Any) -> Any:
        if not isinstance(e, sympy.Expr):
            return e
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            return sym_ints[e]
        parts = [value(a) for a in e.args]
        out = parts[0]
        for a in parts[1:]:
            out = out + a if e.is_Add else out * a
        return out

    with fake_mode:
        inputs = []
        place = 0
        for n in placeholders:
            val = n.meta["val"]
            sizes = [value(exprs[place + d]) for d in range(val.dim())]
            place += val.dim()
            inputs.append(torch.empty(sizes, dtype=val.dtype, device=val.device))
    start = place
    bodies = [n for n in graph.nodes if n.op not in ("placeholder",)]

    def replay(*args: Any) -> Any:
        ints = iter([value(e) for e in exprs[start:]])
        env_: dict[Node, Any] = dict(zip(placeholders, args))

        def sub(a: Any) -> Any:
            if _is_int(a):
                return next(ints)
            if isinstance(a, NODE_TYPES):
                return env_[a]
            if isinstance(a, (list, tuple)):
                return [sub(x) for x in a] if isinstance(a, list) else tuple(sub(x) for x in a)
            if isinstance(a, dict):
                return {k: sub(v) for k, v in sorted(a.items())}
            return a

        for n in bodies:
            if n.op == "call_function":
                args_, kwargs = sub(n.args), sub(n.kwargs)
                env_[n] = n.target(*args_, **kwargs)
            else:
                out = sub(n.args[0])
                return tuple(out) if isinstance(out, (list, tuple)) else (out,)
        raise AssertionError("graph without output")

    with fake_mode, _quiet.on():
        traced = make_fx(replay, decomposition_table=decompositions(),
                         tracing_mode="fake")(*inputs, *[sym_ints[e] for e in extra])
    # The shape environment's symbols are its own: name them back as `symbols`.
    back = {env_sym: s for s, si in sym_ints.items()
            for env_sym in [si.node.expr] if isinstance(env_sym, sympy.Symbol)}
    # A size unequal to a constant (Ne) is a branch on layout: a slice that is no alias, a
    # view that is not contiguous (`mask[:t, :t]` of an 8x8 mask for t != 8). The graph's
    # values are the same on both sides, and a program has no strides: a window read
    # whole (t == 8) belongs to the class of its shorter reads.
    guards = [e for g in env.guards for e in [g.expr.xreplace(back)] if not _layout_branch(e)]
    return traced, guards


def _layout_branch(e: sympy.Expr) -> bool:
    """Whether guard `e` says a size differs from a constant above 1 (see `retrace`)."""
    return isinstance(e, sympy.Ne) and any(a.is_Integer and a > 1 for a in e.args)


def _num_ints(entry: Any) -> int:
    """How many int places a class key entry holds."""
    if entry == _INT:
        return 1
    if isinstance(entry, tuple):
        return sum(_num_ints(e) for e in entry)
    return 0


# How much of its structure a graph shares with another (difflib's ratio of their class
# keys) for the other's sizes to be taken as a second point: a loop's first length differs
# by a few ops (a reshape that is a view at length 1 and a copy at others).
SIBLING_RATIO = 0.9


def _shapes(inputs: tuple, ints: list[int]) -> list[tuple[int, ...]]:
    """The sorted shapes of `inputs` (class key entries) whose dims lead `ints`."""
    shapes, at = [], 0
    for k in inputs:
        shapes.append(tuple(ints[at:at + k[2]]))
        at += k[2]
    return sorted(shapes)


def _unlinked(entry: Any) -> Any:
    """A class key entry without the indices of the nodes it reads (which shift with every
    node before them), to align the entries of two structures."""
    if isinstance(entry, tuple):
        return ("%",) if entry[:1] == ("%",) else tuple(_unlinked(e) for e in entry)
    return entry


def sibling(key: tuple, ints: list[int], sizes: list[bool], other_key: tuple,
            other_ints: list[int], num_dims: int) -> list[int] | None:
    """The ints of another graph over the same inputs (`other_key`, `other_ints`: another
    structure) placed as `key`'s, a second point from which to make `key`'s class symbolic:
    the inputs' dims, then the ints of the ops both graphs share (their longest common run
    of entries); an int of an op the other graph lacks is, in a size slot (`sizes`), the
    other graph's size of an input dim it equals in `ints` (a length), else itself (a
    constant). None when the structures share less than `SIBLING_RATIO` of their entries
    (two unrelated graphs over inputs of the same types)."""
    def places(k: tuple) -> list[int]:
        out, at = [], 0
        for e in k:
            out.append(at)
            at += e[2] if e[0] == "in" else _num_ints(e)
        return out

    matcher = difflib.SequenceMatcher(None, [_unlinked(e) for e in key],
                                      [_unlinked(e) for e in other_key], autojunk=False)
    if matcher.ratio() < SIBLING_RATIO:
        return None
    mine, theirs = places(key), places(other_key)
    lengths = {ints[k]: other_ints[k] for k in range(num_dims) if ints[k] != other_ints[k]}
    out = [lengths.get(v, v) if size else v for v, size in zip(ints, sizes)]
    out[:num_dims] = other_ints[:num_dims]
    for a, b, size in matcher.get_matching_blocks():
        for i in range(size):
            if key[a + i][0] == "in":
                continue
            n = _num_ints(key[a + i])
            out[mine[a + i]:mine[a + i] + n] = other_ints[theirs[b + i]:theirs[b + i] + n]
    return out


class ShapeClasses:
    """The shape classes of recorded graphs on one device: `runner(graph)` says how a recorded
    graph runs. A key holds a few classes (`MAX_PER_KEY`): a graph that fails every
    symbolic class's guard (an int that was constant changed) starts another. The keys of
    the `MAX_KEYS` structures run most recently are kept (each class holds its first graph
    and its compiled programs: a program that made new structures without end kept them
    all, until the process ran out of memory maps); `evictions` counts those dropped."""

    MAX_PER_KEY = 8
    MAX_KEYS = 256

    def __init__(self, device: int = 0) -> None:
        self.device = device
        self.classes: OrderedDict[tuple, list[ShapeClass]] = OrderedDict()
        self.evictions = 0
        # Per list of inputs (their dtypes, ranks, devices): the key and ints of the last
        # graph over such inputs, whatever its structure.
        self.last: dict[tuple, tuple[tuple, list[int]]] = {}

    def _last(self, key: tuple, ints: list[int]) -> tuple[tuple, list[int]] | None:
        """The key and ints of the last graph over the inputs of `key`; records `key` and
        `ints` for the next."""
        inputs = tuple(k for k in key if k[0] == "in")
        last = self.last.get(inputs)
        if len(self.last) >= 1024:
            self.last.clear()
        self.last[inputs] = (key, ints)
        return last

    @staticmethod
    def _sibling(key: tuple, ints: list[int], sizes: list[bool],
                 last: tuple[tuple, list[int]] | None) -> list[int] | None:
        """The ints of `last` placed as `key`'s (`sibling`), when its input dims differ."""
        inputs = tuple(k for k in key if k[0] == "in")
        if last is None or _shapes(inputs, last[1]) == _shapes(inputs, ints):
            return None  # the same sizes (in another order: inputs, not a length, moved)
        return sibling(key, ints, sizes, *last, sum(k[2] for k in inputs))

    def runner(self, graph: Graph) -> tuple[Callable | None, str]:
        """The symbolic runner that takes `graph`'s inputs (a class of its key is symbolic
        and `graph` passes its guard), else None and why `graph` runs at its exact sizes."""
        key, ints, sizes = key_ints_sizes(graph)
        last = self._last(key, ints)
        classes = self.classes.get(key)
        if classes is None:
            while len(self.classes) >= self.MAX_KEYS:
                self.classes.popitem(last=False)  # the structure run least recently
                self.evictions += 1
            classes = self.classes[key] = []
        else:
            self.classes.move_to_end(key)
        for cls in classes:
            if cls.runner is not None and cls.matches(ints):
                if ints != cls.first_ints:
                    cls.speculative = False
                return cls.call(ints), "padded to buckets"
        for cls in classes:
            if cls.speculative and ints != cls.first_ints:  # the guess failed its guard
                log.info("torchtpu: fused graph's sizes guessed from another structure failed "
                         "the guard; made symbolic from two graphs of its own")
                cls.reset()
            if cls.exprs is None and cls.reason is None and ints != cls.first_ints:
                why = cls.generalize(ints)
                if why is None and cls.matches(ints):
                    return cls.call(ints), "padded to buckets"
                if why is None:  # the class serves later graphs; a size of 1 keeps this one
                    return None, "its sizes fail the guard of the class made from it"
                cls.reason = why
                log.info("torchtpu: fused graph compiles per exact size: %s", why)
                return None, why
        if len(classes) < self.MAX_PER_KEY and all(c.first_ints != ints for c in classes):
            cls = ShapeClass(graph, ints, self.device)
            classes.append(cls)
            other = self._sibling(key, ints, sizes, last)
            if other is not None:
                why = cls.speculate(other)
                if why is None:
                    return cls.call(ints), "padded to buckets (sizes from another structure)"
                log.info("torchtpu: fused graph's sizes guessed from another structure: %s", why)
        return None, "first graph of its class"


__all__ = ["ShapeClass", "ShapeClasses", "key_and_ints", "key_ints_sizes", "retrace", "sibling"]
