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


def _grid_and_grad(theta: torch.Tensor, size: tuple, align_corners: bool):
    theta = theta.detach().requires_grad_()
    grid = F.affine_grid(theta, size, align_corners=align_corners)
    (grid * torch.arange(grid.numel(), device=grid.device).reshape(grid.shape).sin()).sum().backward()
    return grid.detach(), theta.grad


# Size-1 dims: PyTorch's decomposition (and the C++ composite of the backward) made their
# coordinate with torch.tensor(0), which aot_autograd refused in a functional graph.
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("size", [(2, 3, 1, 7), (2, 3, 5, 1), (3, 1, 4, 6), (2, 1, 1, 3, 1),
                                  (2, 1, 2, 3, 4)], ids=str)
def test_affine_grid_compiled_matches_the_cpu(size: tuple, dynamic: bool) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(_grid_and_grad, backend="tpu", dynamic=dynamic)
    torch.manual_seed(0)
    k = len(size) - 2
    theta = torch.randn(size[0], k, k + 1)
    for align_corners in (False, True):
        grid, grad = _grid_and_grad(theta, size, align_corners)
        got_grid, got_grad = compiled(theta.to(TPU), size, align_corners)
        torch.testing.assert_close(got_grid.cpu(), grid)
        torch.testing.assert_close(got_grad.cpu(), grad, rtol=1e-5, atol=1e-4)
