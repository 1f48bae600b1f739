"""Dtypes a CPU kernel refuses are refused on tpu with the CPU's error, where our lowering
would compute anyway (softmax of int64 gave zeros, var of int64 an int64): csrc/aten/
cpu_dtypes.cc. Each case raises on the CPU; on tpu it must raise the same type with the
same message, and the accepted dtypes next to it still compute. Each case builds its
tensors from the ones it is given, so the tpu call runs on tpu tensors only."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_same, eager_mode

_I = torch.tensor([[1, 2, 3], [4, 5, 6]])
_B = _I > 2

_REFUSED = {
    "softmax int64": lambda i, b: torch.softmax(i, 1),
    "softmax dim 0": lambda i, b: torch.softmax(i, 0),
    "log_softmax bool": lambda i, b: torch.log_softmax(b, 1),
    "log_softmax dim 0": lambda i, b: torch.log_softmax(i, 0),
    "var": lambda i, b: i.var(),
    "std dim": lambda i, b: i.std(0),
    "var_mean": lambda i, b: torch.var_mean(i),
    "gelu int8": lambda i, b: F.gelu(i.to(torch.int8)),
    "silu uint8": lambda i, b: F.silu(i.to(torch.uint8)),
    "mish int16": lambda i, b: F.mish(i.short()),
    "hardswish bool": lambda i, b: F.hardswish(b),
    "hardsigmoid": lambda i, b: F.hardsigmoid(i),
    "glu": lambda i, b: F.glu(torch.cat([i, i], 1)),
    "logsigmoid": lambda i, b: F.logsigmoid(i),
    "softplus": lambda i, b: F.softplus(i),
    "hardshrink": lambda i, b: F.hardshrink(i),
    "huber_loss": lambda i, b: F.huber_loss(i, i),
    "smooth_l1_loss": lambda i, b: F.smooth_l1_loss(i, i),
    "nll_loss": lambda i, b: F.nll_loss(i, i[:, 0] // 4),  # targets 0, 1
    "cross_entropy": lambda i, b: F.cross_entropy(i, i[:, 0] // 4),
    "logaddexp": lambda i, b: torch.logaddexp(i, i),
    "logaddexp2 bool": lambda i, b: torch.logaddexp2(b, b),
    "lerp scalar": lambda i, b: torch.lerp(i, i, 2),
    "lerp tensor": lambda i, b: torch.lerp(i, i, i),
    "round decimals": lambda i, b: torch.round(i, decimals=1),
    "round bool": lambda i, b: torch.round(b),
    "floor bool": lambda i, b: torch.floor(b),
    "avg_pool2d int32": lambda i, b: F.avg_pool2d(i[None].int(), 1),
    "avg_pool3d uint8": lambda i, b: F.avg_pool3d(i[None, None].to(torch.uint8), 1),
    "mm bool": lambda i, b: b @ b.T,
    "bmm bool": lambda i, b: torch.bmm(b[None], b.T[None]),
    "dot bool": lambda i, b: torch.dot(b[0], b[0]),
    "mv bool": lambda i, b: torch.mv(b, b[0]),
    "addcmul bool": lambda i, b: torch.addcmul(b, b, b),
    "threshold bool": lambda i, b: F.threshold(b, 0, 1),
    "trace bool": lambda i, b: b.trace(),
    "median bool": lambda i, b: b.median(),
    "median dim bool": lambda i, b: b.median(0),
    "kthvalue bool": lambda i, b: b.kthvalue(1),
    "relu bool": lambda i, b: F.relu(b),
    "max_pool2d bool": lambda i, b: F.max_pool2d(b[None].clone(), 1),
    "max_unpool2d int64": lambda i, b: F.max_unpool2d(i[None, None], torch.zeros_like(i)[None, None], 1),
    "reflection_pad1d bool": lambda i, b: F.pad(b[None], (1, 1), mode="reflect"),
    "reflection_pad2d bool": lambda i, b: F.pad(b[None, None], (1, 1, 1, 1), mode="reflect"),
    "index_reduce bool": lambda i, b: b[0].index_reduce(0, torch.zeros_like(i[0]), b[1], "amax"),
    "searchsorted bool": lambda i, b: torch.searchsorted(b[0], b[1]),
    "interpolate nearest int64": lambda i, b: F.interpolate(i[None, None], scale_factor=2),
    "interpolate nearest1d bool": lambda i, b: F.interpolate(b[None], scale_factor=2),
    "interpolate nearest-exact int32": lambda i, b: F.interpolate(
        i[None, None].int(), scale_factor=2, mode="nearest-exact"),
    "interpolate bilinear int8": lambda i, b: F.interpolate(
        i[None, None].to(torch.int8), scale_factor=2, mode="bilinear"),
    "interpolate linear uint8": lambda i, b: F.interpolate(
        i[None].to(torch.uint8), scale_factor=2, mode="linear"),
    "interpolate bicubic antialias": lambda i, b: F.interpolate(
        i[None, None], scale_factor=2, mode="bicubic", antialias=True),
    "conv2d bool": lambda i, b: F.conv2d(b[None, None], b[None, None]),
    "conv3d bool": lambda i, b: F.conv3d(b[None, None, None], b[None, None, None]),
    "conv1d dilated int32": lambda i, b: F.conv1d(i[None].int(), i[None, :, :2].int(), dilation=2),
    "conv_transpose2d uint8": lambda i, b: F.conv_transpose2d(
        i[None, None].to(torch.uint8), i[None, None].to(torch.uint8)),
    "conv_transpose3d int16": lambda i, b: F.conv_transpose3d(
        i[None, None, None].short(), i[None, None, None].short()),
    "bernoulli int64": lambda i, b: torch.bernoulli(i),
    "bernoulli_ int64 p": lambda i, b: i.float().bernoulli_(i // 6),
    "scatter_reduce mean bool": lambda i, b: b[0].scatter_reduce(0, i[0] // 4, b[1], "mean"),
    "div trunc complex": lambda i, b: torch.div(i.cfloat(), i, rounding_mode="trunc"),
    "div floor complex scalar": lambda i, b: torch.div(i.cfloat(), 2, rounding_mode="floor"),
}


@pytest.mark.parametrize("mode", ["op", "fused"])
@pytest.mark.parametrize("name", list(_REFUSED))
def test_refused_dtype_raises_the_cpu_error(name: str, mode: str) -> None:
    fn = _REFUSED[name]
    with pytest.raises(Exception) as cpu:
        fn(_I, _B)
    with eager_mode(mode), pytest.raises(Exception) as tpu:
        fn(_I.to("tpu"), _B.to("tpu"))
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
    ("interpolate nearest uint8", lambda x: F.interpolate(x[None, None].to(torch.uint8), scale_factor=2)),
    ("conv2d int64", lambda x: F.conv2d(x[None, None], x[None, None, :, :2])),
    ("conv2d dilated int64", lambda x: F.conv2d(x[None, None], x[None, None, :1, :2], dilation=2)),
    ("conv_transpose2d int64", lambda x: F.conv_transpose2d(x[None, None], x[None, None])),
    ("conv2d int32 empty batch", lambda x: F.conv2d(x[None, None].int()[:0], x[None, None].int())),
    ("bernoulli p int64", lambda x: torch.bernoulli(x // 8, 0.5)),
    ("bernoulli_ of int64 by float p", lambda x: x.bernoulli_(torch.ones_like(x, dtype=torch.float))),
    ("scatter_reduce mean int64", lambda x: x[0].scatter_reduce(0, x[0] // 4, x[1], "mean")),
    ("div trunc int64", lambda x: torch.div(x, 2, rounding_mode="trunc")),
    ("div complex", lambda x: torch.div(x.cfloat(), x)),
])
def test_accepted_dtypes_still_compute(name: str, fn) -> None:
    assert_same(fn, _I)
