"""torch.multinomial on tpu: frequencies follow the probabilities (with replacement),
draws without replacement are distinct, seeds reproduce, and bad input raises as on the CPU."""

from __future__ import annotations

import pytest
import torch
from _compare import fallbacks, new_fallbacks

import torchtpu

TPU = "tpu"


def frequencies(samples: torch.Tensor, num_categories: int) -> torch.Tensor:
    counts = torch.bincount(samples.reshape(-1).cpu(), minlength=num_categories)
    return counts.double() / samples.numel()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_with_replacement_frequencies_follow_probabilities(dtype: torch.dtype) -> None:
    weights = torch.tensor([[1.0, 2.0, 0.0, 7.0], [5.0, 0.0, 5.0, 0.0]], dtype=dtype)
    before = fallbacks()
    samples = torch.multinomial(weights.to(TPU), 8000, replacement=True)
    assert new_fallbacks(before) == {}
    assert samples.device.type == TPU and samples.dtype == torch.int64
    assert samples.shape == (2, 8000)
    for row in range(2):
        p = weights[row].double() / weights[row].double().sum()
        freq = frequencies(samples[row], 4)
        # Standard error of a frequency <= 0.0056 over 8000 draws; allow ~4.5x.
        torch.testing.assert_close(freq, p, rtol=0, atol=0.025)
        assert freq[p == 0].sum() == 0, "a zero-probability category was drawn"


def test_with_replacement_scales_with_samples_plus_categories() -> None:
    # A race per sample over every category took samples x categories keys: 50,000
    # categories x 43,000 samples ran out of memory (25.8 GB); inverting the running sum
    # takes a binary search per sample. Zero probabilities at both ends are never drawn.
    cats, n = 50_000, 43_000
    weights = torch.rand(cats) + 0.5
    weights[:3] = 0
    weights[-3:] = 0
    samples = torch.multinomial(weights.to(TPU), n, replacement=True).cpu()
    assert samples.shape == (n,)
    assert int(samples.min()) >= 3 and int(samples.max()) < cats - 3
    # The draws' mean index against the distribution's (standard error ~ 72).
    p = weights.double() / weights.double().sum()
    expected = float((p * torch.arange(cats, dtype=torch.float64)).sum())
    assert abs(float(samples.double().mean()) - expected) < 500


def test_without_replacement_draws_distinct_categories() -> None:
    weights = torch.rand(6, 10) + 0.01
    weights[3, 4:] = 0  # row 3 has exactly four categories left
    samples = torch.multinomial(weights.to(TPU), 4).cpu()
    for row in samples:
        assert len(set(row.tolist())) == 4
    assert sorted(samples[3].tolist()) == [0, 1, 2, 3]
    one_d = torch.multinomial(torch.ones(5, device=TPU), 5).cpu()
    assert sorted(one_d.tolist()) == [0, 1, 2, 3, 4]


def test_without_replacement_first_draw_follows_probabilities() -> None:
    p = torch.tensor([0.1, 0.6, 0.3])
    samples = torch.multinomial(p.expand(6000, 3).contiguous().to(TPU), 2)
    first = frequencies(samples[:, 0], 3)
    torch.testing.assert_close(first, p.double(), rtol=0, atol=0.03)
    assert bool((samples[:, 0] != samples[:, 1]).all())


def test_seed_reproduces_and_steps_advance() -> None:
    p = torch.rand(3, 7, device=TPU)
    torchtpu.manual_seed(5)
    a = torch.multinomial(p, 20, replacement=True).cpu()
    b = torch.multinomial(p, 20, replacement=True).cpu()
    torchtpu.manual_seed(5)
    c = torch.multinomial(p, 20, replacement=True).cpu()
    assert torch.equal(a, c)
    assert not torch.equal(a, b)


@pytest.mark.parametrize("probs, kwargs", [
    ([0.5, -0.1, 0.6], {"num_samples": 1}),
    ([0.5, float("inf")], {"num_samples": 1}),
    ([0.5, float("nan")], {"num_samples": 1}),
    ([[0.0, 0.0], [1.0, 1.0]], {"num_samples": 1}),
    ([0.2, 0.8], {"num_samples": 3}),  # more samples than categories without replacement
    ([0.2, 0.8], {"num_samples": 0}),
    ([[[0.2, 0.8]]], {"num_samples": 1}),
])
def test_invalid_input_raises_like_cpu(probs: list, kwargs: dict) -> None:
    cpu = torch.tensor(probs)
    with pytest.raises(RuntimeError) as expected:
        torch.multinomial(cpu, **kwargs)
    with pytest.raises(RuntimeError) as actual:
        torch.multinomial(cpu.to(TPU), **kwargs)
        torchtpu.synchronize()  # fused eager reports a failed data check at the next flush
    assert str(actual.value).splitlines()[0] == str(expected.value).splitlines()[0]


def test_out_variant_and_integer_input_error() -> None:
    out = torch.empty(4, dtype=torch.int64, device=TPU)
    torch.multinomial(torch.tensor([0.0, 1.0], device=TPU), 4, replacement=True, out=out)
    assert out.cpu().tolist() == [1, 1, 1, 1]
    with pytest.raises(RuntimeError):
        torch.multinomial(torch.tensor([1, 2], device=TPU), 1)
