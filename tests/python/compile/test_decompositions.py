"""Ops whose PyTorch decomposition computes other values than PyTorch's kernel, compiled:
torchtpu/dynamo/decompositions.py puts its own in their place. Values and gradients are
compared with the CPU's eager kernel, static and dynamic, and in fused eager mode (whose
retrace of a recorded graph decomposes as compiled graphs do)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtpu

torch._dynamo.config.cache_size_limit = 64
TPU = "tpu"

# A row lists its labels up to its first -1; what follows is ignored (PyTorch's own
# decomposition counted it in the margins).
MULTILABEL_CASES = [
    ((2, 4), [[1, 1, -1, 3], [-1, 2, 2, 0]]),
    ((3, 5), [[4, 0, -1, -1, -1], [0, 1, 2, 3, 4], [2, -1, 2, 1, 0]]),
    ((5,), [3, 0, -1, 2, 2]),
    ((), 0),
    ((4, 1), [[0], [-1], [0], [0]]),
]


def _loss_and_grad(x: torch.Tensor, target: torch.Tensor, reduction: str):
    x = x.detach().requires_grad_()
    loss = F.multilabel_margin_loss(x, target, reduction=reduction)
    loss.sum().backward()
    return loss.detach(), x.grad


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_compiled_matches_the_cpu(reduction: str, dynamic: bool) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(_loss_and_grad, backend="tpu", dynamic=dynamic)
    torch.manual_seed(0)
    for shape, target in MULTILABEL_CASES:
        x, t = torch.randn(shape), torch.tensor(target)
        loss, grad = _loss_and_grad(x, t, reduction)
        got_loss, got_grad = compiled(x.to(TPU), t.to(TPU), reduction)
        torch.testing.assert_close(got_loss.cpu(), loss, msg=f"loss at {shape}")
        torch.testing.assert_close(got_grad.cpu(), grad, msg=f"grad at {shape}")


def test_multilabel_margin_loss_in_fused_eager_at_two_sizes() -> None:
    # The second size makes the recorded graph's class symbolic and retraces it.
    previous = torchtpu.eager_mode()
    torchtpu.set_eager_mode("fused")
    try:
        torch.manual_seed(0)
        for shape, target in MULTILABEL_CASES[:2] * 2:
            x, t = torch.randn(shape), torch.tensor(target)
            expected = F.multilabel_margin_loss(x, t, reduction="none")
            got = F.multilabel_margin_loss(x.to(TPU), t.to(TPU), reduction="none")
            torch.testing.assert_close(got.cpu(), expected)
    finally:
        torchtpu.set_eager_mode(previous)
