"""DTensor on 2 ranks of tpu tensors: distribute_tensor / redistribute across Shard,
Replicate and Partial, and tensor parallelism (parallelize_module, Colwise/Rowwise) on an
MLP against the unsharded module. One spawned job."""

from __future__ import annotations

import pytest
from _launch import run_ranks

pytestmark = pytest.mark.timeout(300)


def _dtensor(rank: int, world: int) -> None:
    import copy

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("tpu", (world,))
    torch.manual_seed(0)
    x = torch.randn(4 * world, 6)

    def full(d: DTensor) -> torch.Tensor:
        assert d.to_local().device.type == "tpu"
        return d.full_tensor().cpu()

    d = distribute_tensor(x.to("tpu"), mesh, [Shard(0)])
    assert d.to_local().shape == (4, 6)
    torch.testing.assert_close(d.to_local().cpu(), x[rank * 4:(rank + 1) * 4])
    torch.testing.assert_close(full(d), x)
    for src, dst in [([Shard(0)], [Replicate()]), ([Shard(0)], [Shard(1)]),
                     ([Replicate()], [Shard(1)]), ([Shard(1)], [Shard(0)])]:
        r = distribute_tensor(x.to("tpu"), mesh, src).redistribute(mesh, dst)
        assert r.placements == tuple(dst)
        torch.testing.assert_close(full(r), x, msg=lambda m: f"{src} -> {dst}: {m}")
    # Partial: each rank holds a summand; Replicate all-reduces, Shard reduce-scatters.
    local = torch.full((4 * world, 6), float(rank + 1), device="tpu")
    total = torch.full((4 * world, 6), float(sum(range(1, world + 1))))
    p = DTensor.from_local(local, mesh, [Partial()])
    torch.testing.assert_close(p.redistribute(mesh, [Replicate()]).to_local().cpu(), total)
    s = p.redistribute(mesh, [Shard(0)])
    torch.testing.assert_close(s.to_local().cpu(), total[rank * 4:(rank + 1) * 4])
    avg = DTensor.from_local(local, mesh, [Partial("avg")]).redistribute(mesh, [Replicate()])
    torch.testing.assert_close(avg.to_local().cpu(), total / world)
    # An op on sharded operands: a row-sharded matrix times a replicated one.
    w = torch.randn(6, 3)
    y = torch.mm(distribute_tensor(x.to("tpu"), mesh, [Shard(0)]),
                 distribute_tensor(w.to("tpu"), mesh, [Replicate()]))
    torch.testing.assert_close(full(y), x @ w, rtol=1e-5, atol=1e-5)

    # A 2-D mesh: its dimensions are subgroups of the tpu backend.
    mesh2 = init_device_mesh("tpu", (1, world), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group = mesh2.get_group("tp"), mesh2.get_group("dp")
    assert dist.get_world_size(tp_group) == world and dist.get_world_size(dp_group) == 1
    d2 = distribute_tensor(x.to("tpu"), mesh2, [Replicate(), Shard(1)])
    torch.testing.assert_close(d2.redistribute(mesh2, [Replicate(), Replicate()]).to_local().cpu(), x)
    t = torch.full((2,), float(rank + 1), device="tpu")
    dist.all_reduce(t, group=tp_group)
    torch.testing.assert_close(t.cpu(), torch.full((2,), float(sum(range(1, world + 1)))))

    # Tensor parallelism: Colwise then Rowwise linear layers of an MLP.
    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(6, 16)
            self.down = nn.Linear(16, 6)

        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return self.down(torch.relu(self.up(t)))

    ref = MLP()
    tp = parallelize_module(copy.deepcopy(ref).to("tpu"), mesh,
                            {"up": ColwiseParallel(), "down": RowwiseParallel()})
    assert tp.up.weight.placements == (Shard(0),) and tp.down.weight.placements == (Shard(1),)
    inp = torch.randn(5, 6)
    out = tp(inp.to("tpu"))
    expect = ref(inp)
    torch.testing.assert_close(out.cpu(), expect, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    expect.sum().backward()
    for (name, p), r in zip(tp.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), r.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"grad of {name}: {m}")
    dist.barrier()


def test_dtensor_and_tensor_parallel():
    run_ranks(_dtensor, 2, timeout=240)
