"""OpInfo coverage harness: PyTorch's OpInfo samples run on the CPU and on ``tpu``, compared.

For one OpInfo (``torch.testing._internal.common_methods_invocations.op_db``) and dtype,
``check(op, mode, dtype)`` runs one *mode*:

- ``eager``: every sample input, plus an edge-value sample (the first floating sample with
  NaN, +Inf and -Inf written into its input) and, for the op's primary dtype, every error
  input (which must raise on tpu with the exception type PyTorch raises on the CPU).
- ``autograd``: gradients of the outputs (with seeded random grad_outputs) with respect to
  every input that requires grad, through ``torch.autograd.grad``.
- ``compiled``: the op under ``torch.compile(backend="tpu")`` on tpu inputs.

Results must match the CPU within ``tolerance(dtype)``; a CPU fallback anywhere (forward or
backward) fails the check as ``fallback: aten::xyz``, read from the device's counters, so
the check exercises the lowerings. Ops whose result depends on the data's shape
(nonzero, unique, ...) run on the host by design: those round-trips are recorded, not
failures. For the linalg, fft and special families a fallback is allowed and reported as a
host round-trip (status ``host``). Random ops (whose CPU result changes with the seed) are
compared by device, dtype and shape only.

Inputs are randomized but reproducible: each OpInfo's samples are drawn after seeding
with a hash of its name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import warnings
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from torchtpu import _C

TPU = "tpu"
MODES = ("eager", "autograd", "compiled")
HOST_FAMILIES = ("linalg", "fft", "special")  # a host round-trip is allowed (and shown)
DEFAULT_MAX_SAMPLES = {"eager": 4, "autograd": 3, "compiled": 2}

# (rtol, atol). float32 uses PyTorch's own device-vs-CPU tolerance (test_ops.py,
# test_compare_cpu): XLA's transcendental functions and summation order differ by a few ulp.
# bfloat16: one rounding step (2**-8 relative) plus per-step versus single rounding.
_TOLERANCES = {
    torch.float32: (1e-3, 1e-3),
    torch.float64: (1e-7, 1e-7),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
    torch.complex64: (1e-3, 1e-3),
    torch.complex128: (1e-7, 1e-7),
}
# Dtypes tried, in order, for ops that do not support float32 (bitwise, gcd, ...; complex64
# for the complex-only ones: view_as_real, ...).
_FALLBACK_PRIMARY = (torch.int64, torch.int32, torch.bool, torch.uint8, torch.complex64)


@dataclasses.dataclass
class Outcome:
    status: str  # "pass", "host" (passed via host round-trips), "fail", "n/a"
    reason: str = ""
    samples: int = 0
    roundtrips: tuple[str, ...] = ()  # data-dependent ops that went through the host


def op_key(op: Any) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def op_database() -> list[Any]:
    """All OpInfos, each key once (the first entry wins, as in PyTorch's test suites): the
    main op_db, then the list ops' (_foreach_*) databases."""
    from torch.testing._internal import common_methods_invocations as cmi

    seen: dict[str, Any] = {}
    for db in (cmi.op_db, *_foreach_databases(cmi)):
        for op in db:
            seen.setdefault(op_key(op), op)
    return list(seen.values())


def _foreach_databases(cmi: Any) -> list[list[Any]]:
    names = ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
             "foreach_reduce_op_db", "foreach_other_op_db")
    return [getattr(cmi, n) for n in names if hasattr(cmi, n)]


# torch.* spellings of linear-algebra decompositions and solvers (their OpInfos live in
# the main op_db, not in the linalg definitions module): they belong to the linalg family.
_LINALG_ALIASES = {
    "cholesky", "cholesky_inverse", "cholesky_solve", "geqrf", "logdet", "lu", "lu_solve",
    "lu_unpack", "matrix_exp", "ormqr", "pinverse", "qr", "svd", "svd_lowrank", "pca_lowrank",
    "triangular_solve", "det", "inverse", "slogdet",
}
# Float -> integer conversions of NaN/Inf are undefined behaviour in C++ (PyTorch documents
# the result as undefined), so these ops get no edge-value sample. Nor does
# special.shifted_chebyshev_polynomial_w: PyTorch's CPU kernel turns a NaN input into garbage
# that changes from call to call (7e-45, 0.0, -3e-29 for the same NaN). Nor does mode: its
# CPU kernel sorts each row with std::sort comparing values by `<`, which a NaN makes an
# invalid ordering (undefined behaviour), so a row holding NaN has no single right mode.
# Nor do the general eigendecompositions: MKL's geev crashes the CPU reference on a NaN
# (PyTorch issue 61251); tpu's guard of that case is tested in tests/python/ops.
_NO_EDGE_VALUES = {"byte", "char", "short", "int", "long",
                   "special.shifted_chebyshev_polynomial_w", "mode", "linalg.eig",
                   "linalg.eigvals"}


def _no_edge_values(op: Any) -> bool:
    # Fourier transforms mix every input into every output: which outputs of an Inf input
    # become NaN (inf - inf inside a butterfly) depends on the FFT algorithm (PyTorch's
    # pocketfft, XLA's DUCC), so edge values have no single right answer there.
    return op.name in _NO_EDGE_VALUES or op.name.startswith("fft.") or op.name == "stft"


# Ops whose CPU kernel is wrong or less exact in a half type: their reference is computed in
# float32 and rounded to the half type. matrix_exp: the CPU kernel computes in the half type,
# whose Padé coefficients overflow (NaN/inf for a plain randn(5, 5)); tpu computes in
# float32. The grid samplers: the CPU's bfloat16 kernels round their interpolation weights
# (on OpInfo's samples, max |error| against the float64 result 0.21 on the CPU, 0.004 on
# tpu). addbmm, conv_transpose1d and 3-d adaptive average pooling: the CPU rounds partial
# results to bfloat16 (addbmm 1.02 on the CPU, 0.87 on tpu; the others equal or smaller on
# tpu). (addr, the 2-d and 3-d transposed convolutions and trilinear interpolation differ
# from both references by one bfloat16 rounding at the tolerance's edge: left as measured.)
_HALF_REFERENCE_IN_FLOAT32 = {
    "matrix_exp", "grid_sampler_2d", "grid_sampler_3d", "nn.functional.grid_sample", "addbmm",
    "nn.functional.conv_transpose1d", "nn.functional.adaptive_avg_pool3d"}


def _cpu_reference(op: Any, s: Any, dtype: torch.dtype) -> Any:
    if dtype not in (torch.float16, torch.bfloat16) or op.name not in _HALF_REFERENCE_IN_FLOAT32:
        return _call(op, s, "cpu")
    up = s.transform(lambda t: t.float() if isinstance(t, torch.Tensor) and t.dtype == dtype
                     else t)
    return tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and
                    t.dtype == torch.float32 else t, _call(op, up, "cpu"))


# Ops whose index outputs name one of several equal elements unless the sort is stable:
# which one is the kernel's choice (the CPU's and XLA's differ among equal bfloat16
# values), so an index output is compared by the element it selects. (op name -> position
# of `dim` in the sample's args, default -1.)
_TIE_ORDER_DIM = {"sort": 0, "argsort": 0, "topk": 1}


def _selected_elements(op: Any, s: Any, actual: Any, expected: Any) -> tuple[Any, Any]:
    """`actual` and `expected` with each index output of a tie-order op replaced by the
    elements of the sample's input it selects; unchanged for other ops and stable sorts."""
    pos = _TIE_ORDER_DIM.get(op.name)
    x = s.input
    if pos is None or not isinstance(x, torch.Tensor) or x.dim() == 0 or \
            s.kwargs.get("stable", False):
        return actual, expected
    dim = s.kwargs.get("dim", s.args[pos] if len(s.args) > pos else -1)

    def select(out: Any, device: str) -> Any:
        items = list(out) if isinstance(out, (tuple, list)) else [out]
        picked = [x.gather(dim, t.cpu()).to(device)
                  if isinstance(t, torch.Tensor) and t.dtype == torch.int64 else t for t in items]
        return tuple(picked) if isinstance(out, (tuple, list)) else picked[0]

    return select(actual, TPU), select(expected, "cpu")


# Arguments PyTorch requires on the CPU whatever the device (op name -> positions in args).
_CPU_ARGS = {"tensor_split": (0,)}


def family_of(op: Any) -> str:
    """core, linalg, fft, special, sparse or foreach: by the definitions module the OpInfo
    comes from (torch.testing._internal.opinfo.definitions.*), then by name; the torch.*
    aliases of linalg decompositions count as linalg."""
    from torch.testing._internal.opinfo.definitions import fft, linalg, special

    for family, module in (("linalg", linalg), ("fft", fft), ("special", special)):
        if any(o is op for o in module.op_db):
            return family
    name = op.name
    if name.startswith("_foreach_"):
        return "foreach"
    if name in _LINALG_ALIASES or (name == "norm" and op.variant_test_name == "nuc"):
        return "linalg"
    for prefix in ("linalg", "fft", "special"):
        if name.startswith(prefix + "."):
            return prefix
    if "sparse" in name:
        return "sparse"
    return "core"


def primary_dtype(op: Any) -> torch.dtype | None:
    """float32 when the op supports it on the CPU, else its first integer/bool dtype, else
    complex64."""
    supported = op.supported_dtypes("cpu")
    for dtype in (torch.float32, *_FALLBACK_PRIMARY):
        if dtype in supported:
            return dtype
    return None


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return _TOLERANCES.get(dtype, (0.0, 0.0))


# ---- running and comparing ---------------------------------------------------------------

class _Watch:
    """Fallbacks and host round-trips (op name -> count) that happened inside the block."""

    def __enter__(self) -> _Watch:
        self._before = {k: dict(v) for k, v in _C.keyed_counters().items()}
        self.fallbacks: set[str] = set()
        self.roundtrips: set[str] = set()
        return self

    def __exit__(self, *exc: Any) -> None:
        after = _C.keyed_counters()
        for kind, target in (("fallback_ops", self.fallbacks),
                             ("host_roundtrip_ops", self.roundtrips)):
            before = self._before.get(kind, {})
            target.update(op for op, n in after.get(kind, {}).items() if n > before.get(op, 0))


def _to(x: Any, device: str) -> Any:
    """A copy of a (nested) sample argument on `device`; leaves keep requires_grad.

    Tensors that share a storage (an out= view of an input, as error inputs use to test
    overlap checks) or overlap themselves (expanded) are copied as views of one copied
    storage, so the aliasing survives.
    """
    tensors = [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]
    owners: dict[int, int] = {}
    for t in tensors:
        if t.layout == torch.strided and t.untyped_storage().nbytes():
            key = t.untyped_storage().data_ptr()
            owners[key] = owners.get(key, 0) + 1
    storages: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def move(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        # Shared storages and self-overlapping layouts (expanded outs) keep their layout.
        shared = t.layout == torch.strided and t.untyped_storage().nbytes() and (
            owners.get(t.untyped_storage().data_ptr(), 0) > 1
            or torch._debug_has_internal_overlap(t) != 0)
        if shared:
            key = (t.untyped_storage().data_ptr(), t.dtype)
            if key not in storages:
                numel = t.untyped_storage().nbytes() // t.element_size()
                flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), 0, (numel,), (1,))
                storages[key] = flat.detach().to(device, copy=True)
            y = storages[key].as_strided(t.size(), t.stride(), t.storage_offset())
        else:
            y = t.detach().to(device, copy=True)
        return y.requires_grad_(True) if t.requires_grad else y
    return tree_map(move, x)


def _is_cpu_device(v: Any) -> bool:
    return (isinstance(v, str) and v == "cpu") or (isinstance(v, torch.device) and v.type == "cpu")


def _sample_on(sample: Any, device: str, op: Any = None) -> tuple[Any, Any, Any]:
    """The sample's (input, args, kwargs) on `device`. Samples are drawn for the CPU, so a
    device argument naming the CPU (factories, Tensor.to) names `device` instead."""
    cpu_args = _CPU_ARGS.get(op.name, ()) if op is not None else ()
    kept = {i: a for i, a in enumerate(sample.args) if i in cpu_args}
    inp, args, kwargs = _to((sample.input, sample.args, sample.kwargs), device)
    args = tuple(kept.get(i, device if _is_cpu_device(a) else a) for i, a in enumerate(args))
    kwargs = {k: device if _is_cpu_device(v) else v for k, v in kwargs.items()}
    return inp, args, kwargs


def _call(op: Any, sample: Any, device: str) -> Any:
    inp, args, kwargs = _sample_on(sample, device, op)
    return op(inp, *args, **kwargs)


def _first_line(e: BaseException) -> str:
    inner = getattr(e, "inner_exception", None)  # torch.compile wraps the backend's error
    if isinstance(inner, BaseException):
        e = inner
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def _compare(actual: Any, expected: Any, dtype: torch.dtype) -> str | None:
    """None when `actual` (tpu) matches `expected` (CPU), else a one-line reason."""
    a_flat, _ = tree_flatten(actual)
    e_flat, _ = tree_flatten(expected)
    if len(a_flat) != len(e_flat):
        return f"mismatch: {len(a_flat)} outputs, CPU gives {len(e_flat)}"
    for i, (a, e) in enumerate(zip(a_flat, e_flat)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"mismatch: output {i} is {type(a).__name__}, CPU gives a tensor"
            if a.device.type != TPU:
                return f"mismatch: output {i} is on {a.device}, expected tpu"
            if a.dtype != e.dtype or a.shape != e.shape:
                return (f"mismatch: output {i} is {a.dtype}{list(a.shape)}, CPU gives "
                        f"{e.dtype}{list(e.shape)}")
            rtol, atol = max(tolerance(dtype), tolerance(e.dtype))
            try:
                torch.testing.assert_close(a.detach().cpu(), e.detach(), rtol=rtol, atol=atol,
                                           equal_nan=True, check_stride=False)
            except AssertionError as err:
                detail = [ln.strip() for ln in str(err).splitlines()
                          if "Mismatched elements" in ln or "Greatest absolute" in ln]
                if not detail:  # NaN/Inf placement or a boolean/integer difference
                    detail = [str(err).strip().splitlines()[0]]
                return f"mismatch: output {i} ({e.dtype}): " + "; ".join(detail)[:200]
        elif isinstance(e, float) and isinstance(a, float):
            if not (a == e or (a != a and e != e) or abs(a - e) <= 1e-3 * max(1.0, abs(e))):
                return f"mismatch: output {i} is {a}, CPU gives {e}"
        elif a != e:
            return f"mismatch: output {i} is {a!r}, CPU gives {e!r}"
    return None


def _seeded(seed: int, fn: Callable[[], Any]) -> Any:
    torch.manual_seed(seed)
    return fn()


_UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                  "empty_permuted"}


def _values_undefined(op: Any) -> bool:
    """Random ops (OpInfo wraps them in wrapper_set_seed, which fixes the CPU seed, so the
    CPU result alone does not reveal them) and ops returning uninitialized memory."""
    names = getattr(getattr(op.op, "__code__", None), "co_names", ())
    return "wrapper_set_seed" in names or op.name in _UNINITIALIZED


def _is_random(fn: Callable[[], Any]) -> bool:
    """True when the CPU result changes with the global seed (random ops)."""
    try:
        r1, r2 = _seeded(1, fn), _seeded(2, fn)
    except Exception:
        return False
    return _compare_cpu(r1, r2) is not None


def _compare_cpu(a: Any, b: Any) -> str | None:
    a_flat, _ = tree_flatten(a)
    b_flat, _ = tree_flatten(b)
    for x, y in zip(a_flat, b_flat):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            same = x.shape == y.shape and torch.equal(torch.nan_to_num(x.detach()),
                                                      torch.nan_to_num(y.detach()))
            if not same:
                return "differs"
        elif x != y:
            return "differs"
    return None


def _metadata_only(actual: Any, expected: Any) -> Any:
    """For random ops: keep device/dtype/shape checks by comparing against `actual` itself."""
    def pick(a: Any, e: Any) -> Any:
        return a.detach().cpu() if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) \
            and a.shape == e.shape and a.dtype == e.dtype else e
    a_flat, spec = tree_flatten(actual)
    e_flat, _ = tree_flatten(expected)
    if len(a_flat) != len(e_flat):
        return expected
    return tree_unflatten([pick(a, e) for a, e in zip(a_flat, e_flat)], spec)


def _samples(op: Any, dtype: torch.dtype, requires_grad: bool, limit: int | None) -> list[Any]:
    torch.manual_seed(zlib.crc32(op_key(op).encode()))
    it = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
    return list(itertools.islice(it, limit))


def _edge_sample(samples: list[Any]) -> Any | None:
    """The first floating sample with NaN, +Inf, -Inf written into its input."""
    from torch.testing._internal.opinfo.core import SampleInput

    for s in samples:
        x = s.input
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() >= 3:
            y = x.detach().clone(memory_format=torch.contiguous_format)
            y.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
            return SampleInput(y, args=s.args, kwargs=s.kwargs,
                               output_process_fn_grad=s.output_process_fn_grad)
    return None


class _Result:
    """Accumulates one check: the first real failure, plus fallbacks and round-trips."""

    def __init__(self) -> None:
        self.failure = ""
        self.fallbacks: set[str] = set()
        self.roundtrips: set[str] = set()
        self.samples = 0
        self.random = False  # once one sample shows the op is random, values are not compared

    def outcome(self, family: str) -> Outcome:
        trips = tuple(sorted(self.roundtrips))
        if self.failure:
            return Outcome("fail", self.failure, self.samples, trips)
        if self.fallbacks:
            names = ", ".join(sorted(self.fallbacks))
            if family in HOST_FAMILIES:
                return Outcome("host", "host: " + names, self.samples,
                               tuple(sorted(self.roundtrips | self.fallbacks)))
            return Outcome("fail", "fallback: " + names, self.samples, trips)
        return Outcome("pass", "", self.samples, trips)


def _run_watched(res: _Result, fn: Callable[[], Any]) -> tuple[object, bool]:
    """Runs `fn` on tpu, adding its fallbacks, host round-trips and one sample to `res`.
    Returns (result, raised). When it raised, `res.failure` holds the error's first line,
    unless the error was a strict-mode fallback: then the fallback is the reported cause."""
    actual, raised = None, False
    with _Watch() as w:
        try:
            actual = fn()
        except Exception as e:
            raised = True
            res.failure = _first_line(e)
    res.fallbacks |= w.fallbacks
    res.roundtrips |= w.roundtrips
    res.samples += 1
    if raised and w.fallbacks and "TORCHTPU_FALLBACK" in res.failure:
        res.failure = ""
    return actual, raised


def _check_forward(op: Any, s: Any, dtype: torch.dtype, res: _Result,
                   run_tpu: Callable[[Any], Any]) -> bool:
    """One sample forward on both devices; False once the check has failed."""
    try:
        expected = _seeded(0, lambda: _cpu_reference(op, s, dtype))
    except Exception:
        return True  # the CPU rejects this sample (edge values): nothing to compare
    res.random = res.random or _is_random(lambda: _call(op, s, "cpu"))
    actual, raised = _run_watched(res, lambda: run_tpu(s))
    if raised:
        return not res.failure
    if res.random:
        expected = _metadata_only(actual, expected)
    actual, expected = _selected_elements(op, s, actual, expected)
    reason = _compare(actual, expected, dtype)
    if reason:
        res.failure = reason
    return not reason


def _check_error_inputs(op: Any, res: _Result) -> None:
    try:
        error_inputs = list(op.error_inputs("cpu"))
    except Exception:
        return  # the OpInfo has none, or cannot build them here
    for ei in error_inputs:
        s = ei.sample_input
        try:  # some error inputs only fail on other devices (CUDA): not a CPU contract
            _call(op, s, "cpu")
            continue
        except Exception:
            pass
        try:
            _call(op, s, TPU)
        except Exception as e:
            if not isinstance(e, ei.error_type):
                res.failure = (f"error input raised {type(e).__name__} instead of "
                               f"{ei.error_type.__name__} ({_first_line(e)})")
                return
            continue
        res.failure = (f"error input did not raise {ei.error_type.__name__} "
                       f"(expected /{ei.error_regex}/)")[:240]
        return


def _eager(op: Any, dtype: torch.dtype, limit: int | None, res: _Result) -> None:
    samples = _samples(op, dtype, False, limit)
    edge = None if _no_edge_values(op) else _edge_sample(samples)
    for s in samples + ([edge] if edge is not None else []):
        if not _check_forward(op, s, dtype, res, lambda smp: _call(op, smp, TPU)):
            return
    if dtype == primary_dtype(op):
        _check_error_inputs(op, res)


def _grads(op: Any, s: Any, device: str, grad_seed: int) -> Any:
    inp, args, kwargs = _sample_on(s, device, op)
    leaves = [t for t in tree_flatten((inp, args, kwargs))[0]
              if isinstance(t, torch.Tensor) and t.requires_grad]
    out = s.output_process_fn_grad(op(inp, *args, **kwargs))
    outs = [o for o in tree_flatten(out)[0]
            if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
    if not leaves or not outs:
        return None
    g = torch.Generator().manual_seed(grad_seed)
    grad_outputs = [torch.randn(o.shape, generator=g, dtype=o.dtype).to(o.device) for o in outs]
    grads = torch.autograd.grad(outs, leaves, grad_outputs, allow_unused=True)
    return [gr if gr is not None else torch.zeros_like(x) for gr, x in zip(grads, leaves)]


def _autograd(op: Any, dtype: torch.dtype, limit: int | None, res: _Result) -> bool:
    """False when the op has no differentiable sample (n/a)."""
    any_grad = False
    for i, s in enumerate(_samples(op, dtype, True, limit)):
        try:
            expected = _seeded(0, lambda: _grads(op, s, "cpu", i))
        except Exception:
            continue
        if expected is None:
            continue
        any_grad = True
        res.random = res.random or _is_random(lambda: _grads(op, s, "cpu", i))
        actual, raised = _run_watched(res, lambda: _seeded(0, lambda: _grads(op, s, TPU, i)))
        if raised:
            return True
        if res.random:
            expected = _metadata_only(actual, expected)
        reason = _compare(actual, expected, dtype)
        if reason:
            res.failure = "grad " + reason
            return True
    return any_grad


def _compiled(op: Any, dtype: torch.dtype, limit: int | None, res: _Result) -> None:
    import torch._dynamo

    torch._dynamo.reset()
    fn = op.op

    def call(inp: Any, args: Any, kwargs: Any) -> Any:
        return fn(inp, *args, **kwargs)

    compiled = torch.compile(call, backend="tpu", dynamic=False)
    # Each sample recompiles the one frame by design; the backend's recompile notes are noise.
    logging.getLogger("torchtpu.compile").setLevel(logging.ERROR)

    def run_tpu(s: Any) -> Any:
        inp, args, kwargs = _sample_on(s, TPU, op)
        return compiled(inp, args, kwargs)

    with _unseeded(fn):
        for s in _samples(op, dtype, False, limit):
            if not _check_forward(op, s, dtype, res, run_tpu):
                return


def _call_unseeded(op: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return op(*args, **kwargs)


@contextlib.contextmanager
def _unseeded(fn: Callable[..., Any]) -> Iterator[None]:
    """OpInfo wraps random ops in wrapper_set_seed (freeze the RNG state, seed 42), which
    Dynamo cannot trace (freeze_rng_state runs under no_dispatch). Random results are
    compared by device, dtype and shape only, so under compile the op is called directly."""
    module_globals = getattr(fn, "__globals__", {})
    original = module_globals.get("wrapper_set_seed")
    if original is None:
        yield
        return
    module_globals["wrapper_set_seed"] = _call_unseeded
    try:
        yield
    finally:
        module_globals["wrapper_set_seed"] = original


def check(op: Any, mode: str, dtype: torch.dtype, max_samples: int | None = -1) -> Outcome:
    """Runs `mode` for `op` at `dtype`. max_samples=-1 uses DEFAULT_MAX_SAMPLES[mode];
    None runs every sample."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if max_samples == -1:
        max_samples = DEFAULT_MAX_SAMPLES[mode]
    if dtype not in op.supported_dtypes("cpu"):
        return Outcome("n/a", f"{dtype} not supported by the op on the CPU")
    if mode == "autograd" and (not op.supports_autograd
                               or dtype not in op.supported_backward_dtypes("cpu")):
        return Outcome("n/a", "no autograd support")
    family = family_of(op)
    res = _Result()
    res.random = _values_undefined(op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if mode == "eager":
                _eager(op, dtype, max_samples, res)
            elif mode == "autograd":
                if not _autograd(op, dtype, max_samples, res):
                    return Outcome("n/a", "no differentiable sample")
            else:
                _compiled(op, dtype, max_samples, res)
        except Exception as e:  # sample generation itself failed
            res.failure = res.failure or "harness: " + _first_line(e)
    if res.samples == 0 and not res.failure:
        return Outcome("n/a", "no sample the CPU accepts")
    return res.outcome(family)
