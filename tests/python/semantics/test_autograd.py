"""Gradients on tpu against the same graph on CPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_close, fallbacks, make, new_fallbacks, to_device

GRAD_TOLS = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 5e-2)}


def assert_grads_same(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor,
                      dtype_tols: dict | None = None) -> None:
    """Backpropagates a fixed random cotangent through ``fn`` on CPU and on tpu."""
    cpu_inputs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*cpu_inputs)
    cot = torch.randn(out.shape, dtype=out.dtype)
    (out * cot).sum().backward()
    tpu_inputs = [to_device(x, "tpu") for x in cpu_inputs]
    before = fallbacks()
    tpu_out = fn(*tpu_inputs)
    (tpu_out * cot.to("tpu")).sum().backward()
    unexpected = new_fallbacks(before)
    assert not unexpected, f"backward fell back to the CPU for {unexpected}"
    tols = dtype_tols or GRAD_TOLS
    assert_close(tpu_out, out, dtype_tols=tols, what="forward")
    for i, (c, t) in enumerate(zip(cpu_inputs, tpu_inputs)):
        if c.grad is None:
            continue
        assert t.grad is not None, f"input {i}: no gradient on tpu"
        assert_close(t.grad, c.grad, dtype_tols=tols, what=f"grad of input {i}")


F32 = torch.float32

CASES: dict[str, tuple[Callable[..., torch.Tensor], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "add_mul_broadcast": (lambda a, b: a * b + a, lambda: (make((3, 4), F32), make((4,), F32))),
    "div": (lambda a, b: a / b, lambda: (make((3, 4), F32), make((3, 4), F32, low=0.5, high=2))),
    "exp_log_sqrt": (lambda a: torch.exp(a) + torch.log(a.abs() + 1) + torch.sqrt(a.abs() + 1),
                     lambda: (make((3, 4), F32),)),
    "pow": (lambda a: a.abs().pow(1.5), lambda: (make((3, 4), F32),)),
    "tanh_sigmoid": (lambda a: torch.tanh(a) * torch.sigmoid(a), lambda: (make((5,), F32),)),
    "relu": (F.relu, lambda: (make((4, 5), F32),)),
    "gelu": (F.gelu, lambda: (make((4, 5), F32),)),
    "silu": (F.silu, lambda: (make((4, 5), F32),)),
    "leaky_relu": (lambda a: F.leaky_relu(a, 0.2), lambda: (make((4, 5), F32),)),
    "softmax": (lambda a: F.softmax(a, dim=1), lambda: (make((3, 6), F32),)),
    "log_softmax": (lambda a: F.log_softmax(a, dim=0), lambda: (make((3, 6), F32),)),
    "sum_mean": (lambda a: a.sum(1, keepdim=True) * a.mean(0), lambda: (make((3, 4), F32),)),
    "amax": (lambda a: a.amax(1), lambda: (make((3, 4), F32),)),
    "var": (lambda a: a.var(1), lambda: (make((3, 6), F32),)),
    "norm": (lambda a: a.norm(dim=1), lambda: (make((3, 6), F32),)),
    "mm": (torch.mm, lambda: (make((3, 5), F32), make((5, 2), F32))),
    "bmm": (torch.bmm, lambda: (make((2, 3, 5), F32), make((2, 5, 2), F32))),
    "linear": (F.linear, lambda: (make((4, 6), F32), make((3, 6), F32), make((3,), F32))),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (8,), w, b),
                   lambda: (make((4, 8), F32), make((8,), F32), make((8,), F32))),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1),
               lambda: (make((2, 3, 6, 6), F32), make((4, 3, 3, 3), F32), make((4,), F32))),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), lambda: (make((1, 2, 4, 4), F32),)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 2), lambda: (make((1, 2, 4, 4), F32),)),
    "index_select": (lambda a: a.index_select(0, torch.tensor([2, 0, 2], device=a.device)),
                     lambda: (make((3, 4), F32),)),
    "gather": (lambda a: a.gather(1, torch.tensor([[0, 0], [3, 1], [2, 2]], device=a.device)),
               lambda: (make((3, 4), F32),)),
    "cat_slice": (lambda a, b: torch.cat([a[:, 1:], b.t()], 1),
                  lambda: (make((3, 4), F32), make((2, 3), F32))),
    "view_permute": (lambda a: a.view(2, 3, 4).permute(2, 0, 1).reshape(4, 6),
                     lambda: (make((6, 4), F32),)),
    "expand": (lambda a: a.expand(3, 4) * 2, lambda: (make((1, 4), F32),)),
    "where_masked_fill": (lambda a: torch.where(a > 0, a, a * 3).masked_fill(a < -2, 0.0),
                          lambda: (make((4, 4), F32),)),
    "clamp": (lambda a: a.clamp(-1, 1), lambda: (make((4, 4), F32),)),
    "cumsum": (lambda a: a.cumsum(1), lambda: (make((3, 4), F32),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grad_matches_cpu(name: str) -> None:
    fn, inputs = CASES[name]
    assert_grads_same(fn, *inputs())


def test_bf16_linear_grad() -> None:
    b = torch.bfloat16
    assert_grads_same(F.linear, make((4, 8), b), make((3, 8), b), make((3,), b))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_grad(reduction: str) -> None:
    target = torch.tensor([1, 0, 3, 3, -100])
    assert_grads_same(lambda x: F.cross_entropy(x, target.to(x.device), reduction=reduction),
                      make((5, 4), F32))


def test_mse_and_nll_grad() -> None:
    y = make((3, 4), F32)
    assert_grads_same(lambda x: F.mse_loss(x, y.to(x.device)), make((3, 4), F32))
    t = torch.tensor([0, 2, 1])
    assert_grads_same(lambda x: F.nll_loss(F.log_softmax(x, 1), t.to(x.device)), make((3, 4), F32))


def test_embedding_grad_with_repeats() -> None:
    idx = torch.tensor([[1, 3, 1], [0, 1, 4]])
    assert_grads_same(lambda w: F.embedding(idx.to(w.device), w), make((5, 3), F32))


def test_dropout_grad_uses_same_mask() -> None:
    x = torch.ones(50, 50, device="tpu", requires_grad=True)
    y = F.dropout(x, p=0.5, training=True)
    y.sum().backward()
    # d(sum)/dx is exactly the scaled mask used in the forward pass.
    assert torch.equal(x.grad.cpu(), y.detach().cpu())


def test_grad_accumulates_and_zero_grad() -> None:
    w = torch.ones(3, device="tpu", requires_grad=True)
    (w * 2).sum().backward()
    (w * 3).sum().backward()
    assert w.grad.device.type == "tpu"
    assert w.grad.cpu().tolist() == [5.0, 5.0, 5.0]
    w.grad = None
    (w ** 2).sum().backward()
    assert w.grad.cpu().tolist() == [2.0, 2.0, 2.0]


def test_autograd_grad_and_no_grad() -> None:
    x = make((4,), F32).to("tpu").requires_grad_()
    (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
    torch.testing.assert_close(g.detach().cpu(), 3 * x.detach().cpu() ** 2, rtol=1e-5, atol=1e-5)
    (g2,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(g2.cpu(), 6 * x.detach().cpu(), rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        y = x * 2
    assert not y.requires_grad


def test_module_backward_matches_cpu() -> None:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.GELU(),
                            torch.nn.Linear(8, 3))
    x = torch.randn(5, 6)
    y = torch.tensor([0, 2, 1, 1, 0])
    F.cross_entropy(m(x), y).backward()
    cpu_grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m.to("tpu")
    F.cross_entropy(m(x.to("tpu")), y.to("tpu")).backward()
    for i, (p, g) in enumerate(zip(m.parameters(), cpu_grads)):
        assert_close(p.grad, g, dtype_tols=GRAD_TOLS, what=f"parameter {i} grad")


@pytest.mark.parametrize("op", [
    lambda ts: torch._foreach_mul_(ts, 10.0),
    lambda ts: torch._foreach_add_(ts, ts),
    lambda ts: torch._foreach_addcmul_(ts, ts, ts, value=2.0),
    lambda ts: torch._foreach_lerp_(ts, [t + 1 for t in ts], 0.5),
    lambda ts: torch._foreach_zero_(ts),
    lambda ts: torch._foreach_exp_(ts),
], ids=["mul_", "add_list", "addcmul_", "lerp_", "zero_", "exp_"])
def test_foreach_in_place_ops_count_as_in_place_for_autograd(op) -> None:
    # A foreach write to a tensor saved for backward must fail backward, as on the CPU
    # (the version counters were not bumped: a silently wrong gradient). Optimizers take
    # the foreach path on tpu, so opt.step() between forward and backward is this case.
    results = {}
    for device in ("cpu", "tpu"):
        x = torch.tensor([1.0, 2.0], device=device, requires_grad=True)
        y = x * 1
        loss = (y * y).sum()
        before = y._version
        op([y])
        results[device] = y._version - before
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
    assert results["tpu"] == results["cpu"]


def test_optimizer_step_before_backward_is_caught_like_cpu() -> None:
    for device in ("cpu", "tpu"):
        m = torch.nn.Linear(3, 1).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=1.0)
        x = torch.ones(2, 3, device=device, requires_grad=True)
        loss = m(x).pow(2).sum()
        for p in m.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(loss, x)


def test_foreach_in_place_on_an_inference_tensor_raises_and_writes_nothing() -> None:
    with torch.inference_mode():
        ts = [torch.ones(3, device="tpu")]
    with pytest.raises(RuntimeError, match="inference tensor outside InferenceMode"):
        torch._foreach_mul_(ts, 2.0)
    assert ts[0].tolist() == [1.0, 1.0, 1.0]


def test_deterministic_mode_fills_uninitialized_memory_as_the_cpu() -> None:
    # torch.use_deterministic_algorithms(True) makes empty tensors NaN (or the largest
    # integer), and what resize_ adds too, so reads of memory never written show; tpu gave
    # zeros.
    torch.use_deterministic_algorithms(True)
    try:
        for d in ("cpu", "tpu"):
            made = [torch.empty(3, device=d), torch.empty(2, dtype=torch.int32, device=d),
                    torch.empty_like(torch.ones(2, device=d)),
                    torch.empty_strided((2, 2), (1, 2), dtype=torch.int64, device=d),
                    torch.zeros(1, device=d).resize_(3)]
            if d == "cpu":
                want = made
            else:
                for w, g in zip(want, made):
                    torch.testing.assert_close(g.cpu(), w, equal_nan=True, rtol=0, atol=0)
    finally:
        torch.use_deterministic_algorithms(False)
