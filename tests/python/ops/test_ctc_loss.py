"""F.ctc_loss on tpu (aten::_ctc_loss and its backward, lowered): loss and gradient of the
log-probabilities against PyTorch's CPU kernels, with padded and concatenated targets,
empty targets, impossible alignments (an infinite loss, zeroed by zero_infinity), every
reduction, and the CPU's argument errors; nothing runs on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_close, assert_raises_like_cpu, fallbacks, new_fallbacks

TPU = "tpu"
T, N, C = 12, 4, 6


def _log_probs(dtype: torch.dtype, shape: tuple[int, ...] = (T, N, C)) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(*shape, dtype=dtype).log_softmax(-1)


def _loss_and_grad(lp: torch.Tensor, *args, fn=F.ctc_loss, **kwargs
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """fn(lp, *args, **kwargs) and the gradient of lp for a weighted sum of the losses."""
    lp = lp.detach().requires_grad_(True)
    loss = fn(lp, *args, **kwargs)
    weights = torch.linspace(0.5, 1.5, loss.numel(), dtype=loss.dtype).to(loss.device)
    (loss.reshape(-1) * weights).sum().backward()
    return loss.detach(), lp.grad


def _same_on_tpu(lp: torch.Tensor, targets: torch.Tensor, input_lengths, target_lengths,
                 **kwargs) -> None:
    expected = _loss_and_grad(lp, targets, input_lengths, target_lengths, **kwargs)
    on_tpu = (lambda v: v.to(TPU)) if isinstance(input_lengths, torch.Tensor) else (lambda v: v)
    before = fallbacks()
    actual = _loss_and_grad(lp.to(TPU), targets.to(TPU), on_tpu(input_lengths),
                            on_tpu(target_lengths), **kwargs)
    assert not new_fallbacks(before), new_fallbacks(before)
    tol = (1e-5, 1e-5) if lp.dtype == torch.float32 else (1e-9, 1e-9)
    assert_close(actual, expected, dtype_tols={lp.dtype: tol})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_padded_targets(dtype: torch.dtype, reduction: str) -> None:
    # Repeated labels (a blank must separate them), an empty target, a sample whose input
    # is shorter than T, and one whose target cannot fit its input (loss inf).
    targets = torch.tensor([[1, 2, 2, 3], [4, 4, 4, 0], [0, 0, 0, 0], [5, 1, 3, 2]])
    _same_on_tpu(_log_probs(dtype), targets, [12, 9, 7, 3], [4, 2, 0, 4], blank=0,
                 reduction=reduction)


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_concatenated_targets_and_tensor_lengths(zero_infinity: bool) -> None:
    # 1-D targets (each sample's labels after the previous ones), int32, lengths as tensors
    # (read to the host by PyTorch's composite, as on the CPU), a blank that is not 0.
    target_lengths = torch.tensor([3, 0, 5, 6])
    targets = torch.randint(0, C - 1, (int(target_lengths.sum()),), dtype=torch.int32)
    _same_on_tpu(_log_probs(torch.float32), targets, torch.tensor([12, 4, 10, 5]),
                 target_lengths, blank=C - 1, reduction="none", zero_infinity=zero_infinity)


def test_unbatched_input() -> None:
    _same_on_tpu(_log_probs(torch.float32, (T, C)), torch.tensor([1, 3, 3]), [T], [3],
                 reduction="sum")


def test_long_sequence_stays_finite() -> None:
    # 200 steps: alpha underflows in probability space long before; in log space it must not.
    lp = _log_probs(torch.float32, (200, 2, 30))
    targets = torch.randint(1, 30, (2, 40))
    _same_on_tpu(lp, targets, [200, 150], [40, 25])


@pytest.mark.parametrize("case", ["input_too_long", "target_too_long", "blank", "negative"])
def test_argument_errors_like_cpu(case: str) -> None:
    lp, targets = _log_probs(torch.float32), torch.ones(N, 3, dtype=torch.long)
    il, tl, blank = [T] * N, [3] * N, 0
    if case == "input_too_long":
        il = [T + 1] * N
    elif case == "target_too_long":
        tl = [4] * N
    elif case == "blank":
        blank = C
    else:
        tl = [3, -1, 3, 3]
    assert_raises_like_cpu(lambda a, b: F.ctc_loss(a, b, il, tl, blank=blank), lp, targets)


def test_compiled_loss_and_gradient() -> None:
    # In a torch.compile graph the int-list lengths are structure of the graph, as in eager.
    targets = torch.randint(1, C, (N, 4))

    def loss_fn(lp: torch.Tensor, tg: torch.Tensor) -> torch.Tensor:
        return F.ctc_loss(lp, tg, [12, 9, 7, 10], [4, 2, 0, 4], reduction="sum")

    torch._dynamo.reset()
    before = fallbacks()
    lp = _log_probs(torch.float32)
    actual = _loss_and_grad(lp.to(TPU), targets.to(TPU), fn=torch.compile(loss_fn, backend="tpu"))
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, _loss_and_grad(lp, targets, fn=loss_fn))
