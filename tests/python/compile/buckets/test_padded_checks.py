"""Data checks of graphs run padded to shape buckets, in fused eager mode (shape classes)
and under ``torch.compile(dynamic=True)``: an index into a padded dim (or a loss target
over padded classes) is checked against the dim's true size, not its bucket's, and the
padding of an index tensor fails no check.

Each case runs at lengths 9..12 (one bucket, 16) with valid indices, computed from an
input so that the index tensor's padding would be out of range if it reached a check,
including the true last position and, where the op takes them, negative ones, and
compares with the CPU. Then, at length 11, one index in [11, 16) (or below -11) must raise
the CPU's exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from _compare import eager_mode

import torchtpu

LENGTHS = range(9, 13)
BAD_AT = 11
SHIFT = 5  # indices arrive shifted by SHIFT: an index tensor's padding (zeros) reads -SHIFT


@dataclass(frozen=True)
class Case:
    fn: Callable[..., torch.Tensor]
    inputs: Callable[[int], list[torch.Tensor]]  # valid CPU inputs at length t
    # Bad calls: (input, value at its last element) for length t, the value shifted too.
    bad: tuple[tuple[int, Callable[[int], int]], ...]
    # The exception type when compiled, where it is not the CPU's (None: the CPU's).
    compiled_error: type | None = None


def _positions(t: int) -> torch.Tensor:
    return torch.randperm(t) + SHIFT


def _from_both_ends(t: int) -> torch.Tensor:
    """Every position once, every other one counted from the true end (negative)."""
    return torch.randperm(t) - t * (torch.arange(t) % 2) + SHIFT


_PAST = (lambda t: t + 2 + SHIFT,)  # past the true size, inside the bucket
_BEFORE = (lambda t: -t - 1 + SHIFT,)  # before the true start, after the bucket's

CASES: dict[str, Case] = {
    "index_select": Case(lambda x, i: (x * 2).index_select(0, i - SHIFT),
                         lambda t: [torch.randn(t, 3), _positions(t)], ((1, *_PAST),)),
    "index": Case(lambda x, i: (x * 2)[i - SHIFT],
                  lambda t: [torch.randn(t, 3), _from_both_ends(t)],
                  ((1, *_PAST), (1, *_BEFORE))),
    "embedding": Case(lambda w, i: F.embedding(i - SHIFT, w * 2),
                      lambda t: [torch.randn(t, 3), _positions(t)], ((1, *_PAST),)),
    "gather": Case(lambda x, i: torch.gather(x * 2, 0, i - SHIFT),
                   lambda t: [torch.randn(t, 3), torch.stack([_positions(t)] * 3, 1)],
                   ((1, *_PAST),)),
    "scatter_add": Case(lambda x, i: (x * 2).scatter_add(0, i - SHIFT, x),
                        lambda t: [torch.randn(t, 3), torch.stack([_positions(t)] * 3, 1)],
                        ((1, *_PAST),)),
    "index_put_accumulate": Case(
        lambda x, i: (x * 2).index_put((i - SHIFT,), x, accumulate=True),
        lambda t: [torch.randn(t, 3), _from_both_ends(t)], ((1, *_PAST), (1, *_BEFORE))),
    # The compiled rewrite finds each row's last writer with a scatter, whose bounds error
    # PyTorch types RuntimeError (index_put's is an IndexError).
    "index_put": Case(lambda x, i: (x * 2).index_put((i - SHIFT,), x),
                      lambda t: [torch.randn(t, 3), _from_both_ends(t)],
                      ((1, *_PAST), (1, *_BEFORE)), compiled_error=RuntimeError),
    # Logits of a batch against itself (a contrastive loss): the classes are padded too.
    # Compiled graphs decompose nll_loss into a gather, whose bounds error PyTorch types
    # RuntimeError (nll_loss's is an IndexError).
    "cross_entropy": Case(lambda x, y: F.cross_entropy(x * 2, y - SHIFT),
                          lambda t: [torch.randn(t, t), _positions(t)], ((1, *_PAST),),
                          compiled_error=RuntimeError),
}


def _with_bad(inputs: list[torch.Tensor], at: int, value: int) -> list[torch.Tensor]:
    out = [x.clone() for x in inputs]
    out[at].view(-1)[-1] = value
    return out


def _cpu_error(fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> type:
    try:
        fn(*inputs)
    except Exception as e:  # what PyTorch raises on the CPU, compared below
        return type(e)
    raise AssertionError("the CPU accepted the bad index")


def _run(name: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "8")
    case = CASES[name]
    if mode == "compiled":
        torch._dynamo.reset()
        fn: Callable[..., Any] = torch.compile(case.fn, backend="tpu", dynamic=True)
    else:
        fn = case.fn
    padded_before = torchtpu._C.counters().get("num_fused_graphs_run_by_shape_class", 0)
    graphs_before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    with eager_mode("fused" if mode == "fused" else "op"):
        for t in LENGTHS:
            inputs = case.inputs(t)
            got = fn(*[x.to("tpu") for x in inputs]).cpu()
            torch.testing.assert_close(got, case.fn(*inputs), rtol=1e-5, atol=1e-5,
                                       msg=lambda m, t=t: f"{name} at length {t}: {m}")
        # The lengths ran padded: one program for the bucket (compiled), or the shape class's.
        if mode == "compiled":
            assert torchtpu.debug.metrics()["num_graphs_compiled"] - graphs_before == 1
        else:
            padded = torchtpu._C.counters()["num_fused_graphs_run_by_shape_class"]
            assert padded - padded_before >= len(LENGTHS) - 2
        for at, value in case.bad:
            inputs = _with_bad(case.inputs(BAD_AT), at, value(BAD_AT))
            expected = _cpu_error(case.fn, inputs)
            if mode == "compiled" and case.compiled_error is not None:
                expected = case.compiled_error
            with pytest.raises(expected, match="out of bounds|out of range") as e:
                fn(*[x.to("tpu") for x in inputs]).cpu()
            # Fused, the exact-size program reports it; compiled, the padded program says
            # that the sizes its message names are buckets.
            assert (mode == "compiled") == ("padded to shape buckets" in str(e.value))
    assert torchtpu._C.num_pending_data_checks() == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_eager_checks_true_sizes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(name, "fused", monkeypatch)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_dynamic_checks_true_sizes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(name, "compiled", monkeypatch)
