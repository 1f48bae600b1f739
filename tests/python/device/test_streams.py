"""Streams and events on ``tpu``: PyTorch's semantics on one in-order queue per device
(``torch.tpu.Stream``/``Event`` and the generic ``torch.Stream``/``torch.Event``)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import torchtpu


@pytest.fixture(scope="module")
def big() -> torch.Tensor:
    a = torch.randn(1536, 1536, device="tpu")
    (a @ a).cpu()  # compile once outside the timings
    return a


def test_current_and_default_stream() -> None:
    s = torch.tpu.current_stream()
    assert s == torch.tpu.default_stream()
    assert s.stream_id == 0 and s.device == torch.device("tpu", 0)
    assert isinstance(s, torch.Stream)
    assert torch.accelerator.current_stream() == s


def test_new_streams_and_context_manager() -> None:
    s1, s2 = torch.tpu.Stream(), torch.Stream(device="tpu")
    assert s1 != s2 and s1.device.type == s2.device.type == "tpu"
    with torch.tpu.stream(s1):
        assert torch.tpu.current_stream() == s1
        with s2:  # torch.Stream's own context manager
            assert torch.tpu.current_stream() == s2
        assert torch.tpu.current_stream() == s1
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    torch.tpu.set_stream(s2)
    try:
        assert torch.accelerator.current_stream() == s2
    finally:
        torch.tpu.set_stream(torch.tpu.default_stream())


def test_stream_context_is_reentrant_and_none_changes_nothing() -> None:
    s = torch.tpu.Stream()
    ctx = torch.tpu.StreamContext(s)
    with ctx:
        with ctx:
            assert torch.tpu.current_stream() == s
        assert torch.tpu.current_stream() == s
    assert torch.tpu.current_stream() == torch.tpu.default_stream()
    with torch.tpu.stream(None):
        assert torch.tpu.current_stream() == torch.tpu.default_stream()


def test_current_stream_is_per_thread() -> None:
    s = torch.tpu.Stream()
    seen = []
    with torch.tpu.stream(s):
        t = threading.Thread(target=lambda: seen.append(torch.tpu.current_stream()))
        t.start()
        t.join()
    assert seen == [torch.tpu.default_stream()]


def test_work_on_streams_matches_cpu() -> None:
    x = torch.randn(64, 64)
    s = torch.tpu.Stream()
    dev = x.to("tpu")
    with torch.tpu.stream(s):
        y = dev @ dev
        done = s.record_event()
    torch.tpu.current_stream().wait_event(done)
    z = y.relu().sum(0)
    torch.tpu.current_stream().wait_stream(s)
    torch.testing.assert_close(z.cpu(), (x @ x).relu().sum(0), rtol=1e-5, atol=1e-4)


def test_event_query_and_synchronize(big: torch.Tensor) -> None:
    e = torch.tpu.Event()
    assert e.query()  # never recorded
    c = big @ big
    for _ in range(3):
        c = c @ big
    e.record()
    assert not e.query()  # several matmuls of 1536^2 take far longer than this call
    e.synchronize()
    assert e.query()
    assert torch.tpu.current_stream().query()
    s = torch.tpu.Stream()
    c = c @ big
    assert not s.query()  # one queue: another stream sees the default stream's work
    s.synchronize()
    assert s.query()


def test_elapsed_time_of_a_matmul_is_device_time(big: torch.Tensor) -> None:
    start = torch.tpu.Event(enable_timing=True)
    end = torch.Event(device="tpu", enable_timing=True)
    torchtpu.synchronize()
    t0 = time.perf_counter()
    start.record()
    c = big
    for _ in range(4):
        c = c @ big
    end.record()
    enqueued_ms = (time.perf_counter() - t0) * 1e3
    end.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    ms = start.elapsed_time(end)
    # Within 2x of wall time (the end's completion callback may run just after the host
    # wakes), and not the host's enqueue time.
    assert wall_ms / 2 <= ms <= 2 * wall_ms, (ms, wall_ms)
    assert ms > enqueued_ms, (ms, enqueued_ms)


def test_elapsed_time_errors() -> None:
    a, b = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    with pytest.raises((RuntimeError, ValueError), match="record"):
        a.elapsed_time(b)
    c, d = torch.tpu.Event(), torch.tpu.Event()
    c.record()
    d.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        c.elapsed_time(d)


def test_events_are_torch_events() -> None:
    e = torch.tpu.Event(enable_timing=True)
    assert isinstance(e, torch.Event) and isinstance(e, torch.tpu.Event)
    assert e.device.type == "tpu"
    e.record()
    assert e.device == torch.device("tpu", 0)
    assert not isinstance(torch.Event(device="cpu"), torch.tpu.Event)


def test_interprocess_event_says_what_to_do() -> None:
    with pytest.raises(NotImplementedError, match="interprocess"):
        torch.tpu.Event(interprocess=True)


def test_streams_and_generators_of_a_device_that_does_not_exist_are_refused() -> None:
    # They were made, and work on them ran on device 0 or failed later elsewhere.
    n = torch.tpu.device_count()
    for make in (lambda: torch.tpu.current_stream(n), lambda: torch.accelerator.current_stream(n),
                 lambda: torch.tpu.default_stream(n), lambda: torch.Generator(device=f"tpu:{n}")):
        with pytest.raises(RuntimeError, match=f"invalid device index {n}"):
            make()
    assert torch.Generator(device=f"tpu:{n - 1}").device == torch.device("tpu", n - 1)


def test_set_stream_rejects_other_devices() -> None:
    with pytest.raises(ValueError, match="tpu stream"):
        torch.tpu.set_stream(torch.Stream(device="cpu"))


def test_set_stream_rejects_streams_that_were_never_made() -> None:
    # A stream rebuilt from a made-up id (torch.Stream(stream_id=...)) names no stream of
    # the device: CUDA rejects it too, rather than running work on an unknown queue.
    made = torch.tpu.Stream()
    unknown = torch.Stream(stream_id=2**40, device_index=0,
                           device_type=made.device_type)
    with pytest.raises(ValueError, match="no stream"):
        torch.tpu.set_stream(unknown)
    negative = torch.Stream(stream_id=-3, device_index=0, device_type=made.device_type)
    with pytest.raises(ValueError, match="no stream"):
        torch.tpu.set_stream(negative)
    other_device = torch.Stream(stream_id=0, device_index=7, device_type=made.device_type)
    with pytest.raises(RuntimeError, match="invalid device index 7"):
        torch.tpu.set_stream(other_device)
    assert torch.tpu.current_stream() == torch.tpu.default_stream()  # nothing changed
    torch.tpu.set_stream(made)
    assert torch.tpu.current_stream() == made
    torch.tpu.set_stream(torch.tpu.default_stream())


def test_stream_priority_reads_as_cuda_streams_do() -> None:
    # One in-order queue per device: every stream has priority 0, whatever was asked.
    assert torch.tpu.Stream(priority=-1).priority == 0
    assert torch.tpu.current_stream().priority == 0
    assert torch.tpu.Stream.priority_range() == (0, 0)


def test_record_stream_is_accepted_for_a_tpu_stream() -> None:
    # Prefetching loaders and FSDP call it; every stream of a device is one in-order queue
    # and a buffer is released only after the work using it, so there is nothing to record.
    x = torch.ones(4, device="tpu")
    side = torch.tpu.Stream()
    with torch.tpu.stream(side):
        y = x * 2
    y.record_stream(side)
    x.record_stream(torch.tpu.current_stream())
    del x
    torch.testing.assert_close(y.cpu(), torch.full((4,), 2.0))
    with pytest.raises(RuntimeError, match="tpu stream"):
        y.record_stream(torch.Stream(device="cpu"))
