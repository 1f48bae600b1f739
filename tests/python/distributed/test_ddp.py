"""DDP on 2 ranks of tpu tensors matches single-process training step for step."""

from __future__ import annotations

import pytest
from _launch import run_ranks

pytestmark = pytest.mark.timeout(300)


def _ddp(rank: int, world: int, options: dict | None = None) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import torchtpu

    torch.manual_seed(0)  # the same initial weights in every process
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    local = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    local.load_state_dict(ref.state_dict())
    if rank == 1:  # DDP broadcasts rank 0's parameters at construction
        with torch.no_grad():
            for p in local.parameters():
                p.add_(1.0)
    # Several buckets of 2 KB.
    model = DDP(local.to("tpu"), bucket_cap_mb=0.0005, **(options or {}))
    for p, r in zip(model.module.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), r.detach())
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(7)
    before = torchtpu.debug.metrics().get("num_host_staged_collectives", 0)
    for step in range(4):
        xs = torch.randn(world * 6, 8, generator=gen)
        ys = torch.randn(world * 6, 4, generator=gen)
        # Single process: the whole batch. DDP: this rank's shard, gradients averaged.
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(ref(xs), ys).backward()
        ref_opt.step()
        shard = slice(rank * 6, (rank + 1) * 6)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xs[shard].to("tpu")), ys[shard].to("tpu"))
        loss.backward()
        opt.step()
        for (name, p), r in zip(model.module.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.detach().cpu(), r.detach(), rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"step {step} {name}: {m}")
    assert torchtpu.debug.metrics()["num_host_staged_collectives"] > before
    assert dist.get_backend() == "tpu"
    assert dist.Backend.default_device_backend_map["tpu"] == "tpu"


def test_ddp_matches_single_process():
    # The plain "tpu" backend (no Gloo group for CPU tensors): init_process_group("tpu").
    run_ranks(_ddp, 2, timeout=240, backend="tpu")


@pytest.mark.parametrize("options", [{"find_unused_parameters": True}, {"static_graph": True}])
def test_ddp_with_unused_parameter_tracking(options):
    # The reducer copies its map of used parameters through memory it pins for the device
    # (and asserts is_pinned()): tpu's pinned allocator must give memory is_pinned() admits.
    run_ranks(_ddp, 2, args=(options,), timeout=240, backend="tpu")


def _sync_batch_norm(rank: int, world: int) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                              torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    local = torch.nn.SyncBatchNorm.convert_sync_batchnorm(
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                            torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1)))
    local.load_state_dict(ref.state_dict())
    model = DDP(local.to("tpu"))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        # Ranks hold batches of different sizes (3 and 5): the statistics weigh them.
        xs = torch.randn(8, 3, 6, 6, generator=gen) * 2 + 1
        lo, hi = (0, 3) if rank == 0 else (3, 8)
        ref_opt.zero_grad()
        ref_out = ref(xs)
        ref_out.square().mean().backward()
        ref_opt.step()
        opt.zero_grad()
        out = model(xs[lo:hi].to("tpu"))
        # DDP averages gradients over ranks: weigh each rank's loss by its share.
        (out.square().sum() / ref_out.numel() * world).backward()
        opt.step()
        torch.testing.assert_close(out.detach().cpu(), ref_out.detach()[lo:hi],
                                   rtol=1e-4, atol=1e-4)
    for (name, p), r in zip(model.module.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(p.cpu(), r, rtol=1e-4, atol=1e-4, msg=name)


def test_sync_batch_norm_matches_batch_norm_over_the_whole_batch():
    run_ranks(_sync_batch_norm, 2, timeout=240, backend="tpu")
