"""FSDP2 (fully_shard) of a small transformer on 2 ranks of tpu tensors matches
single-process training step for step."""

from __future__ import annotations

import pytest
from _launch import run_ranks

pytestmark = pytest.mark.timeout(300)


def _fsdp2(rank: int, world: int, compiled: bool) -> None:
    import copy

    import torch
    import torch.nn.functional as F
    from _models import TinyTransformer
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    import torchtpu

    torch.manual_seed(0)
    ref = TinyTransformer()
    model = copy.deepcopy(ref).to("tpu")
    mesh = init_device_mesh("tpu", (world,))
    for blk in model.blocks:
        fully_shard(blk, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # Every parameter is a DTensor sharded over the mesh.
    for p in model.parameters():
        assert p.placements[0].is_shard(), p.placements
    fwd = torch.compile(model, backend="tpu") if compiled else model
    # SGD, not Adam: Adam's first step is lr * sign(grad), which turns the rounding noise of
    # gradients that are zero in exact arithmetic (the attention's key bias) into full steps.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(3)
    before = torchtpu.debug.metrics().get("num_host_staged_collectives", 0)
    for step in range(3):
        tokens = torch.randint(0, 64, (world * 2, 8), generator=gen)
        targets = torch.randint(0, 64, (world * 2, 8), generator=gen)
        ref_opt.zero_grad()
        F.cross_entropy(ref(tokens).flatten(0, 1), targets.flatten()).backward()
        ref_opt.step()
        shard = slice(rank * 2, (rank + 1) * 2)
        opt.zero_grad()
        logits = fwd(tokens[shard].to("tpu"))
        F.cross_entropy(logits.flatten(0, 1), targets[shard].to("tpu").flatten()).backward()
        opt.step()
        full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(full[k], v, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"step {step} {k}: {m}")
    m = torchtpu.debug.metrics()
    assert m["num_host_staged_collectives"] > before
    if compiled:  # Dynamo compiled graphs for the tpu backend (FSDP's hooks run eagerly)
        from torch._dynamo.utils import counters

        assert counters["stats"]["unique_graphs"] > 0, dict(counters["stats"])


def test_fsdp2_matches_single_process():
    run_ranks(_fsdp2, 2, args=(False,), timeout=240)


def test_fsdp2_compiled_matches_single_process():
    run_ranks(_fsdp2, 2, args=(True,), timeout=280)
