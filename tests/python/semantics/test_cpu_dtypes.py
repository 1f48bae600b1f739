"""Dtypes a CPU kernel refuses are refused on tpu with the CPU's error, where our lowering
would compute anyway (softmax of int64 gave zeros, var of int64 an int64): csrc/aten/
cpu_dtypes.cc. Each case raises on the CPU; on tpu it must raise the same type with the
same message, and the accepted dtypes next to it still compute."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_same, eager_mode

_I = torch.tensor([[1, 2, 3], [4, 5, 6]])
_B = _I > 2

_REFUSED = {
    "softmax int64": lambda: torch.softmax(_I, 1),
    "softmax dim 0": lambda: torch.softmax(_I, 0),
    "log_softmax bool": lambda: torch.log_softmax(_B, 1),
    "log_softmax dim 0": lambda: torch.log_softmax(_I, 0),
    "var": lambda: _I.var(),
    "std dim": lambda: _I.std(0),
    "var_mean": lambda: torch.var_mean(_I),
    "gelu int8": lambda: F.gelu(_I.to(torch.int8)),
    "silu uint8": lambda: F.silu(_I.to(torch.uint8)),
    "mish int16": lambda: F.mish(_I.short()),
    "hardswish bool": lambda: F.hardswish(_B),
    "hardsigmoid": lambda: F.hardsigmoid(_I),
    "glu": lambda: F.glu(torch.ones(2, 4, dtype=torch.long)),
    "logsigmoid": lambda: F.logsigmoid(_I),
    "softplus": lambda: F.softplus(_I),
    "hardshrink": lambda: F.hardshrink(_I),
    "huber_loss": lambda: F.huber_loss(_I, _I),
    "smooth_l1_loss": lambda: F.smooth_l1_loss(_I, _I),
    "nll_loss": lambda: F.nll_loss(_I, torch.tensor([0, 1])),
    "cross_entropy": lambda: F.cross_entropy(_I, torch.tensor([0, 1])),
    "logaddexp": lambda: torch.logaddexp(_I, _I),
    "logaddexp2 bool": lambda: torch.logaddexp2(_B, _B),
    "lerp scalar": lambda: torch.lerp(_I, _I, 2),
    "lerp tensor": lambda: torch.lerp(_I, _I, _I),
    "round decimals": lambda: torch.round(_I, decimals=1),
    "round bool": lambda: torch.round(_B),
    "floor bool": lambda: torch.floor(_B),
    "avg_pool2d int32": lambda: F.avg_pool2d(_I[None].int(), 1),
    "avg_pool3d uint8": lambda: F.avg_pool3d(_I[None, None].to(torch.uint8), 1),
    "mm bool": lambda: _B @ _B.T,
    "bmm bool": lambda: torch.bmm(_B[None], _B.T[None]),
    "dot bool": lambda: torch.dot(_B[0], _B[0]),
    "mv bool": lambda: torch.mv(_B, _B[0]),
    "addcmul bool": lambda: torch.addcmul(_B, _B, _B),
    "threshold bool": lambda: F.threshold(_B, 0, 1),
    "trace bool": lambda: _B.trace(),
    "median bool": lambda: _B.median(),
    "median dim bool": lambda: _B.median(0),
    "kthvalue bool": lambda: _B.kthvalue(1),
    "relu bool": lambda: F.relu(_B),
    "max_pool2d bool": lambda: F.max_pool2d(_B[None].clone(), 1),
    "max_unpool2d int64": lambda: F.max_unpool2d(_I[None, None], torch.zeros_like(_I)[None, None], 1),
    "reflection_pad1d bool": lambda: F.pad(_B[None], (1, 1), mode="reflect"),
    "reflection_pad2d bool": lambda: F.pad(_B[None, None], (1, 1, 1, 1), mode="reflect"),
    "index_reduce bool": lambda: _B[0].index_reduce(0, torch.zeros_like(_I[0]), _B[1], "amax"),
    "searchsorted bool": lambda: torch.searchsorted(_B[0], _B[1]),
}


def _on(device: str, fn):
    """`fn` with the module tensors moved to `device` for the call."""
    global _I, _B
    saved = _I, _B
    _I, _B = saved[0].to(device), saved[1].to(device)
    try:
        return fn()
    finally:
        _I, _B = saved


@pytest.mark.parametrize("mode", ["op", "fused"])
@pytest.mark.parametrize("name", list(_REFUSED))
def test_refused_dtype_raises_the_cpu_error(name: str, mode: str) -> None:
    fn = _REFUSED[name]
    with pytest.raises(Exception) as cpu:
        _on("cpu", fn)
    with eager_mode(mode), pytest.raises(Exception) as tpu:
        _on("tpu", fn)
        torch.tpu.synchronize()
    assert type(tpu.value) is type(cpu.value)
    assert str(tpu.value).splitlines()[0] == str(cpu.value).splitlines()[0]


@pytest.mark.parametrize("name,fn", [
    ("softmax to float", lambda x: torch.softmax(x, 1, dtype=torch.float32)),
    ("logaddexp int with float", lambda x: torch.logaddexp(x, x.float())),
    ("round int", torch.round),
    ("avg_pool2d int64", lambda x: F.avg_pool2d(x[None], 1)),
    ("mm int", lambda x: x @ x.T),
    ("relu int", F.relu),
    ("median int", lambda x: x.median()),
])
def test_accepted_dtypes_still_compute(name: str, fn) -> None:
    assert_same(fn, _I)
