"""A compiled graph holding ops with no lowering runs cut at them: the ops run as in eager
mode (a counted CPU fallback) between compiled pieces, instead of the whole compile
failing with "has no lowering". Values and gradients are the CPU's."""

from __future__ import annotations

import pytest
import torch
from _compare import fallbacks, new_fallbacks
from torch.fx.experimental.proxy_tensor import make_fx

import torchtpu
from torchtpu.dynamo import split

TPU = "tpu"


def _mixed(x: torch.Tensor) -> torch.Tensor:
    # Lowered ops (unfold among them) around two ops with no lowering (special.bessel_j0,
    # special.erfcx), whose results feed lowered ops again.
    y = torch.special.bessel_j0(x * 2) + 1
    return torch.special.erfcx(y).sum(0) * x.unfold(0, 2, 1).sum()


def _stats() -> dict:
    return torchtpu.dynamo.compile_stats()


def test_graph_runs_cut_at_ops_without_lowering() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(6, 3)
    splits_before = _stats()["graph_unlowered_splits"]
    eager_before = _stats()["num_out_of_graph_ops"]
    before = fallbacks()
    split._warned.clear()  # warned once per op and process
    with pytest.warns(UserWarning, match="special_erfcx eagerly between compiled pieces"):
        actual = torch.compile(_mixed, backend="tpu", dynamic=False)(x.to(TPU))
    torch.testing.assert_close(actual.cpu(), _mixed(x), rtol=1e-5, atol=1e-5)
    # The unlowered ops ran eagerly, as in eager mode (CPU fallbacks); nothing else did.
    assert set(new_fallbacks(before)) == {"aten::special_bessel_j0.out", "aten::special_erfcx.out"}
    splits = _stats()["graph_unlowered_splits"]
    assert splits.get("aten::special_erfcx", 0) > splits_before.get("aten::special_erfcx", 0)
    assert _stats()["num_out_of_graph_ops"] >= eager_before + 2


def test_gradient_through_a_split_graph() -> None:
    torch._dynamo.reset()
    torch.manual_seed(1)
    x = torch.randn(6, 3)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return (torch.special.erfcx(t) * t.unfold(0, 3, 2).sum()).sum()

    x_cpu, x_tpu = x.clone().requires_grad_(True), x.to(TPU).requires_grad_(True)
    fn(x_cpu).backward()
    torch.compile(fn, backend="tpu", dynamic=False)(x_tpu).backward()
    torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad, rtol=1e-5, atol=1e-5)


def test_a_graph_of_lowered_ops_is_not_cut() -> None:
    torch._dynamo.reset()
    x = torch.randn(4, 4)
    before = _stats()["num_graph_unlowered_splits"]
    out = torch.compile(lambda t: (t.sin() @ t).relu(), backend="tpu", dynamic=False)(x.to(TPU))
    torch.testing.assert_close(out.cpu(), (x.sin() @ x).relu(), rtol=1e-5, atol=1e-5)
    assert _stats()["num_graph_unlowered_splits"] == before


def test_unlowered_ops_lists_each_op_once() -> None:
    gm = make_fx(lambda t: torch.special.erfcx(torch.special.erfcx(t)) + t)(torch.randn(3))
    assert split.unlowered_ops(gm) == ["aten::special_erfcx"]


# A user's kernels wrapped as custom ops: one mutating its argument (AOTAutograd calls it
# through ``auto_functionalized``, a higher-order op), one writing an out argument and
# returning a value, one with a registered gradient. They run eagerly between compiled
# pieces, as a custom op with no mutation always did.
@torch.library.custom_op("torchtpu_test::scale_add_", mutates_args=("x",))
def _scale_add_(x: torch.Tensor, k: float) -> None:
    x.mul_(k).add_(1)


@torch.library.custom_op("torchtpu_test::triple_into", mutates_args=("out",))
def _triple_into(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    out.copy_(x * 3)
    return x + 1


@_triple_into.register_fake
def _(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("torchtpu_test::cube", mutates_args=())
def _cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


@_cube.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


_cube.register_autograd(lambda ctx, g: g * 3 * ctx.saved_tensors[0] ** 2,
                        setup_context=lambda ctx, inputs, output: ctx.save_for_backward(
                            inputs[0]))


@pytest.mark.parametrize("dynamic", [False, True])
def test_mutating_custom_ops_run_between_compiled_pieces(dynamic: bool) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = x.sin()
        _scale_add_(h, 2.0)  # a temporary
        _scale_add_(y, 3.0)  # the caller's tensor
        _scale_add_(y[0], 10.0)  # a view of it
        out = torch.empty_like(h)
        r = _triple_into(h, out)
        return h * 2, r, out

    torch._dynamo.reset()
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    y_tpu = y.to(TPU)
    actual = torch.compile(fn, backend="tpu", dynamic=dynamic, fullgraph=True)(x.to(TPU), y_tpu)
    y_cpu = y.clone()
    expected = fn(x, y_cpu)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(y_tpu.cpu(), y_cpu, rtol=1e-5, atol=1e-5)
    assert "higher_order::auto_functionalized_v2" in split.unlowered_splits


def test_custom_op_with_a_gradient_in_a_compiled_training_step() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (_cube(x @ w) + w.sum()).mean()

    torch._dynamo.reset()
    torch.manual_seed(2)
    x, w = torch.randn(4, 3), torch.randn(3, 3)
    w_cpu, w_tpu = w.clone().requires_grad_(True), w.to(TPU).requires_grad_(True)
    fn(x, w_cpu).backward()
    loss = torch.compile(fn, backend="tpu", fullgraph=True)(x.to(TPU), w_tpu)
    loss.backward()
    torch.testing.assert_close(loss.detach().cpu(), fn(x, w).detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w_tpu.grad.cpu(), w_cpu.grad, rtol=1e-5, atol=1e-5)


def test_print_inside_a_compiled_graph(capfd: pytest.CaptureFixture) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        torch._higher_order_ops.print("value {}", y.sum())
        return y + 1

    torch._dynamo.reset()
    x = torch.arange(3.0)
    out = torch.compile(fn, backend="tpu", fullgraph=True)(x.to(TPU))
    torch.testing.assert_close(out.cpu(), x * 2 + 1)
    assert "value 6." in capfd.readouterr().out


@pytest.mark.parametrize("fn, x, error", [
    # The CPU kernel's dispatch leaves int64 out; eager mode raises its error.
    (lambda t: t.softmax(0) + 1, torch.arange(4), NotImplementedError),
    # The meta kernel refuses bool; the Python meta Dynamo's fake tensors run does not.
    (lambda t: t.argmax() + 1, torch.tensor([False, True]), RuntimeError),
    (lambda t: t.argmin(0), torch.tensor([True, False]), RuntimeError),
])
def test_calls_eager_mode_refuses_raise_as_in_eager_mode(fn, x, error) -> None:
    torch._dynamo.reset()
    with pytest.raises(error) as expected:
        fn(x)
    with pytest.raises(error) as actual:
        torch.compile(fn, backend="tpu", dynamic=False)(x.to(TPU))
    assert str(actual.value).splitlines()[0] == str(expected.value).splitlines()[0]


def test_calls_eager_mode_takes_stay_in_the_graph() -> None:
    # The same ops on arguments eager mode takes are lowered: no cut.
    torch._dynamo.reset()
    before = _stats()["num_graph_unlowered_splits"]
    x = torch.randn(4, 3)
    out = torch.compile(lambda t: t.softmax(0).argmax(1), backend="tpu")(x.to(TPU))
    torch.testing.assert_close(out.cpu(), x.softmax(0).argmax(1))
    assert _stats()["num_graph_unlowered_splits"] == before


def _resize_aa(x: torch.Tensor) -> torch.Tensor:
    # The antialiased resize of a uint8 image is no lowering's case (PyTorch's uint8 kernel
    # is a fixed-point one of its own): eager mode runs it on the CPU; lowered ops around it.
    y = torch.nn.functional.interpolate(x + 1, size=(7, 9), mode="bilinear", antialias=True)
    return y.float() * 2 + 1


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_call_its_lowering_refuses_runs_eagerly(dynamic: bool) -> None:
    """A node whose lowering does not take its call (a dtype or mode left to the CPU) runs
    as eager mode runs it, between compiled pieces, with the lowering's reason; the whole
    compile does not fail."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    split._warned.clear()
    compiled = torch.compile(_resize_aa, backend="tpu", dynamic=dynamic)
    before = fallbacks()
    with pytest.warns(UserWarning, match="_upsample_bilinear2d_aa of uint8 is not lowered"):
        for rows in (11, 12, 14):
            x = torch.randint(0, 250, (1, 3, rows, 13), dtype=torch.uint8)
            torch.testing.assert_close(compiled(x.to(TPU)).cpu(), _resize_aa(x))
    assert set(new_fallbacks(before)) == {"aten::_upsample_bilinear2d_aa"}
