"""float32 matrix products on the CPU plugin's host GEMM kernel (kernels/gemm.h): products
large enough to use it (M, N, K >= 16 and >= 2^20 multiply-adds), eager and compiled, with
transposed operands (read in place in compiled graphs), batches, NaN and inf, against
PyTorch on the CPU; and TORCHTPU_HOST_GEMM=0, which keeps XLA's dot."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_close, make
from _subprocess import run_python

import torchtpu

pytestmark = pytest.mark.skipif(not torchtpu.ops.has_host_kernel("torchtpu_gemm"),
                                reason="the plugin runs no host GEMM kernel (not a CPU plugin)")

TOLS = {torch.float32: (1e-5, 1e-4)}


def products(x, w, y, bias, batched_a, batched_b, acc):
    return (
        x @ y,                                    # mm
        F.linear(x, w, bias),                     # addmm with a transposed weight
        F.linear(x, w),                           # mm with a transposed weight
        x.t() @ F.linear(x, w),                   # transposed left operand
        torch.addmm(bias, x, y, beta=0.5, alpha=2.0),
        torch.bmm(batched_a, batched_b),
        batched_a @ batched_b.transpose(1, 2).contiguous().transpose(1, 2),
        torch.baddbmm(acc, batched_a, batched_b, beta=0),
    )


def inputs():
    x = make((160, 96), torch.float32)
    w = make((120, 96), torch.float32)
    y = make((96, 120), torch.float32)
    bias = make((120,), torch.float32)
    acc = torch.full((3, 160, 120), float("nan"))  # beta=0: never read
    return (x, w, y, bias, make((3, 160, 96), torch.float32), make((3, 96, 120), torch.float32),
            acc)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_products_match_the_cpu(mode: str) -> None:
    cpu = inputs()
    fn = products if mode == "eager" else torch.compile(products, backend="tpu", dynamic=False)
    got = fn(*(t.to("tpu") for t in cpu))
    want = products(*cpu)
    assert_close(got, want, dtype_tols=TOLS)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_nan_and_inf_stay_in_their_rows_and_columns(mode: str) -> None:
    a = make((128, 96), torch.float32)
    b = make((96, 112), torch.float32)
    a[3, 5] = float("nan")
    a[10, 0] = float("inf")
    b[7, 9] = float("-inf")
    fn = torch.mm if mode == "eager" else torch.compile(torch.mm, backend="tpu", dynamic=False)
    got = fn(a.to("tpu"), b.to("tpu")).cpu()
    want = a @ b
    assert 0 < int(want.isnan().sum()) < want.numel()
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-4)


def test_training_step_gradients_match_the_cpu() -> None:
    # Forward and backward products of a two-layer MLP (transposes of weights and
    # activations in the backward), compiled.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64))
    x = make((256, 64), torch.float32)
    ref = [p.detach().clone() for p in model.parameters()]
    model(x).square().mean().backward()
    want = [p.grad.clone() for p in model.parameters()]
    tpu_model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                    torch.nn.Linear(128, 64)).to("tpu")
    with torch.no_grad():
        for p, r in zip(tpu_model.parameters(), ref, strict=True):
            p.copy_(r)
    step = torch.compile(lambda m, v: m(v).square().mean().backward(), backend="tpu")
    step(tpu_model, x.to("tpu"))
    assert_close([p.grad for p in tpu_model.parameters()], want, dtype_tols=TOLS)


def test_off_keeps_xla_dot_with_the_same_results() -> None:
    out = run_python("""
        import torch, torchtpu
        torch.manual_seed(0)
        a, b = torch.randn(96, 64), torch.randn(64, 80)
        got = (a.to("tpu") @ b.to("tpu")).cpu()
        torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-4)
        print(sorted(torchtpu.ops.host_kernels()))
    """, TORCHTPU_HOST_GEMM="0")
    assert out.returncode == 0, out.stderr
    assert "torchtpu_gemm" not in out.stdout and "torchtpu_int8_matmul" in out.stdout
