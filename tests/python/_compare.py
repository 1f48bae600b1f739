"""Differential helpers: run the same function on CPU and on ``tpu`` and compare per dtype.

``assert_same(fn, *inputs)`` runs ``fn`` on the CPU inputs and on ``.to('tpu')`` copies of
them, checks that every tpu result lives on ``tpu``, has the CPU result's dtype and shape, and
is close within the tolerance of its dtype. By default it also asserts that the tpu run needed
no CPU fallback: a test of a lowered op must exercise the lowering, not PyTorch's CPU kernel.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

import torchtpu

TPU = "tpu"

# (rtol, atol) per dtype. f32: XLA's transcendental functions differ from ATen's by a few ulp.
# bf16: one rounding step (2**-8 relative) plus the difference of computing in f32 and
# rounding once versus rounding per step.
DEFAULT_TOLS: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-3),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
EXACT = (0.0, 0.0)

FLOAT_DTYPES = [torch.float32, torch.bfloat16]
ALL_DTYPES = [torch.float32, torch.bfloat16, torch.int64, torch.bool]


def tols_for(dtype: torch.dtype, dtype_tols: dict[torch.dtype, tuple[float, float]] | None = None
             ) -> tuple[float, float]:
    if dtype_tols and dtype in dtype_tols:
        return dtype_tols[dtype]
    return DEFAULT_TOLS.get(dtype, EXACT)


def to_device(x: Any, device: str | torch.device) -> Any:
    """Copies every tensor in a (nested) structure to ``device``, keeping requires_grad leaves."""
    if isinstance(x, torch.Tensor):
        y = x.detach().to(device)
        if x.requires_grad:
            y.requires_grad_(True)
        return y
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


def make(shape: Iterable[int], dtype: torch.dtype, *, low: float = -3.0, high: float = 3.0,
         noncontiguous: bool = False) -> torch.Tensor:
    """A seeded-random CPU tensor of ``dtype``; ``noncontiguous`` gives a strided view."""
    shape = tuple(shape)
    if noncontiguous:
        # Double the last dim and take every other element: same values layout, stride 2.
        big = make(shape[:-1] + (shape[-1] * 2,), dtype, low=low, high=high) if shape else None
        t = big[..., ::2] if big is not None else make(shape, dtype, low=low, high=high)
        assert not shape or not t.is_contiguous() or t.numel() <= 1
        return t
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_complex:
        part = torch.float64 if dtype == torch.complex128 else torch.float32
        return torch.complex(make(shape, part, low=low, high=high),
                             make(shape, part, low=low, high=high))
    if dtype.is_floating_point:
        return (torch.rand(shape, dtype=torch.float32) * (high - low) + low).to(dtype)
    return torch.randint(int(low), int(high) + 1, shape, dtype=dtype)


def assert_close(actual: Any, expected: Any, *,
                 dtype_tols: dict[torch.dtype, tuple[float, float]] | None = None,
                 check_device: bool = True, what: str = "result") -> None:
    """``actual`` (tpu) against ``expected`` (CPU), recursively through tuples and lists."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual)}"
        if check_device:
            assert actual.device.type == TPU, f"{what}: expected a tpu tensor, got {actual.device}"
        assert actual.dtype == expected.dtype, (
            f"{what}: dtype mismatch (expected {expected.dtype}, got {actual.dtype})")
        assert actual.shape == expected.shape, (
            f"{what}: shape mismatch (expected {tuple(expected.shape)}, got {tuple(actual.shape)})")
        rtol, atol = tols_for(expected.dtype, dtype_tols)
        torch.testing.assert_close(actual.detach().cpu(), expected.detach(), rtol=rtol, atol=atol,
                                   equal_nan=True, msg=lambda m: f"{what} ({expected.dtype}): {m}")
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)) and len(actual) == len(expected), (
            f"{what}: expected a sequence of {len(expected)}, got {actual!r}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_close(a, e, dtype_tols=dtype_tols, check_device=check_device,
                         what=f"{what}[{i}]")
    elif isinstance(expected, float):
        assert abs(actual - expected) <= 1e-5 * max(1.0, abs(expected)), (
            f"{what}: expected {expected}, got {actual}")
    else:
        assert actual == expected, f"{what}: expected {expected!r}, got {actual!r}"


@contextlib.contextmanager
def eager_mode(mode: str) -> Iterator[None]:
    """Runs the block in eager mode `mode` ("op" or "fused"), then restores the previous
    mode (which runs the graphs still pending when leaving fused mode)."""
    previous = torchtpu.eager_mode()
    torchtpu.set_eager_mode(mode)
    try:
        yield
    finally:
        torchtpu.set_eager_mode(previous)


def programs_obtained() -> int:
    """Executables this process compiled or loaded from the disk cache so far: every program
    it needed that it did not hold already (eager ops, graphs, storage programs)."""
    m = torchtpu.debug.metrics()
    return m.get("num_compiles", 0) + m.get("num_compile_cache_hits_disk", 0)


def fallbacks() -> dict[str, int]:
    return dict(torchtpu.debug.metrics()["fallback_ops"])


def new_fallbacks(before: dict[str, int]) -> dict[str, int]:
    after = fallbacks()
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def assert_same(fn: Callable[..., Any], *inputs: Any,
                dtype_tols: dict[torch.dtype, tuple[float, float]] | None = None,
                allow_fallback: Iterable[str] = (), **kwargs: Any) -> Any:
    """Runs ``fn(*inputs, **kwargs)`` on CPU and on tpu copies; compares; returns the tpu result.

    ``allow_fallback`` names ops (e.g. ``"aten::sort"``) that have no lowering and may run on
    the CPU; any other fallback fails the comparison.
    """
    expected = fn(*inputs, **kwargs)
    before = fallbacks()
    actual = fn(*to_device(inputs, TPU), **to_device(kwargs, TPU))
    unexpected = {k: v for k, v in new_fallbacks(before).items() if k not in set(allow_fallback)}
    assert not unexpected, f"tpu run fell back to the CPU for {unexpected}"
    assert_close(actual, expected, dtype_tols=dtype_tols)
    return actual


def assert_raises_like_cpu(fn: Callable[..., Any], *inputs: Any) -> BaseException:
    """``fn`` must raise on CPU and raise an exception of the same type on tpu (not crash)."""
    try:
        fn(*inputs)
    except Exception as e:  # noqa: BLE001
        cpu_exc: BaseException = e
    else:
        raise AssertionError("test is wrong: the CPU call did not raise")
    try:
        fn(*to_device(inputs, TPU))
        torchtpu.synchronize()
    except Exception as e:  # noqa: BLE001
        assert type(e) is type(cpu_exc), (
            f"tpu raised {type(e).__name__}: {e}; CPU raises {type(cpu_exc).__name__}: {cpu_exc}")
        return e
    raise AssertionError(f"tpu did not raise; CPU raises {type(cpu_exc).__name__}: {cpu_exc}")
