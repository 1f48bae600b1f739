"""torch._assert_async on tpu: the check runs on the device and is read at the next host
read (as CUDA reports a device-side assert at a later sync), eager and compiled, with the
CPU kernel's messages; nothing falls back to the CPU."""

from __future__ import annotations

import pytest
import torch
from _compare import fallbacks, new_fallbacks

import torchtpu

TPU = "tpu"


def test_passing_asserts_do_not_wait_or_fall_back() -> None:
    torchtpu._C.flush_data_checks()
    before = fallbacks()
    reads = torchtpu.debug.metrics().get("num_data_checks", 0)
    positions = torch.arange(8, device=TPU)
    torch._assert_async(torch.all(positions <= 7), "position_ids exceed max_valid_pos=7")
    torch._assert_async(torch.tensor(3.5, device=TPU))
    torch._assert_async(torch.tensor([float("nan")], device=TPU), "NaN is nonzero")
    assert torchtpu._C.num_pending_data_checks() == 3  # queued, not read
    assert torchtpu.debug.metrics().get("num_data_checks", 0) == reads
    assert new_fallbacks(before) == {}
    torch.tpu.synchronize()
    assert torchtpu._C.num_pending_data_checks() == 0


def test_a_loop_that_never_reads_the_host_keeps_the_queue_bounded() -> None:
    """Past 64 queued runs the older half is read (one transfer per run), so a loop of
    asserts that never reads the host holds a bounded queue, and a failure among the
    older runs still raises there."""
    torchtpu._C.flush_data_checks()
    ok = torch.tensor(True, device=TPU)
    for _ in range(200):
        torch._assert_async(ok)
        assert torchtpu._C.num_pending_data_checks() <= 65
    torch._assert_async(torch.tensor(False, device=TPU), "the 201st")
    with pytest.raises(RuntimeError, match="the 201st"):
        for _ in range(100):
            torch._assert_async(ok)
    torchtpu._C.flush_data_checks()
    assert torchtpu._C.num_pending_data_checks() == 0


@pytest.mark.parametrize("args, message", [
    ((torch.tensor(False), "position_ids exceed max_valid_pos=7"),
     "position_ids exceed max_valid_pos=7"),
    ((torch.tensor(0.0), ""), "Assertion is failed"),
    ((torch.tensor([0]),), "Expected Tensor with single nonzero value, but got zero"),
], ids=["msg", "empty_msg", "no_msg"])
def test_failed_assert_raises_at_the_next_host_read(args, message: str) -> None:
    torchtpu._C.flush_data_checks()
    cond = args[0].to(TPU)
    with pytest.raises(RuntimeError, match=message):
        torch._assert_async(args[0], *args[1:])  # the CPU kernel: the reference message
    torch._assert_async(cond, *args[1:])  # returns at once
    out = cond.float() + 1
    with pytest.raises(RuntimeError, match=f"earlier call of aten::_assert_async.*{message}"):
        out.cpu()
    # Reported once; the device keeps working.
    assert torchtpu._C.num_pending_data_checks() == 0
    assert out.cpu().item() == 1.0


@pytest.mark.parametrize("shape, message", [((2,), "more than one value"),
                                            ((0,), "no values")])
def test_element_count_is_checked_at_the_call(shape, message: str) -> None:
    # The CPU's check, made before anything runs: not a CPU fallback that happens to raise.
    before = fallbacks()
    for args in (("x",), ()):
        with pytest.raises(RuntimeError, match=message):
            torch._assert_async(torch.ones(shape, device=TPU), *args)
    assert not new_fallbacks(before), new_fallbacks(before)


def _checked_double(x: torch.Tensor) -> torch.Tensor:
    # (A plain `assert tensor` becomes the same op under Dynamo, but pytest rewrites the
    # asserts of test modules.)
    torch._assert_async(torch.all(x > 0), "x must be positive")
    return x * 2


def test_compiled_assert_is_a_deferred_check() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(_checked_double, backend="tpu", fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(3, device=TPU)).cpu(), torch.full((3,), 2.0))
    torchtpu._C.flush_data_checks()
    out = compiled(torch.tensor([1.0, -1.0, 2.0], device=TPU))
    assert torchtpu._C.num_pending_data_checks() == 1
    with pytest.raises(RuntimeError, match="compiled graph run earlier.*x must be positive"):
        out.cpu()
