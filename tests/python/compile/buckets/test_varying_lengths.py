"""A new length inside a known bucket runs already-compiled programs only.

The sweeps of the issue that made shape buckets one subsystem: a block of
``nn.MultiheadAttention`` (causal mask built from the length) and an MLP under
``torch.compile(backend="tpu", dynamic=True)``, lengths 5..104; the same with batch and
length both varying; and a training step (forward with its loss, backward, optimizer) over
50 lengths. Every program the process needs is counted (compiled, or loaded from the disk
cache), eager helpers included: a length in a bucket already seen must need none, a new
bucket only its graphs. Results are compared with the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from _compare import programs_obtained

from torchtpu.dynamo.buckets import bucket_size

D_MODEL = 16


class Block(nn.Module):
    def __init__(self, d: int = D_MODEL, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=x.device), diagonal=1)
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def _twins() -> tuple[Block, Block]:
    torch.manual_seed(0)
    cpu = Block()
    tpu = Block().to("tpu")
    tpu.load_state_dict({k: v.to("tpu") for k, v in cpu.state_dict().items()})
    return cpu, tpu


def _sweep(shapes: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()
    cpu, tpu = _twins()
    cpu.eval()
    tpu.eval()
    compiled = torch.compile(tpu, backend="tpu", dynamic=True)
    seen: set[tuple[int, int]] = set()
    worst = 0.0
    for b, n in shapes:
        x = torch.randn(b, n, D_MODEL)
        before = programs_obtained()
        with torch.no_grad():
            got = compiled(x.to("tpu")).cpu()
            want = cpu(x)
        worst = max(worst, (got - want).abs().max().item())
        # Batch 1 is a size Dynamo specializes: its own graph, with its own buckets.
        bucket = (b if b == 1 else bucket_size(b), bucket_size(n))
        needed = programs_obtained() - before
        if bucket in seen:
            assert needed == 0, f"batch {b}, length {n}: {needed} programs in a known bucket"
        else:
            assert needed <= 1, f"batch {b}, length {n}: {needed} programs for a new bucket"
        seen.add(bucket)
    assert worst < 1e-4, worst


def test_attention_block_over_lengths_5_to_104(monkeypatch: pytest.MonkeyPatch) -> None:
    _sweep([(2, n) for n in range(5, 105)], monkeypatch)


def test_attention_block_with_batch_and_length_varying(monkeypatch: pytest.MonkeyPatch) -> None:
    _sweep([(1 + n % 3, n) for n in range(5, 105, 3)], monkeypatch)


def test_training_step_over_50_lengths(monkeypatch: pytest.MonkeyPatch) -> None:
    # The loss inside the compiled function: forward and backward graphs per bucket; the
    # optimizer's eager programs are the parameters' (static) shapes, needed once.
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()
    cpu, tpu = _twins()

    def step_loss(model: Block, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((model(x) - y) ** 2).mean()

    compiled = torch.compile(step_loss, backend="tpu", dynamic=True)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.05)
    opt = torch.optim.SGD(tpu.parameters(), lr=0.05)
    seen: set[int] = set()
    for step, n in enumerate(range(5, 55)):
        x, y = torch.randn(2, n, D_MODEL), torch.randn(2, n, D_MODEL)
        before = programs_obtained()
        loss = compiled(tpu, x.to("tpu"), y.to("tpu"))
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss_cpu = step_loss(cpu, x, y)
        loss_cpu.backward()
        opt_cpu.step()
        opt_cpu.zero_grad()
        assert loss.item() == pytest.approx(loss_cpu.item(), rel=1e-4, abs=1e-6), f"n={n}"
        needed = programs_obtained() - before
        if step > 0 and bucket_size(n) in seen:
            assert needed == 0, f"length {n}: {needed} programs in a known bucket"
        elif step > 0:
            assert needed <= 2, f"length {n}: {needed} programs for a new bucket"
        seen.add(bucket_size(n))
    for (name, p_cpu), p in zip(cpu.named_parameters(), tpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-3, atol=1e-4,
                                   msg=lambda m, name=name: f"{name}: {m}")
