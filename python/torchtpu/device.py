"""The ``torch.tpu`` module: device management and random state for the ``tpu`` device."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from torchtpu import _C


def is_available() -> bool:
    """True when a PJRT plugin loaded and reports at least one device."""
    return _C.device_count() > 0


def device_count() -> int:
    return _C.device_count()


def init() -> None:
    """``torch.cuda.init``'s counterpart: the PJRT client starts when torchtpu is imported,
    so this only raises if no plugin loaded (as using the device would)."""
    if not is_available():
        raise RuntimeError("tpu: no device: the PJRT plugin reported none "
                           "(torchtpu.debug.report() says which plugin was loaded)")


# What an allocation that does not fit raises (torch.cuda.OutOfMemoryError is the same class).
OutOfMemoryError = torch.OutOfMemoryError


def is_initialized() -> bool:
    """True once the PJRT client is up (importing torchtpu starts it); fake tensors ask
    this before reading current_device()."""
    return is_available()


def current_device() -> int:
    return _C.current_device()


def _index(device: int | str | torch.device | None) -> int:
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "tpu":
        raise ValueError(f"tpu: expected a tpu device, got {d}")
    return current_device() if d.index is None else d.index


def set_device(device: int | str | torch.device) -> None:
    _C.set_device(_index(device))


@contextlib.contextmanager
def device(device: int | str | torch.device) -> Iterator[None]:
    """Context manager that makes ``device`` current inside the block."""
    previous = current_device()
    set_device(device)
    try:
        yield
    finally:
        set_device(previous)


def device_of(obj: object) -> contextlib.AbstractContextManager:
    """Context manager that makes the device of ``obj`` (a tpu tensor or storage) current;
    does nothing for anything else, as ``torch.cuda.device_of``."""
    if isinstance(obj, (torch.Tensor, torch.UntypedStorage)) and obj.device.type == "tpu":
        return device(obj.device.index or 0)
    return contextlib.nullcontext()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 runs on every PJRT plugin torchtpu drives (XLA computes it natively or in
    float32 and rounds)."""
    return True


def synchronize(device: int | str | torch.device | None = None) -> None:
    """Blocks until the work queued so far on ``device`` has finished."""
    _C.synchronize(_index(device))


def _seed_bits(seed: int) -> int:
    """`seed` as torch.Generator.manual_seed takes it: a negative int64 wraps to its uint64
    bits; outside [-2^63, 2^64) is an error, not a seed silently cut to its low bits."""
    seed = int(seed)
    if not -2**63 <= seed < 2**64:
        raise ValueError(f"Overflow when unpacking long long: seed {seed} is outside "
                         "[-2**63, 2**64)")
    return seed & 0xFFFF_FFFF_FFFF_FFFF


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    _C.manual_seed(current_device(), _seed_bits(seed))


def manual_seed_all(seed: int) -> None:
    bits = _seed_bits(seed)
    for i in range(device_count()):
        _C.manual_seed(i, bits)


def seed() -> None:
    _C.seed(current_device())


def seed_all() -> None:
    for i in range(device_count()):
        _C.seed(i)


def initial_seed() -> int:
    return _C.initial_seed(current_device())


def get_rng_state(device: int | str | torch.device | None = None) -> torch.Tensor:
    """The generator state of ``device`` as a uint8 CPU tensor (seed, offset)."""
    return _C.get_rng_state(_index(device))


def set_rng_state(state: torch.Tensor, device: int | str | torch.device | None = None) -> None:
    """Sets the generator state of ``device`` from a uint8 CPU tensor that get_rng_state
    returned (a strided view of one is copied first, as ``torch.cuda.set_rng_state``)."""
    if isinstance(state, torch.Tensor) and state.device.type == "cpu":
        state = state.contiguous()
    _C.set_rng_state(_index(device), state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(states: list[torch.Tensor]) -> None:
    for i, state in enumerate(states):
        set_rng_state(state, i)


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16]


def _is_in_bad_fork() -> bool:
    """True in the child of a fork() made after the device started, where device calls
    raise (the PJRT client's threads do not survive fork)."""
    return _C.in_forked_child()


def __getattr__(name: str) -> object:
    # torch.utils.checkpoint saves and restores a device's RNG state only when its module's
    # `_initialized` is true (torch.cuda's lazy-init flag); the client starts on import.
    if name == "_initialized":
        return is_initialized()
    if name == "amp":  # torch.tpu.amp.autocast / GradScaler, as torch.cuda.amp's
        import torchtpu.amp

        return torchtpu.amp
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


from torchtpu.memory import (  # noqa: E402, F401  (torch.tpu.memory_allocated, ...)
    TpuDeviceProperties,
    empty_cache,
    get_device_name,
    get_device_properties,
    max_memory_allocated,
    max_memory_cached,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_cached,
    memory_reserved,
    memory_stats,
    memory_stats_as_nested_dict,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_max_memory_allocated,
    reset_max_memory_cached,
    reset_peak_memory_stats,
)
from torchtpu.streams import (  # noqa: E402, F401  (torch.tpu.Stream, torch.tpu.Event, ...)
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)
