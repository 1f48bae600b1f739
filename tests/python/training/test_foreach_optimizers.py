"""torch.optim's foreach implementations on tpu: every _foreach_* op they call is lowered
(one program for the whole parameter list), the steps match the CPU, and nothing falls back."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from _compare import eager_mode, fallbacks, new_fallbacks
from torch import nn

import torchtpu

TPU = "tpu"
NUM_STEPS = 4

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd_momentum": lambda p, **kw: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                                    weight_decay=1e-4, **kw),
    "adam": lambda p, **kw: torch.optim.Adam(p, lr=3e-3, weight_decay=1e-3, **kw),
    "adam_amsgrad": lambda p, **kw: torch.optim.Adam(p, lr=3e-3, amsgrad=True, **kw),
    "adamw": lambda p, **kw: torch.optim.AdamW(p, lr=3e-3, weight_decay=0.01, **kw),
    "rmsprop": lambda p, **kw: torch.optim.RMSprop(p, lr=1e-3, momentum=0.9, centered=True,
                                                   weight_decay=1e-4, **kw),
    "adagrad": lambda p, **kw: torch.optim.Adagrad(p, lr=0.05, lr_decay=1e-3,
                                                   weight_decay=1e-4, **kw),
}


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 3))


def run(net: nn.Module, make_opt: Callable, device: str, **opt_kwargs) -> nn.Module:
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(12, 8, generator=g), torch.randint(0, 3, (12,), generator=g)
    net = net.to(device)
    x, y = x.to(device), y.to(device)
    opt = make_opt(net.parameters(), **opt_kwargs)
    for _ in range(NUM_STEPS):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)  # _foreach_norm, _foreach_mul_
        opt.step()
    return net


@pytest.mark.parametrize("foreach", [True, None], ids=["foreach", "default"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_foreach_optimizer_matches_cpu_without_fallback(name: str, foreach: bool | None) -> None:
    net = model()
    cpu = run(copy.deepcopy(net), OPTIMIZERS[name], "cpu", foreach=foreach)
    before = fallbacks()
    tpu = run(copy.deepcopy(net), OPTIMIZERS[name], TPU, foreach=foreach)
    assert new_fallbacks(before) == {}
    for (pname, p_cpu), p_tpu in zip(cpu.named_parameters(), tpu.parameters()):
        assert p_tpu.device.type == TPU
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m, n=pname: f"{name} {n}: {m}")


def test_default_optimizer_uses_foreach_on_tpu() -> None:
    params = [torch.zeros(3, device=TPU, requires_grad=True)]
    opt = torch.optim.AdamW(params)
    # torch.optim picks foreach for devices in _get_foreach_kernels_supported_devices(),
    # which includes the PrivateUse1 backend.
    from torch.optim.optimizer import _default_to_fused_or_foreach

    _, use_foreach = _default_to_fused_or_foreach(params, differentiable=False,
                                                  use_fused=False)
    assert use_foreach and opt.defaults["foreach"] is None


def test_list_op_is_one_program_call_whatever_the_list_length() -> None:
    """A _foreach op on 2 or on 20 tensors runs one executable (PyTorch's generic kernel
    would run one per tensor)."""
    def calls(n: int) -> int:
        xs = [torch.randn(4, 5, device=TPU) for _ in range(n)]
        ys = [torch.randn(4, 5, device=TPU) for _ in range(n)]
        torch._foreach_addcmul_(xs, ys, ys, 0.5)  # warm the op cache for this signature
        before = torchtpu.debug.metrics()["num_eager_ops"]
        torch._foreach_addcmul_(xs, ys, ys, 0.5)
        return torchtpu.debug.metrics()["num_eager_ops"] - before

    with eager_mode("op"):  # counts op-by-op calls (fused mode defers them into a graph)
        assert calls(2) == 1
        assert calls(20) == 1


@pytest.mark.parametrize("n", [3, 60])
def test_clip_grad_norm_runs_a_fixed_number_of_programs_whatever_the_parameter_count(
        n: int) -> None:
    """clip_grad_norm_ over n whole gradients: _foreach_norm, a stack of the n 0-dim norms,
    the total norm and clip coefficient, _foreach_mul_. Each list op and the stack is one
    program; the stack once cost one per parameter (PyTorch's composite stack cats n
    unsqueezed views, each materialized alone)."""
    shapes = [(7, 5), (5,), (3, 2, 4)]
    grads = [torch.randn(shapes[i % 3], generator=torch.Generator().manual_seed(i))
             for i in range(n)]
    params = [nn.Parameter(torch.zeros(g.shape)) for g in grads]
    tpu_params = [nn.Parameter(torch.zeros(g.shape, device=TPU)) for g in grads]

    def clip(ps: list[nn.Parameter], device: str) -> tuple[torch.Tensor, int]:
        for p, g in zip(ps, grads):
            p.grad = g.to(device)
        torchtpu.synchronize()
        before = torchtpu.debug.metrics()["num_executions"]
        total = torch.nn.utils.clip_grad_norm_(ps, 1.0)
        torchtpu.synchronize()
        return total, torchtpu.debug.metrics()["num_executions"] - before

    clip(tpu_params, TPU)  # warm the op cache for these signatures
    total, executions = clip(tpu_params, TPU)
    expected, _ = clip(params, "cpu")
    assert executions <= 12, f"{executions} programs for {n} parameters"
    torch.testing.assert_close(total.cpu(), expected, rtol=1e-5, atol=1e-5)
    for p, e in zip(tpu_params, params):
        torch.testing.assert_close(p.grad.cpu(), e.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["add_list_alpha", "mul_scalar", "div_scalarlist", "sqrt",
                                  "lerp_scalar", "addcdiv_scalarlist", "maximum_list",
                                  "norm", "pow_scalar_and_tensor", "zero", "copy", "sub_tensor0d",
                                  "clamp_min_scalar", "max"])
def test_foreach_ops_match_cpu(case: str) -> None:
    g = torch.Generator().manual_seed(3)
    shapes = [(3,), (2, 4), (), (5, 1)]

    def lists(k: int) -> list[list[torch.Tensor]]:
        return [[torch.rand(s, generator=g) + 0.5 for s in shapes] for _ in range(k)]

    a, b, c = lists(3)
    scalars = [0.5, -2.0, 3.0, 1.5]
    fns = {
        "add_list_alpha": lambda a, b, c: torch._foreach_add(a, b, alpha=-0.3),
        "mul_scalar": lambda a, b, c: torch._foreach_mul(a, 2.5),
        "div_scalarlist": lambda a, b, c: torch._foreach_div(a, scalars),
        "sqrt": lambda a, b, c: torch._foreach_sqrt(a),
        "lerp_scalar": lambda a, b, c: torch._foreach_lerp(a, b, 0.25),
        "addcdiv_scalarlist": lambda a, b, c: torch._foreach_addcdiv(a, b, c, scalars),
        "maximum_list": lambda a, b, c: torch._foreach_maximum(a, b),
        "norm": lambda a, b, c: torch._foreach_norm(a, 2),
        "pow_scalar_and_tensor": lambda a, b, c: torch._foreach_pow(2.0, a),
        "zero": lambda a, b, c: (torch._foreach_zero_(a), a)[1],
        "copy": lambda a, b, c: (torch._foreach_copy_(a, b), a)[1],
        "sub_tensor0d": lambda a, b, c: (torch._foreach_sub_(a, b, alpha=2), a)[1],
        "clamp_min_scalar": lambda a, b, c: torch._foreach_clamp_min(a, 1.0),
        "max": lambda a, b, c: torch._foreach_max(a),
    }
    expected = fns[case](*copy.deepcopy((a, b, c)))
    before = fallbacks()
    actual = fns[case](*[[t.to(TPU) for t in lst] for lst in (a, b, c)])
    assert new_fallbacks(before) == {}
    assert len(actual) == len(expected)
    for x, e in zip(actual, expected):
        assert x.device.type == TPU and x.dtype == e.dtype and x.shape == e.shape
        torch.testing.assert_close(x.cpu(), e, rtol=1e-5, atol=1e-6)


def test_in_place_list_op_writes_through_views_and_mixed_dtypes() -> None:
    base = torch.arange(12.0).reshape(3, 4)
    items = [base[:, 1], torch.ones(2, dtype=torch.bfloat16), torch.ones(3, dtype=torch.float64)]
    tpu_base = base.to(TPU)
    tpu_items = [tpu_base[:, 1]] + [t.to(TPU) for t in items[1:]]
    torch._foreach_mul_(items, 3.0)
    torch._foreach_mul_(tpu_items, 3.0)
    torch.testing.assert_close(tpu_base.cpu(), base)  # the view's write reached its base
    for x, e in zip(tpu_items, items):
        assert x.dtype == e.dtype
        torch.testing.assert_close(x.cpu(), e)


def _flat_views(flat: torch.Tensor) -> list[torch.Tensor]:
    """Items over one storage as FSDP2 lays out its gradients (as_strided windows of a flat
    buffer), plus a transposed view and a strided view."""
    items, offset = [], 0
    for shape in [(3, 4), (5,), (2, 3, 2)]:
        n = torch.Size(shape).numel()
        items.append(flat[offset:offset + n].view(shape))
        offset += n
    items.append(flat[offset:offset + 12].view(3, 4).t())
    items.append(flat[offset + 12:offset + 24:2])
    return items


def test_list_op_over_views_of_one_storage_matches_cpu_in_few_programs() -> None:
    flat = torch.randn(80, generator=torch.Generator().manual_seed(3))
    other = [torch.randn(t.shape) for t in _flat_views(flat)]
    tpu_flat = flat.to(TPU)
    items, tpu_items = _flat_views(flat), _flat_views(tpu_flat)
    tpu_other = [t.to(TPU) for t in other]
    torch._foreach_add_(tpu_items, tpu_other, alpha=0.5)  # warm the op cache
    tpu_flat.copy_(flat.to(TPU))
    torchtpu.synchronize()
    before = torchtpu.debug.metrics()["num_executions"]
    torch._foreach_add_(tpu_items, tpu_other, alpha=0.5)
    norms = torch._foreach_norm(tpu_items)
    torchtpu.synchronize()
    executions = torchtpu.debug.metrics()["num_executions"] - before
    torch._foreach_add_(items, other, alpha=0.5)
    torch.testing.assert_close(tpu_flat.cpu(), flat)  # every write, in list order
    for n, e in zip(norms, torch._foreach_norm(items)):
        torch.testing.assert_close(n.cpu(), e)
    # add_: read the views, run, write them back; norm: read, run (one program each).
    assert executions <= 6, f"{executions} programs for {len(items)} views of one storage"


@pytest.mark.parametrize("whole", [False, True], ids=["views", "views_and_whole"])
def test_list_op_writes_overlapping_items_in_list_order(whole: bool) -> None:
    base = torch.arange(8.0)
    tpu_base = base.to(TPU)

    def items(b: torch.Tensor) -> list[torch.Tensor]:
        return [b[2:5], b, b[4:7]] if whole else [b[2:5], b[4:7], b[1:8:3]]

    values = [torch.full(t.shape, float(i + 1)) for i, t in enumerate(items(base))]
    torch._foreach_copy_(items(base), values)
    torch._foreach_copy_(items(tpu_base), [v.to(TPU) for v in values])
    torch.testing.assert_close(tpu_base.cpu(), base)


def test_foreach_errors_match_cpu() -> None:
    a = [torch.ones(2, device=TPU), torch.ones(3, device=TPU)]
    with pytest.raises(RuntimeError, match="same length|same number"):
        torch._foreach_add_(a, [torch.ones(2, device=TPU)])
    ints = [torch.ones(2, dtype=torch.int64, device=TPU)]
    with pytest.raises(RuntimeError):
        torch._foreach_add_(ints, 0.5)  # a float result cannot be written into int64
    with pytest.raises(RuntimeError, match="at least one tensor"):
        torch._foreach_add_([], 1.0)


def _aliased_list_calls(device: str) -> list[torch.Tensor]:
    out = []
    x = torch.ones(2, 3, device=device)
    torch._foreach_add_([x, x], 1.0)  # the same tensor twice
    out.append(x)
    x = torch.ones(2, 3, device=device)
    torch._foreach_mul_([x, x[0]], 2.0)  # a view of an earlier item
    out.append(x)
    x = torch.arange(6.0, device=device).view(2, 3)
    torch._foreach_add_([x[0], x[1]], [x[1], x[0]])  # reads an item written before it
    out.append(x)
    x = torch.ones(3, device=device)
    torch._foreach_addcmul_([x, x], [x, x], [x, x], torch.tensor([1.0, 2.0]))
    out.append(x)
    w = torch.ones(3, device=device, requires_grad=True)
    w.grad = torch.full((3,), 4.0, device=device)
    torch.nn.utils.clip_grad_norm_([w, w], 1.0)  # foreach by default on tpu
    out.append(w.grad)
    return out


def test_list_items_sharing_memory_update_in_list_order_like_cpu() -> None:
    # One program over the list read every item before writing any: [x, x] was added to
    # once, and clip_grad_norm_ over a list naming a gradient twice scaled it once.
    for got, want in zip(_aliased_list_calls(TPU), _aliased_list_calls("cpu")):
        torch.testing.assert_close(got.cpu(), want)


def test_zero_dim_cpu_tensors_in_a_foreach_list_are_scalars() -> None:
    """A list op takes 0-dim CPU tensors among its other tensors, as one tensor argument
    does and CUDA's per-tensor path does: an optimizer whose lr tensor came back on the CPU
    from a checkpoint loaded with map_location="cpu" (Adagrad and RAdam build such lists)."""
    xs = [torch.randn(3), torch.randn(2, 2)]
    others = [torch.tensor(2.0), torch.tensor(3, dtype=torch.int64)]
    for op in (torch._foreach_mul, torch._foreach_add, torch._foreach_div,
               torch._foreach_maximum, torch._foreach_pow):
        expected = op(xs, others)
        actual = op([x.to(TPU) for x in xs], others)
        for a, e in zip(actual, expected):
            assert a.device.type == TPU and a.dtype == e.dtype
            torch.testing.assert_close(a.cpu(), e)
    on_tpu = [x.to(TPU) for x in xs]
    torch._foreach_addcmul_(on_tpu, on_tpu, [torch.tensor(0.5), torch.tensor(0.5)], value=2)
    for a, x in zip(on_tpu, xs):
        torch.testing.assert_close(a.cpu(), x + 2 * x * 0.5)

    for cls in (torch.optim.Adagrad, torch.optim.RAdam, torch.optim.Adam):
        torch.manual_seed(0)
        cpu_model = nn.Linear(3, 2)
        tpu_model = copy.deepcopy(cpu_model).to(TPU)
        opts = [cls(m.parameters(), lr=torch.tensor(0.01, device=d))
                for m, d in ((cpu_model, "cpu"), (tpu_model, TPU))]
        x = torch.randn(4, 3)
        for step in range(3):
            for m, opt, d in zip((cpu_model, tpu_model), opts, ("cpu", TPU)):
                opt.zero_grad()
                m(x.to(d)).square().sum().backward()
                opt.step()
                if step == 0:  # a resume whose checkpoint was loaded onto the CPU
                    state = copy.deepcopy(opt.state_dict())
                    for group in state["param_groups"]:
                        group["lr"] = group["lr"].cpu()
                    opt.load_state_dict(state)
        for a, e in zip(tpu_model.parameters(), cpu_model.parameters()):
            torch.testing.assert_close(a.detach().cpu(), e.detach(), rtol=1e-5, atol=1e-6)
