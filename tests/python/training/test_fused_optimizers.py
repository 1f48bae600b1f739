"""torch.optim's fused Adam/AdamW, SGD and Adagrad on tpu (``fused=True``, TorchTitan's
default for AdamW): the ``_fused_adam_`` / ``_fused_adamw_`` ops against PyTorch's CPU fused
kernels, ``_fused_sgd_`` against its unfused SGD and ``_fused_adagrad_`` against its fused
Adagrad, one program for the whole parameter list, a learning-rate schedule without
recompiles, GradScaler's grad_scale/found_inf, and no CPU fallback."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from _compare import eager_mode, fallbacks, new_fallbacks
from torch import nn

import torchtpu

TPU = "tpu"
# Per-element arithmetic as PyTorch's CPU kernel orders it; the two may differ by a fused
# multiply-add (ATen's vectorized lerp uses one) and XLA's pow in the bias corrections.
TOLS = {torch.float32: dict(rtol=2e-6, atol=1e-7), torch.bfloat16: dict(rtol=8e-3, atol=1e-5),
        torch.float64: dict(rtol=1e-12, atol=1e-14)}


def state(dtype: torch.dtype, amsgrad: bool, seed: int = 0) -> dict[str, list[torch.Tensor]]:
    """CPU lists for a fused Adam call: items of several shapes, one a 0-dim parameter."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 3), (7,), (), (2, 1, 4)]

    def rand(scale: float = 1.0, positive: bool = False) -> list[torch.Tensor]:
        out = [torch.randn(s, generator=g, dtype=torch.float64) * scale for s in shapes]
        return [(t.abs() if positive else t).to(dtype) for t in out]

    return {
        "params": rand(),
        "grads": rand(0.5),
        "exp_avgs": rand(0.1),
        "exp_avg_sqs": rand(0.01, positive=True),
        "max_exp_avg_sqs": rand(0.02, positive=True) if amsgrad else [],
        # The optimizer keeps float32 steps on the parameters' device (already incremented).
        "state_steps": [torch.tensor(float(k + 1)) for k in range(len(shapes))],
    }


def on(device: str, lists: dict[str, list[torch.Tensor]]) -> dict[str, list[torch.Tensor]]:
    return {k: [t.to(device) for t in v] for k, v in lists.items()}


def call(op, lists, **kw) -> None:
    op(lists["params"], lists["grads"], lists["exp_avgs"], lists["exp_avg_sqs"],
       lists["max_exp_avg_sqs"], lists["state_steps"], **kw)


def assert_lists_close(actual, expected, dtype: torch.dtype) -> None:
    for name in expected:
        for i, (a, e) in enumerate(zip(actual[name], expected[name], strict=True)):
            assert a.device.type == TPU and a.dtype == e.dtype and a.shape == e.shape
            torch.testing.assert_close(a.cpu(), e, **TOLS[dtype],
                                       msg=lambda m, n=name, k=i: f"{n}[{k}]: {m}")


CASES = {
    "plain": dict(),
    "weight_decay": dict(weight_decay=0.1),
    "amsgrad": dict(amsgrad=True, weight_decay=0.05),
    "maximize": dict(maximize=True, weight_decay=0.05),
    "beta1_small": dict(beta1=0.3),  # lerp weight >= 0.5: PyTorch's lerp from the other end
    "grad_scale": dict(grad_scale=True),
    "found_inf": dict(grad_scale=True, found_inf=1.0),
    "found_inf_zero": dict(grad_scale=True, found_inf=0.0),
    "tensor_lr": dict(tensor_lr="tpu"),
    "tensor_lr_cpu": dict(tensor_lr="cpu"),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64],
                         ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("adamw", [False, True], ids=["adam", "adamw"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_adam_matches_cpu_kernel(case: str, adamw: bool, dtype: torch.dtype) -> None:
    spec = CASES[case]
    amsgrad = spec.get("amsgrad", False)
    op = torch._fused_adamw_ if adamw else torch._fused_adam_
    kw = dict(lr=2e-2, beta1=spec.get("beta1", 0.9), beta2=0.999,
              weight_decay=spec.get("weight_decay", 0.0), eps=1e-8, amsgrad=amsgrad,
              maximize=spec.get("maximize", False))
    cpu = state(dtype, amsgrad)
    tpu = on(TPU, cpu)

    def extra(device: str) -> dict:
        out = {}
        if spec.get("grad_scale"):
            out["grad_scale"] = torch.tensor(4.0, device=device)
        if "found_inf" in spec:
            out["found_inf"] = torch.tensor(spec["found_inf"], device=device)
        if "tensor_lr" in spec:
            where = spec["tensor_lr"] if device == TPU else "cpu"
            out["lr"] = torch.tensor(kw["lr"], device=where)
        return out

    before_cpu = copy.deepcopy(cpu)
    call(op, cpu, **{**kw, **extra("cpu")})
    before = fallbacks()
    call(op, tpu, **{**kw, **extra(TPU)})
    assert new_fallbacks(before) == {}
    assert_lists_close(tpu, cpu, dtype)
    if spec.get("found_inf") == 1.0:  # a skipped step changes nothing, grads included
        assert_lists_close(tpu, before_cpu, dtype)


def test_fused_adam_writes_through_views() -> None:
    """A parameter that is a strided view: the update reaches its base and nothing else.
    (PyTorch's CPU kernel assumes contiguous parameters, so the reference is run on a
    contiguous copy.)"""
    base = torch.randn(5, 6)
    cpu = state(torch.float32, amsgrad=False, seed=1)
    cpu["params"][0] = base[:, 1:4].clone()
    tpu = on(TPU, cpu)
    tpu_base = base.to(TPU)
    tpu["params"][0] = tpu_base[:, 1:4]
    kw = dict(lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=False,
              maximize=False)
    call(torch._fused_adamw_, cpu, **kw)
    call(torch._fused_adamw_, tpu, **kw)
    expected = base.clone()
    expected[:, 1:4] = cpu["params"][0]
    torch.testing.assert_close(tpu_base.cpu(), expected, **TOLS[torch.float32])


def test_fused_adam_rejects_mismatched_lists_like_the_cpu() -> None:
    lists = on(TPU, state(torch.float32, amsgrad=False))
    lists["grads"] = lists["grads"][:-1]
    with pytest.raises(RuntimeError):
        call(torch._fused_adamw_, lists, lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0,
             eps=1e-8, amsgrad=False, maximize=False)


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.LayerNorm(32),
                         nn.Linear(32, 4))


def step(loss: torch.Tensor, opt: torch.optim.Optimizer,
         grad_scaler: torch.amp.GradScaler | None) -> None:
    """Backward and the optimizer's step, through the GradScaler when given."""
    if grad_scaler is None:
        loss.backward()
        opt.step()
    else:
        grad_scaler.scale(loss).backward()
        grad_scaler.step(opt)
        grad_scaler.update()


def train(net: nn.Module, device: str, steps: int, scaler: bool = False) -> list[float]:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 8, generator=g).to(device), torch.randint(0, 4, (16,), generator=g)
    y = y.to(device)
    net.to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.1, fused=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=steps)
    grad_scaler = torch.amp.GradScaler(device, init_scale=2.0**10) if scaler else None
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        step(loss, opt, grad_scaler)
        sched.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("scaler", [False, True], ids=["plain", "grad_scaler"])
def test_fused_adamw_trains_like_cpu_one_program_per_step(scaler: bool) -> None:
    steps = 5
    net = model()
    cpu_losses = train(cpu_net := copy.deepcopy(net), "cpu", steps, scaler)
    before = fallbacks()
    tpu_net = copy.deepcopy(net)
    train(tpu_net, TPU, 1, scaler)  # compiles every program of a step
    compiled = torchtpu.debug.metrics()["num_op_signatures_compiled"]
    tpu_net = copy.deepcopy(net)
    tpu_losses = train(tpu_net, TPU, steps, scaler)
    # The learning rate changed every step (OneCycleLR): it is data, not a new program.
    assert torchtpu.debug.metrics()["num_op_signatures_compiled"] == compiled
    assert new_fallbacks(before) == {}
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for (name, p_cpu), p_tpu in zip(cpu_net.named_parameters(), tpu_net.parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=name: f"{n}: {m}")


def test_fused_step_is_one_program_call_whatever_the_parameter_count() -> None:
    def calls(n: int) -> int:
        params = [torch.randn(4, 5, device=TPU, requires_grad=True) for _ in range(n)]
        opt = torch.optim.Adam(params, lr=1e-3, fused=True)
        for p in params:
            p.grad = torch.randn(4, 5, device=TPU)
        opt.step()  # warms the op cache (and creates the state)
        before = torchtpu.debug.metrics()["num_eager_ops"]
        opt.step()
        return torchtpu.debug.metrics()["num_eager_ops"] - before

    # _foreach_add_ on the steps, then _fused_adam_ (op by op: fused mode defers them).
    with eager_mode("op"):
        assert calls(2) == calls(12) == 2


def test_scaler_skips_a_step_with_inf_gradients() -> None:
    net = model().to(TPU)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, fused=True)
    scaler = torch.amp.GradScaler(TPU, init_scale=2.0**8)
    x = torch.randn(4, 8, device=TPU)
    scaler.scale(net(x).sum()).backward()
    before = [p.detach().cpu().clone() for p in net.parameters()]
    next(net.parameters()).grad[0, 0] = float("inf")
    scaler.step(opt)
    scaler.update()
    for p, b in zip(net.parameters(), before):
        torch.testing.assert_close(p.detach().cpu(), b, rtol=0, atol=0)
    assert scaler.get_scale() == 2.0**7


SGD_CASES = {
    "plain": dict(),
    "momentum": dict(momentum=0.9),
    "nesterov+decay": dict(momentum=0.9, nesterov=True, weight_decay=0.01),
    "dampening+maximize": dict(momentum=0.5, dampening=0.3, maximize=True),
}


def train_steps(net: nn.Module, device: str, opt: torch.optim.Optimizer,
                scaler: bool) -> list[float]:
    """Four steps of `opt` on `net` (already on `device`) over fixed batches; the losses."""
    grad_scaler = torch.amp.GradScaler(device, init_scale=2.0**10) if scaler else None
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(4):
        x, y = torch.randn(6, 8, generator=g), torch.randint(0, 3, (6,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(net(x.to(device)), y.to(device))
        step(loss, opt, grad_scaler)
        losses.append(loss.item())
    return losses


def train_sgd(net: nn.Module, device: str, fused: bool, kw: dict, scaler: bool,
              lr: float | torch.Tensor = 0.1) -> tuple[list[float], list]:
    net = net.to(device)
    opt = torch.optim.SGD(net.parameters(), lr=lr, fused=fused, **kw)
    losses = train_steps(net, device, opt, scaler)
    return losses, [opt.state[p].get("momentum_buffer") for p in net.parameters()]


@pytest.mark.parametrize("scaler", [False, True], ids=["plain", "grad_scaler"])
@pytest.mark.parametrize("case", list(SGD_CASES))
def test_fused_sgd_trains_like_cpu_sgd(case: str, scaler: bool) -> None:
    # _fused_sgd_ ran on the CPU (no lowering, no meta kernel). Compared with the CPU's
    # unfused SGD: its fused kernel corrupts float16 momentum buffers (a PyTorch bug).
    kw = SGD_CASES[case]
    net = model()
    cpu_net = copy.deepcopy(net)
    cpu_losses, cpu_bufs = train_sgd(cpu_net, "cpu", False, kw, scaler)
    before = fallbacks()
    tpu_net = copy.deepcopy(net)
    tpu_losses, tpu_bufs = train_sgd(tpu_net, TPU, True, kw, scaler)
    assert new_fallbacks(before) == {}
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for p_tpu, p_cpu in zip(tpu_net.parameters(), cpu_net.parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)
    for b_tpu, b_cpu in zip(tpu_bufs, cpu_bufs):
        assert (b_tpu is None) == (b_cpu is None)
        if b_cpu is not None:
            torch.testing.assert_close(b_tpu.cpu(), b_cpu, rtol=1e-5, atol=1e-6)


def test_fused_sgd_of_bfloat16_parameters_steps_in_float32() -> None:
    # The CPU's fused kernel computes 16-bit items in float32 and rounds once; so does the
    # lowering (the CPU's unfused SGD rounds every step, hence its own reference here).
    params = [torch.randn(5, 3), torch.randn(7)]
    grads = [torch.randn(5, 3), torch.randn(7)]
    bufs = [torch.randn(5, 3), torch.randn(7)]
    lists = [[t.bfloat16() for t in ts] for ts in (params, grads, bufs)]
    on_tpu = [[t.to(TPU) for t in ts] for ts in lists]
    kw = dict(weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.1, nesterov=True,
              maximize=False, is_first_step=False)
    torch._fused_sgd_(*on_tpu, **kw)
    for p, g, b, got_p, got_b in zip(*lists, on_tpu[0], on_tpu[2]):
        g32 = g.float() + 0.01 * p.float()
        b32 = 0.9 * b.float() + 0.9 * g32
        want_p = (p.float() - 0.1 * (g32 + 0.9 * b32)).bfloat16()
        torch.testing.assert_close(got_b.cpu(), b32.bfloat16(), rtol=0, atol=0)
        torch.testing.assert_close(got_p.cpu(), want_p, rtol=8e-3, atol=1e-5)


def test_fused_sgd_takes_a_tensor_lr_and_skips_steps_with_inf_gradients() -> None:
    net = model()
    cpu_net, tpu_net = copy.deepcopy(net), copy.deepcopy(net)
    cpu_losses, _ = train_sgd(cpu_net, "cpu", False, dict(momentum=0.9), False)
    before = fallbacks()
    tpu_losses, _ = train_sgd(tpu_net, TPU, True, dict(momentum=0.9), False,
                              lr=torch.tensor(0.1, device=TPU))
    assert new_fallbacks(before) == {}
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    opt = torch.optim.SGD(tpu_net.parameters(), lr=0.1, momentum=0.9, fused=True)
    scaler = torch.amp.GradScaler(TPU, init_scale=2.0**8)
    scaler.scale(tpu_net(torch.randn(4, 8, device=TPU)).sum()).backward()
    next(tpu_net.parameters()).grad[0, 0] = float("inf")
    before = [p.detach().cpu().clone() for p in tpu_net.parameters()]
    scaler.step(opt)
    scaler.update()
    for p, b in zip(tpu_net.parameters(), before):
        torch.testing.assert_close(p.detach().cpu(), b, rtol=0, atol=0)
    assert scaler.get_scale() == 2.0**7


ADAGRAD_CASES = {
    "plain": dict(),
    "decay+lr_decay": dict(weight_decay=0.01, lr_decay=0.1),
    "maximize": dict(maximize=True, initial_accumulator_value=0.5),
}


@pytest.mark.parametrize("scaler", [False, True], ids=["plain", "grad_scaler"])
@pytest.mark.parametrize("case", list(ADAGRAD_CASES))
def test_fused_adagrad_trains_like_cpu_fused_adagrad(case: str, scaler: bool) -> None:
    # _fused_adagrad_ ran on the CPU (no lowering, no meta kernel).
    kw = ADAGRAD_CASES[case]
    net = model()

    def train_adagrad(net: nn.Module, device: str) -> list[float]:
        net = net.to(device)
        opt = torch.optim.Adagrad(net.parameters(), lr=0.05, fused=True, **kw)
        return train_steps(net, device, opt, scaler)

    cpu_net, tpu_net = copy.deepcopy(net), copy.deepcopy(net)
    cpu_losses = train_adagrad(cpu_net, "cpu")
    before = fallbacks()
    tpu_losses = train_adagrad(tpu_net, TPU)
    assert new_fallbacks(before) == {}
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for p_tpu, p_cpu in zip(tpu_net.parameters(), cpu_net.parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-5, atol=1e-6)
