"""Streams and events of ``torch.tpu`` (the names and meanings of ``torch.cuda``'s).

Every stream of a device runs on the device's one in-order queue (csrc/aten/tpu_streams.h):
streams never overlap, so waits between them are always met, and events time the device's
progress (``Event(enable_timing=True).elapsed_time``). ``torch.Stream(device="tpu")`` and
``torch.Event(device="tpu")`` are the same objects; these classes are their tpu forms.
"""

from __future__ import annotations

import torch

from torchtpu import _C
from torchtpu.device import _index

Device = int | str | torch.device | None


class Stream(torch.Stream):
    """A tpu stream: ``Stream()``, ``Stream(device)``; usable as a context manager."""

    def __new__(cls, device: Device = None, priority: int = 0, **kwargs) -> Stream:  # noqa: PYI034
        if kwargs:  # stream_id / device_index / device_type, as torch.Stream takes them
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("tpu", _index(device)),
                               priority=priority)

    @property
    def priority(self) -> int:
        """0: every stream of a device runs on its one in-order queue, so a requested
        priority changes nothing (``torch.cuda.Stream.priority``'s meaning)."""
        return 0

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(least, greatest) priority: (0, 0), as the device has one queue."""
        return (0, 0)


class _TpuEventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "tpu"


class Event(metaclass=_TpuEventMeta):
    """A tpu event: ``Event(enable_timing=True)``, ``record()``, ``elapsed_time()``.

    Constructs a plain ``torch.Event`` on the current tpu device (``torch.Event``'s methods
    accept only that exact type as the other event), so ``isinstance`` is by device."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False) -> torch.Event:
        if interprocess:
            raise NotImplementedError("tpu: interprocess events are not supported; share "
                                      "results through tensors moved to the CPU")
        return torch.Event(device=torch.device("tpu", _index(None)),
                           enable_timing=enable_timing, blocking=blocking)


def _wrap(stream_id: int, device_index: int, device_type: int) -> Stream:
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def current_stream(device: Device = None) -> Stream:
    """The current stream of ``device`` on this thread (the default stream unless set)."""
    return _wrap(*_C.current_stream(_index(device)))


def default_stream(device: Device = None) -> Stream:
    return _wrap(*_C.default_stream(_index(device)))


def set_stream(stream: torch.Stream) -> None:
    """Makes ``stream`` current for its device on this thread, and its device the current
    device (as ``torch.cuda.set_stream`` and ``torch.accelerator.set_stream`` do)."""
    if stream.device.type != "tpu":
        raise ValueError(f"tpu: expected a tpu stream, got one on {stream.device}")
    from torchtpu.device import current_device, set_device

    _C.set_stream(stream.stream_id, stream.device_index)  # checks the stream first
    if stream.device_index != current_device():
        set_device(stream.device_index)


class StreamContext:
    """Context manager (``torch.cuda.StreamContext``'s meaning): ``stream`` is the current
    stream, and its device the current device, inside the block; on exit the device and
    both devices' streams are what they were. ``None`` changes nothing. Re-entrant."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._previous: list[tuple[Stream, Stream | None]] = []

    def __enter__(self) -> None:
        if self.stream is None:
            return
        here = current_stream()  # the current device's
        there = (current_stream(self.stream.device_index)
                 if self.stream.device_index != here.device_index else None)
        self._previous.append((here, there))
        set_stream(self.stream)

    def __exit__(self, *exc: object) -> None:
        if self.stream is None:
            return
        here, there = self._previous.pop()
        if there is not None:
            set_stream(there)  # the stream's device gets its stream back
        set_stream(here)  # and the device current before is current again


def stream(s: torch.Stream | None) -> StreamContext:
    """``with torch.tpu.stream(s):`` makes ``s`` current for the block."""
    return StreamContext(s)


__all__ = ["Event", "Stream", "StreamContext", "current_stream", "default_stream", "set_stream", "stream"]
