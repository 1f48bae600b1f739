"""Errors, not hangs: collectives whose ranks disagree raise on every rank, naming the
collective, the ranks and the shapes; a rank that died or does not arrive makes the live
ranks raise within the group's timeout (a timeout set later with set_timeout included),
naming the rank that did not reach the collective."""

from __future__ import annotations

import pytest
from _launch import run_ranks, run_ranks_expect_failure

pytestmark = pytest.mark.timeout(300)


def _mismatches(rank: int, world: int) -> None:
    import pytest as _pytest
    import torch
    import torch.distributed as dist

    with _pytest.raises(ValueError) as e:
        dist.all_reduce(torch.ones(4 if rank == 0 else 3, device="tpu"))
    msg = str(e.value)
    assert "all_reduce" in msg and "different shapes" in msg, msg
    assert "rank 0: all_reduce Float[4] SUM" in msg and "rank 1: all_reduce Float[3] SUM" in msg, msg

    with _pytest.raises(ValueError, match="different dtypes") as e:
        dist.all_gather_into_tensor(
            torch.empty(world * 2, device="tpu", dtype=torch.float32 if rank else torch.int64),
            torch.ones(2, device="tpu", dtype=torch.float32 if rank else torch.int64))
    assert "Long[2]" in str(e.value) and "Float[2]" in str(e.value), str(e.value)

    with _pytest.raises(ValueError, match="different collectives"):
        t = torch.ones(world * 2, device="tpu")
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.reduce_scatter_tensor(torch.empty(2, device="tpu"), t)

    with _pytest.raises(ValueError, match="different reduce ops"):
        dist.all_reduce(torch.ones(2, device="tpu"),
                        op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX)

    # Collectives that run as another name the one the user called first.
    n = 2 + rank
    with _pytest.raises(ValueError, match=r"^tpu: gather \(run as all_gather\): .*shapes"):
        dist.gather(torch.ones(n, device="tpu"),
                    [torch.empty(n, device="tpu") for _ in range(world)] if rank == 0 else None,
                    dst=0)

    with _pytest.raises(ValueError, match="sends 1 rows to rank 1, which expects 2"):
        # Rank 0 sends 1 row to rank 1; rank 1 expects 2 from rank 0.
        ins = [1, 1] if rank == 0 else [1, 1]
        outs = [1, 1] if rank == 0 else [2, 0]
        dist.all_to_all_single(torch.empty(sum(outs), device="tpu"),
                               torch.ones(sum(ins), device="tpu"), outs, ins)

    # Sizes on both sides of the inline capacity (the last collective's size: rank 0's data
    # would travel with the signatures, rank 1's not): still refused on both ranks.
    for _ in range(2):
        dist.all_reduce(torch.ones(4, device="tpu"))
    with _pytest.raises(ValueError, match="different shapes") as e:
        dist.all_reduce(torch.ones(4 if rank == 0 else (1 << 18) + 8, device="tpu"))
    assert "Float[4]" in str(e.value) and "Float[262152]" in str(e.value), str(e.value)

    # In a subgroup too (new_group orders its ranks, so group ranks are global ones here).
    g = dist.new_group([1, 0])
    with _pytest.raises(ValueError, match=r"rank 0: broadcast Float\[2\] root 0; rank 1: "
                                          r"broadcast Float\[3\] root 0"):
        dist.broadcast(torch.ones(2 + rank, device="tpu"), src=0, group=g)

    # send/recv of different shapes: the receiver raises, naming both sides (Gloo alone
    # aborts the process); the pair stays in step.
    if rank == 0:
        dist.send(torch.ones(2, 3, device="tpu"), dst=1)
    else:
        with _pytest.raises(ValueError, match=r"rank 0 sent Float\[2, 3\] but rank 1 "
                                              r"receives into Float\[4\]"):
            dist.recv(torch.empty(4, device="tpu"), src=0)

    # AVG of bools: refused on every rank before anything moves, as in the plugin.
    with _pytest.raises(ValueError, match="tpu: all_reduce: AVG is not defined on bool"):
        dist.all_reduce(torch.ones(2, device="tpu", dtype=torch.bool), op=dist.ReduceOp.AVG)

    # MIN/MAX of complex numbers, in every collective that reduces (torch's Python layer
    # refuses them for all_reduce only): at the call, not at wait() or the first read.
    c = torch.ones(2, dtype=torch.complex64, device="tpu")
    for call in (lambda: dist.reduce(c, dst=0, op=dist.ReduceOp.MAX),
                 lambda: dist.reduce_scatter_tensor(c[:1], c, op=dist.ReduceOp.MIN)):
        with _pytest.raises(ValueError, match="is not defined on complex tensors"):
            call()

    # Unsigned integers wider than 8 bits: no CPU arithmetic to reduce them with (a CPU
    # kernel's NotImplementedError came at wait()); broadcasting them works.
    for dtype in (torch.uint16, torch.uint32, torch.uint64):
        u = torch.ones(3, dtype=dtype, device="tpu")
        for call in (lambda: dist.all_reduce(u),
                     lambda: dist.all_reduce(u, op=dist.ReduceOp.MAX),
                     lambda: dist.reduce_scatter_tensor(u[:1], u[:world])):
            with _pytest.raises(ValueError, match="reductions of UInt"):
                call()
        dist.broadcast(u, src=0)

    # The group is still in step after every refused collective.
    t = torch.ones(3, device="tpu")
    dist.all_reduce(t)
    torch.testing.assert_close(t.cpu(), torch.full((3,), float(world)))


def _large_mismatches(rank: int, world: int) -> None:
    """Mismatches of collectives whose data (1 MB and more) travels in the same messages as
    the signatures: refused on every rank, the payloads dropped, the group still in step."""
    import os

    import pytest as _pytest
    import torch
    import torch.distributed as dist

    big = 1 << 18  # floats: 1 MB

    with _pytest.raises(ValueError, match="different shapes") as e:
        dist.all_reduce(torch.ones(big if rank == 0 else big + 8, device="tpu"))
    assert "Float[262144]" in str(e.value) and "Float[262152]" in str(e.value), str(e.value)

    # The same number of bytes (a payload of the expected length lands): the signatures
    # still tell the dtypes apart.
    dtype = torch.float32 if rank == 0 else torch.int32
    with _pytest.raises(ValueError, match="different dtypes"):
        dist.all_gather_into_tensor(torch.empty(world * big, device="tpu", dtype=dtype),
                                    torch.ones(big, device="tpu", dtype=dtype))

    with _pytest.raises(ValueError, match="different reduce ops"):
        dist.reduce_scatter_tensor(torch.empty(big, device="tpu"),
                                   torch.ones(world * big, device="tpu"),
                                   op=dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MIN)

    with _pytest.raises(ValueError, match="different collectives"):
        t = torch.ones(world * big, device="tpu")
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.all_gather_into_tensor(torch.empty(world * world * big, device="tpu"), t)

    # A large rank against a small one.
    with _pytest.raises(ValueError, match="different shapes"):
        dist.reduce_scatter_tensor(torch.empty(big if rank else 2, device="tpu"),
                                   torch.ones(world * (big if rank else 2), device="tpu"))

    t = torch.full((big + 3,), float(rank + 1), device="tpu")
    dist.all_reduce(t)
    torch.testing.assert_close(t.cpu(), torch.full((big + 3,), float(sum(range(1, world + 1)))))

    # Without the signature check, a payload of an unexpected length still raises (here on
    # both ranks: each receives one) and the group stays in step.
    os.environ["TORCHTPU_DIST_CHECK"] = "0"
    unchecked = dist.new_group(backend="tpu")
    with _pytest.raises(ValueError, match=r"sent \d+ bytes where this rank .* expects \d+"):
        dist.all_reduce(torch.ones(big if rank == 0 else big + 8, device="tpu"), group=unchecked)
    t = torch.ones(big, device="tpu")
    dist.all_reduce(t, group=unchecked)
    torch.testing.assert_close(t.cpu(), torch.full((big,), float(world)))


def _dead_peer(rank: int, world: int) -> None:
    import os
    import time

    import pytest as _pytest
    import torch
    import torch.distributed as dist

    dist.barrier()
    if rank == 1:
        os._exit(0)  # dies without a word
    start = time.monotonic()
    with _pytest.raises(dist.DistBackendError) as e:
        dist.all_reduce(torch.ones(4, device="tpu"))
    elapsed = time.monotonic() - start
    msg = str(e.value)
    assert "tpu: all_reduce (collective #1 of the group) on global ranks [0, 1]" in msg, msg
    assert "host-staged" in msg and "global ranks [1] did not reach it" in msg, msg
    assert elapsed < 20, elapsed
    # The group is broken now: the next collective fails at once, without asking the store
    # again which ranks are missing (that waited up to 5 s a collective).
    with _pytest.raises(dist.DistBackendError) as e:
        dist.all_reduce(torch.ones(4, device="tpu"))
    msg = str(e.value)
    assert "an earlier collective of this group failed" in msg, msg
    assert "did not reach it" not in msg and "every rank" not in msg, msg


def _late_peer(rank: int, world: int) -> None:
    import time

    import pytest as _pytest
    import torch
    import torch.distributed as dist

    # The tensors exist before the clock starts (their first creation compiles programs,
    # which takes seconds on a loaded machine).
    out, inp = torch.empty(8, device="tpu"), torch.ones(4, device="tpu")
    torch.tpu.synchronize()
    dist.barrier()
    if rank == 1:
        time.sleep(6)  # past rank 0's timeout; then leaves without a collective
        return
    start = time.monotonic()
    with _pytest.raises(dist.DistBackendError) as e:
        dist.all_gather_into_tensor(out, inp)
    elapsed = time.monotonic() - start
    msg = str(e.value)
    assert "all_gather" in msg and "timeout (3 s)" in msg, msg
    assert "global ranks [1] did not reach it" in msg, msg
    assert elapsed < 6, elapsed


def _timeout_set_later(rank: int, world: int) -> None:
    import time
    from datetime import timedelta

    import pytest as _pytest
    import torch
    import torch.distributed as dist

    # Created with 60 s; set_timeout brings every later collective down to 2 s.
    dist.group.WORLD._get_backend(torch.device("tpu")).set_timeout(timedelta(seconds=2))
    dist.barrier()
    if rank == 1:
        time.sleep(5)
        return
    start = time.monotonic()
    with _pytest.raises(dist.DistBackendError) as e:
        dist.all_reduce(torch.ones(4, device="tpu"))
    elapsed = time.monotonic() - start
    msg = str(e.value)
    assert "timeout (2 s)" in msg and "global ranks [1] did not reach it" in msg, msg
    assert elapsed < 4.5, elapsed


def test_mismatches_raise_on_every_rank():
    run_ranks(_mismatches, 2, timeout=200)


def test_large_mismatches_raise_on_every_rank():
    run_ranks(_large_mismatches, 2, timeout=200)


def test_dead_peer_raises():
    run_ranks(_dead_peer, 2, timeout=120, pg_timeout_s=10)


def test_late_peer_raises_within_timeout():
    run_ranks(_late_peer, 2, timeout=120, pg_timeout_s=3)


def test_set_timeout_reaches_the_transport():
    run_ranks(_timeout_set_later, 2, timeout=120, pg_timeout_s=60)



def _unreached(rank: int, world: int) -> None:
    raise AssertionError("the group was made under an unreadable TORCHTPU_POLL_US")


def test_unreadable_poll_budget_is_refused_with_its_value():
    # The group's tpu backend is refused when it is made, naming the setting, its value and
    # what it accepts.
    text = run_ranks_expect_failure(_unreached, 2, timeout=120,
                                    env={"TORCHTPU_POLL_US": "soon"})
    assert ("TORCHTPU_POLL_US='soon' is not a polling budget in microseconds "
            "(expected 0..1000000; 0 turns polling off; default 1000)") in text, text
