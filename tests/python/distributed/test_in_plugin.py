"""The tpu backend's in-plugin transport: 4 ranks as threads of one process, each on its own
device of the XLA CPU plugin (TORCHTPU_NUM_DEVICES=4), every collective one StableHLO
program over their devices. Each rank knows every rank's inputs (seeded by rank), so it
checks its results against the same collective computed with PyTorch on the CPU. The
checks run in one child process (the device count is fixed when the client is created)."""

from __future__ import annotations

import os

import pytest
from _subprocess import run_python

pytestmark = pytest.mark.timeout(300)

HERE = os.path.dirname(os.path.abspath(__file__))

_COLLECTIVES = r'''
import sys
from datetime import timedelta
sys.path.insert(0, HERE)
import torch
import torch.distributed as dist
import torchtpu
from _threads import run_rank_threads

R = dist.ReduceOp
W = 4


def inputs(shape, dtype, seed):
    """Every rank's input of one check (small integers: every order sums exactly)."""
    out = []
    for r in range(W):
        g = torch.Generator().manual_seed(1000 * seed + r)
        out.append(torch.randint(-4, 5, shape, generator=g).to(dtype))
    return out


def same(t, ref, what):
    assert t.device.type == "tpu", what
    torch.testing.assert_close(t.cpu(), ref, msg=lambda m: f"{what}: {m}")


def reference(op, xs, factor=None):
    s = torch.stack([x.double() for x in xs])
    if op == R.SUM:
        v = s.sum(0)
    elif op == R.AVG:
        v = s.sum(0) / len(xs)
    elif op == R.PRODUCT:
        v = s.prod(0)
    elif op == R.MIN:
        v = s.amin(0)
    elif op == R.MAX:
        v = s.amax(0)
    else:
        v = (s * factor).sum(0)
    return v.to(xs[0].dtype)


def body(rank, world):
    assert torchtpu.distributed.transport() == "in_plugin"
    seed = 0
    before = torchtpu.debug.metrics().get("num_in_plugin_collectives", 0)

    # all_reduce: every op, several dtypes.
    for dtype in (torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.int32):
        ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
        if dtype.is_floating_point:
            ops += [R.AVG]
        for op in ops:
            seed += 1
            xs = inputs((3, 5), dtype, seed)
            t = xs[rank].to("tpu")
            dist.all_reduce(t, op=op)
            same(t, reference(op, xs), f"all_reduce {op} {dtype}")
    # Bitwise reductions (integers and bool), as host-staged groups and Gloo compute them.
    for dtype in (torch.int32, torch.uint8, torch.int8, torch.bool):
        for op, fold in ((R.BAND, torch.bitwise_and), (R.BOR, torch.bitwise_or),
                         (R.BXOR, torch.bitwise_xor)):
            seed += 1
            xs = inputs((3, 5), dtype, seed)
            t = xs[rank].to("tpu")
            dist.all_reduce(t, op=op)
            expected = xs[0]
            for x in xs[1:]:
                expected = fold(expected, x)
            same(t, expected, f"all_reduce {op} {dtype}")
    # reduce_scatter with a bitwise op: the whole input reduced, this rank's part kept.
    seed += 1
    xs = inputs((W * 3,), torch.int32, seed)
    out = torch.empty(3, dtype=torch.int32, device="tpu")
    dist.reduce_scatter_tensor(out, xs[rank].to("tpu"), op=R.BXOR)
    expected = xs[0]
    for x in xs[1:]:
        expected = torch.bitwise_xor(expected, x)
    same(out, expected[3 * rank:3 * rank + 3], "reduce_scatter_tensor BXOR")
    try:
        dist.all_reduce(torch.ones(2, device="tpu"), op=R.BAND)
        raise AssertionError("BAND of floats was accepted")
    except ValueError as e:
        assert "takes integer or bool tensors" in str(e), e
    for factor in (0.5, torch.tensor(3.0, device="tpu")):
        seed += 1
        xs = inputs((7,), torch.float32, seed)
        t = xs[rank].to("tpu")
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
        f = factor.item() if isinstance(factor, torch.Tensor) else factor
        same(t, reference(None, xs, f), f"all_reduce PREMUL_SUM {factor}")

    # all_gather (list and into one tensor), reduce_scatter (list and tensor).
    seed += 1
    xs = inputs((2, 3), torch.float32, seed)
    out = torch.empty(W * 2, 3, device="tpu")
    dist.all_gather_into_tensor(out, xs[rank].to("tpu"))
    same(out, torch.cat(xs), "all_gather_into_tensor")
    outs = [torch.empty(2, 3, device="tpu") for _ in range(W)]
    dist.all_gather(outs, xs[rank].to("tpu"))
    for r in range(W):
        same(outs[r], xs[r], f"all_gather [{r}]")
    for op in (R.SUM, R.MAX, R.AVG):
        seed += 1
        xs = inputs((W * 3,), torch.float32, seed)
        out = torch.empty(3, device="tpu")
        dist.reduce_scatter_tensor(out, xs[rank].to("tpu"), op=op)
        same(out, reference(op, xs)[3 * rank:3 * rank + 3], f"reduce_scatter_tensor {op}")
    seed += 1
    xs = inputs((W, 2), torch.int64, seed)
    out = torch.empty(2, dtype=torch.int64, device="tpu")
    dist.reduce_scatter(out, [x.to("tpu") for x in xs[rank]])
    same(out, reference(R.SUM, xs)[rank], "reduce_scatter (list)")

    # all_to_all: equal and uneven splits.
    seed += 1
    xs = inputs((W * 2, 3), torch.float32, seed)
    out = torch.empty(W * 2, 3, device="tpu")
    dist.all_to_all_single(out, xs[rank].to("tpu"))
    same(out, torch.cat([xs[j][2 * rank:2 * rank + 2] for j in range(W)]), "all_to_all even")

    def split(src, dst):  # rows rank src sends to rank dst (0 included)
        return (src + 2 * dst) % 3

    seed += 1
    xs = [inputs((sum(split(r, j) for j in range(W)), 2), torch.float32, seed)[r]
          for r in range(W)]
    in_splits = [split(rank, j) for j in range(W)]
    out_splits = [split(j, rank) for j in range(W)]
    out = torch.empty(sum(out_splits), 2, device="tpu")
    dist.all_to_all_single(out, xs[rank].to("tpu"), out_splits, in_splits)
    expected = []
    for j in range(W):
        start = sum(split(j, k) for k in range(rank))
        expected.append(xs[j][start:start + split(j, rank)])
    same(out, torch.cat(expected), "all_to_all uneven")

    # broadcast, send/recv, barrier.
    seed += 1
    xs = inputs((4, 2), torch.bfloat16, seed)
    t = xs[rank].to("tpu")
    dist.broadcast(t, src=2)
    same(t, xs[2], "broadcast from 2")
    seed += 1
    xs = inputs((5,), torch.float32, seed)
    if rank % 2 == 0:
        dist.send(xs[rank].to("tpu"), dst=rank + 1, tag=7)
    else:
        t = torch.zeros(5, device="tpu")
        dist.recv(t, src=rank - 1, tag=7)
        same(t, xs[rank - 1], "recv")
        # A recv without a source is refused here, saying so (a send meets a named recv).
        try:
            dist.recv(t)
            raise AssertionError("a recv without a source was taken")
        except RuntimeError as e:
            assert "recv without a source" in str(e) and "pass src=" in str(e), e
    # Every rank posts its isend before its irecv (a ring), and pairs swap through
    # batch_isend_irecv: a send run on the caller's thread waited for a recv its peer could
    # post only once its own send returned, until the timeout.
    seed += 1
    xs = inputs((3,), torch.float32, seed)
    got = torch.zeros(3, device="tpu")
    works = [dist.isend(xs[rank].to("tpu"), dst=(rank + 1) % W, tag=3),
             dist.irecv(got, src=(rank - 1) % W, tag=3)]
    for w in works:
        w.wait()
    same(got, xs[(rank - 1) % W], "ring isend/irecv")
    peer = rank ^ 1
    got = torch.zeros(3, device="tpu")
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, xs[rank].to("tpu"), peer),
                                     dist.P2POp(dist.irecv, got, peer)]):
        w.wait()
    same(got, xs[peer], "batch_isend_irecv")
    dist.barrier()

    # Empty tensors on every rank: nothing to move (XLA refuses a collective over a zero
    # dim), results empty as with Gloo.
    empty = torch.zeros(0, 2, device="tpu")
    outs = [torch.zeros(0, 2, device="tpu") for _ in range(W)]
    dist.all_gather(outs, empty)
    assert all(o.shape == (0, 2) for o in outs)
    flat = torch.zeros(0, device="tpu")
    dist.all_gather_into_tensor(flat, torch.zeros(0, device="tpu"))
    dist.reduce_scatter_tensor(flat, torch.zeros(0, device="tpu"))
    dist.all_to_all_single(flat, torch.zeros(0, device="tpu"))
    assert flat.shape == (0,)

    # Subgroups {0, 1} and {2, 3}: each a program over its own two devices.
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    mine = g01 if rank < 2 else g23
    assert torchtpu.distributed.transport(mine) == "in_plugin"
    seed += 1
    xs = inputs((6,), torch.float32, seed)
    t = xs[rank].to("tpu")
    dist.all_reduce(t, group=mine)
    pair = [0, 1] if rank < 2 else [2, 3]
    same(t, xs[pair[0]] + xs[pair[1]], "subgroup all_reduce")
    out = torch.empty(12, device="tpu")
    dist.all_gather_into_tensor(out, xs[rank].to("tpu"), group=mine)
    same(out, torch.cat([xs[pair[0]], xs[pair[1]]]), "subgroup all_gather")

    after = torchtpu.debug.metrics().get("num_in_plugin_collectives", 0)
    assert after > before, (before, after)

    # In place all_reduce donates every rank's buffer to its program when each is held by
    # its tensor alone. A buffer another tensor shares (copy_ shares it) is not donated,
    # and that tensor keeps its value. (Counters are process-wide: read between barriers.)
    def donations():
        dist.barrier()
        n = torchtpu.debug.metrics().get("num_in_plugin_donations", 0)
        dist.barrier()
        return n
    d0 = donations()
    t = torch.full((64,), float(rank + 1), device="tpu")
    dist.all_reduce(t)
    same(t, torch.full((64,), 10.0), "all_reduce with its buffer donated")
    d1 = donations()
    assert d1 == d0 + W, (d0, d1)
    t = torch.full((8,), float(rank), device="tpu")
    keep = torch.empty_like(t)
    keep.copy_(t)
    dist.all_reduce(t)
    same(t, torch.full((8,), 6.0), "all_reduce of a shared buffer")
    same(keep, torch.full((8,), float(rank)), "the tensor sharing the buffer")
    assert donations() == d1

    # A thread reading a rank's tensor while all_reduce donates its buffer reads a whole
    # value, never one being given up (the storage stays locked from the check until the
    # result is in; without the lock ~1 read in 8 was garbage).
    import threading

    t = torch.ones(4096, device="tpu")
    stop, bad = threading.Event(), []

    def reader():
        while not stop.is_set() and not bad:
            try:
                if not bool((t.cpu() == 1).all()):
                    bad.append("a value no call wrote")
            except RuntimeError as e:
                bad.append(str(e))
    th = threading.Thread(target=reader)
    th.start()
    for _ in range(100):
        dist.all_reduce(t, op=R.MAX)
    stop.set()
    th.join()
    assert not bad, bad

    # A rank whose shape differs: every rank raises, naming the ranks and shapes.
    t = torch.ones(5 if rank == 3 else 4, device="tpu")
    try:
        dist.all_reduce(t)
        raise AssertionError("a shape mismatch did not raise")
    except ValueError as e:
        msg = str(e)
        assert "ranks disagree" in msg and "rank 3: all_reduce(sum) float32[5]" in msg, msg
        assert "rank 0: all_reduce(sum) float32[4]" in msg, msg

    # A rank that never arrives: the others raise within the group's timeout, naming it;
    # the late rank then fails at once (the group is broken, as after a NCCL timeout).
    slow = dist.new_group([0, 1, 2, 3], timeout=timedelta(seconds=2))
    dist.barrier()
    t = torch.ones(3, device="tpu")
    if rank != 3:
        try:
            dist.all_reduce(t, group=slow)
            raise AssertionError("a missing rank did not time out")
        except dist.DistBackendError as e:
            assert "ranks [3] did not arrive" in str(e), str(e)
    dist.barrier()
    if rank == 3:
        try:
            dist.all_reduce(t, group=slow)
            raise AssertionError("a broken group ran a collective")
        except dist.DistBackendError as e:
            assert "ranks [3] did not arrive" in str(e), str(e)


run_rank_threads(body, W)
print("IN_PLUGIN_OK")
'''


def test_collectives_on_four_rank_threads() -> None:
    proc = run_python(f"HERE = {HERE!r}\n" + _COLLECTIVES, timeout=240,
                      TORCHTPU_NUM_DEVICES="4")
    assert proc.returncode == 0 and "IN_PLUGIN_OK" in proc.stdout, proc.stdout + proc.stderr
