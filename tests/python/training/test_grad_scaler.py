"""torch.amp.GradScaler on tpu: its two ops lowered, and a scaled training loop against the CPU.

GradScaler calls ``_amp_foreach_non_finite_check_and_unscale_`` (unscale every gradient, flag
infs/NaNs in ``found_inf``) and ``_amp_update_scale_`` (back off or grow the scale, which also
writes ``growth_tracker``). Every test forbids CPU fallbacks.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from _compare import EXACT, assert_close, fallbacks, make, new_fallbacks

import torchtpu  # noqa: F401


def _no_fallback(before: dict[str, int]) -> None:
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"


@pytest.mark.parametrize("poison", [None, float("inf"), float("-inf"), float("nan")])
def test_non_finite_check_and_unscale(poison: float | None) -> None:
    grads = [make((3, 4), torch.float32), make((5,), torch.bfloat16), make((2, 2), torch.float16),
             make((), torch.float32)]
    if poison is not None:
        grads[1][2] = poison
    tpu_grads = [g.to("tpu") for g in grads]
    found, inv = torch.zeros(()), torch.full((), 1 / 1024)
    tpu_found, tpu_inv = found.to("tpu"), inv.to("tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    before = fallbacks()
    torch._amp_foreach_non_finite_check_and_unscale_(tpu_grads, tpu_found, tpu_inv)
    _no_fallback(before)
    assert_close(tpu_found, found, dtype_tols={torch.float32: EXACT})
    assert tpu_found.item() == (0.0 if poison is None else 1.0)
    for k, (a, e) in enumerate(zip(tpu_grads, grads)):
        assert_close(a, e, dtype_tols={e.dtype: EXACT}, what=f"grad {k}")


def test_found_inf_is_never_cleared() -> None:
    found = torch.ones((1,), device="tpu")
    grads = [torch.ones(3, device="tpu")]
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.full((1,), 0.5,
                                                                              device="tpu"))
    assert found.item() == 1.0
    assert grads[0].cpu().tolist() == [0.5, 0.5, 0.5]


def test_update_scale_sequence() -> None:
    # growth_interval 2: grow after two clean steps, back off (and reset) on a found inf; a
    # growth that would overflow float32 keeps the scale.
    found_infs = [0.0, 0.0, 1.0, 0.0, 3.0, 0.0, 0.0]
    for start in [65536.0, 3.0e38]:
        scale, tracker = torch.full((), start), torch.zeros((), dtype=torch.int32)
        tpu_scale, tpu_tracker = scale.to("tpu"), tracker.to("tpu")
        before = fallbacks()
        for f in found_infs:
            out = torch._amp_update_scale_(scale, tracker, torch.full((), f), 2.0, 0.5, 2)
            tpu_out = torch._amp_update_scale_(tpu_scale, tpu_tracker,
                                               torch.full((), f, device="tpu"), 2.0, 0.5, 2)
            assert tpu_out is tpu_scale and out is scale
            assert tpu_scale.item() == scale.item(), f"scale after found_inf={f}"
            assert tpu_tracker.item() == tracker.item(), f"growth_tracker after found_inf={f}"
        _no_fallback(before)


def _train(device: str, steps: int, inf_step: int) -> list[tuple[float, int, list[torch.Tensor]]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=2)
    gen = torch.Generator().manual_seed(1)
    history = []
    for step in range(steps):
        x = torch.randn(4, 6, generator=gen).to(device)
        y = torch.randn(4, 2, generator=gen).to(device)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if step == inf_step:
            with torch.no_grad():
                model[0].weight.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        params = [p.detach().cpu().clone() for p in model.parameters()]
        history.append((scaler.get_scale(), int(scaler._growth_tracker.item()), params))
    return history


def test_grad_scaler_training_matches_cpu() -> None:
    steps, inf_step = 6, 3
    expected = _train("cpu", steps, inf_step)
    before = fallbacks()
    actual = _train("tpu", steps, inf_step)
    _no_fallback(before)
    for step, ((s_tpu, g_tpu, p_tpu), (s_cpu, g_cpu, p_cpu)) in enumerate(zip(actual, expected)):
        assert s_tpu == s_cpu, f"step {step}: scale {s_tpu} (cpu {s_cpu})"
        assert g_tpu == g_cpu, f"step {step}: growth tracker {g_tpu} (cpu {g_cpu})"
        assert_close(p_tpu, p_cpu, check_device=False, what=f"params after step {step}")
    scales = [s for s, _, _ in actual]
    # Two clean steps double the scale; the inf step halves it and leaves the weights alone.
    assert scales[:3] == [1024.0, 2048.0, 2048.0]
    assert scales[inf_step] == scales[inf_step - 1] / 2
    for a, b in zip(actual[inf_step][2], actual[inf_step - 1][2]):
        assert torch.equal(a, b), "the step with an inf gradient must be skipped"


def test_update_scale_bad_arguments_raise_like_cpu() -> None:
    scale, found = torch.ones(()), torch.zeros(())
    for tracker in [torch.zeros(()), torch.zeros((2,), dtype=torch.int32)]:
        with pytest.raises(RuntimeError, match="growth_tracker must be") as cpu:
            torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
        with pytest.raises(RuntimeError, match="growth_tracker must be") as tpu:
            torch._amp_update_scale_(scale.to("tpu"), tracker.to("tpu"), found.to("tpu"), 2.0,
                                     0.5, 2)
        assert str(tpu.value).split("\n")[0] == str(cpu.value).split("\n")[0]
