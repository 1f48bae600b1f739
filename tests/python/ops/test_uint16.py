"""uint16 on ``tpu`` as far as PyTorch's CPU kernels support it (storage, views as another
dtype, copies and casts), against the CPU."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")


def test_round_trip_and_dtype_views() -> None:
    x = torch.tensor([0, 1, 255, 256, 65535], dtype=torch.uint16)
    t = x.to("tpu")
    assert t.dtype == torch.uint16 and torch.equal(t.cpu(), x)
    f = torch.randn(6)
    assert torch.equal(f.to("tpu").view(torch.uint16).cpu(), f.view(torch.uint16))
    assert torch.equal(t.view(torch.int16).cpu(), x.view(torch.int16))


def test_casts_and_comparisons() -> None:
    x = torch.tensor([0, 7, 300, 65535], dtype=torch.uint16)
    t = x.to("tpu")
    assert torch.equal(t.to(torch.float32).cpu(), x.to(torch.float32))
    assert torch.equal(t.to(torch.int64).cpu(), x.to(torch.int64))
    f = torch.tensor([1.5, 70000.0, -1.0, 65535.0])
    assert torch.equal(f.to("tpu").to(torch.uint16).cpu(), f.to(torch.uint16))
    # PyTorch's CPU kernels stop there (no gt, flip, add for uint16), so nothing more is
    # compared here.


@pytest.mark.parametrize("dtype,scalars", [
    (torch.uint16, [65537, -1, 2**40 + 3]),
    (torch.uint32, [2**33 + 1, -2**40, -1]),
    (torch.uint64, [-1, 2**64 - 1]),
])
def test_comparisons_with_numbers_past_the_dtype_wrap_as_the_cpu(dtype, scalars) -> None:
    # A number out of the dtype's range wraps (65537 as uint16 is 1), as on the CPU and for
    # uint8; uint16/32/64 refused it ("cannot be converted ... without overflow").
    x = torch.tensor([0, 1, 2, 3], dtype=dtype)
    for s in scalars:
        for op in (torch.eq, torch.ne):
            assert torch.equal(op(x.to("tpu"), s).cpu(), op(x, s)), (dtype, s, op)
