"""isin (generate() checks end-of-sequence and padding ids with it on every step) and
isposinf/isneginf (PyTorch's math attention tests masks for -inf) vs the CPU."""

from __future__ import annotations

import pytest
import torch
from _compare import assert_same, make


@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_isin_tensor_tensor(dtype, invert) -> None:
    elements = make((3, 5), dtype, low=0, high=6)
    test = make((2, 2), dtype, low=0, high=6)
    assert_same(lambda e, t: torch.isin(e, t, invert=invert), elements, test)


def test_isin_promotes_mixed_dtypes() -> None:
    elements = torch.tensor([1.0, 2.5, 3.0])
    assert_same(lambda e, t: torch.isin(e, t), elements, torch.tensor([3, 1]))


def test_isin_empty_test_elements() -> None:
    assert_same(lambda e, t: torch.isin(e, t), torch.arange(4), torch.tensor([], dtype=torch.int64))


def test_isin_with_a_scalar() -> None:
    ids = torch.tensor([[5, 2, 7], [2, 2, 0]])
    assert_same(lambda e: torch.isin(e, 2), ids)
    assert_same(lambda t: torch.isin(2, t), ids)


@pytest.mark.parametrize("fn", [torch.isposinf, torch.isneginf])
def test_signed_isinf(fn) -> None:
    x = torch.tensor([0.0, float("inf"), -float("inf"), float("nan"), -3.0,
                      torch.finfo(torch.float32).min])
    assert_same(fn, x)
    assert_same(fn, x.to(torch.bfloat16))
    assert_same(fn, torch.tensor([1, -2, 3]))
