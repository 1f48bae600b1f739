"""Distributed checkpointing: an FSDP2-sharded model's state saved by 2 ranks of tpu
tensors, loaded by 1 rank into an unsharded model (resharding)."""

from __future__ import annotations

import pytest
from _launch import run_ranks

pytestmark = pytest.mark.timeout(300)


def _save(rank: int, world: int, ckpt: str, expect_path: str) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    import torch.nn.functional as F
    from _models import TinyTransformer
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = TinyTransformer().to("tpu")
    mesh = init_device_mesh("tpu", (world,))
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # One training step, so the saved values differ from any fresh initialisation.
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    tokens = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(rank))
    F.cross_entropy(model(tokens.to("tpu")).flatten(0, 1), tokens.to("tpu").flatten()).backward()
    opt.step()
    sd = model.state_dict()
    dcp.save(sd, checkpoint_id=ckpt)
    full = {k: v.full_tensor().cpu() for k, v in sd.items()}
    if rank == 0:
        torch.save(full, expect_path)


def _load(rank: int, world: int, ckpt: str, expect_path: str) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from _models import TinyTransformer

    torch.manual_seed(1)  # other initial weights than the saved ones
    model = TinyTransformer().to("tpu")
    sd = model.state_dict()
    dcp.load(sd, checkpoint_id=ckpt)
    model.load_state_dict(sd)
    expect = torch.load(expect_path)
    got = model.state_dict()
    assert set(got) == set(expect)
    for k, v in expect.items():
        assert got[k].device.type == "tpu"
        torch.testing.assert_close(got[k].cpu(), v, rtol=0, atol=0, msg=lambda m: f"{k}: {m}")


def test_dcp_save_on_2_load_on_1(tmp_path):
    ckpt, expect = str(tmp_path / "ckpt"), str(tmp_path / "expect.pt")
    run_ranks(_save, 2, args=(ckpt, expect), timeout=200)
    run_ranks(_load, 1, args=(ckpt, expect), timeout=120)
