"""torch.fft on tpu: every function reaches aten::_fft_c2c / _fft_r2c / _fft_c2r, lowered to
stablehlo.fft; forward and backward against PyTorch on the CPU, with CPU fallbacks forbidden.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from _compare import assert_close, assert_same, fallbacks, make, new_fallbacks

import torchtpu

# XLA's CPU FFT (DUCC) and PyTorch's (pocketfft) sum in different orders.
FFT_TOLS = {torch.float32: (1e-4, 1e-4), torch.complex64: (1e-4, 1e-4),
            torch.float64: (1e-10, 1e-10), torch.complex128: (1e-10, 1e-10)}
NORMS = [None, "forward", "ortho"]


def same(fn: Callable[..., Any], *inputs: Any) -> None:
    assert_same(fn, *inputs, dtype_tols=FFT_TOLS)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("norm", NORMS)
def test_fft_ifft(dtype: torch.dtype, norm: str | None) -> None:
    x = make((3, 8), dtype)
    same(lambda a: torch.fft.fft(a, norm=norm), x)
    same(lambda a: torch.fft.ifft(a, norm=norm), x)
    same(lambda a: torch.fft.fft(a, n=5, dim=0, norm=norm), x)  # trims / pads first
    same(lambda a: torch.fft.fft(a, n=12, norm=norm), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm", NORMS)
def test_rfft_irfft_hfft(dtype: torch.dtype, norm: str | None) -> None:
    x = make((4, 10), dtype)
    same(lambda a: torch.fft.rfft(a, norm=norm), x)
    same(lambda a: torch.fft.rfft(a, n=7, norm=norm), x)
    same(lambda a: torch.fft.fft(a, norm=norm), x)  # real input: a two-sided r2c
    cdt = torch.complex128 if dtype == torch.float64 else torch.complex64
    spec = make((4, 6), cdt)
    same(lambda a: torch.fft.irfft(a, norm=norm), spec)
    same(lambda a: torch.fft.irfft(a, n=9, norm=norm), spec)
    same(lambda a: torch.fft.hfft(a, norm=norm), spec)
    same(lambda a: torch.fft.ihfft(a, norm=norm), x)


@pytest.mark.parametrize("norm", NORMS)
def test_nd_transforms(norm: str | None) -> None:
    x = make((2, 3, 4, 5), torch.complex64)
    r = make((2, 3, 4, 6), torch.float32)
    same(lambda a: torch.fft.fft2(a, norm=norm), x)
    same(lambda a: torch.fft.ifft2(a, norm=norm), x)
    same(lambda a: torch.fft.fftn(a, norm=norm), x)  # four dims: two stablehlo.fft groups
    same(lambda a: torch.fft.fftn(a, dim=(0, 2), norm=norm), x)
    same(lambda a: torch.fft.ifftn(a, s=(3, 3), dim=(1, 3), norm=norm), x)
    same(lambda a: torch.fft.rfft2(a, norm=norm), r)
    same(lambda a: torch.fft.rfftn(a, norm=norm), r)
    same(lambda a: torch.fft.irfftn(a, norm=norm), x)
    same(lambda a: torch.fft.irfftn(a, s=(4, 8), dim=(1, 3), norm=norm), x)
    same(lambda a: torch.fft.irfft2(a, norm=norm), x)


def test_fftshift_and_freqs() -> None:
    x = make((6, 5), torch.complex64)
    same(lambda a: torch.fft.fftshift(torch.fft.fft2(a)), x)
    same(lambda a: torch.fft.ifftshift(a, dim=0), x)


def test_stft_istft() -> None:
    signal = make((2, 64), torch.float32)
    window = torch.hann_window(16)

    def roundtrip(s: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        spec = torch.stft(s, n_fft=16, hop_length=4, window=w, return_complex=True)
        back = torch.istft(spec, n_fft=16, hop_length=4, window=w, length=64)
        return spec, back

    same(roundtrip, signal, window)


@pytest.mark.parametrize("case", ["fft", "ifft", "rfft", "irfft", "fft2", "rfftn", "irfftn",
                                  "hfft"])
def test_backward(case: str) -> None:
    real_in = case in ("rfft", "rfftn")
    shape = (3, 4, 6)
    fns = {
        "fft": lambda a: torch.fft.fft(a, norm="ortho"),
        "ifft": lambda a: torch.fft.ifft(a),
        "rfft": lambda a: torch.fft.rfft(a),
        "irfft": lambda a: torch.fft.irfft(a, n=8),
        "fft2": lambda a: torch.fft.fft2(a, norm="forward"),
        "rfftn": lambda a: torch.fft.rfftn(a),
        "irfftn": lambda a: torch.fft.irfftn(a),
        "hfft": lambda a: torch.fft.hfft(a),
    }

    def run(device: str) -> list[torch.Tensor]:
        torch.manual_seed(7)
        x = make(shape, torch.float32 if real_in else torch.complex64).to(device)
        x.requires_grad_(True)
        y = fns[case](x)
        w = make(y.shape, y.dtype).to(device)
        loss = (torch.view_as_real(y * w) if y.is_complex() else y * w).sum()
        loss.backward()
        return [y.detach(), x.grad]

    expected = run("cpu")
    before = fallbacks()
    actual = run("tpu")
    torchtpu.synchronize()
    assert not new_fallbacks(before), new_fallbacks(before)
    assert_close(actual, expected, dtype_tols=FFT_TOLS)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
@pytest.mark.parametrize("dim,size,step", [(1, 4, 2), (0, 2, 3), (1, 3, 3), (1, 5, 1),
                                           (1, 2, 4), (0, 7, 1), (1, 9, 2), (1, 9, 1),
                                           (0, 2, 100)])
def test_unfold_backward(dtype: torch.dtype, dim: int, size: int, step: int) -> None:
    # The overlap-add istft runs through (and Tensor.unfold's derivative).
    sizes = [7, 20]
    windows = (sizes[dim] - size) // step + 1
    grad_shape = list(sizes)
    grad_shape[dim] = windows
    grad = make(grad_shape + [size], dtype)
    same(lambda g: torch.ops.aten.unfold_backward(g, sizes, dim, size, step), grad)


def test_istft_of_seconds_of_audio_grows_with_its_length(tmp_path: Any) -> None:
    """istft's overlap-add (unfold_backward) takes time and memory in proportion to the
    signal: no program holds a [windows * n_fft, length] map (3 s of 16 kHz audio was
    10 GB and minutes; 48,000 samples ran out of memory)."""
    import re

    from _subprocess import run_python

    length, n_fft, hop = 48000, 400, 160
    code = f"""
        import torch, torchtpu
        torch.manual_seed(0)
        spec = torch.stft(torch.randn(2, {length}), {n_fft}, {hop},
                          window=torch.hann_window({n_fft}), return_complex=True)
        signal = torch.randn(1, {length}, requires_grad=True)
        got = torch.istft(spec.to("tpu"), {n_fft}, {hop},
                          window=torch.hann_window({n_fft}, device="tpu"), length={length})
        expected = torch.istft(spec, {n_fft}, {hop}, window=torch.hann_window({n_fft}),
                               length={length})
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
        signal_t = signal.detach().to("tpu").requires_grad_()
        signal_t.unfold(-1, {n_fft}, {hop}).pow(2).sum().backward()
        signal.unfold(-1, {n_fft}, {hop}).pow(2).sum().backward()
        torch.testing.assert_close(signal_t.grad.cpu(), signal.grad)
    """
    proc = run_python(code, timeout=300, TORCHTPU_DUMP_DIR=str(tmp_path / "dump"),
                      TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    windows = length // hop + 1
    largest = 0
    for path in (tmp_path / "dump").glob("*.mlir"):
        for dims in re.findall(r"tensor<((?:\d+x)+)[a-z]", path.read_text()):
            largest = max(largest, math.prod(int(d) for d in dims.rstrip("x").split("x")))
    assert 0 < largest <= 4 * 2 * windows * n_fft, largest
