"""Graph-mode lowerings of view, copy and factory ops: small programs compiled with
``torch.compile(backend="tpu")`` against the same program run eagerly on the CPU.

Each test compares forward results (and gradients, where the program trains) within the
stated tolerances and asserts that no op fell back to the CPU. Compiled graphs fuse and
reorder arithmetic, so float32 results are compared with rtol 1e-4 / atol 1e-5 (forward)
and 1e-4 / 1e-4 (gradients, which sum over the batch).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu

torch._dynamo.config.cache_size_limit = 64

FWD_TOLS = dict(rtol=1e-4, atol=1e-5)
GRAD_TOLS = dict(rtol=1e-4, atol=1e-4)

class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.ln = nn.LayerNorm(16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(F.gelu(self.ln(self.l1(x))))


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


class Block(nn.Module):
    """A GPT decoder block: causal self-attention (SDPA or explicit masked softmax) + MLP."""

    def __init__(self, d: int, heads: int, sdpa: bool, p: float) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, h, C // h).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / (C // h) ** 0.5)
            mask = torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T)
            att = att.masked_fill(mask[:, :, :T, :T] == 0, float("-inf"))
            y = self.drop(F.softmax(att, dim=-1)) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.drop(self.proj(y))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, sdpa: bool, p: float = 0.0, vocab: int = 11, d: int = 16,
                 T: int = 8) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.block = Block(d, 2, sdpa, p)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor,
                targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pos = torch.arange(0, idx.shape[1], dtype=torch.long, device=idx.device)
        logits = self.head(self.ln(self.block(self.tok(idx) + self.pos(pos))))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def _to(x: Any, device: str) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().to(device).requires_grad_(x.requires_grad)
    return x


def _compiled(fn: Callable) -> Callable:
    torch._dynamo.reset()
    return torch.compile(fn, backend="tpu", dynamic=False)


def _as_tuple(out: Any) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _check_function(fn: Callable, *inputs: torch.Tensor) -> None:
    """Every output of `fn` compiled on tpu against `fn` on the CPU, with no CPU fallback."""
    expected = _as_tuple(fn(*inputs))
    torchtpu.debug.reset_metrics()
    actual = _as_tuple(_compiled(fn)(*(x.to("tpu") for x in inputs)))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, **FWD_TOLS)
    assert torchtpu.debug.metrics()["fallback_ops"] == {}


def _check_module(make: Callable[[], nn.Module], *inputs: torch.Tensor, train: bool = True,
                  eval_mode: bool = False) -> None:
    """Forward (and backward of the summed last output) of a compiled tpu copy of the model
    against the CPU model; compares outputs, parameter and input gradients and buffers."""
    torch.manual_seed(0)
    cpu = make()
    tpu = copy.deepcopy(cpu).to("tpu")
    if eval_mode:
        cpu.eval()
        tpu.eval()
    compiled = _compiled(tpu)
    cpu_in = [x.clone().requires_grad_(x.is_floating_point() and train) for x in inputs]
    tpu_in = [_to(x, "tpu") for x in cpu_in]
    torchtpu.debug.reset_metrics()
    expected = _as_tuple(cpu(*cpu_in))
    actual = _as_tuple(compiled(*tpu_in))
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.device.type == "tpu"
        torch.testing.assert_close(a.detach().cpu(), e.detach(), **FWD_TOLS)
    if train:
        expected[-1].sum().backward()
        actual[-1].sum().backward()
        for (name, p_cpu), p_tpu in zip(cpu.named_parameters(), tpu.parameters()):
            assert p_tpu.grad is not None, name
            torch.testing.assert_close(p_tpu.grad.cpu(), p_cpu.grad, **GRAD_TOLS, msg=name)
        for x_cpu, x_tpu in zip(cpu_in, tpu_in):
            if x_cpu.grad is not None:
                torch.testing.assert_close(x_tpu.grad.cpu(), x_cpu.grad, **GRAD_TOLS)
    for (name, b_cpu), b_tpu in zip(cpu.named_buffers(), tpu.buffers()):
        torch.testing.assert_close(b_tpu.cpu(), b_cpu, **FWD_TOLS, msg=name)
    assert torchtpu.debug.metrics()["fallback_ops"] == {}


def test_mlp_layernorm_gelu_forward_backward() -> None:
    _check_module(MLP, torch.randn(4, 8))


def test_cnn_conv_batchnorm_maxpool_training() -> None:
    # Training-mode batch norm: _native_batch_norm_legit_functional, whose new running
    # statistics are compared as buffers.
    _check_module(CNN, torch.randn(2, 3, 8, 8))


def test_cnn_eval_uses_running_statistics() -> None:
    _check_module(CNN, torch.randn(2, 3, 8, 8), train=False, eval_mode=True)


@pytest.mark.parametrize("sdpa", [True, False], ids=["sdpa", "masked_softmax"])
def test_gpt_block_causal_attention_embedding_cross_entropy(sdpa: bool) -> None:
    idx = torch.randint(0, 11, (2, 8))
    targets = torch.randint(0, 11, (2, 8))
    _check_module(lambda: GPT(sdpa), idx, targets)


def test_view_ops_on_values() -> None:
    # Every view below is a new value in the graph: permute, transpose, t, expand,
    # unsqueeze/squeeze, slice with steps, select, split/chunk/unbind, as_strided, unfold.
    def views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2
        a = y.permute(2, 0, 1) + 1
        b = y.transpose(0, -1)[1:, :, ::2] * 3
        c = y[0].t().unsqueeze(0).expand(2, 5, 4).squeeze(0) - 1
        d0, d1 = torch.split(y, [1, 3], dim=1)
        e = torch.chunk(y, 2, dim=2)
        f = torch.unbind(y, dim=0)
        g = y.as_strided((2, 3), (5, 2), 1) + 0
        h = y[:, -1, 2]
        i = y.unfold(2, 3, 2) + y.unfold(0, 1, 1).sum()  # windows along a dim
        return a, b, c, d0 + 1, d1 + 1, e[0][..., :2] + e[1], f[1] - f[0], g, h, i

    x = torch.randn(2, 4, 5)
    _check_function(views, x)


def test_index_assignment_copies_into_a_value() -> None:
    # y[0] = src and y[:, 1] += 2 functionalize to slice/select + copy + *_scatter.
    def assign(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        y = x * 1
        y[0] = src
        y[:, 1] += 2
        return y

    x, src = torch.randn(3, 4), torch.randn(4)
    _check_function(assign, x, src)


def test_factories_and_conversions() -> None:
    def factories(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = torch.zeros_like(x) + torch.ones(3, 4, device=x.device)
        a = a + torch.full((3, 4), 2.0, device=x.device)
        b = torch.arange(5, device=x.device) * 1.5
        c = x.to(torch.float64) + x.int()
        d = torch.where(x > 0, x, 0.0)
        e = x.new_zeros(2) + x.new_ones(2)
        return a, b, c, d, e, x.t().contiguous()

    x = torch.randn(3, 4)
    _check_function(factories, x)


def test_vector_norm_orders() -> None:
    # A norm's order is structure in a graph as in eager calls: each order its own reduction.
    def norms(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.linalg.vector_norm(x), torch.linalg.vector_norm(x, 1, dim=1),
                torch.linalg.vector_norm(x, float("inf"), dim=0, keepdim=True),
                torch.linalg.vector_norm(x, -float("inf")), torch.linalg.vector_norm(x, 0),
                x.norm(p=3.5, dim=1), *torch._foreach_norm([x, x[0]], 2))

    x = torch.randn(3, 4)
    x[1, 1] = 0
    _check_function(norms, x)


def test_pow_scalar_exponents() -> None:
    # The exponent of pow(Tensor, Scalar) is structure in a graph as in eager calls.
    def powers(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x.abs() + 0.5
        return x.pow(2), x ** 3, y.pow(0.5), x.pow(-1), y.pow(2.5), x.pow(0), y.pow(-0.5)

    _check_function(powers, torch.randn(3, 4))


def test_dropout_masks_and_scales() -> None:
    # Random masks cannot match the CPU; check the invariants instead: kept elements are
    # scaled by 1 / (1 - p), and the gradient is the same mask and scale.
    p = 0.5
    x = torch.randn(64, 32).abs().add_(0.1).to("tpu").requires_grad_(True)
    torchtpu.debug.reset_metrics()
    y = _compiled(lambda t: F.dropout(t, p, training=True))(x)
    y.sum().backward()
    yc, xc, gc = y.detach().cpu(), x.detach().cpu(), x.grad.cpu()
    kept = yc != 0
    assert 0.3 < kept.float().mean().item() < 0.7
    torch.testing.assert_close(yc[kept], xc[kept] / (1 - p), **FWD_TOLS)
    torch.testing.assert_close(gc, kept.float() / (1 - p), **FWD_TOLS)
    assert torchtpu.debug.metrics()["fallback_ops"] == {}


def test_gpt_training_steps_match_cpu() -> None:
    torch.manual_seed(0)
    cpu = GPT(sdpa=True)
    tpu = copy.deepcopy(cpu).to("tpu")
    step = _compiled(tpu)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt_tpu = torch.optim.SGD(tpu.parameters(), lr=0.1)
    torchtpu.debug.reset_metrics()
    for _ in range(3):
        idx, targets = torch.randint(0, 11, (2, 8)), torch.randint(0, 11, (2, 8))
        _, loss_cpu = cpu(idx, targets)
        _, loss_tpu = step(idx.to("tpu"), targets.to("tpu"))
        assert loss_tpu.item() == pytest.approx(loss_cpu.item(), rel=1e-4)
        for opt, loss in ((opt_cpu, loss_cpu), (opt_tpu, loss_tpu)):
            opt.zero_grad()
            loss.backward()
            opt.step()
    for (name, p_cpu), p_tpu in zip(cpu.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(p_tpu.detach().cpu(), p_cpu.detach(), **GRAD_TOLS, msg=name)
    assert torchtpu.debug.metrics()["fallback_ops"] == {}
