"""Every collective of the tpu backend on 2 ranks against the same collective on CPU
tensors through Gloo (the default group is ``cpu:gloo,tpu:tpu``, so CPU tensors take
Gloo). All checks run in one spawned job to pay the start-up once."""

from __future__ import annotations

import pytest
from _launch import run_ranks

pytestmark = pytest.mark.timeout(300)


def _collectives(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    import torchtpu

    R = dist.ReduceOp
    gen = torch.Generator().manual_seed(1234 + rank)

    def data(shape, dtype=torch.float32):
        if dtype.is_floating_point:
            # Small integers in floating point: every reduction order gives the same value.
            return torch.randint(-4, 5, shape, generator=gen).to(dtype)
        return torch.randint(1, 7, shape, generator=gen).to(dtype)

    def same(tpu_t, cpu_t, what):
        assert tpu_t.device.type == "tpu", what
        torch.testing.assert_close(tpu_t.cpu(), cpu_t, msg=lambda m: f"{what}: {m}")

    before = torchtpu.debug.metrics().get("num_host_staged_collectives", 0)
    assert torchtpu.distributed.transport() == "host_staged"

    # all_reduce: every op and the dtypes Gloo takes, against Gloo on the CPU.
    cases = [(op, torch.float32) for op in (R.SUM, R.MIN, R.MAX, R.PRODUCT)]
    cases += [(op, torch.int64) for op in (R.SUM, R.MIN, R.MAX, R.PRODUCT, R.BAND, R.BOR)]
    cases += [(R.SUM, torch.float64), (R.MAX, torch.int32), (R.SUM, torch.bfloat16)]
    # Small shapes go whole to the peer; 40001 elements (over 64 KB) are reduce-scattered
    # and all-gathered, in parts of unequal length.
    for shape in ((3, 5), (40001,)):
        for op, dtype in cases:
            x = data(shape, dtype)
            ref = x.clone()
            dist.all_reduce(ref, op=op)
            t = x.to("tpu")
            dist.all_reduce(t, op=op)
            same(t, ref, f"all_reduce {op} {dtype} {shape}")
    # AVG and PREMUL_SUM are computed by the backend (Gloo has no PREMUL_SUM).
    for n in (7, 40001):
        x = data((n,))
        total = x.clone()
        dist.all_reduce(total)
        t = x.to("tpu")
        dist.all_reduce(t, op=R.AVG)
        same(t, total / world, f"all_reduce AVG of {n}")
        for factor in (0.5, torch.tensor(3.0, device="tpu")):
            scaled = x * (factor.item() if isinstance(factor, torch.Tensor) else factor)
            dist.all_reduce(scaled)
            t = x.to("tpu")
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
            same(t, scaled, f"all_reduce PREMUL_SUM {factor} of {n}")

    # Async work: wait() and a future that completes with the outputs (DDP needs both).
    t = x.to("tpu")
    work = dist.all_reduce(t, async_op=True)
    assert work.wait()
    fut_value = work.get_future().wait()
    assert isinstance(fut_value, list) and fut_value[0] is not None
    same(fut_value[0], total, "future of all_reduce")
    chained = work.get_future().then(lambda f: f.value()[0] * 2).wait()
    same(chained, total * 2, "future.then of all_reduce")

    # all_reduce_coalesced (the group's method, as DDP's fallback path calls it).
    xs = [data((4,)), data((2, 3))]
    refs = [a.clone() for a in xs]
    for a in refs:
        dist.all_reduce(a)
    ts = [a.to("tpu") for a in xs]
    pg = dist.distributed_c10d._get_default_group()
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = R.SUM
    pg.allreduce_coalesced(ts, opts).wait()
    for a, b in zip(ts, refs):
        same(a, b, "allreduce_coalesced")

    # broadcast from each root.
    for root in range(world):
        x = data((2, 4))
        ref = x.clone()
        dist.broadcast(ref, src=root)
        t = x.to("tpu")
        dist.broadcast(t, src=root)
        same(t, ref, f"broadcast root {root}")

    # all_gather (list) and all_gather_into_tensor, flat and stacked outputs.
    x = data((3, 2))
    refs = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(refs, x)
    outs = [torch.empty((3, 2), device="tpu") for _ in range(world)]
    dist.all_gather(outs, x.to("tpu"))
    for a, b in zip(outs, refs):
        same(a, b, "all_gather")
    ref = torch.empty(world * 3, 2)
    dist.all_gather_into_tensor(ref, x)
    for shape in ((world * 3, 2), (world, 3, 2)):
        out = torch.empty(shape, device="tpu")
        dist.all_gather_into_tensor(out, x.to("tpu"))
        same(out.reshape(world * 3, 2), ref, f"all_gather_into_tensor {shape}")

    # Coalesced forms (what FSDP2 issues).
    ins = [data((4,)), data((2, 2))]
    with dist._coalescing_manager(async_ops=True) as cm:
        outs = [torch.empty(world * a.numel(), device="tpu") for a in ins]
        for o, a in zip(outs, ins):
            dist.all_gather_into_tensor(o, a.to("tpu").reshape(-1))
    cm.wait()
    for o, a in zip(outs, ins):
        ref = torch.empty(world * a.numel())
        dist.all_gather_into_tensor(ref, a.reshape(-1))
        same(o, ref, "allgather_into_tensor_coalesced")
    ins = [data((world * 3,)), data((world * 2,))]
    with dist._coalescing_manager(async_ops=True) as cm:
        outs = [torch.empty(a.numel() // world, device="tpu") for a in ins]
        for o, a in zip(outs, ins):
            dist.reduce_scatter_tensor(o, a.to("tpu"))
    cm.wait()
    for o, a in zip(outs, ins):
        ref = torch.empty(a.numel() // world)
        dist.reduce_scatter_tensor(ref, a)
        same(o, ref, "reduce_scatter_tensor_coalesced")

    # reduce_scatter_tensor with each op, and the list form.
    for op in (R.SUM, R.MIN, R.MAX, R.PRODUCT, R.AVG):
        x = data((world * 4, 3))
        gloo_op = R.SUM if op == R.AVG else op
        ref = torch.empty(4, 3)
        dist.reduce_scatter_tensor(ref, x.clone(), op=gloo_op)
        if op == R.AVG:
            ref = ref / world
        out = torch.empty(4, 3, device="tpu")
        dist.reduce_scatter_tensor(out, x.to("tpu"), op=op)
        same(out, ref, f"reduce_scatter_tensor {op}")
    x = data((world * 4,))
    ref = torch.empty(4)
    dist.reduce_scatter_tensor(ref, x * 0.25)
    out = torch.empty(4, device="tpu")
    dist.reduce_scatter_tensor(out, x.to("tpu"), op=dist._make_nccl_premul_sum(0.25))
    same(out, ref, "reduce_scatter_tensor PREMUL_SUM")
    chunks = [data((2, 2)) for _ in range(world)]
    ref = torch.empty(2, 2)
    dist.reduce_scatter(ref, [c.clone() for c in chunks])
    out = torch.empty(2, 2, device="tpu")
    dist.reduce_scatter(out, [c.to("tpu") for c in chunks])
    same(out, ref, "reduce_scatter (list)")

    # all_to_all_single: even and uneven splits; all_to_all (lists of different sizes).
    x = data((world * 2, 3))
    ref = torch.empty_like(x)
    dist.all_to_all_single(ref, x)
    out = torch.empty((world * 2, 3), device="tpu")
    dist.all_to_all_single(out, x.to("tpu"))
    same(out, ref, "all_to_all_single even")
    # Rank i sends (i + 1) * (j + 1) rows to rank j.
    in_splits = [(rank + 1) * (j + 1) for j in range(world)]
    out_splits = [(i + 1) * (rank + 1) for i in range(world)]
    x = data((sum(in_splits), 3))
    ref = torch.empty(sum(out_splits), 3)
    dist.all_to_all_single(ref, x, out_splits, in_splits)
    out = torch.empty((sum(out_splits), 3), device="tpu")
    dist.all_to_all_single(out, x.to("tpu"), out_splits, in_splits)
    same(out, ref, "all_to_all_single uneven")
    ins = [data((2, 2)) for r in range(world)]  # Gloo's list form takes equal sizes only
    out_shapes = [(2, 2)] * world
    refs = [torch.empty(s) for s in out_shapes]
    dist.all_to_all(refs, ins)
    outs = [torch.empty(s, device="tpu") for s in out_shapes]
    dist.all_to_all(outs, [a.to("tpu") for a in ins])
    for a, b in zip(outs, refs):
        same(a, b, "all_to_all (lists)")

    # gather, scatter, reduce.
    x = data((5,))
    refs = [torch.empty(5) for _ in range(world)] if rank == 0 else None
    dist.gather(x, refs, dst=0)
    outs = [torch.empty(5, device="tpu") for _ in range(world)] if rank == 0 else None
    dist.gather(x.to("tpu"), outs, dst=0)
    if rank == 0:
        for a, b in zip(outs, refs):
            same(a, b, "gather")
    root = world - 1
    pieces = [data((2, 3)) for _ in range(world)]
    ref = torch.empty(2, 3)
    dist.scatter(ref, pieces if rank == root else None, src=root)
    out = torch.empty(2, 3, device="tpu")
    dist.scatter(out, [p.to("tpu") for p in pieces] if rank == root else None, src=root)
    same(out, ref, "scatter")
    x = data((6,))
    ref = x.clone()
    dist.reduce(ref, dst=1, op=R.MAX)
    t = x.to("tpu")
    dist.reduce(t, dst=1, op=R.MAX)
    same(t, ref if rank == 1 else x, "reduce")

    # Point to point and barrier.
    if rank == 0:
        dist.send(torch.arange(6.0, device="tpu").reshape(2, 3), dst=1)
        r = torch.empty(4, device="tpu", dtype=torch.int64)
        dist.recv(r, src=1)
        same(r, torch.arange(4) * 10, "recv on rank 0")
    else:
        r = torch.empty(2, 3, device="tpu")
        dist.recv(r, src=0)
        same(r, torch.arange(6.0).reshape(2, 3), "recv on rank 1")
        dist.send((torch.arange(4) * 10).to("tpu"), dst=0)
    dist.barrier()

    # Subgroups: the whole world in another order, and a group of rank 1 alone.
    g = dist.new_group([1, 0])
    t = torch.full((3,), float(rank + 1), device="tpu")
    dist.all_reduce(t, group=g)
    same(t, torch.full((3,), float(sum(range(1, world + 1)))), "all_reduce in a subgroup")
    alone = dist.new_group([1])
    if rank == 1:
        t = torch.ones(2, device="tpu")
        dist.all_reduce(t, group=alone)
        same(t, torch.ones(2), "all_reduce in a group of one")
        out = torch.empty(2, device="tpu")
        dist.all_gather_into_tensor(out, torch.ones(2, device="tpu"), group=alone)
        same(out, torch.ones(2), "all_gather in a group of one")

    # Sizes on both sides of the all_reduce's direct bound (64 KB from each peer): small
    # data goes whole to the peer, 1 MB is reduce-scattered and all-gathered; odd element
    # counts split unevenly between the ranks. Either way the values are Gloo's.
    for n in (16, 16, 300, 16, 1 << 14, (1 << 18) + 8, (1 << 18) + 7, 16, 16):
        x = data((n,))
        ref = x.clone()
        dist.all_reduce(ref)
        t = x.to("tpu")
        dist.all_reduce(t)
        same(t, ref, f"all_reduce of {n}")
        ref = torch.empty(world * n)
        dist.all_gather_into_tensor(ref, x)
        out = torch.empty(world * n, device="tpu")
        dist.all_gather_into_tensor(out, x.to("tpu"))
        same(out, ref, f"all_gather of {n}")
        big = data((world * n,))
        ref = torch.empty(n)
        dist.reduce_scatter_tensor(ref, big)
        out = torch.empty(n, device="tpu")
        src = big.to("tpu")
        dist.reduce_scatter_tensor(out, src)
        same(out, ref, f"reduce_scatter of {n}")
        # The exchange reads the input's own memory and leaves it as it was.
        same(src, big, f"reduce_scatter's input of {n}")
        b = data((n,)).to("tpu")
        dist.broadcast(b, src=1)
        ref = b.cpu()
        dist.all_reduce(ref, op=R.MAX)  # every rank now holds rank 1's values
        same(b, ref, f"broadcast of {n}")

    # async_op=True returns before the peers join, whatever the size: a rank may signal a
    # peer (here through the store) between issuing a collective and waiting for it.
    import datetime

    store = dist.distributed_c10d._get_default_store()
    t = torch.ones(4, device="tpu")
    if rank == 0:
        w = dist.all_reduce(t, async_op=True)
        store.set("async_all_reduce_issued", "1")
        w.wait()
    else:
        store.wait(["async_all_reduce_issued"], datetime.timedelta(seconds=60))
        dist.all_reduce(t)
    same(t, torch.full((4,), float(world)), "an async all_reduce waited for after a signal")

    # MIN and MAX meeting a NaN: Gloo keeps the first operand unless the comparison picks
    # the second, so a NaN wins only from the lower rank; the host's reduction must agree.
    nan = float("nan")
    for op in (R.MIN, R.MAX):
        x = torch.tensor([nan, 1.0, 2.0]) if rank == 0 else torch.tensor([1.0, nan, 3.0])
        ref = x.clone()
        dist.all_reduce(ref, op=op)
        t = x.to("tpu")
        dist.all_reduce(t, op=op)
        torch.testing.assert_close(t.cpu(), ref, equal_nan=True, msg=lambda m: f"{op}: {m}")

    # Strided arguments (transposed, sliced, channels_last) take part with their logical
    # values, and what a collective writes lands in the caller's tensor (and so in the
    # tensor it is a view of): the contiguous collective through Gloo is the reference.
    views = {
        "transposed": lambda a: a.transpose(1, 2),
        "sliced": lambda a: a[:, ::2],
        "channels_last": lambda a: a.contiguous(memory_format=torch.channels_last),
    }
    for name, view in views.items():
        x = data((2, 4, 3, 2))
        for what, call in (("all_reduce", lambda a: dist.all_reduce(a)),
                           ("broadcast", lambda a: dist.broadcast(a, 1)),
                           ("send/recv", lambda a: dist.send(a, 1) if rank == 0 else
                            dist.recv(a, 0))):
            ref = view(x).contiguous()
            call(ref)
            base = x.to("tpu")
            t = view(base)
            call(t)
            same(t, ref, f"{what} of a {name} tensor")
            if t._base is base:
                expect = x.clone()
                view(expect).copy_(ref)
                same(base, expect, f"{what} into a {name} view, seen through its base")
        part = view(x)
        ref_out = torch.empty((world * part.shape[0],) + part.shape[1:])
        dist.all_gather_into_tensor(ref_out, part.contiguous())
        out_base = torch.zeros(ref_out.shape[::-1], device="tpu")
        out = out_base.permute(3, 2, 1, 0)  # strided output too
        dist.all_gather_into_tensor(out, view(x.to("tpu")))
        same(out, ref_out, f"all_gather_into_tensor of a {name} tensor")
        ref_rs = torch.empty((part.shape[0] // world,) + part.shape[1:])
        dist.reduce_scatter_tensor(ref_rs, part.contiguous())
        rs = torch.zeros(ref_rs.shape[::-1], device="tpu").permute(3, 2, 1, 0)
        dist.reduce_scatter_tensor(rs, view(x.to("tpu")))
        same(rs, ref_rs, f"reduce_scatter_tensor of a {name} tensor")

    # The host-staged path is counted, never silent.
    m = torchtpu.debug.metrics()
    assert m["num_host_staged_collectives"] - before >= 40, m["num_host_staged_collectives"]
    assert m["host_staged_bytes"] > 0
    # Every wait of a caller or queue thread either ended while polling or went on to sleep.
    assert m["host_staged_waits_polled"] + m["host_staged_waits_slept"] >= 40, m

    # Arguments the backend refuses, with the facts in the message (no collective runs, so
    # both ranks raise locally and stay in step).
    import pytest as _pytest

    with _pytest.raises(ValueError, match="share memory"):
        dist.all_reduce(torch.ones(4, device="tpu").expand(3, 4))
    with _pytest.raises(ValueError, match=r"must have 2 times the elements"):
        dist.all_gather_into_tensor(torch.empty(3, device="tpu"), torch.ones(2, device="tpu"))
    with _pytest.raises(ValueError, match="same dtype"):
        dist.all_gather_into_tensor(torch.empty(4, device="tpu", dtype=torch.int64),
                                    torch.ones(2, device="tpu"))
    with _pytest.raises(ValueError, match="do not split evenly"):
        dist.all_to_all_single(torch.empty(3, device="tpu"), torch.ones(3, device="tpu"))
    with _pytest.raises(ValueError, match="add up to"):
        dist.all_to_all_single(torch.empty(2, device="tpu"), torch.ones(2, device="tpu"),
                               [1, 1], [1, 2])
    with _pytest.raises(ValueError, match="BAND takes integer"):
        dist.all_reduce(torch.ones(2, device="tpu"), op=R.BAND)
    dist.barrier()


def test_collectives_match_gloo_on_cpu():
    run_ranks(_collectives, 2, timeout=240)


def _three_ranks(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    R = dist.ReduceOp
    gen = torch.Generator().manual_seed(99 + rank)

    def same(tpu_t, cpu_t, what):
        torch.testing.assert_close(tpu_t.cpu(), cpu_t, msg=lambda m: f"{what}: {m}")

    # Below and above the direct bound (64 KB from the peers together); 3 ranks split
    # 40001 elements unevenly and reduce their peers' parts from a scratch buffer.
    for n in (5, 40001):
        for op in (R.SUM, R.MAX, R.PRODUCT):
            x = torch.randint(-3, 4, (n,), generator=gen).float()
            ref = x.clone()
            dist.all_reduce(ref, op=op)
            t = x.to("tpu")
            dist.all_reduce(t, op=op)
            same(t, ref, f"all_reduce {op} of {n}")
        x = torch.randint(-3, 4, (n,), generator=gen).to(torch.int64)
        ref = torch.empty(world * n, dtype=torch.int64)
        dist.all_gather_into_tensor(ref, x)
        out = torch.empty(world * n, dtype=torch.int64, device="tpu")
        dist.all_gather_into_tensor(out, x.to("tpu"))
        same(out, ref, f"all_gather of {n}")
        big = torch.randint(-3, 4, (world * n,), generator=gen).float()
        ref = torch.empty(n)
        dist.reduce_scatter_tensor(ref, big, op=R.MIN)
        out = torch.empty(n, device="tpu")
        dist.reduce_scatter_tensor(out, big.to("tpu"), op=R.MIN)
        same(out, ref, f"reduce_scatter MIN of {n}")
        b = torch.randint(-3, 4, (n,), generator=gen).float()
        ref = b.clone()
        dist.broadcast(ref, src=2)
        t = b.to("tpu")
        dist.broadcast(t, src=2)
        same(t, ref, f"broadcast of {n}")
    # Rank r sends rank p (r + 1) * (p + 1) rows of 3.
    ins = [(rank + 1) * (p + 1) for p in range(world)]
    outs = [(p + 1) * (rank + 1) for p in range(world)]
    x = torch.randint(-3, 4, (sum(ins), 3), generator=gen).float()
    ref = torch.empty(sum(outs), 3)
    dist.all_to_all_single(ref, x, outs, ins)
    out = torch.empty(sum(outs), 3, device="tpu")
    dist.all_to_all_single(out, x.to("tpu"), outs, ins)
    same(out, ref, "all_to_all")
    # recv without a source takes whichever send comes first and returns its rank, as Gloo
    # does for CPU tensors; then a strided one.
    for device in ("cpu", "tpu", "tpu strided"):
        if rank == 0:
            got = {}
            for _ in range(world - 1):
                t = torch.zeros(4, 2, device=device.split()[0])
                into = t.t() if device.endswith("strided") else t
                src = dist.recv(into)
                got[src] = into.cpu()
            assert sorted(got) == [1, 2], (device, got)
            for src, t in got.items():
                same(t, torch.arange(8.0).reshape(t.shape) * src, f"recv from any on {device}")
        else:
            shape = (2, 4) if device.endswith("strided") else (4, 2)
            dist.send(torch.arange(8.0, device=device.split()[0]).reshape(shape) * rank, 0)
        dist.barrier()  # a send completes once sent: the next round's could be taken here


def test_three_ranks_match_gloo_on_cpu():
    run_ranks(_three_ranks, 3, timeout=240)


def _p2p_in_any_order(rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    other = 1 - rank

    def payload(n: int, src: int) -> torch.Tensor:
        return torch.arange(float(n)) + 10 * src

    # Both ranks post their send first, then their receive (and then the other way round):
    # Gloo completes these; a send that waited for its peer on the group's one queue held
    # back the receive the peer was waiting on.
    for first in ("send", "recv"):
        got = torch.zeros(3, device="tpu")
        ops = [lambda: dist.isend(payload(3, rank).to("tpu"), other),
               lambda: dist.irecv(got, other)]
        works = [op() for op in (ops if first == "send" else ops[::-1])]
        for w in works:
            w.wait()
        torch.testing.assert_close(got.cpu(), payload(3, other))
    # PyTorch's documented batch_isend_irecv pattern, with a collective queued before it.
    pending = dist.all_reduce(torch.ones(2, device="tpu"), async_op=True)
    got = torch.zeros(5, device="tpu")
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, payload(5, rank).to("tpu"), other),
                                     dist.P2POp(dist.irecv, got, other)]):
        w.wait()
    pending.wait()
    torch.testing.assert_close(got.cpu(), payload(5, other))
    # Sends to one peer stay in order.
    if rank == 0:
        works = [dist.isend(torch.full((2,), float(k), device="tpu"), 1) for k in range(4)]
        for w in works:
            w.wait()
    else:
        for k in range(4):
            t = torch.zeros(2, device="tpu")
            dist.recv(t, 0)
            torch.testing.assert_close(t.cpu(), torch.full((2,), float(k)))
    # Blocking sends of tags 5 then 6, received 6 first; then twelve tags (more queues
    # than are kept idle) received in the reverse order of the sends; then a recv from any
    # source. Gloo completes each: a send of one tag never holds back another tag's.
    if rank == 0:
        for tag in (5, 6):
            dist.send(torch.full((2,), float(tag), device="tpu"), 1, tag=tag)
        works = [dist.isend(torch.full((3,), float(tag), device="tpu"), 1, tag=tag)
                 for tag in range(12)]
        for w in works:
            w.wait()
        dist.send(torch.full((1,), 42.0, device="tpu"), 1, tag=3)
    else:
        got = {tag: torch.zeros(2, device="tpu") for tag in (6, 5)}
        works = [dist.irecv(t, 0, tag=tag) for tag, t in got.items()]
        for w in works:
            w.wait()
        assert {tag: t.cpu().tolist() for tag, t in got.items()} == {6: [6.0] * 2, 5: [5.0] * 2}
        got = {tag: torch.zeros(3, device="tpu") for tag in reversed(range(12))}
        works = [dist.irecv(t, 0, tag=tag) for tag, t in got.items()]
        for w in works:
            w.wait()
        assert all(t.cpu().tolist() == [float(tag)] * 3 for tag, t in got.items())
        anyone = torch.zeros(1, device="tpu")
        assert dist.recv(anyone, tag=3) == 0 and anyone.item() == 42.0
    # Recvs of one tag from a named source and from any source keep their posting order.
    if rank == 0:
        for k in range(4):
            dist.send(torch.full((2,), float(k), device="tpu"), 1, tag=9)
    else:
        bufs = [torch.zeros(2, device="tpu") for _ in range(4)]
        works = [dist.irecv(b, src=0 if k % 2 == 0 else None, tag=9) for k, b in enumerate(bufs)]
        for w in works:
            w.wait()
        assert [b.cpu().tolist() for b in bufs] == [[float(k)] * 2 for k in range(4)]


def test_p2p_in_any_order_completes_as_with_gloo():
    run_ranks(_p2p_in_any_order, 2, timeout=120, backend="tpu", pg_timeout_s=20)



def _issued_from_callbacks_and_modes(rank: int, world: int, device: str) -> None:
    import torch
    import torch.distributed as dist

    # A collective issued and waited in a work's future callback (DDP's PowerSGD hook):
    # queued behind the task whose completion ran the callback, it never ran.
    a = torch.full((2,), float(rank + 1), device=device)
    b = torch.full((2,), 10.0 * (rank + 1), device=device)
    fut = dist.all_reduce(a, async_op=True).get_future().then(
        lambda f: f.value()[0] + dist.all_reduce(b, async_op=True).get_future().wait()[0])
    torch.testing.assert_close(fut.wait().cpu(), torch.full((2,), 33.0))
    # A pending irecv does not hold back the group's next collective.
    got, x = torch.zeros(2, device=device), torch.ones(2, device=device)
    if rank == 0:
        w = dist.irecv(got, src=1)
        dist.all_reduce(x)
        w.wait()
        torch.testing.assert_close(got.cpu(), torch.full((2,), 7.0))
    else:
        dist.all_reduce(x)
        dist.send(torch.full((2,), 7.0, device=device), dst=0)
    torch.testing.assert_close(x.cpu(), torch.full((2,), 2.0))
    # List outputs written under the issuer's inference_mode, and under no_grad into
    # leaves that require grad (the queue's thread wrote them in its own modes).
    with torch.inference_mode():
        t = torch.full((2,), float(rank + 1), device=device)
        out = [torch.zeros(2, device=device) for _ in range(world)]
        dist.all_gather(out, t)
        assert [o.cpu().tolist() for o in out] == [[1.0, 1.0], [2.0, 2.0]]
        objs = [None] * world
        dist.all_gather_object(objs, rank)
        assert objs == [0, 1]
    leaves = [torch.zeros(1, device=device, requires_grad=True) for _ in range(world)]
    with torch.no_grad():
        dist.all_to_all(leaves, [torch.full((1,), float(rank + 1), device=device)] * world)
    assert [v.item() for v in leaves] == [1.0, 2.0]


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_collectives_from_callbacks_pending_irecv_and_inference_mode_as_gloo(device):
    run_ranks(_issued_from_callbacks_and_modes, 2, args=(device,), timeout=120,
              backend="gloo" if device == "cpu" else "tpu", pg_timeout_s=20)


def _shapes_gloo_takes(rank: int, world: int, device: str) -> None:
    import torch
    import torch.distributed as dist

    # reduce_scatter of a list whose parts differ in size: each rank's output is its part.
    parts = [torch.full((k + 2,), float(rank + 1), device=device) for k in range(world)]
    out = torch.zeros(rank + 2, device=device)
    dist.reduce_scatter(out, parts)
    assert out.cpu().tolist() == [3.0] * (rank + 2)
    # all_to_all_single without split sizes moves numel / world elements to each rank,
    # whatever the shapes: a [2, 3] input into a [6] output.
    x = (torch.arange(6.0) + 10 * rank).reshape(2, 3).to(device)
    y = torch.zeros(6, device=device)
    dist.all_to_all_single(y, x)
    expected = [float(v) for r in range(world) for v in range(3 * rank + 10 * r,
                                                              3 * rank + 10 * r + 3)]
    assert y.cpu().tolist() == expected, (y, expected)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_uneven_reduce_scatter_and_reshaped_all_to_all_as_gloo(device):
    run_ranks(_shapes_gloo_takes, 2, args=(device,), timeout=120,
              backend="gloo" if device == "cpu" else "tpu", pg_timeout_s=20)


def _default_group_made_again(rank: int, world: int, port: int) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    # As under torchrun: one store outlives the groups made from it. A group made again
    # after destroy_process_group() has the same name; its send/recv Gloo connected to the
    # addresses the last one left and waited out the timeout.
    dist.destroy_process_group()  # the launcher's
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=30))
    for making in range(3):
        dist.init_process_group("tpu", store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=20))
        t = torch.tensor([rank + 1.0 + making], device="tpu")
        dist.all_reduce(t)
        peer = torch.zeros(1, device="tpu")
        if rank == 0:
            dist.send(t, 1)
        else:
            dist.recv(peer, 0)
            assert peer.item() == t.item()
        assert t.item() == 3.0 + 2 * making, (making, t)
        dist.destroy_process_group()
    dist.init_process_group("tpu", store=store, rank=rank, world_size=world)  # the launcher's


def test_the_default_group_made_again_on_the_same_store():
    from torchtpu._ports import free_port

    run_ranks(_default_group_made_again, 2, args=(free_port(),), timeout=120, backend="tpu",
              pg_timeout_s=20)


def _split_groups(rank: int, world: int, partial: bool) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    def summed(group) -> list[float]:
        t = torch.full((3,), float(rank + 1), device="tpu")
        dist.all_reduce(t, group=group)
        return t.cpu().tolist()

    # With the default group bound to a device, DeviceMesh splits it (as under NCCL).
    mesh = init_device_mesh("tpu", (1, world), mesh_dim_names=("dp", "tp"))
    assert summed(mesh.get_group("tp")) == [3.0] * 3
    assert summed(mesh.get_group("dp")) == [float(rank + 1)] * 3  # a group of one rank
    alone = dist.split_group(split_ranks=[[0], [1]])
    assert dist.get_world_size(alone) == 1 and summed(alone) == [float(rank + 1)] * 3
    if partial:
        # A split and a new group leaving rank 0 out (new_group asks the ranks it leaves out
        # to split too, for NCCL's communicator split): torch then names the next split's
        # group differently on each rank (it counts each process's groups), which Gloo's
        # split keys by.
        only_1 = dist.split_group(split_ranks=[[1]])
        assert (only_1 is None) == (rank == 0)
        one = dist.new_group([1])
        if rank == 1:
            assert summed(one) == [2.0] * 3
    both = dist.split_group(split_ranks=[[1, 0]])
    assert dist.get_rank(both) == rank and summed(both) == [3.0] * 3
    out = torch.empty(2 * world, device="tpu")
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank), device="tpu"), group=both)
    assert out.cpu().tolist() == [0.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("backend", ["tpu", "cpu:gloo,tpu:tpu"])
def test_groups_split_from_a_group_bound_to_a_device(backend: str) -> None:
    run_ranks(_split_groups, 2, args=(backend == "tpu",), timeout=150, backend=backend,
              bind_device=True)
