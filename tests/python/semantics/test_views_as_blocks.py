"""Views that are one dense block in another dim order (transposes, permutes, expands), and
fused eager's reads of a storage in another shape and its copies between tpu tensors.

Such views read as slice + transpose (+ broadcast) and write as transpose + update, never
as an element gather or scatter; fused eager records a reshaped read or a tpu-to-tpu copy
into its graph instead of running a program at the call. Values are compared with the CPU
in both eager modes; counters show that nothing ran before the host read.
"""

from __future__ import annotations

import pytest
import torch
from _compare import eager_mode

import torchtpu

TPU = "tpu"


def counter(name: str) -> int:
    return torchtpu._C.counters().get(name, 0)


def block_views(x: torch.Tensor) -> list[torch.Tensor]:
    """Reads of x (4, 6, 8) through views that are dense blocks in another order."""
    return [
        x.transpose(0, 2) * 1,
        x.permute(1, 2, 0) + 0,
        x[1:3].transpose(1, 2) * 2,  # a permuted window at an offset
        x[:, 2:4].permute(2, 0, 1) * 1,  # not one block: a gather, still right
        x[2, :, :1].expand(6, 5) + 0,  # stride-0 dim broadcast
        x.reshape(24, 8).t()[:, 3:9] * 1,
        x[:1].transpose(0, 1).unsqueeze(2) * 1,  # size-1 dims anywhere
    ]


@pytest.mark.parametrize("mode", ["op", "fused"])
def test_block_view_reads_match_the_cpu(mode: str) -> None:
    x = torch.randn(4, 6, 8)
    with eager_mode(mode):
        got = [t.cpu() for t in block_views(x.to(TPU))]
    for g, want in zip(got, block_views(x)):
        torch.testing.assert_close(g, want)


def write_through_views(y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y.t()[1:3] = v[:2]  # a transposed window
    y.transpose(0, 1)[4:] += 1  # read-modify-write through the same kind of view
    y[:, ::2] = 7  # not one block: a scatter
    return y


@pytest.mark.parametrize("mode", ["op", "fused"])
def test_writes_through_block_views_match_the_cpu(mode: str) -> None:
    y0 = torch.randn(5, 6)
    v = torch.randn(3, 5)
    with eager_mode(mode):
        got = write_through_views(y0.to(TPU), v.to(TPU)).cpu()
    torch.testing.assert_close(got, write_through_views(y0.clone(), v))


def test_fused_reshaped_reads_and_copies_run_nothing_before_the_host_read() -> None:
    a = torch.randn(4, 8, 16)
    w = torch.randn(12, 16)
    with eager_mode("fused"):
        x, wt = a.to(TPU), w.to(TPU)  # buffers computed before the graph
        out = torch.zeros(32, 12, device=TPU)
        torchtpu.block_until_ready(out)
        executions, graphs = counter("num_executions"), counter("num_fused_graphs_run")
        y = x.view(32, 16) @ wt.t()  # x read flattened, w transposed
        out[1:].copy_(y[:-1])  # a tpu-to-tpu copy into a view
        whole = torch.empty(32, 12, device=TPU)
        whole.copy_(y)  # a copy of the whole storage
        assert counter("num_executions") == executions
        got, got_whole = out.cpu(), whole.cpu()
        assert counter("num_fused_graphs_run") == graphs + 1
        assert counter("num_executions") == executions + 1
    want = torch.zeros(32, 12)
    want[1:] = (a.view(32, 16) @ w.t())[:-1]
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_whole, a.view(32, 16) @ w.t())
