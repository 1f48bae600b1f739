"""``torchtpu.jax_op``: a JAX (or Pallas) function as a PyTorch custom op.

``op = jax_op("mylib::rms_norm", fn, static_argnames=("eps",))`` defines the
``torch.library`` custom op ``mylib::rms_norm`` (``torch.ops.mylib.rms_norm``) whose
schema follows ``fn``'s signature: every parameter not named static is a ``Tensor``, every
static one is an ``int``, ``float``, ``bool``, ``str`` or ``int[]`` (from its annotation or
default). The op returns ``Tensor[]`` (fn's outputs, flattened); calling ``op(...)`` returns
them in fn's own structure (one tensor, a tuple, a dict).

How it runs (docs/kernels.md has the whole story):

- On tpu tensors the op is a *module call* (``csrc/lowering/module_call.h``): per call
  signature (shapes, dtypes, static values) ``fn`` is exported once with ``jax.export``
  (kernels/export.py) and its StableHLO functions are spliced into the module being built.
  Eager mode builds a module of its own around the call (compiled once, then cached in
  memory and on disk like every program); in ``torch.compile`` graphs the call sits inside
  the graph's one module, so XLA fuses it with the model around it.
- The fake (meta) implementation is the export's output types, so Dynamo traces the op
  without running it.
- The op has no kernel for other devices (CPU tensors raise PyTorch's "could not run"
  error): its reference is your PyTorch code, or ``fn`` under ``jax.jit``.
- Autograd: ``jax.vjp`` of ``fn``, exported the same way as the op
  ``<ns>::<name>_jax_vjp`` (so a ``jax.custom_vjp`` rule of ``fn`` is used); or a
  PyTorch backward given with ``op.register_autograd(backward, setup_context=...)``.
- ``donate_argnums``: those (tensor) arguments are updated in place with the output that
  JAX pairs them with (same shape and dtype, as ``jax.jit`` donation pairs them), and that
  output is the argument itself. In compiled graphs XLA writes into the argument's
  buffer; in eager mode the op's new buffer replaces the argument's (no copy).
"""

from __future__ import annotations

import inspect
import logging
import re
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from torchtpu import _C
from torchtpu.kernels.export import (
    ExportedCall,
    JaxOpError,
    TensorSpec,
    export_call,
    import_jax,
)

# Qualified name -> op; the module-call provider (kernels/lowering.py) reads it.
_OPS: dict[str, JaxOp] = {}
_OPS_LOCK = threading.Lock()

log = logging.getLogger("torchtpu.compile")
_specialized: set[tuple[str, str]] = set()  # (op, argument) whose dynamic size was logged
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_NAMESPACES = {"aten", "prim", "prims", "torchtpu", "_", "higher_order"}
_STATIC_KINDS = {int: "int", float: "float", bool: "bool", str: "str"}


@dataclass(frozen=True)
class Param:
    """One parameter of the op's schema (and of the function)."""

    name: str
    kind: str        # "Tensor", "Tensor[]", "int", "float", "bool", "str", "int[]"
    default: Any = inspect.Parameter.empty
    keyword_only: bool = False

    @property
    def is_tensor(self) -> bool:
        return self.kind in ("Tensor", "Tensor[]")

    def schema(self) -> str:
        if self.default is inspect.Parameter.empty:
            return f"{self.kind} {self.name}"
        d = self.default
        text = (f'"{d}"' if isinstance(d, str) else str(list(d)) if isinstance(d, tuple)
                else repr(d))
        return f"{self.kind} {self.name}={text}"


def _static_kind(op: str, p: inspect.Parameter) -> str:
    ann = p.annotation
    if isinstance(ann, str):  # `from __future__ import annotations`
        ann = {"int": int, "float": float, "bool": bool, "str": str}.get(ann, ann)
    if ann in _STATIC_KINDS:
        return _STATIC_KINDS[ann]
    d = p.default
    if isinstance(d, bool):
        return "bool"
    if type(d) in _STATIC_KINDS:
        return _STATIC_KINDS[type(d)]
    if isinstance(d, (tuple, list)) and all(isinstance(v, int) and not isinstance(v, bool)
                                            for v in d):
        return "int[]"
    raise JaxOpError(f"torchtpu.jax_op {op}: static argument {p.name!r} needs an int, float, "
                     "bool, str or tuple-of-ints default or annotation (its type goes into the "
                     "op's schema)")


def _params_from_signature(op: str, fn: Callable[..., Any],
                           static_argnames: Sequence[str]) -> list[Param]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise JaxOpError(f"torchtpu.jax_op {op}: cannot read the function's signature ({e})")
    unknown = set(static_argnames) - set(sig.parameters)
    if unknown:
        raise JaxOpError(f"torchtpu.jax_op {op}: static_argnames {sorted(unknown)} are not "
                         f"parameters of the function (it has {list(sig.parameters)})")
    params = []
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise JaxOpError(f"torchtpu.jax_op {op}: *{p.name} / **{p.name} parameters cannot "
                             "become schema arguments; name every argument")
        kw = p.kind == p.KEYWORD_ONLY
        if p.name in static_argnames:
            default = p.default
            if isinstance(default, list):
                default = tuple(default)
            params.append(Param(p.name, _static_kind(op, p), default, kw))
        else:
            if p.default is not p.empty:
                raise JaxOpError(f"torchtpu.jax_op {op}: array argument {p.name!r} has a "
                                 "default; arrays must be passed (or list it in "
                                 "static_argnames)")
            if kw:
                raise JaxOpError(f"torchtpu.jax_op {op}: array argument {p.name!r} is "
                                 "keyword-only; arrays must be positional (gradients flow to "
                                 "positional arguments only)")
            params.append(Param(p.name, "Tensor"))
    if not any(p.is_tensor for p in params):
        raise JaxOpError(f"torchtpu.jax_op {op}: the function takes no array argument, so "
                         "there is no device to run it on")
    return params


def _schema(params: Sequence[Param]) -> str:
    parts, star = [], False
    for p in params:
        if p.keyword_only and not star:
            parts.append("*")
            star = True
        parts.append(p.schema())
    return "(" + ", ".join(parts) + ") -> Tensor[]"


def _spec(op: str, name: str, t: Any) -> TensorSpec:
    """A tensor's export spec. A symbolic size (a dynamic dim under torch.compile) is
    specialized: JAX exports static shapes, so the graph is guarded on this size and
    compiles once per size (each recompile logged with the size that changed)."""
    sizes = []
    for s in t.shape:
        if isinstance(s, torch.SymInt):
            try:
                value = int(s)
            except Exception as e:  # an unbacked size (from nonzero, item()): no value
                raise JaxOpError(f"torchtpu.jax_op {op}: argument {name!r} has the "
                                 f"data-dependent size {s}; JAX exports static shapes, so "
                                 "its sizes must be known when the graph is traced") from e
            if (op, name) not in _specialized:
                _specialized.add((op, name))
                log.info("torchtpu.jax_op %s: the dynamic size %s of argument %r is "
                         "specialized to %d (JAX exports static shapes: one graph per size)",
                         op, s, name, value)
            sizes.append(value)
        else:
            sizes.append(int(s))
    return TensorSpec(t.dtype, tuple(sizes))


class JaxOp:
    """A JAX function registered as the custom op ``qualname``; see the module docs."""

    def __init__(self, qualname: str, fn: Callable[..., Any], params: Sequence[Param],
                 donate_argnums: Sequence[int] = ()) -> None:
        self.qualname = qualname
        self.fn = fn
        self.params = list(params)
        self._lock = threading.RLock()
        self._exports: dict[tuple, ExportedCall] = {}
        # Fixed by the first export: fn's output structure (its JAX tree, leaves numbered)
        # with the function rebuilding it from the flat outputs, and the donation pairs
        # (flat tensor input -> output), which every later signature must repeat.
        self._structure: Any = None
        self._rebuild: Callable[[list[Any]], Any] | None = None
        self._aliases: tuple[tuple[int, int], ...] | None = None
        positional = [i for i, p in enumerate(self.params) if not p.keyword_only]
        self.donated: list[int] = []  # indices into self.params
        for n in donate_argnums:
            if not isinstance(n, int) or not 0 <= n < len(positional):
                raise JaxOpError(f"torchtpu.jax_op {qualname}: donate_argnums entry {n!r} is "
                                 f"not a positional argument index (0..{len(positional) - 1})")
            if self.params[positional[n]].kind != "Tensor":
                raise JaxOpError(f"torchtpu.jax_op {qualname}: donated argument "
                                 f"{self.params[positional[n]].name!r} is not an array argument")
            self.donated.append(positional[n])
        self.schema = _schema(self.params)
        ns, name = qualname.split("::")
        try:
            # No device kernel: on tpu the boxed kernel lowers the op as a module call
            # (fn is the op's definition, never called by the dispatcher).
            self.custom_op = torch.library.custom_op(
                qualname, fn, mutates_args=(), device_types=(), schema=self.schema)
        except RuntimeError as e:
            raise JaxOpError(f"torchtpu.jax_op {qualname}: torch.library refused the op "
                             f"{qualname}{self.schema}: {e}") from e
        self.custom_op.register_fake(self._fake_impl)
        self.overload = getattr(getattr(torch.ops, ns), name).default
        _C.register_module_call(qualname)
        with _OPS_LOCK:
            _OPS[qualname] = self

    # An op is registered once per process: a copy is the op itself, a pickle its name.
    def __copy__(self) -> JaxOp:
        return self

    def __deepcopy__(self, memo: dict) -> JaxOp:
        return self

    def __reduce__(self) -> tuple:
        return (_registered, (self.qualname,))

    # -- calling -------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        positional, keywords = self._bind(args, kwargs)
        # (Keyword-only parameters follow the positional ones: a donated index is both.)
        positional = _scalars_on_device(positional, set(self.donated))
        outs = list(self.overload(*positional, **keywords))
        if self.donated:
            values = positional + [keywords[p.name] for p in self.params if p.keyword_only]
            tensor_args = self._flat_tensors(values)
            for i, k in self._aliases or ():
                # The output is the donated argument's new value: it takes the output's
                # buffer (no copy in eager mode; an input mutation XLA updates in place
                # in compiled graphs), and the caller gets the argument back.
                tensor_args[i].copy_(outs[k])
                outs[k] = tensor_args[i]
        assert self._rebuild is not None  # the call above exported (or found) the op
        return self._rebuild(outs)

    def _bind(self, args: tuple, kwargs: dict) -> tuple[list[Any], dict[str, Any]]:
        positional = [p for p in self.params if not p.keyword_only]
        if len(args) > len(positional):
            raise TypeError(f"{self.qualname}() takes {len(positional)} positional "
                            f"arguments but {len(args)} were given")
        values: dict[str, Any] = dict(zip((p.name for p in positional), args))
        for k, v in kwargs.items():
            if k in values:
                raise TypeError(f"{self.qualname}() got multiple values for argument {k!r}")
            if not any(p.name == k for p in self.params):
                raise TypeError(f"{self.qualname}() got an unexpected keyword argument {k!r}")
            values[k] = v
        for p in self.params:
            if p.name not in values:
                if p.default is inspect.Parameter.empty:
                    raise TypeError(f"{self.qualname}() missing argument {p.name!r}")
                values[p.name] = p.default
            if p.kind == "Tensor" and not isinstance(values[p.name], torch.Tensor):
                raise TypeError(f"{self.qualname}(): argument {p.name!r} must be a tensor, "
                                f"got {type(values[p.name]).__name__}")
        return ([values[p.name] for p in positional],
                {p.name: values[p.name] for p in self.params if p.keyword_only})

    def _flat_tensors(self, values: Sequence[Any]) -> list[torch.Tensor]:
        flat: list[torch.Tensor] = []
        for p, v in zip(self.params, values):
            if p.kind == "Tensor":
                flat.append(v)
            elif p.kind == "Tensor[]":
                flat.extend(v)
        return flat

    def register_autograd(self, backward: Callable[..., Any], *,
                          setup_context: Callable[..., Any] | None = None) -> None:
        """A PyTorch backward for the op, replacing the default ``jax.vjp`` one (the
        arguments of ``torch.library.register_autograd``; ``backward`` gets one gradient
        list, for the op's ``Tensor[]`` result; it returns one gradient or None per
        positional argument)."""

        def trimmed(ctx: Any, *grads: Any) -> Any:
            # The dispatcher drops trailing arguments equal to their defaults, and
            # torch.library wants one gradient per argument it passed (needs_input_grad):
            # the Nones of the dropped ones go (any other extra is torch.library's error).
            out = backward(ctx, *grads)
            passed = len(ctx.needs_input_grad)
            if (isinstance(out, (tuple, list)) and len(out) > passed
                    and all(g is None for g in out[passed:])):
                out = tuple(out[:passed])
            return out

        self.custom_op.register_autograd(trimmed, setup_context=setup_context)

    # -- signatures and exports -------------------------------------------------------------

    def _values_in_schema_order(self, args: tuple, kwargs: dict) -> list[Any]:
        values = list(args)
        for p in self.params[len(args):]:
            values.append(kwargs.get(p.name, p.default))
        return values

    def key(self, values: Sequence[Any]) -> tuple:
        """The export key of a call: per parameter, its TensorSpec (a tuple of them for a
        list) or its static value."""
        key = []
        for p, v in zip(self.params, values):
            if p.kind == "Tensor":
                key.append(_spec(self.qualname, p.name, v))
            elif p.kind == "Tensor[]":
                key.append(tuple(_spec(self.qualname, p.name, t) for t in v))
            elif p.kind == "int[]":
                key.append(tuple(int(x) for x in v))
            elif p.kind == "float":
                key.append(float(v))
            else:
                key.append(v)
        return tuple(key)

    def exported(self, key: tuple) -> ExportedCall:
        """The export for `key` (exported on first use, then cached)."""
        cached = _by_bits(key)
        with self._lock:
            hit = self._exports.get(cached)
            if hit is not None:
                return hit
            call = self._export(key)
            structure = call.out_structure
            if self._structure is None:
                self._structure, self._aliases = structure, call.aliases
                self._rebuild = _rebuilder(structure)
            elif (_shape_of(structure) != _shape_of(self._structure)
                  or call.aliases != self._aliases):
                raise JaxOpError(
                    f"torchtpu.jax_op {self.qualname}: the call with {self._describe(key)} "
                    f"returns {_shape_of(structure)} with donation pairs {list(call.aliases)}, "
                    f"but an earlier call returned {_shape_of(self._structure)} with "
                    f"{list(self._aliases or ())}; an op's output structure and donations "
                    "must not depend on its inputs")
            self._exports[cached] = call
            return call

    def _describe(self, key: tuple) -> str:
        return "(" + ", ".join(
            f"{p.name}=" + (str(v) if p.kind != "Tensor[]" else f"[{', '.join(map(str, v))}]")
            for p, v in zip(self.params, key)) + ")"

    def _flatten(self, key: tuple) -> tuple[Callable[..., Any], list[TensorSpec], list[int]]:
        """For a call `key`: fn as a function of the call's flat arrays (list parameters
        regrouped, statics bound), their specs, and the flat positions donated."""
        specs: list[TensorSpec] = []
        groups: list[tuple[int, int]] = []  # per tensor parameter: (first array, count or -1)
        for p, v in zip(self.params, key):
            if p.kind == "Tensor":
                groups.append((len(specs), -1))
                specs.append(v)
            elif p.kind == "Tensor[]":
                groups.append((len(specs), len(v)))
                specs.extend(v)
        params, fn = self.params, self.fn

        def flat_fn(*arrays: Any) -> Any:
            pos, kw, it = [], {}, iter(groups)
            for p, v in zip(params, key):
                if p.is_tensor:
                    first, count = next(it)
                    v = arrays[first] if count < 0 else list(arrays[first:first + count])
                if p.keyword_only:
                    kw[p.name] = v
                else:
                    pos.append(v)
            return fn(*pos, **kw)

        tensor_index = {i: k for k, i in enumerate(
            i for i, p in enumerate(self.params) if p.is_tensor)}
        donate = [groups[tensor_index[i]][0] for i in self.donated]
        return flat_fn, specs, donate

    def _export(self, key: tuple) -> ExportedCall:
        flat_fn, specs, donate = self._flatten(key)
        statics = {p.name: v for p, v in zip(self.params, key) if not p.is_tensor}
        call = export_call(self.qualname, flat_fn, specs, statics, donate)
        paired = {i for i, _ in call.aliases}
        missing = [self.params[i].name for i, d in zip(self.donated, donate) if d not in paired]
        if missing:
            raise JaxOpError(f"torchtpu.jax_op {self.qualname}: donated argument(s) {missing} "
                             "have no output of the same shape and dtype to take their buffer "
                             "(JAX pairs a donated array with such an output)")
        return call

    # -- torch.library implementations ------------------------------------------------------

    def _fake_impl(self, *args: Any, **kwargs: Any) -> list[torch.Tensor]:
        values = self._values_in_schema_order(args, kwargs)
        tensors = self._flat_tensors(values)
        device = tensors[0].device
        # As eager dispatch refuses them (a compiled graph would run a CPU tensor's call on
        # tpu and give back a CPU result).
        for t in tensors[1:]:
            if t.device != device:
                raise RuntimeError(f"{self.qualname}: expected all tensors to be on the same "
                                   f"device, but found at least two devices, {device} and "
                                   f"{t.device}")
        if device.type not in ("tpu", "meta"):
            raise NotImplementedError(f"{self.qualname} runs on tpu tensors only (a jax_op has "
                                      f"no {device.type} kernel); got {device} tensors: move "
                                      "them with .to('tpu')")
        call = self.exported(self.key(values))
        return [torch.empty(s.shape, dtype=s.dtype, device=device) for s in call.outputs]


def _by_bits(key: tuple) -> tuple:
    """`key` with its floats as their bits: -0.0 and 0.0 are equal numbers but different
    statics (x / -0.0 is -inf), and a NaN equals no NaN (every call would export again)."""
    return tuple(("float", struct.pack("<d", v)) if type(v) is float else v for v in key)


def _shape_of(structure: Any) -> str:
    """An output structure (a JAX tree) with its leaves as '*': ('*', {'mean': '*'})."""
    import jax

    return repr(jax.tree_util.tree_map(lambda _: "*", structure))


def _rebuilder(structure: Any) -> Callable[[list[Any]], Any]:
    """A function of the flat outputs giving fn's output structure (a JAX tree whose leaves
    are their indices): tuples, lists, namedtuples, dicts and None as plain Python (which
    Dynamo traces), any other node JAX knows (a registered dataclass) through JAX's own
    unflatten. PyTorch's pytree is not JAX's: it takes None for a leaf and knows no JAX
    registrations."""
    import jax

    if isinstance(structure, int):
        return lambda outs: outs[structure]
    if structure is None:
        return lambda outs: None
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        items = [_rebuilder(s) for s in structure]
        kind = type(structure)
        return lambda outs: kind(*(f(outs) for f in items))
    if type(structure) in (tuple, list):
        items = [_rebuilder(s) for s in structure]
        kind = type(structure)
        return lambda outs: kind(f(outs) for f in items)
    if type(structure) is dict:
        entries = [(k, _rebuilder(v)) for k, v in structure.items()]
        return lambda outs: {k: f(outs) for k, f in entries}
    leaves, treedef = jax.tree_util.tree_flatten(structure)
    return lambda outs: jax.tree_util.tree_unflatten(treedef, [outs[i] for i in leaves])


def _scalars_on_device(values: list[Any], donated: set[int]) -> list[Any]:
    """`values` (positional arguments) with their 0-dim CPU tensors, lists' items too, on
    the device of the first device tensor: an array argument given as a 0-dim CPU tensor
    beside device tensors, which PyTorch's own ops take as a scalar. A donated argument
    stays (the caller's tensor is what it updates), and is refused as a CPU tensor."""
    def tensors(v: Any) -> list[Any]:
        return list(v) if isinstance(v, (list, tuple)) else [v]

    device = next((t.device for v in values for t in tensors(v)
                   if isinstance(t, torch.Tensor) and t.device.type != "cpu"), None)
    if device is None:
        return values

    def moved(t: Any) -> Any:
        return t.to(device) if isinstance(t, torch.Tensor) and t.device.type == "cpu" \
            and t.dim() == 0 else t

    return [v if i in donated else type(v)(moved(t) for t in v) if isinstance(v, (list, tuple))
            else moved(v) for i, v in enumerate(values)]


def _registered(qualname: str) -> JaxOp:
    """The op `qualname` of this process, for unpickling a reference to it."""
    op = find_op(qualname)
    if op is None:
        raise JaxOpError(f"torchtpu.jax_op {qualname} is not defined in this process: define "
                         "it (run the jax_op(...) call) before loading what refers to it")
    return op


def find_op(qualname: str) -> JaxOp | None:
    with _OPS_LOCK:
        return _OPS.get(qualname)


def jax_op(qualname: str, fn: Callable[..., Any], *, donate_argnums: Sequence[int] = (),
           static_argnames: Sequence[str] = ()) -> JaxOp:
    """Registers the JAX (or Pallas) function `fn` as the PyTorch custom op `qualname`
    ("namespace::name"); see this module's docs. Returns the op: call it like `fn` with
    tensors (and the static arguments); ``.custom_op`` is the ``torch.library`` op,
    ``torch.ops.<namespace>.<name>`` its dispatcher entry."""
    import_jax()
    if not isinstance(qualname, str) or not _NAME.match(qualname):
        raise JaxOpError(f"torchtpu.jax_op: op name {qualname!r} is not 'namespace::name' "
                         "(letters, digits and underscores)")
    if qualname.split("::")[0] in _RESERVED_NAMESPACES:
        raise JaxOpError(f"torchtpu.jax_op: namespace {qualname.split('::')[0]!r} is reserved;"
                         " pick your own (e.g. 'mylib::...')")
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    if isinstance(donate_argnums, int):
        donate_argnums = (donate_argnums,)
    if find_op(qualname) is not None:
        raise JaxOpError(f"torchtpu.jax_op: {qualname} is already defined in this process "
                         "(an op name is defined once; pick another name)")
    params = _params_from_signature(qualname, fn, tuple(static_argnames))
    op = JaxOp(qualname, fn, params, tuple(donate_argnums))
    from torchtpu.kernels.autograd import register_vjp

    register_vjp(op)
    return op
