"""What reading views and moving storages costs in program executions (counts, not times).

A training step under FSDP2 reads many parameters that are views or reshapes of their own
storages, copies each sharded parameter into its unsharded storage, and frees and
reallocates those storages every step. Each case here is compared with PyTorch on the CPU
and held to an execution count:

- the view inputs of one call (an eager op, a list op, a compiled graph) are read by one
  program for all of them, whatever storages they come from;
- a copy of a whole storage into a whole storage with the same elements runs nothing (the
  destination takes the source's buffer as it is);
- resizing a storage to or from zero bytes runs nothing (what is left is all zeros).
"""

from __future__ import annotations

import torch

import torchtpu

TPU = "tpu"


def executions() -> int:
    return torchtpu.debug.metrics()["num_executions"]  # counted when enqueued


def run_counted(fn):
    fn()  # warm: compiles and caches every program it needs
    before = executions()
    out = fn()
    return out, executions() - before


def test_an_eager_op_reads_its_view_inputs_with_one_program() -> None:
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(6, 4, generator=g), torch.randn(3, 12, generator=g)
    ta, tb = a.to(TPU), b.to(TPU)
    # a transposed view and a window of another storage in another shape
    out, n = run_counted(lambda: torch.mm(ta.t(), tb[1:].view(6, 4)))
    torch.testing.assert_close(out.cpu(), torch.mm(a.t(), b[1:].view(6, 4)))
    assert n == 2  # one read program for both views, then mm


def test_a_list_op_reads_views_of_several_storages_with_one_program() -> None:
    g = torch.Generator().manual_seed(1)
    bases = [torch.randn(4, 5, generator=g) for _ in range(3)]
    tpu_bases = [b.to(TPU) for b in bases]

    def items(bs):
        return [bs[0].t(), bs[1][1:3], bs[2].view(20), bs[0][:, 1]]

    out, n = run_counted(lambda: torch._foreach_mul(items(tpu_bases), 2.0))
    for o, e in zip(out, torch._foreach_mul(items(bases), 2.0)):
        torch.testing.assert_close(o.cpu(), e)
    assert n == 2  # one read program over the three storages, then the list op


def test_cat_of_reshaped_storages_reads_them_with_one_program() -> None:
    g = torch.Generator().manual_seed(2)
    grads = [torch.randn(s, generator=g) for s in [(8, 3), (5,), (2, 2, 2)]]
    tpu_grads = [t.to(TPU) for t in grads]
    out, n = run_counted(lambda: torch.cat([t.view(1, -1) for t in tpu_grads], dim=1))
    torch.testing.assert_close(out.cpu(), torch.cat([t.view(1, -1) for t in grads], dim=1))
    assert n == 2


def test_a_compiled_graph_reads_its_view_inputs_with_one_program() -> None:
    def f(w1, w2, x):
        return torch.relu(x @ w1) @ w2

    fast = torch.compile(f, backend="tpu", dynamic=False)
    g = torch.Generator().manual_seed(3)
    flat1, flat2, x = torch.randn(48, generator=g), torch.randn(30, generator=g), torch.randn(
        2, 6, generator=g)
    t1, t2, tx = flat1.to(TPU), flat2.to(TPU), x.to(TPU)
    # parameters as FSDP2 hands them over: 2-D views of 1-D storages, and a window
    out, n = run_counted(lambda: fast(t1.view(6, 8), t2[6:].view(8, 3), tx))
    torch.testing.assert_close(out.cpu(), f(flat1.view(6, 8), flat2[6:].view(8, 3), x))
    assert n == 2  # one read program for both parameters, then the graph


def test_copying_a_whole_storage_into_another_of_the_same_elements_runs_nothing() -> None:
    src = torch.randn(3, 4, generator=torch.Generator().manual_seed(4))
    t_src = src.to(TPU)
    t_dst = torch.empty(12, device=TPU)

    def copy():
        t_dst.copy_(t_src.view(12))  # a flat copy of a 2-D storage: no reshape program
        return t_dst

    out, n = run_counted(copy)
    assert n == 0
    torch.testing.assert_close(out.cpu(), src.view(12))
    # the destination read in the source's shape is its buffer as it is: only the add runs
    view, n = run_counted(lambda: t_dst.view(3, 4) + 1)
    torch.testing.assert_close(view.cpu(), src + 1)
    assert n == 1
    # the copy is a value: writing the source afterwards leaves the destination alone
    t_src.add_(1)
    torch.testing.assert_close(t_dst.cpu(), src.view(12))
    # other shapes, dtypes or partial destinations keep the ordinary copy
    half = torch.zeros(24, device=TPU)
    half[:12].copy_(t_src.view(12))
    torch.testing.assert_close(half.cpu(), torch.cat([(src + 1).view(12), torch.zeros(12)]))
    as_double = torch.empty(3, 4, dtype=torch.float64, device=TPU).copy_(t_src)
    torch.testing.assert_close(as_double.cpu(), (src + 1).double())


def test_resizing_a_storage_to_and_from_zero_runs_nothing() -> None:
    x = torch.arange(6.0).to(TPU)
    storage = x.untyped_storage()
    before = executions()
    storage.resize_(0)
    storage.resize_(6 * 4)
    assert executions() - before == 0
    assert torch.equal(x.cpu(), torch.zeros(6))  # nothing kept: new bytes are zero
    x.copy_(torch.arange(6.0, 12.0))
    assert torch.equal(x.cpu(), torch.arange(6.0, 12.0))
    # a resize that keeps bytes keeps them, and zero-fills the rest
    storage.resize_(8 * 4)
    grown = torch.empty(0, device=TPU).set_(storage, 0, (8,), (1,))
    assert torch.equal(grown.cpu(), torch.cat([torch.arange(6.0, 12.0), torch.zeros(2)]))
