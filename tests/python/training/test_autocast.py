"""torch.autocast("tpu", dtype=bfloat16 / float16): matmul-family ops run in the low
precision dtype, float32-sensitive ops (softmax, norms, losses) in float32, as PyTorch's
accelerator autocast lists say; results match the CPU's autocast within 16-bit tolerance,
a training step works, and nothing falls back."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from _compare import fallbacks, new_fallbacks
from torch import nn

TPU = "tpu"
TOLS = {torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 2e-3)}


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(10, 16, generator=g), torch.randint(0, 8, (10,), generator=g)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mlp_under_autocast_matches_cpu_autocast(dtype: torch.dtype) -> None:
    net, (x, y) = mlp(), batch()
    with torch.autocast("cpu", dtype=dtype):
        cpu_logits = net(x)
        cpu_loss = F.cross_entropy(cpu_logits, y)
    tpu_net, before = copy.deepcopy(net).to(TPU), fallbacks()
    with torch.autocast(TPU, dtype=dtype):
        assert torch.is_autocast_enabled(TPU)
        logits = tpu_net(x.to(TPU))
        loss = F.cross_entropy(logits, y.to(TPU))
    assert new_fallbacks(before) == {}
    assert logits.dtype == cpu_logits.dtype == dtype
    assert loss.dtype == cpu_loss.dtype == torch.float32
    rtol, atol = TOLS[dtype]
    torch.testing.assert_close(logits.float().cpu(), cpu_logits.float(), rtol=rtol, atol=atol)
    torch.testing.assert_close(loss.cpu(), cpu_loss, rtol=rtol, atol=atol)


def test_softmax_and_layer_norm_run_in_float32() -> None:
    """The accelerator lists (CUDA's, which tpu shares) keep softmax and layer_norm in
    float32; the CPU's list leaves softmax in the input dtype, so the reference is the
    float32 op on the bfloat16 matmul result."""
    x, w = torch.randn(6, 16), torch.randn(16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h_cpu = x @ w
    with torch.autocast(TPU, dtype=torch.bfloat16):
        h = x.to(TPU) @ w.to(TPU)
        probs = torch.softmax(h, dim=-1)
        normed = F.layer_norm(h, (16,))
        kept = h + 1  # ops without a rule keep their input dtype
    assert h.dtype == torch.bfloat16 and kept.dtype == torch.bfloat16
    assert probs.dtype == torch.float32 and normed.dtype == torch.float32
    torch.testing.assert_close(h.float().cpu(), h_cpu.float(), rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(probs.cpu(), torch.softmax(h_cpu.float(), -1), rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(normed.cpu(), F.layer_norm(h_cpu.float(), (16,)), rtol=2e-2,
                               atol=2e-2)


def test_autocast_disabled_inside_and_outside() -> None:
    x = torch.randn(4, 4, device=TPU)
    with torch.autocast(TPU, dtype=torch.bfloat16):
        with torch.autocast(TPU, enabled=False):
            assert (x @ x).dtype == torch.float32
        assert (x @ x).dtype == torch.bfloat16
    assert (x @ x).dtype == torch.float32


def test_training_step_under_autocast_matches_cpu() -> None:
    net, (x, y) = mlp(), batch()
    results = {}
    for device in ("cpu", TPU):
        model = copy.deepcopy(net).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            assert all(p.grad.dtype == torch.float32 for p in model.parameters())
            opt.step()
        results[device] = [p.detach().cpu() for p in model.parameters()]
    for p_tpu, p_cpu in zip(results[TPU], results["cpu"]):
        assert p_tpu.dtype == torch.float32
        torch.testing.assert_close(p_tpu, p_cpu, rtol=2e-2, atol=5e-3)


def test_binary_cross_entropy_is_refused_as_on_cuda() -> None:
    p = torch.rand(4, device=TPU)
    with torch.autocast(TPU, dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, p)
