"""Functional collectives inside ``torch.compile(backend="tpu")`` graphs.

- In-plugin (4 ranks as threads, one device each): a graph's collectives compile into its
  program, which runs replicated over the ranks' devices; nothing runs outside the graph.
  Covers every lowered collective against the same computation on the CPU, a tensor
  parallel MLP (Colwise/Rowwise) under compile, a graph over two groups of a 2-D mesh,
  and an uneven all_to_all, which runs between compiled pieces (counted).
- Host-staged (2 ranks as processes): the graph is cut at its collectives, which run
  through the process group (counted and warned), with the same results.
"""

from __future__ import annotations

import os

import pytest
from _launch import run_ranks
from _subprocess import run_python

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.abspath(__file__))

_IN_PLUGIN = r'''
import sys
import warnings
sys.path.insert(0, HERE)
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torchtpu
from _threads import run_rank_threads

W = 4


def inputs(shape, seed):
    """Every rank's input (small integers: sums and products are exact in any order)."""
    return [torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(100 * seed + r))
            .float() for r in range(W)]


def same(t, ref, what):
    assert t.device.type == "tpu", what
    torch.testing.assert_close(t.cpu(), ref, msg=lambda m: f"{what}: {m}")


def every_collective(x, group):
    a = funcol.all_reduce(x * 2, "sum", group)
    m = funcol.all_reduce(x, "max", group)
    g = funcol.all_gather_tensor(x, 0, group)
    s = funcol.reduce_scatter_tensor(g * 3, "avg", 0, group)
    t = funcol.all_to_all_single(g, None, None, group)
    b = funcol.broadcast(x + 1, 2, group)
    return a + 1, m, g, s, t, b


def tp_mlp(rank):
    import copy
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
    # Every rank's reference gets the same weights from a generator of its own: the ranks
    # are threads, torch.manual_seed seeds the one process-wide generator, and their draws
    # would interleave. The model holds rank 0's weights (distribute_tensor sends them from
    # rank 0), so a reference that differed would fail every other rank.
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.rand(p.shape, generator=gen) - 0.5)
    mesh = init_device_mesh("tpu", (W,))
    model = parallelize_module(copy.deepcopy(ref).to("tpu"), mesh,
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.full_tensor().cpu(), r.detach(), rtol=0, atol=0,
                                   msg=lambda m: f"distributed weight {name}: {m}")
    fast = torch.compile(model, backend="tpu")
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(3))
    out = fast(x.to("tpu"))
    expect = ref(x)
    torch.testing.assert_close(out.cpu(), expect.detach(), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    expect.sum().backward()
    for (name, p), r in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.full_tensor().cpu(), r.grad, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"tensor parallel grad of {name}: {m}")


def two_groups(rank):
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("tpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_group("dp"), mesh.get_group("tp")

    def f(x):
        return funcol.all_reduce(funcol.all_reduce(x, "sum", tp) * 10, "sum", dp)

    xs = inputs((3,), 7)
    out = torch.compile(f, backend="tpu", fullgraph=True)(xs[rank].to("tpu"))
    # mesh [[0, 1], [2, 3]]: tp pairs rows, dp pairs columns.
    same(out, 10 * sum(xs), "2-D mesh: tp then dp")


def uneven(rank):
    def f(x, out_splits, in_splits):
        return funcol.all_to_all_single(x + 0, out_splits, in_splits, dist.group.WORLD) * 2

    in_splits = [(rank + j) % 2 + 1 for j in range(W)]
    out_splits = [(j + rank) % 2 + 1 for j in range(W)]
    xs = [torch.arange(sum((r + j) % 2 + 1 for j in range(W)), dtype=torch.float32) + 100 * r
          for r in range(W)]
    out = torch.compile(f, backend="tpu")(xs[rank].to("tpu"), out_splits, in_splits)
    expected = []
    for j in range(W):
        start = sum((j + k) % 2 + 1 for k in range(rank))
        expected.append(xs[j][start:start + (j + rank) % 2 + 1])
    same(out, torch.cat(expected) * 2, "uneven all_to_all between pieces")


def body(rank, world):
    group = dist.group.WORLD
    xs = inputs((4, 3), 1)
    before = torchtpu.debug.metrics()
    fast = torch.compile(every_collective, backend="tpu", fullgraph=True)
    for step in range(2):  # the second call reuses the program
        a, m, g, s, t, b = fast(xs[rank].to("tpu") + step, group)
        ys = [x + step for x in xs]
        same(a, 2 * sum(ys) + 1, f"all_reduce sum, call {step}")
        same(m, torch.stack(ys).amax(0), f"all_reduce max, call {step}")
        same(g, torch.cat(ys), f"all_gather, call {step}")
        same(s, (3 * torch.cat(ys)).reshape(W, 4, 3)[rank], f"reduce_scatter avg, call {step}")
        # Every rank gathered the same g, so rank r receives g's chunk r from each rank.
        same(t, torch.cat([torch.cat(ys)[4 * rank:4 * rank + 4]] * W), f"all_to_all, call {step}")
        same(b, ys[2] + 1, f"broadcast from 2, call {step}")
    after = torchtpu.debug.metrics()
    lowered = after["num_graph_collectives_lowered"] - before.get("num_graph_collectives_lowered", 0)
    assert lowered >= 6, after
    assert after["num_replicated_graph_executions"] >= 2, after
    assert after["num_out_of_graph_collectives"] == before.get("num_out_of_graph_collectives", 0)

    tp_mlp(rank)
    two_groups(rank)
    splits_before = torchtpu.debug.metrics()["num_graph_collective_splits"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        uneven(rank)
    m = torchtpu.debug.metrics()
    assert m["num_graph_collective_splits"] > splits_before, m
    assert m["num_out_of_graph_collectives"] > 0, m
    assert any("uneven or symbolic split sizes" in r for r in m["graph_collective_splits"]), m


# Dynamo registers a backend from its entry point on first lookup, and two threads doing
# that at once collide ("duplicate name: tpu"): look it up once before the rank threads.
torch.compile(lambda x: x, backend="tpu")
run_rank_threads(body, W, timeout=200)
print("COMPILED_IN_PLUGIN_OK")
'''


def test_compiled_collectives_in_plugin() -> None:
    proc = run_python(f"HERE = {HERE!r}\n" + _IN_PLUGIN, timeout=280, TORCHTPU_NUM_DEVICES="4")
    assert proc.returncode == 0 and "COMPILED_IN_PLUGIN_OK" in proc.stdout, (
        proc.stdout[-4000:] + proc.stderr[-8000:])


def _host_staged(rank: int, world: int) -> None:
    import warnings

    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    import torchtpu

    group = dist.group.WORLD

    def f(x):
        y = funcol.all_reduce(x * 2, "sum", group)
        g = funcol.all_gather_tensor(y + 1, 0, group)
        return funcol.reduce_scatter_tensor(g, "sum", 0, group) - 1

    xs = [torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r for r in range(world)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(f, backend="tpu", fullgraph=True)(xs[rank].to("tpu"))
    y = 2 * sum(xs)
    torch.testing.assert_close(out.cpu(), world * (y + 1) - 1)
    m = torchtpu.debug.metrics()
    assert m["num_graph_collective_splits"] >= 1, m
    assert m["num_out_of_graph_collectives"] >= 3, m
    assert m["num_graph_collectives_lowered"] == 0, m
    assert any("stages through the host" in r for r in m["graph_collective_splits"]), m
    assert any("between compiled pieces" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]


def test_compiled_collectives_host_staged() -> None:
    run_ranks(_host_staged, 2, timeout=240, backend="tpu")
