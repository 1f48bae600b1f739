"""The module-call provider (csrc/lowering/module_call.h): C++ lowers a jax_op's call by
asking ``module_for`` for the functions of that call's signature."""

from __future__ import annotations

from typing import Any

from torchtpu import _C
from torchtpu._dtypes import DTYPES
from torchtpu.kernels.export import JaxOpError
from torchtpu.kernels.jax_op import find_op

# The C++ side's dtypes as PyTorch's: the table compiled graphs describe their tensors with.
_DTYPES = {ours: torch_dtype for torch_dtype, ours in DTYPES.items()}


class _Described:
    """A tensor as a lowering sees it: dtype and shape, all the export key reads."""

    def __init__(self, t: tuple[Any, list[int]]) -> None:
        self.dtype = _DTYPES[t[0]]
        self.shape = tuple(t[1])


def _value(op_name: str, name: str, kind: Any, value: Any, schema_kind: str) -> Any:
    if schema_kind == "Tensor":
        if kind != _C.ArgKind.tensor:
            raise JaxOpError(f"{op_name}: argument {name!r} must be a tpu tensor, got "
                             f"{kind.name if hasattr(kind, 'name') else kind}")
        return _Described(value)
    if schema_kind == "Tensor[]":
        return [_Described(t) for t in value]
    if schema_kind == "float":
        return float(value)
    if schema_kind == "int":
        return int(value)
    if schema_kind == "bool":
        return bool(value)
    if schema_kind == "int[]":
        return tuple(value)
    return value  # str


def module_for(op_name: str, args: list[tuple[Any, Any]],
               out_types: list[tuple[Any, list[int]]]) -> tuple[str, str]:
    """(entry function, functions text) for `op_name` called with `args` ((kind, value)
    per schema argument) returning `out_types` ((dtype, dims) each)."""
    op = find_op(op_name)
    if op is None:
        raise JaxOpError(f"{op_name} is not a jax_op of this process")
    if len(args) != len(op.params):
        raise JaxOpError(f"{op_name}: {len(args)} arguments for a schema of {len(op.params)}")
    values = [_value(op_name, p.name, kind, value, p.kind)
              for (kind, value), p in zip(args, op.params)]
    call = op.exported(op.key(values))
    got = [(_DTYPES[d], tuple(dims)) for d, dims in out_types]
    want = [(s.dtype, s.shape) for s in call.outputs]
    if got != want:
        raise JaxOpError(f"{op_name}: the call expects results {got}, the export gives {want}")
    return call.entry, call.text
