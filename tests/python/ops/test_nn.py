"""NN ops: activations, softmax, normalization, dropout, losses, embedding, conv, pooling."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _compare import (
    FLOAT_DTYPES,
    assert_raises_like_cpu,
    assert_same,
    fallbacks,
    make,
    new_fallbacks,
)

import torchtpu

NN_TOLS = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}
# Normalizations and convolutions accumulate over many elements.
ACC_TOLS = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 1e-1)}

ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "elu": F.elu,
    "softplus": F.softplus,
    "hardtanh": F.hardtanh,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
    "relu6": F.relu6,
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_activation(name: str, dtype: torch.dtype) -> None:
    assert_same(ACTIVATIONS[name], make((4, 9), dtype, low=-5, high=5), dtype_tols=NN_TOLS)


def test_relu_int64_and_inplace() -> None:
    assert_same(F.relu, make((3, 4), torch.int64, low=-5, high=5))
    assert_same(lambda x: F.relu(x.clone(), inplace=True), make((3, 4), torch.float32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax_log_softmax(dtype: torch.dtype, dim: int) -> None:
    x = make((4, 10), dtype, low=-8, high=8)
    assert_same(lambda t: F.softmax(t, dim=dim), x, dtype_tols=NN_TOLS)
    assert_same(lambda t: F.log_softmax(t, dim=dim), x, dtype_tols=NN_TOLS)


def test_softmax_large_values_and_dtype_arg() -> None:
    x = torch.tensor([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -999.0]])
    assert_same(lambda t: F.softmax(t, dim=1), x)
    assert_same(lambda t: F.log_softmax(t, dim=1), x)
    assert_same(lambda t: F.softmax(t, dim=1, dtype=torch.float32), make((2, 5), torch.bfloat16))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_layer_norm(dtype: torch.dtype) -> None:
    x = make((2, 3, 16), dtype)
    w, b = make((16,), dtype), make((16,), dtype)
    assert_same(lambda t, ww, bb: F.layer_norm(t, (16,), ww, bb), x, w, b, dtype_tols=ACC_TOLS)
    assert_same(lambda t: F.layer_norm(t, (3, 16)), x, dtype_tols=ACC_TOLS)


def test_group_norm() -> None:
    x = make((2, 6, 4, 4), torch.float32)
    assert_same(lambda t, w, b: F.group_norm(t, 3, w, b), x, make((6,), torch.float32),
                make((6,), torch.float32), dtype_tols=ACC_TOLS)


def test_batch_norm_train_and_eval() -> None:
    x = make((4, 3, 5, 5), torch.float32)

    def bn(t: torch.Tensor, training: bool) -> tuple[torch.Tensor, ...]:
        mean = torch.zeros(3, device=t.device)
        var = torch.ones(3, device=t.device)
        w = torch.linspace(0.5, 1.5, 3, device=t.device)
        out = F.batch_norm(t, mean, var, w, None, training=training, momentum=0.1)
        return out, mean, var

    assert_same(lambda t: bn(t, True), x, dtype_tols=ACC_TOLS)
    assert_same(lambda t: bn(t, False), x, dtype_tols=ACC_TOLS)


@pytest.mark.parametrize("dtype,stats_dtype,affine", [
    (torch.float32, torch.float32, True), (torch.float32, torch.float32, False),
    (torch.float64, torch.float64, True), (torch.bfloat16, torch.float32, False),
    (torch.bfloat16, torch.bfloat16, True)])
def test_batch_norm_with_update_like_cpu(dtype: torch.dtype, stats_dtype: torch.dtype,
                                         affine: bool) -> None:
    # The op export and compile graphs call for training-mode batch norm: results (their
    # dtypes included) and the running statistics it updates in place, as on the CPU.
    x = make((4, 3, 5), dtype)
    w, bias = (make((3,), dtype), make((3,), dtype)) if affine else (None, None)
    tols = {torch.bfloat16: (2e-2, 2e-2)}
    if stats_dtype == torch.bfloat16:
        tols[torch.float32] = (2e-2, 2e-2)

    def run(t, w, bias, mean, var):
        mean, var = mean.clone(), var.clone()  # updated in place
        results = torch.ops.aten._batch_norm_with_update(t, w, bias, mean, var, 0.1, 1e-5)
        return (*results, mean, var)

    stats = (torch.randn(3, dtype=stats_dtype), torch.rand(3, dtype=stats_dtype) + 0.5)
    assert_same(run, x, w, bias, *stats, dtype_tols=tols)
    functional = torch.ops.aten._batch_norm_with_update_functional
    assert_same(lambda *a: tuple(functional(*a, 0.1, 1e-5)), x, w, bias, *stats,
                dtype_tols=tols)


def test_batch_norm_with_update_gradients_like_cpu() -> None:
    # Its backward is batch_norm_backward (with a reserve tensor), lowered like
    # native_batch_norm_backward: gradients of the input, weight and bias on the device.
    x, w, bias = make((4, 3, 5), torch.float32), make((3,), torch.float32), make((3,), torch.float32)

    def grads(t, w, bias):
        t, w, bias = (v.clone().requires_grad_(True) for v in (t, w, bias))
        mean, var = torch.zeros(3, device=t.device), torch.ones(3, device=t.device)
        out = torch.ops.aten._batch_norm_with_update(t, w, bias, mean, var, 0.1, 1e-5)[0]
        (out * torch.arange(out.numel(), device=t.device).view(out.shape)).sum().backward()
        return t.grad, w.grad, bias.grad

    assert_same(grads, x, w, bias, dtype_tols={torch.float32: (1e-4, 1e-4)})


def test_dropout_statistics() -> None:
    torchtpu.manual_seed(0)
    p = 0.3
    x = torch.ones(200, 200, device="tpu")
    y = F.dropout(x, p=p, training=True)
    assert y.device.type == "tpu"
    kept = (y != 0).float().mean().item()
    assert abs(kept - (1 - p)) < 0.01, f"kept fraction {kept}, expected {1 - p}"
    nonzero = y.cpu()[y.cpu() != 0]
    torch.testing.assert_close(nonzero, torch.full_like(nonzero, 1 / (1 - p)))
    assert torch.equal(F.dropout(x, p=p, training=False).cpu(), x.cpu())
    torchtpu.manual_seed(0)
    y2 = F.dropout(x, p=p, training=True)
    assert torch.equal(y.cpu(), y2.cpu()), "dropout mask is not reproducible from the seed"
    assert not torch.equal(y.cpu(), F.dropout(x, p=p, training=True).cpu())


def test_rrelu_evaluation_like_cpu_and_training_statistics() -> None:
    torch.manual_seed(0)
    x = make((300, 40), torch.float32)
    assert_same(lambda t: F.rrelu(t, 0.1, 0.3, training=False), x)
    neg = x <= 0
    torchtpu.manual_seed(0)
    noise = torch.zeros(x.shape, device="tpu")
    y = torch.ops.aten.rrelu_with_noise(x.to("tpu"), noise, 0.1, 0.3, True).cpu()
    n = noise.cpu()
    # Elements > 0 pass with noise 1; the others are scaled by their noise, U(0.1, 0.3).
    assert torch.equal(y[~neg], x[~neg]) and torch.equal(n[~neg], torch.ones_like(n[~neg]))
    torch.testing.assert_close(y[neg], x[neg] * n[neg])
    r = n[neg]
    assert bool(((r >= 0.1) & (r <= 0.3)).all())
    assert abs(r.mean().item() - 0.2) < 0.005 and abs(r.var().item() - 0.04 / 12) < 4e-4
    torchtpu.manual_seed(0)
    again = torch.zeros(x.shape, device="tpu")
    torch.ops.aten.rrelu_with_noise(x.to("tpu"), again, 0.1, 0.3, True)
    assert torch.equal(again.cpu(), n), "rrelu's noise is not reproducible from the seed"
    # In place, and the gradient is the noise.
    t = x.to("tpu").requires_grad_()
    out = F.rrelu(t, 0.1, 0.3, training=True)
    out.sum().backward()
    g = t.grad.cpu()
    torch.testing.assert_close(g[neg] * x[neg], out.detach().cpu()[neg])
    z = x.to("tpu")
    F.rrelu_(z, 0.1, 0.3, training=True)
    assert torch.equal(z.cpu()[~neg], x[~neg])


def test_rrelu_refusals_like_cpu() -> None:
    x = make((4, 6), torch.float32)
    op = torch.ops.aten.rrelu_with_noise
    # lower > upper once an element <= 0 is met; all-positive inputs compute, as on the CPU.
    assert_raises_like_cpu(lambda t, n: op(t, n, 0.3, 0.1, True), x - 10, torch.zeros(4, 6))
    assert_same(lambda t, n: op(t, n, 0.3, 0.1, True), x.abs() + 1, torch.zeros(4, 6))
    assert_raises_like_cpu(lambda t, n: op(t, n, 0.1, 0.3, False), x, torch.zeros(5))
    assert_raises_like_cpu(lambda t, n: op(t, n, 0.1, 0.3, True), x,
                           torch.zeros(4, 6, dtype=torch.float64))


def test_dropout_edges() -> None:
    x = torch.randn(10, 10, device="tpu")
    assert torch.equal(F.dropout(x, p=0.0).cpu(), x.cpu())
    assert torch.count_nonzero(F.dropout(x, p=1.0)).item() == 0


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy(dtype: torch.dtype, reduction: str) -> None:
    logits = make((6, 5), dtype)
    target = torch.randint(0, 5, (6,))
    assert_same(lambda x, t: F.cross_entropy(x, t, reduction=reduction), logits, target,
                dtype_tols=ACC_TOLS)


def test_cross_entropy_options() -> None:
    logits = make((6, 5), torch.float32)
    target = torch.tensor([0, 4, -100, 2, 2, 1])
    weight = torch.rand(5) + 0.5
    assert_same(lambda x, t: F.cross_entropy(x, t), logits, target)  # ignore_index=-100
    assert_same(lambda x, t, w: F.cross_entropy(x, t, weight=w), logits, target, weight,
                dtype_tols=ACC_TOLS)
    assert_same(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), logits,
                target.clamp(min=0), dtype_tols=ACC_TOLS)
    # Spatial targets (N, C, H, W) use nll_loss2d.
    assert_same(lambda x, t: F.cross_entropy(x, t), make((2, 4, 3, 3), torch.float32),
                torch.randint(0, 4, (2, 3, 3)), dtype_tols=ACC_TOLS)


def test_nll_loss() -> None:
    logp = F.log_softmax(make((5, 4), torch.float32), dim=1)
    target = torch.randint(0, 4, (5,))
    assert_same(F.nll_loss, logp, target)
    assert_same(lambda x, t: F.nll_loss(x, t, reduction="none"), logp, target)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_regression_losses(dtype: torch.dtype) -> None:
    a, b = make((4, 6), dtype), make((4, 6), dtype)
    assert_same(F.mse_loss, a, b, dtype_tols=ACC_TOLS)
    assert_same(lambda x, y: F.mse_loss(x, y, reduction="none"), a, b, dtype_tols=ACC_TOLS)
    assert_same(F.smooth_l1_loss, a, b, dtype_tols=ACC_TOLS)
    assert_same(F.huber_loss, a, b, dtype_tols=ACC_TOLS)
    assert_same(F.l1_loss, a, b, dtype_tols=ACC_TOLS)


def test_binary_cross_entropy() -> None:
    p = make((4, 5), torch.float32, low=0.05, high=0.95)
    t = torch.rand(4, 5)
    assert_same(F.binary_cross_entropy, p, t, dtype_tols=ACC_TOLS)
    assert_same(F.binary_cross_entropy_with_logits, make((4, 5), torch.float32), t,
                dtype_tols=ACC_TOLS)


@pytest.mark.parametrize("target", [[0.0, 2.0], [0.0, -1.0], [0.5, float("nan")]])
def test_binary_cross_entropy_refuses_a_target_outside_0_1(target) -> None:
    e = assert_raises_like_cpu(F.binary_cross_entropy, torch.tensor([0.3, 0.5]),
                               torch.tensor(target))
    assert "target should be between 0 and 1" in str(e)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_embedding(dtype: torch.dtype) -> None:
    weight = make((10, 4), dtype)
    idx = torch.tensor([[0, 3, 9], [3, 3, 1]])
    assert_same(F.embedding, idx, weight)
    assert_same(lambda i, w: F.embedding(i, w, padding_idx=3), idx, weight)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("stride,padding,dilation,groups", [
    (1, 0, 1, 1),
    (2, 1, 1, 1),
    (1, 2, 2, 1),
    (1, 1, 1, 2),
])
def test_conv2d(dtype: torch.dtype, stride: int, padding: int, dilation: int, groups: int) -> None:
    x = make((2, 4, 8, 8), dtype)
    w = make((6, 4 // groups, 3, 3), dtype)
    b = make((6,), dtype)
    assert_same(lambda t, ww, bb: F.conv2d(t, ww, bb, stride, padding, dilation, groups), x, w, b,
                dtype_tols={torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 3e-1)})


def test_conv1d_and_transposed() -> None:
    f = torch.float32
    tols = {f: (1e-4, 1e-4)}
    assert_same(lambda t, w: F.conv1d(t, w, padding=1), make((2, 3, 10), f), make((5, 3, 3), f),
                dtype_tols=tols)
    assert_same(lambda t, w: F.conv_transpose2d(t, w, stride=2), make((1, 4, 5, 5), f),
                make((4, 2, 3, 3), f), dtype_tols=tols)


_X2, _W2 = make((1, 2, 5, 5), torch.float32), make((4, 2, 3, 3), torch.float32)
_BAD_CONVOLUTIONS = {
    "negative padding": lambda x, w: F.conv2d(x, w, padding=-1),
    "zero stride": lambda x, w: F.conv2d(x, w, stride=0),
    "zero dilation": lambda x, w: F.conv2d(x, w, dilation=0),
    "zero groups": lambda x, w: F.conv2d(x, w, groups=0),
    "stride of the wrong length": lambda x, w: F.conv2d(x, w, stride=(1, 1, 1)),
    "groups over the weight's outputs": lambda x, w: F.conv2d(x, w, groups=8),
    "groups not dividing the weight's outputs": lambda x, w: F.conv2d(x, w[:3], groups=2),
    "input channels": lambda x, w: F.conv2d(x[:, :1], w),
    "bias size": lambda x, w: F.conv2d(x, w, w[0, 0, 0]),
    "kernel larger than the input": lambda x, w: F.conv2d(x[..., :2], w),
    "weight rank": lambda x, w: torch.ops.aten.convolution(
        x[0], w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
    "negative output_padding": lambda x, w: torch.ops.aten.convolution(
        x, w.transpose(0, 1), None, [2, 2], [0, 0], [1, 1], True, [-1, -1], 1),
    "output_padding not below stride or dilation": lambda x, w: F.conv_transpose2d(
        x, w[:2], stride=(2, 3), output_padding=(2, 1)),
    "output_padding not below stride, 1d": lambda x, w: F.conv_transpose1d(
        x[..., 0], w[:2, :, 0], stride=2, dilation=2, output_padding=2),
    "output_padding not below stride, 3d": lambda x, w: F.conv_transpose3d(
        x[:, :, None], w[:2, :, None], stride=(2, 1, 3), dilation=(1, 2, 1),
        output_padding=(1, 2, 3)),
    "transposed input channels": lambda x, w: F.conv_transpose2d(x, w[:, :1]),
    "transposed bias size": lambda x, w: F.conv_transpose2d(x, w[:2], w[0, 0, 0]),
    "zero kernel height": lambda x, w: F.conv2d(x, w[:, :, :0]),
    "zero kernel width, transposed": lambda x, w: F.conv_transpose2d(x, w[:2, :, :, :0]),
    "zero kernel width, 1d": lambda x, w: F.conv1d(x[..., 0], w[..., 0, :0]),
    "zero kernel depth, 3d": lambda x, w: F.conv3d(x[:, :, None], w[:, :, None][:, :, :0]),
}


@pytest.mark.parametrize("name", list(_BAD_CONVOLUTIONS))
def test_convolution_arguments_refused_like_cpu(name: str) -> None:
    # aten::convolution is claimed for tpu, past at::_convolution's checks: they are made
    # again, with the CPU's messages (a negative padding used to crop the input).
    e = assert_raises_like_cpu(_BAD_CONVOLUTIONS[name], _X2, _W2)
    with pytest.raises(type(e)) as cpu:
        _BAD_CONVOLUTIONS[name](_X2, _W2)
    assert str(e).splitlines()[0] == str(cpu.value).splitlines()[0]


@pytest.mark.parametrize("x_shape,w_shape", [((1, 0, 5, 5), (3, 0, 3, 3)),
                                             ((0, 2, 5, 5), (3, 2, 3, 3)),
                                             ((2, 0, 6), (4, 0, 2))])
def test_convolution_of_empty_inputs_matches_the_cpu(x_shape, w_shape) -> None:
    # An input of 0 channels has PyTorch's empty result (its shape is the CPU's, whatever
    # a window over 0 channels would give), and every gradient of an empty convolution is
    # zeros; both failed inside the lowering.
    conv = F.conv2d if len(x_shape) == 4 else F.conv1d

    def run(x, w):
        x, w = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        y = conv(x, w)
        y.sum().backward()
        return y, x.grad, w.grad

    assert_same(run, make(x_shape, torch.float32), make(w_shape, torch.float32))


def test_transposed_convolution_of_an_empty_batch_skips_the_output_padding_check() -> None:
    # The CPU's empty path comes before its kernels' output_padding check.
    assert_same(lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=2),
                make((0, 4, 5, 5), torch.float32), make((4, 2, 3, 3), torch.float32))


_PATCHES = {
    "kernel 2x3": ((2, 3, 7, 9), {"kernel_size": (2, 3)}),
    "dilated, padded, strided": ((2, 3, 7, 9), {"kernel_size": 3, "dilation": 2, "padding": 1,
                                                 "stride": 2}),
    "tiles (patchify), unbatched": ((3, 8, 8), {"kernel_size": 4, "stride": 4}),
    "tiles with padding": ((2, 3, 9, 9), {"kernel_size": 4, "stride": 4, "padding": 1}),
    "per-dim everything": ((1, 2, 10, 10), {"kernel_size": (3, 2), "stride": (2, 3),
                                            "padding": (1, 2), "dilation": (1, 2)}),
}


@pytest.mark.parametrize("name", list(_PATCHES))
def test_unfold_fold_and_gradient(name: str) -> None:
    # im2col and col2im are lowered (no CPU fallback): unfold, fold, and unfold's gradient
    # (which is col2im).
    shape, kw = _PATCHES[name]
    x = make(shape, torch.float32)
    assert_same(lambda t: F.unfold(t, **kw), x)
    cols = F.unfold(x, **kw)
    assert_same(lambda t: F.fold(t, shape[-2:], **kw), cols, dtype_tols=NN_TOLS)
    g = make(cols.shape, torch.float32)

    def grad(t: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
        t = t.detach().requires_grad_()
        F.unfold(t, **kw).backward(gt)
        return t.grad

    assert_same(grad, x, g, dtype_tols=NN_TOLS)


@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("mode,spatial", [("bilinear", 2), ("nearest", 2), ("bicubic", 2),
                                          ("bilinear", 3), ("nearest", 3)])
def test_grid_sample_and_gradients(mode: str, padding_mode: str, align_corners: bool,
                                   spatial: int) -> None:
    # Points inside and outside [-1, 1] (padding decides those), and on the corners.
    x = make((2, 3, 5, 7) if spatial == 2 else (2, 3, 4, 5, 6), torch.float32)
    grid = torch.rand((2, 4, 6, 2) if spatial == 2 else (2, 3, 4, 5, 3)) * 2.6 - 1.3
    grid.view(-1, spatial)[:2] = torch.tensor([-1.0, 1.0]).repeat_interleave(spatial).view(2, -1)
    kwargs = {"mode": mode, "padding_mode": padding_mode, "align_corners": align_corners}
    out = assert_same(lambda t, g: F.grid_sample(t, g, **kwargs), x, grid, dtype_tols=NN_TOLS)
    go = torch.randn(out.shape)

    def grads(t, g, go):
        t, g = t.detach().requires_grad_(), g.detach().requires_grad_()
        F.grid_sample(t, g, **kwargs).backward(go)
        return t.grad, g.grad

    assert_same(grads, x, grid, go, dtype_tols=NN_TOLS)


@pytest.mark.parametrize("input_shape,grid_shape", [((0, 3, 5, 5), (0, 2, 2, 2)),
                                                     ((2, 3, 5, 5), (2, 0, 2, 2)),
                                                     ((0, 3, 4, 5, 5), (0, 2, 2, 2, 3))])
def test_grid_sample_of_nothing(input_shape, grid_shape) -> None:
    # An empty batch or grid: empty results and zero gradients, as on the CPU.
    x, grid = make(input_shape, torch.float32), torch.rand(grid_shape) * 2 - 1

    def grads(t, g):
        t, g = t.detach().requires_grad_(), g.detach().requires_grad_()
        out = F.grid_sample(t, g, align_corners=False)
        out.sum().backward()
        return out, t.grad, g.grad

    assert_same(grads, x, grid)


@pytest.mark.parametrize("shape,kernel,out", [
    ((2, 3, 8, 9), (2, 3), (4, 5)), ((3, 7, 7), (3, 3), (5, 2)), ((2, 2, 10, 10), (3, 2), (8, 9)),
    ((1, 2, 5, 6), (2, 2), (1, 1)), ((2, 3, 6, 8, 9), (2, 2, 3), (3, 4, 5)),
    ((2, 5, 6, 7), (2, 3, 2), (3, 2, 4))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fractional_max_pool_like_cpu(shape, kernel, out, dtype: torch.dtype) -> None:
    # Given random samples, the windows, maxima (ties: the first), indices and gradient are
    # the CPU's exactly; bfloat16 windows round as c10's BFloat16 arithmetic does (10
    # pixels into 8 windows of 3: computed in float32, some windows started a pixel early).
    d = len(kernel)
    x = make(shape, dtype)
    x.view(-1)[::7] = x.view(-1)[1]
    samples = torch.rand(shape[0] if len(shape) == d + 2 else 1, shape[-d - 1], d).to(dtype)
    fn = F.fractional_max_pool2d if d == 2 else F.fractional_max_pool3d

    def pool(t, u):
        t = t.detach().requires_grad_()
        y, index = fn(t, kernel, output_size=out, return_indices=True, _random_samples=u)
        y.backward(torch.ones_like(y))
        return y, index, t.grad

    assert_same(pool, x, samples, dtype_tols={torch.bfloat16: (0.0, 0.0)})
    nan = make((1, 1, 6, 6), torch.float32)
    nan[0, 0, 1, 1:3] = math.nan  # a NaN replaces the maximum; a later one replaces it
    assert_same(lambda t, u: F.fractional_max_pool2d(t, 2, output_size=3, return_indices=True,
                                                     _random_samples=u),
                nan, torch.rand(1, 1, 2))


def test_pooling() -> None:
    x = make((2, 3, 8, 8), torch.float32)
    assert_same(lambda t: F.max_pool2d(t, 2), x)
    assert_same(lambda t: F.max_pool2d(t, 3, stride=2, padding=1), x)
    assert_same(lambda t: F.avg_pool2d(t, 2), x)
    assert_same(lambda t: F.adaptive_avg_pool2d(t, (1, 1)), x)
    assert_same(lambda t: tuple(F.max_pool2d(t, 2, return_indices=True)), x)


_POOL3D = [
    lambda t: tuple(F.max_pool3d(t, 3, 2, 1, return_indices=True)),
    lambda t: tuple(F.max_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0), dilation=(1, 2, 1),
                                 ceil_mode=True, return_indices=True)),
    lambda t: F.avg_pool3d(t, 3, 2, 1),
    lambda t: F.avg_pool3d(t, (2, 3, 2), (1, 2, 2), (1, 1, 0), ceil_mode=True,
                           count_include_pad=False),
    lambda t: F.avg_pool3d(t, 2, divisor_override=3),
    lambda t: F.adaptive_avg_pool3d(t, (3, 4, 5)),
    lambda t: F.adaptive_avg_pool3d(t, 1),
    lambda t: tuple(F.adaptive_max_pool3d(t, (2, 3, 4), return_indices=True)),
    lambda t: tuple(F.adaptive_max_pool2d(t.flatten(-2), (5, 7), return_indices=True)),
    lambda t: tuple(F.adaptive_max_pool1d(t.flatten(-3), 4, return_indices=True)),
]


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("pool", range(len(_POOL3D)))
def test_pooling_3d_and_gradient(pool: int, batched: bool) -> None:
    # Volumes (video, medical imaging) pool on the device like planes: forward, indices and
    # gradients as on the CPU, and no op runs on the CPU.
    fn = _POOL3D[pool]
    x = make((2, 3, 7, 8, 9) if batched else (3, 7, 8, 9), torch.float32)
    out = assert_same(fn, x, dtype_tols=NN_TOLS)
    first = out[0] if isinstance(out, tuple) else out
    g = torch.randn(first.shape)

    def grad(t, g):
        t = t.detach().requires_grad_()
        y = fn(t)
        (y[0] if isinstance(y, tuple) else y).backward(g)
        return t.grad

    assert_same(grad, x, g, dtype_tols=NN_TOLS)


@pytest.mark.parametrize("out", [(1, 1), (2, 2), (4, 1), (1, 4), (3, 3), (4, 4)])
def test_adaptive_max_pool_picks_the_cpu_kernels_element(out: tuple) -> None:
    # The CPU kernel keeps the first maximum in row-major order, and the last NaN; a window
    # of -inf returns its first element.
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[[[1., 1., 2., 2.], [2., 0., 1., nan], [-inf] * 4, [nan, 3., nan, 0.]]]])
    assert_same(lambda t: tuple(F.adaptive_max_pool2d(t, out, return_indices=True)), x)
    ties = torch.randint(0, 3, (2, 4, 6, 6)).float()
    assert_same(lambda t: tuple(F.adaptive_max_pool2d(t, out, return_indices=True)), ties)
    assert_same(lambda t: tuple(F.adaptive_max_pool3d(t, (1, *out), return_indices=True)), ties)


@pytest.mark.parametrize("size,out", [((2, 3, 14, 14), (7, 7)), ((1, 2, 10, 7), (3, 4)),
                                      ((4, 6, 11, 13), (5, 1)), ((1, 1, 3, 3), (6, 5))])
def test_adaptive_avg_pool_windows(size: tuple, out: tuple) -> None:
    # Uneven and overlapping windows, and more outputs than inputs; forward and backward.
    x = make(size, torch.float32)
    assert_same(lambda t: F.adaptive_avg_pool2d(t, out), x, dtype_tols=NN_TOLS)
    assert_same(lambda t: F.adaptive_avg_pool1d(t.flatten(1, 2), out[1]), x, dtype_tols=NN_TOLS)
    assert_same(lambda t: F.interpolate(t, size=out, mode="area"), x, dtype_tols=NN_TOLS)
    t, ref = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
    F.adaptive_avg_pool2d(t, out).square().sum().backward()
    F.adaptive_avg_pool2d(ref, out).square().sum().backward()
    torch.testing.assert_close(t.grad.cpu(), ref.grad, rtol=1e-5, atol=1e-5)


def test_adaptive_avg_pool_keeps_inf_and_nan_in_their_windows() -> None:
    # Windows [0, 2), [1, 4), [3, 5) of 5 inputs: an inf or NaN reaches only the windows that
    # hold it (a product with the averaging matrix gave every window of the row NaN).
    inf, nan = float("inf"), float("nan")
    rows = torch.tensor([[1.0, inf, 2.0, 3.0, 5.0], [1.0, inf, 2.0, -inf, 5.0],
                         [nan, 1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, -inf]])
    assert_same(lambda t: F.adaptive_avg_pool1d(t[None], 3), rows)
    assert_same(lambda t: F.adaptive_avg_pool2d(t[None], (2, 3)), rows)


@pytest.mark.parametrize("size,out", [((1, 1, 5), 3), ((2, 3, 7, 9), (4, 5)),
                                      ((1, 2, 4, 4), (6, 7))])
def test_adaptive_avg_pool_backward_keeps_inf_and_nan_in_their_windows(size: tuple,
                                                                        out: tuple) -> None:
    # An inf and a NaN gradient reach only the inputs of their window (the backward was a
    # product with the averaging matrix: 0 * inf gave NaN to every input of the row).
    pool = F.adaptive_avg_pool1d if len(size) == 3 else F.adaptive_avg_pool2d
    x = make(size, torch.float32)
    g = torch.randn(pool(x, out).shape)
    g.view(-1)[0], g.view(-1)[-1] = float("inf"), float("nan")
    t, ref = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
    pool(t, out).backward(g.to("tpu"))
    pool(ref, out).backward(g)
    assert 0 < int(ref.grad.isnan().sum()) < ref.numel()
    torch.testing.assert_close(t.grad.cpu(), ref.grad, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_pad() -> None:
    x = make((2, 3, 4), torch.float32)
    assert_same(lambda t: F.pad(t, (1, 2)), x)
    assert_same(lambda t: F.pad(t, (1, 1, 2, 0), value=-1.5), x)


# float64 linear modes mixed float32 weights into a float64 product (an abort); they now
# compute their taps in double, as ATen's CPU kernels do for double inputs.
@pytest.mark.parametrize("mode,shape", [("linear", (2, 3, 7)), ("bilinear", (1, 2, 5, 6)),
                                        ("bicubic", (1, 2, 5, 6)), ("trilinear", (1, 2, 3, 4, 5))])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_float64(mode: str, shape, align_corners: bool) -> None:
    x = torch.randn(shape, dtype=torch.float64)
    size = tuple(2 * s + 1 for s in shape[2:])
    f = lambda t: torch.nn.functional.interpolate(t, size=size, mode=mode,  # noqa: E731
                                                   align_corners=align_corners)
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    got = f(x.to("tpu"))
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), f(x), rtol=1e-12, atol=1e-12)
    assert torchtpu.debug.metrics()["fallback_ops"] == before


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_interpolate_antialias_and_gradient(mode: str, align_corners: bool,
                                            dtype: torch.dtype) -> None:
    # Down (the filter widened by the scale: positions with different numbers of taps),
    # up, one dim each way, and an infinite pixel (a tap a position lacks adds nothing).
    x = make((2, 3, 16, 9), dtype)
    x[0, 0, 3, 4] = math.inf
    for size in [(5, 4), (21, 13), (16, 3), (7, 9)]:
        kwargs = {"size": size, "mode": mode, "align_corners": align_corners, "antialias": True}
        out = assert_same(lambda t: F.interpolate(t, **kwargs), x)
        g = torch.randn(out.shape, dtype=dtype)

        def grad(t, g):
            t = t.detach().requires_grad_()
            F.interpolate(t, **kwargs).backward(g)
            return t.grad

        assert_same(grad, x.nan_to_num(posinf=1.0), g)


# Scales whose size rounds to the input's (1.1 on 5) or to twice it (2.1 on 5): ATen's nearest
# 2-d forward and every nearest backward copy or halve the index there whatever the scale
# says, its 1-d and 3-d forwards floor o / scale; its linear kernels copy an unchanged
# size. Each was answered with the other rule (the 1-d and 3-d forwards, the linear ones).
@pytest.mark.parametrize("mode,dims", [("nearest", 1), ("nearest", 2), ("nearest", 3),
                                       ("linear", 1), ("bilinear", 2), ("trilinear", 3)])
@pytest.mark.parametrize("scale", [1.1, 2.1, 0.6])
def test_interpolate_by_a_scale_that_keeps_or_doubles_a_size_like_cpu(mode: str, dims: int,
                                                                       scale: float) -> None:
    x = make((1, 2, 5, 3, 4)[:2 + dims], torch.float32)
    out = assert_same(lambda t: F.interpolate(t, scale_factor=scale, mode=mode), x)
    g = torch.randn(out.shape)

    def grad(t, g):
        t = t.detach().requires_grad_()
        F.interpolate(t, scale_factor=scale, mode=mode).backward(g)
        return t.grad

    assert_same(grad, x, g)


# A transposed convolution's output_padding adds trailing positions no input reaches; the
# input gradient is cut back to the input's size (it was a window too large, and the op
# ran on the CPU).
@pytest.mark.parametrize("dims,kw", [
    (2, dict(stride=(3, 2), padding=(1, 2), output_padding=(2, 1), groups=2, dilation=(4, 4))),
    (1, dict(stride=2, padding=1, output_padding=1)),
    (3, dict(stride=2, padding=2, output_padding=1)),
])
def test_conv_transpose_backward_with_output_padding(dims: int, kw: dict) -> None:
    conv = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
            3: torch.nn.functional.conv_transpose3d}[dims]
    groups = kw.get("groups", 1)
    x = torch.randn(2, 2 * groups, *([5] * dims), requires_grad=True)
    w = torch.randn(2 * groups, 3, *([3] * dims), requires_grad=True)
    conv(x, w, **kw).square().sum().backward()
    xd = x.detach().to("tpu").requires_grad_()
    wd = w.detach().to("tpu").requires_grad_()
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    conv(xd, wd, **kw).square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(wd.grad.cpu(), w.grad, rtol=1e-4, atol=1e-4)
    assert torchtpu.debug.metrics()["fallback_ops"] == before


def test_pooling_zero_size_batch() -> None:
    # PyTorch's meta kernel for max_pool2d_with_indices (a Python decomposition) rejects a
    # zero-size batch that the CPU kernel accepts; with no data, the CPU kernel decides.
    x = torch.randn(0, 3, 8, 8)
    out, idx = F.max_pool2d(x.to("tpu"), 2, return_indices=True)
    ref_out, ref_idx = F.max_pool2d(x, 2, return_indices=True)
    assert out.device.type == "tpu" and out.shape == ref_out.shape
    assert idx.dtype == ref_idx.dtype and idx.shape == ref_idx.shape
    # An empty input the CPU rejects is still rejected, with PyTorch's message.
    with pytest.raises(RuntimeError) as cpu_err:
        F.max_pool2d(torch.randn(1, 3, 0, 8), 2)
    with pytest.raises(RuntimeError) as tpu_err:
        F.max_pool2d(torch.randn(1, 3, 0, 8, device="tpu"), 2)
    assert str(tpu_err.value).split("\n")[0] == str(cpu_err.value).split("\n")[0]


@pytest.mark.parametrize("p", [0, 0.5, 1, 1.5, 2, 3, float("inf")])
@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                                  "donot_use_mm_for_euclid_dist"])
def test_cdist_and_gradient(p: float, mode: str) -> None:
    # Both CPU paths (the p-norm of differences, and _euclidean_dist's matrix product with
    # its clamp), rows at distance 0, batches that broadcast; gradients for both inputs.
    for s1, s2 in [((5, 3), (4, 3)), ((2, 6, 4), (2, 7, 4)), ((30, 5), (20, 5)),
                   ((2, 1, 3, 4), (5, 2, 4))]:
        x1, x2 = make(s1, torch.float32), make(s2, torch.float32)
        if len(s1) == len(s2):
            x2[..., 0, :] = x1[..., 0, :]
        out = assert_same(lambda a, b: torch.cdist(a, b, p=p, compute_mode=mode), x1, x2,
                          dtype_tols=NN_TOLS)
        if p == 0:
            continue
        g = torch.randn(out.shape)

        def grads(a, b, g):
            a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
            torch.cdist(a, b, p=p, compute_mode=mode).backward(g)
            return a.grad, b.grad

        assert_same(grads, x1, x2, g, dtype_tols={torch.float32: (1e-4, 1e-5)})


@pytest.mark.parametrize("p", [0, 0.5, 1, 1.5, 2, 3, float("inf")])
@pytest.mark.parametrize("n,m", [(5, 3), (1, 4), (2, 3), (40, 6), (4, 0)])
def test_pdist_and_gradient(p: float, n: int, m: int) -> None:
    x = make((n, m), torch.float32)
    if n > 3:
        x[3] = x[1]  # a pair at distance 0
    out = assert_same(lambda t: F.pdist(t, p), x, dtype_tols=NN_TOLS)
    if p == 0 or out.numel() == 0:
        return
    g = torch.randn(out.shape)

    def grad(t, g):
        t = t.detach().requires_grad_()
        F.pdist(t, p).backward(g)
        return t.grad

    assert_same(grad, x, g, dtype_tols={torch.float32: (1e-4, 1e-5)})


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_multi_margin_loss_and_gradient(p: int, reduction: str, weighted: bool) -> None:
    # Batched and single samples (a 0-d target gives a 0-d loss, as on the CPU).
    for shape, target in [((4, 5), torch.tensor([0, 4, 2, 2])), ((5,), torch.tensor(3)),
                          ((), torch.tensor(0)), ((5,), torch.tensor([1])),
                          ((1, 3), torch.tensor([2]))]:
        x = make(shape, torch.float32)
        w = torch.rand(shape[-1] if shape else 1) if weighted else None
        kwargs = {"p": p, "margin": 0.7, "reduction": reduction}
        out = assert_same(lambda t, y, wt: F.multi_margin_loss(t, y, weight=wt, **kwargs),
                          x, target, w)
        g = torch.randn(out.shape)

        def grad(t, y, wt, g):
            t = t.detach().requires_grad_()
            F.multi_margin_loss(t, y, weight=wt, **kwargs).backward(g)
            return t.grad

        assert_same(grad, x, target, w, g, dtype_tols=NN_TOLS)
    assert_raises_like_cpu(lambda t, y: F.multi_margin_loss(t, y), make((3, 4), torch.float32),
                           torch.tensor([0, 1, 4]))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_and_gradient(reduction: str) -> None:
    # A row lists its classes up to its first -1 (later entries are ignored, repeats count
    # twice); batched rows, one sample (C) and 0-d (a 0-d loss without reduction, as on the
    # CPU).
    cases = [((2, 4), torch.tensor([[1, 1, -1, 3], [-1, 2, 2, 0]])),
             ((3, 5), torch.tensor([[4, 0, -1, -1, -1], [0, 1, 2, 3, 4], [2, -1, 2, 1, 0]])),
             ((5,), torch.tensor([3, 0, -1, 2, 2])), ((), torch.tensor(0)),
             ((4, 1), torch.tensor([[0], [-1], [0], [0]]))]
    for shape, target in cases:
        x = make(shape, torch.float32)
        out = assert_same(lambda t, y: F.multilabel_margin_loss(t, y, reduction=reduction),
                          x, target)
        g = torch.randn(out.shape)

        def grad(t, y, g):
            t = t.detach().requires_grad_()
            F.multilabel_margin_loss(t, y, reduction=reduction).backward(g)
            return t.grad

        assert_same(grad, x, target, g, dtype_tols=NN_TOLS)
    x = make((2, 4), torch.float32)
    for bad in [torch.tensor([[0, 4, -1, 0]] * 2), torch.tensor([[0, -2, -1, 0]] * 2)]:
        assert_raises_like_cpu(lambda t, y: F.multilabel_margin_loss(t, y), x, bad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 2, -1])
def test_weight_norm_runs_on_the_device(dtype: torch.dtype, dim: int) -> None:
    # _weight_norm_interface and its backward (the positional convolution of Wav2Vec2 and
    # HuBERT) ran on the CPU; values, gradients and no fallback.
    import copy

    from torch.nn.utils.parametrizations import weight_norm

    torch.manual_seed(0)
    conv = weight_norm(torch.nn.Conv1d(8, 8, 5, padding=2, groups=2), dim=dim).to(dtype)
    on_tpu = copy.deepcopy(conv).to("tpu")
    x = torch.randn(2, 8, 20, dtype=dtype)
    ref = conv(x)
    ref.float().square().sum().backward()
    before = fallbacks()
    out = on_tpu(x.to("tpu"))
    out.float().square().sum().backward()
    assert new_fallbacks(before) == {}
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.cpu(), ref, rtol=tol, atol=tol)
    for p, q in zip(conv.parameters(), on_tpu.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=10 * tol, atol=10 * tol)


def test_sync_batch_norm_kernels_against_batch_norm() -> None:
    # The CUDA-only ops nn.SyncBatchNorm calls, on one rank's statistics: equal to batch
    # norm's training output and running statistics (the 2-rank DDP test weighs ranks).
    x = torch.randn(6, 3, 4, 5, dtype=torch.float32) * 3 + 2
    w, b = torch.randn(3), torch.randn(3)
    rm, rv = torch.zeros(3), torch.ones(3)
    want = torch.nn.functional.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1,
                                          eps=1e-5)
    xt = x.to("tpu")
    mean, invstd = torch.batch_norm_stats(xt, 1e-5)
    rmt, rvt = torch.zeros(3, device="tpu"), torch.ones(3, device="tpu")
    n = x.numel() // 3
    m1, i1 = torch.batch_norm_gather_stats(xt, mean[None], invstd[None], rmt, rvt, 0.1, 1e-5, n)
    m2, i2 = torch.batch_norm_gather_stats_with_counts(
        xt, mean[None], invstd[None], None, None, 0.1, 1e-5, torch.tensor([n], device="tpu"))
    torch.testing.assert_close(m1.cpu(), m2.cpu())
    torch.testing.assert_close(i1.cpu(), i2.cpu())
    out = torch.empty(0, device="tpu")
    torch.batch_norm_elemt(xt, w.to("tpu"), b.to("tpu"), m1, i1, 1e-5, out=out)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rmt.cpu(), rm)
    torch.testing.assert_close(rvt.cpu(), rv)
    half = torch.batch_norm_stats(xt.half(), 1e-5)
    assert half[0].dtype == torch.float32 and half[1].dtype == torch.float32
