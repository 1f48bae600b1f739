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
