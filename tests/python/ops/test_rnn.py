"""Recurrent layers on tpu: nn.LSTM / nn.GRU / nn.LSTMCell / nn.GRUCell, forward and backward.

PyTorch's RNN.cpp runs every time step on an accelerator through the fused cell ops
(``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell`` and their backward ops), which are
lowered; the CPU reference runs PyTorch's own CPU path. Every test forbids CPU fallbacks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
from _compare import assert_close, fallbacks, make, new_fallbacks, to_device
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torchtpu

# The tpu cells add the biases after the matmuls (as CUDA does), the CPU folds them into
# linear: float32 sums in a different order, a few ulp apart per step.
RNN_TOLS = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10),
            # bf16: the CPU rounds every gate op to bf16, the tpu cells round once.
            torch.bfloat16: (3e-2, 3e-2)}


def run_both(module: nn.Module, fn: Callable[[nn.Module, Any], Any], *inputs: Any) -> None:
    """Runs ``fn(module, *inputs)`` and its backward on CPU and on a tpu copy; compares the
    outputs, the input gradients and every parameter gradient; forbids CPU fallbacks."""
    tpu_module = copy.deepcopy(module).to("tpu")
    cpu_inputs = [x.detach().clone().requires_grad_(True)
                  if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    tpu_inputs = to_device(cpu_inputs, "tpu")

    def step(m: nn.Module, xs: list[Any]) -> Any:
        out = fn(m, *xs)
        flat = [t for t in _flatten(out) if t.requires_grad]
        # A fixed random weight per output so every gradient path carries distinct values.
        gen = torch.Generator().manual_seed(1)
        loss = sum((t * torch.randn(t.shape, generator=gen).to(t.device)).sum() for t in flat)
        loss.backward()
        return out

    expected = step(module, cpu_inputs)
    before = fallbacks()
    actual = step(tpu_module, tpu_inputs)
    torchtpu.synchronize()
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"
    assert_close(_flatten(actual), _flatten(expected), dtype_tols=RNN_TOLS, what="output")
    for i, (a, e) in enumerate(zip(tpu_inputs, cpu_inputs)):
        if isinstance(e, torch.Tensor) and e.grad is not None:
            assert_close(a.grad, e.grad, dtype_tols=RNN_TOLS, what=f"grad of input {i}")
    for (name, p_cpu), (_, p_tpu) in zip(module.named_parameters(),
                                         tpu_module.named_parameters()):
        assert p_cpu.grad is not None, f"test is wrong: {name} got no gradient on the CPU"
        assert_close(p_tpu.grad, p_cpu.grad, dtype_tols=RNN_TOLS, what=f"grad of {name}")


def _flatten(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flatten(v)]
    if hasattr(x, "data") and hasattr(x, "batch_sizes"):  # PackedSequence
        return [x.data]
    raise TypeError(f"unexpected output {type(x)}")


CONFIGS = [
    pytest.param(dict(num_layers=1, batch_first=False, bidirectional=False), id="1layer"),
    pytest.param(dict(num_layers=2, batch_first=True, bidirectional=False), id="2layer-bf"),
    pytest.param(dict(num_layers=1, batch_first=True, bidirectional=True), id="bidir-bf"),
    pytest.param(dict(num_layers=2, batch_first=False, bidirectional=True), id="2layer-bidir"),
    pytest.param(dict(num_layers=1, batch_first=False, bidirectional=False, bias=False),
                 id="nobias"),
]


def _seq_input(cfg: dict[str, Any], seq: int = 5, batch: int = 3, size: int = 4) -> torch.Tensor:
    shape = (batch, seq, size) if cfg.get("batch_first") else (seq, batch, size)
    return make(shape, torch.float32, low=-1, high=1)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_dtypes(kind: type[nn.Module], dtype: torch.dtype) -> None:
    module = kind(4, 6, bidirectional=True).to(dtype)
    run_both(module, lambda m, x: m(x), _seq_input({}).to(dtype))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_lstm(cfg: dict[str, Any]) -> None:
    module = nn.LSTM(4, 6, **cfg)
    run_both(module, lambda m, x: m(x), _seq_input(cfg))


@pytest.mark.parametrize("cfg", CONFIGS)
def test_gru(cfg: dict[str, Any]) -> None:
    module = nn.GRU(4, 6, **cfg)
    run_both(module, lambda m, x: m(x), _seq_input(cfg))


def test_lstm_initial_state_and_proj() -> None:
    module = nn.LSTM(4, 6, num_layers=2, proj_size=3)
    h0 = make((2, 3, 3), torch.float32, low=-1, high=1)
    c0 = make((2, 3, 6), torch.float32, low=-1, high=1)
    run_both(module, lambda m, x, h, c: m(x, (h, c)), _seq_input({}), h0, c0)


def test_gru_initial_state() -> None:
    module = nn.GRU(4, 6, num_layers=2)
    h0 = make((2, 3, 6), torch.float32, low=-1, high=1)
    run_both(module, lambda m, x, h: m(x, h), _seq_input({}), h0)


@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell(bias: bool) -> None:
    cell = nn.LSTMCell(4, 5, bias=bias)
    x = make((3, 4), torch.float32, low=-1, high=1)
    h = make((3, 5), torch.float32, low=-1, high=1)
    c = make((3, 5), torch.float32, low=-1, high=1)
    run_both(cell, lambda m, x, h, c: m(x, (h, c)), x, h, c)


def test_lstm_cell_only_cy_used() -> None:
    # Only cy reaches the loss: the backward op gets no grad_hy (an absent gradient).
    cell = nn.LSTMCell(4, 5)
    x = make((3, 4), torch.float32, low=-1, high=1)
    run_both(cell, lambda m, x: m(x)[1], x)


@pytest.mark.parametrize("bias", [True, False])
def test_gru_cell(bias: bool) -> None:
    cell = nn.GRUCell(4, 5, bias=bias)
    x = make((3, 4), torch.float32, low=-1, high=1)
    h = make((3, 5), torch.float32, low=-1, high=1)
    run_both(cell, lambda m, x, h: m(x, h), x, h)


def test_cells_unbatched() -> None:
    x = make((4,), torch.float32, low=-1, high=1)
    run_both(nn.LSTMCell(4, 5), lambda m, x: m(x), x)
    run_both(nn.GRUCell(4, 5), lambda m, x: m(x), x)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_sequence(kind: type[nn.Module], enforce_sorted: bool) -> None:
    module = kind(4, 6, num_layers=2, bidirectional=True)
    lengths = torch.tensor([5, 3, 2]) if enforce_sorted else torch.tensor([3, 5, 2])

    def fn(m: nn.Module, x: torch.Tensor) -> Any:
        packed = pack_padded_sequence(x, lengths, enforce_sorted=enforce_sorted)
        out, state = m(packed)
        padded, out_lengths = pad_packed_sequence(out)
        assert out_lengths.tolist() == lengths.tolist()
        return padded, state

    run_both(module, fn, _seq_input({}))


def test_double_backward_through_cell() -> None:
    # create_graph=True takes PyTorch's differentiable cell backward (plain ops) instead of
    # the fused backward; the second-order gradient must still match.
    def grad_norm(device: str) -> torch.Tensor:
        torch.manual_seed(0)
        cell = nn.GRUCell(3, 4).to(device)
        x = torch.linspace(-1, 1, 6).reshape(2, 3).to(device).requires_grad_(True)
        (g,) = torch.autograd.grad(cell(x).sum(), x, create_graph=True)
        g.pow(2).sum().backward()
        return x.grad

    before = fallbacks()
    actual = grad_norm("tpu")
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"
    assert_close(actual, grad_norm("cpu"), dtype_tols=RNN_TOLS)


def test_fused_cell_ops_direct() -> None:
    # The ops themselves, bias-free form included, against a formula on the CPU.
    gi, gh = make((2, 12), torch.float32), make((2, 12), torch.float32)
    cx = make((2, 3), torch.float32)
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(gi.to("tpu"), gh.to("tpu"), cx.to("tpu"))
    i, f, g, o = (gi + gh).chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy_ref = f * cx + i * g
    assert_close(cy, cy_ref, dtype_tols=RNN_TOLS)
    assert_close(hy, o * cy_ref.tanh(), dtype_tols=RNN_TOLS)
    assert_close(ws, torch.cat([i, f, g, o], 1), dtype_tols=RNN_TOLS)
    gi, gh, hx = make((2, 9), torch.float32), make((2, 9), torch.float32), make((2, 3),
                                                                                  torch.float32)
    hy, ws = torch.ops.aten._thnn_fused_gru_cell(gi.to("tpu"), gh.to("tpu"), hx.to("tpu"))
    assert ws.shape == (2, 15)
    r = (gi[:, :3] + gh[:, :3]).sigmoid()
    z = (gi[:, 3:6] + gh[:, 3:6]).sigmoid()
    n = (gi[:, 6:] + r * gh[:, 6:]).tanh()
    assert_close(hy, n + z * (hx - n), dtype_tols=RNN_TOLS)


def test_gru_cell_bad_shapes_raise() -> None:
    gi = torch.zeros(2, 9, device="tpu")
    with pytest.raises(RuntimeError, match="hx of shape"):
        torch.ops.aten._thnn_fused_gru_cell(gi, gi, torch.zeros(2, 4, device="tpu"))
    with pytest.raises(RuntimeError, match="a workspace of shape"):
        torch.ops.aten._thnn_fused_gru_cell_backward(torch.zeros(2, 3, device="tpu"),
                                                     torch.zeros(2, 9, device="tpu"), True)


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast(kind: type[nn.Module], dtype: torch.dtype) -> None:
    # Under autocast the gate matmuls run in 16 bits and the cells take 16-bit gates (they
    # compute in float32 and round once); against the float32 CPU run at 16-bit tolerance.
    module = kind(4, 6, num_layers=2)
    tpu_module = copy.deepcopy(module).to("tpu")
    x = _seq_input({})
    expected, _ = module(x)
    before = fallbacks()
    with torch.autocast("tpu", dtype=dtype):
        actual, _ = tpu_module(x.to("tpu"))
    actual.float().sum().backward()
    assert not new_fallbacks(before), f"tpu run fell back to the CPU: {new_fallbacks(before)}"
    assert actual.dtype == dtype
    assert all(p.grad is not None and torch.isfinite(p.grad.cpu()).all()
               for p in tpu_module.parameters())
    torch.testing.assert_close(actual.float().cpu(), expected.detach(), rtol=2e-2, atol=1e-2)
