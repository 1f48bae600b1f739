"""End-to-end training: the same model, data and initial weights on CPU and tpu give the same
loss curve within stated tolerances (SGD with momentum and AdamW, 30 steps)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchtpu

TPU = "tpu"
NUM_STEPS = 30


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 32),
                         nn.ReLU(), nn.Dropout(0.0), nn.Linear(32, 4))


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 4))


def data(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 16, generator=g) if kind == "mlp" else torch.randn(16, 1, 8, 8, generator=g)
    y = torch.randint(0, 4, (x.shape[0],), generator=g)
    return x, y


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    "adamw": lambda p: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.01),
}


def train(model: nn.Module, make_opt: Callable, x: torch.Tensor, y: torch.Tensor,
          device: str) -> tuple[list[float], nn.Module]:
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = make_opt(model.parameters())
    losses = []
    for _ in range(NUM_STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


# f32: per-step rounding differences compound over 30 steps; 1e-4 relative on the loss.
LOSS_RTOL = 1e-4
PARAM_ATOL = 1e-4


@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_matches_cpu(kind: str, opt_name: str) -> None:
    torch.manual_seed(0)
    model = mlp() if kind == "mlp" else cnn()
    x, y = data(kind)
    cpu_losses, cpu_model = train(copy.deepcopy(model), OPTIMIZERS[opt_name], x, y, "cpu")
    tpu_losses, tpu_model = train(copy.deepcopy(model), OPTIMIZERS[opt_name], x, y, TPU)
    assert cpu_losses[-1] < cpu_losses[0], "test is wrong: the CPU run did not learn"
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses),
                               rtol=LOSS_RTOL, atol=1e-5)
    for (name, p_cpu), p_tpu in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert p_tpu.device.type == TPU
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-3,
                                   atol=PARAM_ATOL, msg=lambda m, n=name: f"{n}: {m}")


def test_bf16_training_learns() -> None:
    # bf16 cannot match CPU to 1e-4; it must still train: the loss falls by a clear margin and
    # stays within 5% of the f32 CPU curve at the end.
    torch.manual_seed(0)
    model = mlp()
    x, y = data("mlp")
    cpu_losses, _ = train(copy.deepcopy(model), OPTIMIZERS["adamw"], x, y, "cpu")
    tpu_model = copy.deepcopy(model).to(torch.bfloat16)
    bf_losses, _ = train(tpu_model, OPTIMIZERS["adamw"], x.to(torch.bfloat16), y, TPU)
    assert bf_losses[-1] < 0.8 * bf_losses[0]
    assert abs(bf_losses[-1] - cpu_losses[-1]) < 0.05 * cpu_losses[0]


def test_training_with_dropout_is_reproducible() -> None:
    def run() -> list[float]:
        torch.manual_seed(0)
        torchtpu.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 4))
        return train(model, OPTIMIZERS["sgd_momentum"], *data("mlp"), TPU)[0]

    first, second = run(), run()
    assert first == second
    assert first[-1] < first[0]
