"""One JAX function, one call signature -> the StableHLO functions a module call splices.

``export_call`` runs ``jax.export`` for the running plugin's platform and prepares what the
module-call lowering (``csrc/lowering/module_call.h``) needs:

1. ``jax.export.export(jax.jit(f, keep_unused=True, donate_argnums=...),
   platforms=[platform])`` with the call's shapes and dtypes. The platform is the
   plugin's (``cpu``, ``cuda``, ``rocm``, ``tpu``). On ``cpu`` every Pallas call is traced
   in interpret mode (plain StableHLO loops; Mosaic and Triton kernels exist only for TPU
   and GPU), elsewhere Pallas lowers to its Mosaic or Triton custom call, which that
   platform's plugin compiles. With a 64-bit tensor among the inputs the export runs with
   ``jax_enable_x64``, so int64 and float64 keep their types (without one, JAX's defaults
   stand: a Python float in the function is float32).
2. Checks: the output dtypes exist in PyTorch, the function has no side effects
   (callbacks), and on ``cpu`` it calls no custom call of jaxlib's own CPU runtime (LAPACK,
   Python callbacks), which the plugin does not have.
3. The module is serialized as a portable artifact for the plugin's
   ``stablehlo_current_version`` (what jaxlib's own PJRT client does for a plugin): a
   module using StableHLO the plugin does not know fails here, naming the op, instead
   of inside the plugin's parser.
4. Its functions are renamed ``jax_<module hash>_<name>``, made private and printed in
   generic form without locations: text any graph's module can hold beside its own
   ``@main``. Donation pairs (``tf.aliasing_output``) are read off before the entry's
   argument attributes are dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from torchtpu import _C

JAX_INSTALL_HINT = "pip install 'jax==0.10.2' 'jaxlib==0.10.2'"


class JaxOpError(ValueError):
    """A JAX function could not become (or run as) a torchtpu op; says which and why."""


def import_jax() -> Any:
    try:
        import jax
        import jax.export
    except ImportError as e:
        raise ImportError(
            f"torchtpu.jax_op needs JAX (with jax.export, as in jax 0.10): {JAX_INSTALL_HINT} "
            f"({e})") from e
    return jax


# PyTorch dtypes that have a JAX dtype of the same bits (by name, so jax stays unimported).
_TORCH_TO_JAX = {
    torch.bool: "bool", torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16",
    torch.uint16: "uint16", torch.int32: "int32", torch.uint32: "uint32",
    torch.int64: "int64", torch.uint64: "uint64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.float32: "float32", torch.float64: "float64",
    torch.complex64: "complex64", torch.complex128: "complex128",
}
_JAX_TO_TORCH = {v: k for k, v in _TORCH_TO_JAX.items()}
WIDE_DTYPES = {torch.int64, torch.uint64, torch.float64, torch.complex128}

# Custom-call targets XLA itself expands or implements on every backend; any other target
# in a module exported for cpu is a kernel of jaxlib's own CPU runtime.
_XLA_CUSTOM_CALLS = {
    "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape", "MoveToHost", "MoveToDevice",
    "annotate_device_placement", "X64Combine", "X64SplitLow", "X64SplitHigh", "TopK", "Qr",
    "ProductOfElementaryHouseholderReflectors", "Eigh", "LuDecomposition",
    "AllocateBuffer", "PartialReduce", "ApproxTopK",
}


@dataclass(frozen=True)
class TensorSpec:
    dtype: torch.dtype
    shape: tuple[int, ...]

    def __str__(self) -> str:
        name = _TORCH_TO_JAX.get(self.dtype, str(self.dtype).replace("torch.", ""))
        return f"{name}{list(self.shape)}"


@dataclass(frozen=True)
class ExportedCall:
    """One signature's export: what the fake implementation and the lowering read."""

    entry: str                     # the function a module call calls
    text: str                      # its functions (generic form, private, renamed)
    module_hash: str               # 16 hex digits of the SHA-256 of the module's text
    outputs: tuple[TensorSpec, ...]
    out_structure: Any             # fn's output structure, leaves numbered 0..n-1
    aliases: tuple[tuple[int, int], ...]  # (donated input, the output that takes its buffer)


def plugin_platform() -> str:
    """The JAX platform name of the running plugin's devices."""
    platform = _C.plugin_info()["platform"].lower()
    names = {"cpu": "cpu", "host": "cpu", "cuda": "cuda", "gpu": "cuda", "rocm": "rocm",
             "tpu": "tpu"}
    if platform not in names:
        raise JaxOpError(f"torchtpu.jax_op: the plugin's platform {platform!r} has no JAX "
                         f"export platform (known: {sorted(set(names))})")
    return names[platform]


def plugin_stablehlo_version() -> str | None:
    """The StableHLO version the plugin reads (its ``stablehlo_current_version``)."""
    value = _C.plugin_info()["attributes"].get("stablehlo_current_version")
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return ".".join(str(int(v)) for v in value)
    return str(value)


@contextlib.contextmanager
def _pallas_interpret_mode() -> Iterator[None]:
    """Pallas calls traced inside run in interpret mode (``interpret=True``), whatever
    their own argument says: JAX's hook for forcing interpret mode, with plain ``True``
    (the HLO interpreter: loops over the grid in StableHLO), not TPU-simulation params,
    whose callbacks the plugin cannot run."""
    from jax._src import config

    flag = getattr(config, "pallas_tpu_interpret_mode_context_manager", None)
    if flag is None:  # a JAX without the hook: kernels must pass interpret=True themselves
        yield
        return
    previous = flag.swap_local(True)
    try:
        yield
    finally:
        flag.set_local(previous)


def _describe(name: str, specs: Sequence[TensorSpec], statics: dict[str, Any]) -> str:
    args = ", ".join(str(s) for s in specs)
    extra = f"; static {statics}" if statics else ""
    return f"{name}({args}{extra})"


def export_call(op_name: str, fn: Callable[..., Any], specs: Sequence[TensorSpec],
                statics: dict[str, Any], donate: Sequence[int]) -> ExportedCall:
    """Exports ``fn(*arrays)`` for arrays of `specs` (donating positions `donate`) on the
    plugin's platform; `statics` (already bound in `fn`) only name the call in errors.
    Raises JaxOpError naming `op_name` and the call."""
    jax = import_jax()
    import jax.numpy as jnp

    call = _describe(op_name, specs, statics)
    for s in specs:
        if s.dtype not in _TORCH_TO_JAX:
            raise JaxOpError(f"torchtpu.jax_op {call}: dtype {s.dtype} is not supported "
                             f"(supported: {', '.join(sorted(_TORCH_TO_JAX.values()))})")
    platform = plugin_platform()
    wide = any(s.dtype in WIDE_DTYPES for s in specs)
    avals = [jax.ShapeDtypeStruct(s.shape, jnp.dtype(_TORCH_TO_JAX[s.dtype])) for s in specs]

    jitted = jax.jit(fn, keep_unused=True, donate_argnums=tuple(donate))
    interpret = _pallas_interpret_mode() if platform == "cpu" else contextlib.nullcontext()
    try:
        with jax.enable_x64(wide), interpret, warnings.catch_warnings():
            # An unpaired donation is our error below, with the op's name.
            warnings.filterwarnings("ignore", "Some donated buffers were not usable")
            exported = jax.export.export(jitted, platforms=[platform])(*avals)
    except Exception as e:
        raise JaxOpError(f"torchtpu.jax_op {call}: JAX could not export it for the plugin's "
                         f"platform {platform!r}: {type(e).__name__}: {e}") from e

    if exported.ordered_effects or exported.unordered_effects:
        raise JaxOpError(f"torchtpu.jax_op {call}: the function has side effects "
                         f"({list(exported.ordered_effects) + list(exported.unordered_effects)}:"
                         " callbacks, debug prints), which a compiled program cannot run")
    outputs = []
    for k, aval in enumerate(exported.out_avals):
        dtype = _JAX_TO_TORCH.get(str(aval.dtype))
        if dtype is None:
            raise JaxOpError(f"torchtpu.jax_op {call}: output {k} has dtype {aval.dtype}, "
                             "which jax ops cannot return (supported: "
                             f"{', '.join(sorted(_TORCH_TO_JAX.values()))})")
        outputs.append(TensorSpec(dtype, tuple(int(d) for d in aval.shape)))
    if not outputs:
        raise JaxOpError(f"torchtpu.jax_op {call}: the function returns no arrays")
    structure = jax.tree_util.tree_unflatten(exported.out_tree, list(range(len(outputs))))

    text = exported.mlir_module()
    if platform == "cpu":
        foreign = sorted(set(re.findall(r"stablehlo\.custom_call\s+@([\w.$-]+)", text)) -
                         _XLA_CUSTOM_CALLS - set(_C.host_kernels()))
        if foreign:
            raise JaxOpError(
                f"torchtpu.jax_op {call}: the exported module calls {foreign}, kernels of "
                "jaxlib's own CPU runtime (LAPACK for jnp.linalg, Python callbacks) that the "
                "XLA CPU plugin does not have; express the computation without them")
    _check_version(call, text)
    entry, functions, module_hash, aliases = _prepare(call, text, len(specs))
    return ExportedCall(entry=entry, text=functions, module_hash=module_hash,
                        outputs=tuple(outputs), out_structure=structure,
                        aliases=tuple(sorted(aliases.items())))


def _check_version(call: str, text: str) -> None:
    from jaxlib.mlir.dialects import stablehlo

    target = plugin_stablehlo_version()
    if target is None:
        return
    ours = stablehlo.get_current_version()
    if _version_tuple(target) > _version_tuple(ours):
        target = ours  # a newer plugin reads what this jaxlib writes
    try:
        stablehlo.serialize_portable_artifact_str(text, target)
    except Exception as e:
        if _version_tuple(target) == _version_tuple(ours):
            # Nothing to downgrade: the module JAX wrote is not valid StableHLO (Pallas's
            # interpret mode on a 0-d array writes a dynamic_slice without sizes).
            raise JaxOpError(
                f"torchtpu.jax_op {call}: JAX exported a module that is not valid StableHLO "
                f"(StableHLO {ours}, the plugin's own): {e}; this is a JAX or Pallas "
                "limitation for these inputs (one known case: a Pallas kernel in interpret mode "
                "on a 0-d tensor; pass it with shape (1,))") from e
        raise JaxOpError(
            f"torchtpu.jax_op {call}: its module uses StableHLO the plugin cannot read (the "
            f"plugin reads StableHLO {target}, this jaxlib writes {ours}): {e}; use a jax "
            "whose StableHLO the plugin supports, or a newer plugin") from e


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split("."))


def _prepare(call: str, text: str, num_inputs: int,
             ) -> tuple[str, str, str, dict[int, int]]:
    """(entry name, functions text, module hash, donation pairs) of an exported module."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir

    with jax_mlir.make_ir_context():
        module = ir.Module.parse(text)
        body = [op.operation for op in module.body.operations]
        for op in body:
            if op.name != "func.func":
                raise JaxOpError(f"torchtpu.jax_op {call}: the exported module holds a "
                                 f"top-level {op.name}, which a module call cannot splice")
        generic = "".join(op.get_asm(print_generic_op_form=True, enable_debug_info=False)
                          for op in body)
        module_hash = hashlib.sha256(generic.encode()).hexdigest()[:16]
        names = {ir.StringAttr(op.attributes["sym_name"]).value for op in body}
        if "main" not in names:
            raise JaxOpError(f"torchtpu.jax_op {call}: the exported module has no @main")
        aliases: dict[int, int] = {}
        for op in body:
            if ir.StringAttr(op.attributes["sym_name"]).value != "main":
                continue
            arity = len(ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).inputs)
            if arity != num_inputs:
                raise JaxOpError(f"torchtpu.jax_op {call}: the exported @main takes {arity} "
                                 f"arguments for {num_inputs} arrays (shape polymorphism or "
                                 "several platforms add arguments; neither is used here)")
            if "arg_attrs" in op.attributes:
                for i, attrs in enumerate(ir.ArrayAttr(op.attributes["arg_attrs"])):
                    attrs = ir.DictAttr(attrs)
                    if "tf.aliasing_output" in attrs:
                        aliases[i] = ir.IntegerAttr(attrs["tf.aliasing_output"]).value
        prefix = f"jax_{module_hash}_"
        for old in sorted(names):
            new = prefix + old
            ir.SymbolTable.replace_all_symbol_uses(old, new, module.operation)
        for op in body:
            name = ir.StringAttr(op.attributes["sym_name"]).value
            op.attributes["sym_name"] = ir.StringAttr.get(prefix + name)
            op.attributes["sym_visibility"] = ir.StringAttr.get("private")
            for attr in ("arg_attrs", "res_attrs"):
                if attr in op.attributes:
                    del op.attributes[attr]
        functions = "".join(
            op.get_asm(print_generic_op_form=True, enable_debug_info=False) + "\n" for op in body)
    return prefix + "main", functions, module_hash, aliases

