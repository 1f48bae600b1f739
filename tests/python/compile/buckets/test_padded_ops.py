"""Ops run padded to a shape bucket against the CPU, one case per op (their rules:
torchtpu/dynamo/buckets/rules.py).

Each case runs its op on a dynamic dimension at lengths 5, 11 and 16 (one bucket, 16) and
compares with the CPU. Every case also reduces over the padded dimension, so padding that
leaks into a result shows. It must compile exactly one program in all (the graph; padding
its inputs and reading its results back compile nothing), i.e. actually run padded, and
the graph must hold the case's op on a dynamic dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _compare import programs_obtained

import torchtpu
from torchtpu.dynamo import runner
from torchtpu.dynamo.buckets.rules import RULES

LENGTHS = (5, 11, 16)


@dataclass(frozen=True)
class Case:
    fn: Callable[..., Any]
    inputs: Callable[[int], list[torch.Tensor]]  # CPU inputs for length n
    dynamic: tuple[tuple[int, int], ...] = ((0, 1),)  # (input, dim) marked dynamic


def _rows(n: int) -> list[torch.Tensor]:
    return [torch.randn(3, n)]


def _positive(n: int) -> list[torch.Tensor]:
    return [torch.rand(3, n) + 0.5]


def _pair(n: int) -> list[torch.Tensor]:
    return [torch.randn(3, n), torch.randn(3, n)]


def _unary(op: Callable, inputs: Callable = _rows) -> Case:
    return Case(lambda x: (op(x), op(x).sum(-1)), inputs)


def _binary(op: Callable) -> Case:
    return Case(lambda x, y: (op(x, y), op(x, y).float().sum(-1)), _pair, ((0, 1), (1, 1)))


CASES: dict[str, Case] = {
    "aten.abs.default": _unary(torch.abs),
    "aten.neg.default": _unary(torch.neg),
    "aten.exp.default": _unary(torch.exp),
    "aten.log.default": _unary(torch.log, _positive),
    "aten.sqrt.default": _unary(torch.sqrt, _positive),
    "aten.rsqrt.default": _unary(torch.rsqrt, _positive),
    "aten.reciprocal.default": _unary(torch.reciprocal, _positive),
    "aten.tanh.default": _unary(torch.tanh),
    "aten.sigmoid.default": _unary(torch.sigmoid),
    "aten.relu.default": _unary(torch.relu),
    "aten.gelu.default": _unary(F.gelu),
    "aten.sin.default": _unary(torch.sin),
    "aten.cos.default": _unary(torch.cos),
    "aten.erf.default": _unary(torch.erf),
    "aten.pow.Tensor_Scalar": _unary(lambda x: x ** 3),
    "aten.clamp.default": _unary(lambda x: x.clamp(-0.5, 0.5)),
    "aten.bitwise_not.default": _unary(lambda x: (~(x > 0)).float()),
    "aten.logical_not.default": _unary(lambda x: torch.logical_not(x > 0).float()),
    "aten._to_copy.default": _unary(lambda x: (x * 4).to(torch.int32)),
    "aten.add.Tensor": _binary(torch.add),
    "aten.sub.Tensor": _binary(torch.sub),
    "aten.mul.Tensor": _binary(torch.mul),
    "aten.div.Tensor": _binary(torch.div),
    "aten.maximum.default": _binary(torch.maximum),
    "aten.minimum.default": _binary(torch.minimum),
    "aten.lt.Tensor": _binary(torch.lt),
    "aten.eq.Tensor": _binary(lambda x, y: torch.eq(x > 0, y > 0)),
    "aten.gt.Tensor": _binary(torch.gt),
    "aten.ge.Tensor": _binary(torch.ge),
    "aten.ne.Tensor": _binary(lambda x, y: torch.ne(x > 0, y > 0)),
    "aten.lt.Scalar": _unary(lambda x: (x < 0.25).float()),
    "aten.ge.Scalar": _unary(lambda x: (x >= 0.25).float()),
    "aten.gt.Scalar": _unary(lambda x: (x > 0.25).float()),
    "aten.le.Scalar": _unary(lambda x: (x <= 0.25).float()),
    "aten.ne.Scalar": _unary(lambda x: ((x > 0).float() != 0).float()),
    "aten.logical_and.default": _binary(lambda x, y: torch.logical_and(x > 0, y > 0)),
    "aten.logical_or.default": _binary(lambda x, y: torch.logical_or(x > 0, y > 0)),
    "aten.where.self": _binary(lambda x, y: torch.where(x < y, x, y * 2)),
    "aten.sum.dim_IntList": Case(lambda x: (x.sum(-1), x.sum(0)), _rows),
    "aten.mean.dim": Case(lambda x: (x.mean(-1), x.mean(0)), _rows),
    "aten.amax.default": Case(lambda x: (x.amax(-1), x.amax(0)), _rows),
    "aten.amin.default": Case(lambda x: (x.amin(-1), x.amin(0)), _rows),
    "aten._softmax.default": Case(lambda x: (x.softmax(-1), x.softmax(0)), _rows),
    "aten._log_softmax.default": Case(lambda x: (x.log_softmax(-1), x.log_softmax(0)), _rows),
    "aten.native_layer_norm.default": Case(
        lambda x: (F.layer_norm(x, (8,)), F.layer_norm(x, (8,)).sum(0)),
        lambda n: [torch.randn(n, 8)], ((0, 0),)),
    "aten.mm.default": Case(lambda x, w: (x @ w, (x @ w).sum(0)),
                            lambda n: [torch.randn(n, 8), torch.randn(8, 4)], ((0, 0),)),
    "aten.addmm.default": Case(lambda x, w, b: (F.linear(x, w, b), F.linear(x, w, b).sum(0)),
                               lambda n: [torch.randn(n, 8), torch.randn(4, 8), torch.randn(4)],
                               ((0, 0),)),
    # Contracts over the dynamic dim: padded keys must add nothing.
    "aten.bmm.default": Case(lambda q, k: (q @ k.transpose(1, 2), (q @ k.transpose(1, 2)) @ k),
                             lambda n: [torch.randn(2, n, 4), torch.randn(2, n, 4)],
                             ((0, 1), (1, 1))),
    "aten.view.default": Case(lambda x: (x.view(3, -1, 2), x.view(3, -1, 2).sum(1)),
                              lambda n: [torch.randn(3, n, 2)]),
    "aten.permute.default": Case(lambda x: (x.permute(1, 0) * 2, (x.permute(1, 0) * 2).sum(0)),
                                 _rows),
    "aten.unsqueeze.default": Case(lambda x: (x.unsqueeze(1) + x.unsqueeze(0)[:, :1],
                                              x.unsqueeze(1).sum(-1)), _rows),
    "aten.squeeze.dims": Case(lambda x: (x.squeeze(1) * 2, (x.squeeze(1) * 2).sum(-1)),
                             lambda n: [torch.randn(3, 1, n)], ((0, 2),)),
    "aten.expand.default": Case(lambda x: (x.sum(-1, keepdim=True).expand(3, x.shape[1]) * x,
                                           (x.amax(-1, keepdim=True).expand(3, x.shape[1])
                                            - x).sum(-1)), _rows),
    # Also a constant sliced up to the dynamic size (the lowering sizes that from static
    # types), reduced and returned as is (a view of an input).
    "aten.slice.Tensor": Case(lambda x, m: (x[:, 2:] * 2, (x[:, 2:] * 2).sum(-1), x[1:] + 1,
                                            m[:x.shape[1], :x.shape[1]].sum(-1),
                                            m[:x.shape[1], :x.shape[1]]),
                              lambda n: [torch.randn(3, n), torch.randn(20, 20)]),
    # Writes the dynamic-length src only: its padding must not land in self.
    "aten.slice_scatter.default": Case(
        lambda x, base, t: (torch.slice_scatter(base, x, 1, 0, x.shape[1]),
                            torch.slice_scatter(base, x * 2, 1, 3, x.shape[1] + 3).sum(-1),
                            torch.slice_scatter(torch.zeros(2, 20, dtype=t.dtype,
                                                            device=t.device), t, 1, 0,
                                                t.shape[1])),
        lambda n: [torch.randn(3, n), torch.randn(3, 20), torch.randint(0, 9, (2, n))],
        ((0, 1), (2, 1))),
    "aten.select.int": Case(lambda x: (x[1] * 2, (x[1] * 2).sum(-1), x[:, 0] + 1), _rows),
    "aten.split_with_sizes.default": Case(
        lambda x: tuple(p.sum(-1) for p in x.split([1, 2], dim=0)), _rows),
    "aten.alias.default": _unary(lambda x: torch.ops.aten.alias(x) * 2),
    # After the true end of the dynamic dim (Hugging Face's loss pads its labels so), and
    # along a static dim; integer labels too.
    "aten.constant_pad_nd.default": Case(
        lambda x, t: (F.pad(x, (0, 2), value=-1.0), F.pad(x, (1, 3)).sum(-1),
                      F.pad(x, (0, 0, 1, 1)) * 2, F.pad(t, (0, 1), value=-100)),
        lambda n: [torch.randn(3, n), torch.randint(0, 9, (2, n))], ((0, 1), (1, 1))),
    "aten.clone.default": Case(lambda x: (x.t().contiguous(), x.t().contiguous().sum(0)), _rows),
    # Along a static dim, and along the dynamic one (the second piece starts at the first
    # one's true size, not its bucket).
    "aten.cat.default": Case(lambda x, y, z: (torch.cat([x, y]), torch.cat([z, x], 1).sum(-1),
                                              torch.cat([x, z], 1) * 2),
                             lambda n: [torch.randn(3, n), torch.randn(2, n), torch.randn(3, 4)],
                             ((0, 1), (1, 1))),
    "aten.arange.start_step": Case(lambda x: (x + torch.arange(2, x.shape[1] + 2, device=x.device),
                                              (x * torch.arange(2, x.shape[1] + 2,
                                                                device=x.device)).sum(-1)), _rows),
    "aten.full.default": Case(lambda x: (x + torch.full((3, x.shape[1]), 2.0, device=x.device),
                                         torch.ones(x.shape[1], x.shape[1],
                                                    device=x.device).tril().sum(-1)), _rows),
    "aten.embedding.default": Case(lambda t, table: (F.embedding(t, table),
                                                     F.embedding(t, table).sum(1)),
                                   lambda n: [torch.randint(0, 20, (2, n)), torch.randn(20, 8)]),
    # What Hugging Face's Llama adds (mask and position code): any, bitwise_and, cumsum,
    # eq.Scalar, full_like, index, le.Tensor, mul.Scalar.
    "aten.any.dim": Case(lambda x: ((x > 0.5).any(-1), (x > 0.5).any(0).float() * 2), _rows),
    "aten.bitwise_and.Tensor": _binary(lambda x, y: (x > 0) & (y > 0)),
    # Along the dynamic dim, leading and not, and along a static dim; integers too (an
    # attention mask's positions; XLA folded the integer size count to the bucket).
    "aten.cumsum.default": Case(lambda x, y, m: (x.cumsum(-1), x.cumsum(0), y.cumsum(0),
                                                 y.cumsum(0).sum(0), m.cumsum(-1)),
                                lambda n: [torch.randn(3, n), torch.randn(n, 2),
                                           torch.randint(0, 2, (2, n))],
                                ((0, 1), (1, 0), (2, 1))),
    "aten.eq.Scalar": _unary(lambda x: ((x > 0).float() == 1).float()),
    "aten.full_like.default": Case(lambda x: (torch.full_like(x, 2.0) * x,
                                              torch.full_like(x, 2.0).sum(-1)), _rows),
    # Constant indices into the dynamic dim and into a static one, and a dynamic-length
    # index tensor into a static table.
    "aten.index.Tensor": Case(lambda x, i, table, p: (x[:, i], x[i[:2] % 3].sum(-1), table[p],
                                                      table[p].sum(-1)),
                              lambda n: [torch.randn(3, n), torch.tensor([0, 3, 1]),
                                         torch.randn(20), torch.randint(0, 20, (2, n))],
                              ((0, 1), (3, 1))),
    # A dynamic-length list of rows written into a static table (embedding's backward),
    # accumulated and not: the padded indices and values must write nothing.
    # (Distinct indices where not accumulated: which duplicate wins is unspecified.)
    # Also accumulated at a later dim (x[:, idx]'s gradient) and at two dims apart
    # (x[i, :, j]'s: the index dims come first in the values).
    "aten.index_put.default": Case(
        lambda i, p, v, table, w, wide, u, cube: (
            torch.index_put(table, (i,), v, accumulate=True),
            torch.index_put(table, (p,), v * 2).sum(-1),
            torch.ops.aten.index_put.default(wide, [None, i], w, True),
            torch.ops.aten.index_put.default(cube, [i % 3, None, i], u, True)),
        lambda n: [torch.randint(0, 20, (n,)), torch.randperm(20)[:n], torch.randn(n, 4),
                   torch.randn(20, 4), torch.randn(2, n, 4), torch.randn(2, 20, 4),
                   torch.randn(n, 5), torch.randn(3, 5, 20)],
        ((0, 0), (1, 0), (2, 0), (4, 1), (6, 0))),
    # Along a static dim of dynamic rows (a loss's label lookup and its gradient), and a
    # gather into the dynamic dim at positions inside the true size.
    "aten.gather.default": Case(
        lambda x, i, j: (torch.gather(x, 1, i), torch.gather(x, 1, i).sum(0),
                         torch.gather(x, 0, j)),
        lambda n: [torch.randn(n, 6), torch.randint(0, 6, (n, 1)), torch.randint(0, n, (2, 6))],
        ((0, 0), (1, 0))),
    "aten.scatter.value": Case(
        lambda x, i: (torch.full_like(x, 0.5).scatter(1, i, -1.0),
                      torch.full_like(x, 0.5).scatter(1, i, -1.0).sum(0)),
        lambda n: [torch.randn(n, 6), torch.randint(0, 6, (n, 1))], ((0, 0), (1, 0))),
    "aten.le.Tensor": _binary(torch.le),
    "aten.mul.Scalar": _unary(lambda x: torch.ops.aten.mul.Scalar(x, 2.5)),
    # What their backward graphs add: div.Scalar, add.Scalar, empty_permuted.
    "aten.div.Scalar": _unary(lambda x: torch.ops.aten.div.Scalar(x, 2.5)),
    "aten.add.Scalar": _unary(lambda x: torch.ops.aten.add.Scalar(x, 2.5)),
    # (SiLU's backward: ones shaped like a new, uninitialized tensor.)
    "aten.empty_permuted.default": Case(
        lambda x: (torch.full_like(torch.empty_permuted(x.shape, (0, 1), device=x.device),
                                   1.0) - x.sigmoid(),
                   torch.full_like(torch.empty_permuted(x.shape, (0, 1), device=x.device),
                                   1.0).sum(-1)), _rows),
    # Also what fixed-length slices of a dynamic dim become (x[:, :2] here).
    "aten.index_select.default": Case(
        lambda x, i: (x.index_select(1, i), x.index_select(0, i[:1]).sum(-1), x[:, :2] * 2),
        lambda n: [torch.randn(3, n), torch.tensor([0, 3, 1])]),
}


def _op(name: str) -> torch._ops.OpOverload:
    _, op, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, op), overload)


def test_every_case_is_an_op_with_a_rule() -> None:
    missing = [name for name in CASES if RULES.get(_op(name)) is None]
    assert not missing


def _touched_ops(gm: torch.fx.GraphModule) -> list[str]:
    """Ops of `gm` that read or make a tensor with a symbolic dim."""
    def symbolic(v: Any) -> bool:
        return isinstance(v, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in v.shape)

    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"
            and any(symbolic(v) for v in [n.meta.get("val")] +
                    [a.meta.get("val") for a in n.all_input_nodes])]


def _cpu(v: Any) -> Any:
    return tuple(_cpu(x) for x in v) if isinstance(v, (tuple, list)) else v.cpu()


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_runs_padded_and_exact(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    case = CASES[name]
    seen: list[str] = []
    real = runner.plan

    def recording(gm: torch.fx.GraphModule, *args: Any) -> Any:
        seen.extend(_touched_ops(gm))
        return real(gm, *args)

    monkeypatch.setattr(runner, "plan", recording)
    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(case.fn, backend="tpu")
    metrics = torchtpu.debug.metrics()
    before = metrics.get("num_graphs_compiled", 0), programs_obtained()
    for n in LENGTHS:
        args = case.inputs(n)
        on_tpu = [a.to("tpu") for a in args]
        for i, d in case.dynamic:
            torch._dynamo.mark_dynamic(on_tpu[i], d)
        with torch.no_grad():
            got = _cpu(compiled(*on_tpu))
        torch.testing.assert_close(got, case.fn(*args), rtol=1e-5, atol=1e-5,
                                   msg=lambda m, n=n: f"{name} at length {n}: {m}")
    assert name in seen, f"{name} is not in the compiled graph on a dynamic dim: {seen}"
    metrics = torchtpu.debug.metrics()
    assert metrics["num_graphs_compiled"] - before[0] == 1
    # The graph (unless an earlier test compiled the very same one), nothing else.
    assert programs_obtained() - before[1] <= 1, "a program besides the graph was needed"
