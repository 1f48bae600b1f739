"""Fused eager mode: ops are recorded and run as fused graphs, with eager's semantics.

Each test runs the same code op by op and fused, and compares values (and the CPU where it
matters); counters show that the fused run deferred its ops, ran them as graphs, and that a
loop finds its graph in the cache from the second iteration on.
"""

from __future__ import annotations

import logging
import sys

import pytest
import torch
import torch.nn.functional as F
from _compare import eager_mode, programs_obtained

import torchtpu

TPU = "tpu"


def counter(name: str) -> int:
    return torchtpu._C.counters().get(name, 0)


def test_ops_are_deferred_until_a_host_read() -> None:
    a = torch.randn(8, 8)
    b = torch.randn(8, 8)
    with eager_mode("fused"):
        x, y = a.to(TPU), b.to(TPU)
        before = torchtpu._C.num_pending_ops(0)
        z = torch.relu(x @ y + 1.5) * 2
        assert torchtpu._C.num_pending_ops(0) - before == 4
        graphs = counter("num_fused_graphs_run")
        result = z.cpu()  # the host read runs the graph
        assert counter("num_fused_graphs_run") == graphs + 1
        assert torchtpu._C.num_pending_ops(0) == 0
    torch.testing.assert_close(result, torch.relu(a @ b + 1.5) * 2)


def test_a_loop_hits_the_fused_graph_cache() -> None:
    w = torch.randn(16, 16)
    x0 = torch.randn(4, 16)
    with eager_mode("fused"):
        wt, x = w.to(TPU), x0.to(TPU)
        values = []
        for step in range(4):
            x = torch.tanh(x @ wt) * (0.5 + step)  # a new scalar each step: runtime data
            values.append(x.sum().item())
            if step == 0:
                compiled = counter("num_fused_graphs_compiled")
        assert counter("num_fused_graphs_compiled") == compiled
    ref, expected = x0, []
    for step in range(4):
        ref = torch.tanh(ref @ w) * (0.5 + step)
        expected.append(float(ref.sum()))
    assert values == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_in_place_and_views_keep_eager_semantics() -> None:
    base = torch.arange(24.0).reshape(4, 6)

    def program(t: torch.Tensor) -> list[torch.Tensor]:
        v = t[1:3, ::2]          # a strided view
        v.mul_(10)               # written through the view: the base changes
        t[:, 0] += 1             # an in-place update of a column
        row = t[2]               # a view of the pending base
        s = row * 2              # read through the view
        t.add_(s)                # broadcast in-place add into the base
        return [t.clone(), v.clone(), s]

    expected = program(base.clone())
    op_by_op = [r.cpu() for r in program(base.clone().to(TPU))]
    with eager_mode("fused"):
        got = [r.cpu() for r in program(base.clone().to(TPU))]
    for e, o, g in zip(expected, op_by_op, got):
        torch.testing.assert_close(o, e)
        torch.testing.assert_close(g, e)


def test_dead_intermediates_are_not_outputs_and_held_ones_are() -> None:
    a = torch.randn(32)
    with eager_mode("fused"):
        x = a.to(TPU)
        keep = x * 3
        for _ in range(5):
            x = torch.sin(x) + 1  # each old x dies
        total = (x + keep).sum()
        torch.testing.assert_close(keep.cpu(), a * 3)
        value = total.item()
    ref = a.clone()
    for _ in range(5):
        ref = torch.sin(ref) + 1
    assert value == pytest.approx(float((ref + a * 3).sum()), rel=1e-5)


def test_views_of_computed_storages_are_read_in_the_graph() -> None:
    # Slices of a new length, a transpose and a bitcast view of storages whose values an
    # earlier graph (or the host) computed: the graph reads each view out of its whole
    # storage, so a new length compiles the graph only, never a program keyed by the view.
    w = torch.randn(8, 6)
    mask = torch.tril(torch.ones(8, 8, dtype=torch.bool))
    bits = torch.arange(8, dtype=torch.int32)
    with eager_mode("fused"):
        wt, mt = w.to(TPU), mask.to(TPU)
        bt = bits.to(TPU).view(torch.float32)  # the same bytes, read as another dtype
        grown = (wt * 2)
        grown.cpu()  # computed by its own graph: a storage with a buffer
        got = []
        for t in range(1, 7):
            before = programs_obtained()
            y = (grown[:t] @ wt.t()[:, :t]).masked_fill(~mt[:t, :t], 0.0) + wt[:t, ::2].sum()
            b = bt[1:t].view(torch.int32) * 1
            c = bt.view(torch.int32)[t:] + 1
            torchtpu.synchronize()  # one graph computes all three
            if t > 1:  # a length seen for the first time: its graph, nothing more
                assert programs_obtained() - before == 1, f"length {t}"
            got.append((y.cpu(), b.cpu(), c.cpu()))
    for t, (y, b, c) in enumerate(got, start=1):
        want = ((w * 2)[:t] @ w.t()[:, :t]).masked_fill(~mask[:t, :t], 0.0) + w[:t, ::2].sum()
        torch.testing.assert_close(y, want)
        assert b.tolist() == bits[1:t].tolist()
        assert c.tolist() == (bits[t:] + 1).tolist()


def test_index_errors_op_by_op_are_raised_at_the_call_and_change_nothing() -> None:
    with eager_mode("op"):
        x = torch.arange(6.0, device=TPU) * 2
        with pytest.raises(IndexError):
            x.index_select(0, torch.tensor([7], device=TPU))
        assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_a_failed_check_is_raised_at_the_next_flush_and_undoes_its_op_and_later_ones() -> None:
    with eager_mode("fused"):
        x = torch.arange(6.0, device=TPU) * 2  # pending when the bad op comes
        before = torch.zeros(3, device=TPU)
        before.add_(1)  # recorded before the bad op: kept, as op by op
        bad = x.index_select(0, torch.tensor([7], device=TPU))  # recorded: no error yet
        recorded_line = sys._getframe().f_lineno - 1
        assert torchtpu._C.num_pending_ops(0) > 0
        after = x + 1  # recorded after the bad op
        x.mul_(100)  # an in-place write after the bad op: undone
        before[0] = 5  # a write through a view after the bad op: undone
        failed = counter("num_fused_checks_failed")
        with pytest.raises(IndexError) as e:
            x.cpu()  # the host read runs the graph, which finds the failed check
        assert counter("num_fused_checks_failed") == failed + 1
        message = str(e.value)
        assert "aten::index_select" in message
        assert f'test_fused_eager.py", line {recorded_line}, in ' in message
        # The state is eager's at the failed call: what came before it ran, nothing after.
        assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        assert before.cpu().tolist() == [1.0, 1.0, 1.0]
        for t in (bad, after):
            with pytest.raises(RuntimeError, match="failed a data check"):
                t.cpu()
        assert torchtpu._C.num_pending_ops(0) == 0
        assert (x + 1).cpu().tolist() == [1.0, 3.0, 5.0, 7.0, 9.0, 11.0]  # recording goes on


def test_tensors_first_filled_after_a_failed_check_read_as_failed() -> None:
    # torch.ones / full / randn are an empty storage and a recorded fill: undoing the fill
    # left the never-written storage, which read as zeros (a value no call gave it).
    with eager_mode("fused"):
        x = torch.arange(6.0, device=TPU) * 2
        x.index_select(0, torch.tensor([7], device=TPU))  # fails its check at the run
        made = [torch.ones(3, device=TPU), torch.full((3,), 7.0, device=TPU),
                torch.randn(3, device=TPU), torch.empty(3, device=TPU).fill_(4)]
        with pytest.raises(IndexError):
            x.cpu()
        for t in made:
            with pytest.raises(RuntimeError, match="failed a data check"):
                t.cpu()
        again = torch.ones(3, device=TPU)  # recording goes on
        assert again.cpu().tolist() == [1.0, 1.0, 1.0]


def test_a_graph_holding_checks_keeps_recording_new_tensors() -> None:
    # After an op with data checks (embedding's index bounds), a host tensor's first value
    # and arange's empty out= (torch.arange's composite) ran the pending graph first, so a
    # generation loop ran a graph at every token. Neither overwrites a value a failed check
    # would have to restore: both are recorded (arange) or written (the host tensor) as is.
    w = torch.randn(5, 3)
    with eager_mode("fused"):
        wt = w.to(TPU)
        e = F.embedding(torch.tensor([1, 4], device=TPU), wt)
        graphs, eager = counter("num_fused_graphs_run"), counter("num_eager_ops")
        host = torch.tensor([[2, 3]], device=TPU)
        pos = torch.arange(0, 2, device=TPU)
        assert (counter("num_fused_graphs_run"), counter("num_eager_ops")) == (graphs, eager)
        assert host.cpu().tolist() == [[2, 3]]
        assert pos.cpu().tolist() == [0, 1]
        torch.testing.assert_close(e.cpu(), F.embedding(torch.tensor([1, 4]), w))
        # A check that fails: the calls after it read as failed; a grown out= keeps its size.
        bad = F.embedding(torch.tensor([1, 7], device=TPU), wt)
        host = torch.tensor([5], device=TPU)
        out = torch.empty(0, device=TPU)
        pos = torch.arange(2.0, out=out)
        with pytest.raises(IndexError):
            bad.cpu()
        assert host.cpu().tolist() == [5]  # the user's data, not an undone call's
        assert out.shape == (2,)
        for t in (pos, out):
            with pytest.raises(RuntimeError, match="failed a data check"):
                t.cpu()


def test_resizing_a_result_a_shape_class_ran_padded() -> None:
    # A padded graph leaves its output's storage a prefix of the bucket-sized buffer:
    # resize_ and out= compared the new size with the buffer's, so the storage kept its
    # old size and indexing the new rows raised "out of bounds for storage".
    with eager_mode("fused"):
        for n in (5, 6, 7):  # 6 and 7 are later lengths of 5's shape class: run padded
            y = torch.ones(n, 4).to(TPU) * 2
            y.sum().item()
            y.resize_(16, 4)
            assert y.untyped_storage().nbytes() == 16 * 16
            assert y[:n].cpu().tolist() == [[2.0] * 4] * n
            y[15].cpu()
            z = torch.ones(n, 4).to(TPU) * 2
            z.sum().item()
            torch.mul(torch.ones(8, 4, device=TPU), 3, out=z)  # out= resizes z
            assert z.untyped_storage().nbytes() == 8 * 16
            assert z.cpu().tolist() == [[3.0] * 4] * 8


def test_interpolation_over_a_shape_class_matches_the_cpu() -> None:
    # Inputs of the same structure at other sizes join a shape class; nearest interpolation
    # to a fixed size scales its indices by a ratio of sizes, a float of each size.
    with eager_mode("fused"):
        for shape in [(3, 4, 5), (2, 6, 6), (2, 5, 6), (3, 7, 3)]:
            x = torch.randn(shape)
            got = F.interpolate(x.to(TPU).unsqueeze(0), size=(5, 7), mode="nearest")
            want = F.interpolate(x.unsqueeze(0), size=(5, 7), mode="nearest")
            torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("mode", ["op", "fused"])
def test_host_scalar_tensors_promote_by_dtype_and_numbers_by_kind(mode: str) -> None:
    # A 0-dim float64 tensor the user made promotes int64 to float64, a Python number to
    # float32: one call signature served both (the first one's result type), and the
    # shape class read the tensor back as a number.
    x = torch.arange(1, 41)
    tenth, hundred = torch.tensor(0.1, dtype=torch.float64), torch.tensor(100, dtype=torch.int8)

    def calls(v: torch.Tensor, t: int) -> list:
        b = v[:t] - 20
        return [((v[:t] * tenth) > 0.3).sum().item(), (v[:t] * tenth).dtype,
                ((v[:t] * 0.1) > 0.3).sum().item(), (v[:t] * 0.1).dtype,
                (((b > 0).to(torch.int8) + hundred) * 2 > 0).any().item()]

    with eager_mode(mode):
        for t in (5, 6, 7, 9, 12):
            assert calls(x.to(TPU), t) == calls(x, t)


def test_reading_an_empty_result_raises_its_failed_check() -> None:
    # Copying an empty tensor to the host moves no data, but it is a host read: the failed
    # check of the op that made it is raised there, as op by op, not at a later read.
    a = torch.randn(0, 4)
    index, values = torch.tensor([0]), torch.randn(1, 4)
    with pytest.raises(IndexError):
        a.index_put((index,), values)
    with eager_mode("fused"):
        r = a.to(TPU).index_put((index.to(TPU),), values.to(TPU))
        with pytest.raises(IndexError):
            r.cpu()
        torch.ones(2, device=TPU).cpu()  # nothing left to report


def test_a_bad_target_is_raised_at_the_next_host_read_naming_the_call() -> None:
    logits = torch.randn(4, 3)
    with eager_mode("fused"):
        x = logits.to(TPU).requires_grad_()
        loss = F.cross_entropy(x, torch.tensor([0, 2, 5, 1], device=TPU))
        recorded_line = sys._getframe().f_lineno - 1
        with pytest.raises(IndexError, match="out of bounds") as e:
            loss.item()
        assert "aten::nll_loss_forward" in str(e.value)
        assert f'test_fused_eager.py", line {recorded_line}, in ' in str(e.value)
        with pytest.raises(RuntimeError, match="failed a data check"):
            loss.backward()  # the loss was never computed: as op by op, there is none


def test_a_failed_check_in_an_unheld_result_is_still_raised() -> None:
    with eager_mode("fused"):
        x = torch.arange(6.0, device=TPU)
        x.index_select(0, torch.tensor([-9], device=TPU))  # its result dropped at once
        with pytest.raises(IndexError):
            torchtpu.synchronize()


def test_good_indices_and_targets_match_the_cpu() -> None:
    torch.manual_seed(0)
    weight, targets = torch.randn(10, 6), torch.randint(0, 5, (3, 4))
    tokens, head = torch.randint(0, 10, (3, 4)), torch.randn(6, 5)

    def step(device: str) -> list[torch.Tensor]:
        w = weight.detach().to(device, copy=True).requires_grad_()
        h = head.detach().to(device, copy=True).requires_grad_()
        logits = F.embedding(tokens.to(device), w) @ h
        loss = F.cross_entropy(logits.flatten(0, 1), targets.to(device).flatten())
        loss.backward()
        return [t.detach().cpu() for t in (loss, w.grad, h.grad)]

    expected = step("cpu")
    with eager_mode("fused"):
        got = step(TPU)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_a_training_step_with_data_checks_is_one_graph() -> None:
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(32, 16).to(TPU), torch.nn.Linear(16, 32).to(TPU)
    opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=0.1)
    tokens = torch.randint(0, 32, (4, 8)).to(TPU)
    targets = torch.randint(0, 32, (4, 8)).to(TPU)
    with eager_mode("fused"):
        def step() -> float:
            loss = F.cross_entropy(head(emb(tokens)).flatten(0, 1), targets.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss.item()

        step()
        step()
        graphs, checks = counter("num_fused_graphs_run"), counter("num_data_checks")
        for _ in range(3):
            step()
        assert counter("num_fused_graphs_run") - graphs == 3  # one graph per step
        assert counter("num_data_checks") > checks  # its checks were read, in that graph


def test_shape_errors_are_raised_at_the_call() -> None:
    with eager_mode("fused"):
        a = torch.ones(3, 4, device=TPU) + 1
        with pytest.raises(RuntimeError):
            torch.mm(a, torch.ones(5, 2, device=TPU))
        assert (a * 2).sum().item() == 48.0


def test_training_steps_match_op_by_op() -> None:
    def train(mode: str) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16),
                                    torch.nn.GELU(), torch.nn.Linear(16, 4)).to(TPU)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(16, 8, generator=g).to(TPU)
        y = torch.randint(0, 4, (16,), generator=g).to(TPU)
        losses = []
        with eager_mode(mode):
            for _ in range(4):
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses

    torch.testing.assert_close(train("fused"), train("op"), rtol=1e-5, atol=1e-6)


def test_synchronize_and_mode_switch_run_pending_graphs() -> None:
    with eager_mode("op"):  # also when the suite runs with TORCHTPU_EAGER=fused
        with eager_mode("fused"):
            x = torch.ones(4, device=TPU) * 7
            assert torchtpu._C.num_pending_ops(0) > 0
            torch.tpu.synchronize()
            assert torchtpu._C.num_pending_ops(0) == 0
            y = x + 1
        assert torchtpu._C.num_pending_ops(0) == 0  # leaving fused mode ran it
    assert y.cpu().tolist() == [8.0] * 4


def test_random_ops_draw_in_call_order() -> None:
    torchtpu.manual_seed(3)
    a = torch.rand(5, device=TPU)
    b = torch.randn(5, device=TPU)
    expected = [a.cpu(), b.cpu()]
    torchtpu.manual_seed(3)
    with eager_mode("fused"):
        c = torch.rand(5, device=TPU)
        d = torch.randn(5, device=TPU)
        got = [c.cpu(), d.cpu()]
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)


def test_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="eager mode"):
        torchtpu.set_eager_mode("lazy")


def test_advanced_indexing_with_absent_indices_is_read_as_a_graph(caplog) -> None:
    # x[1:, idx] passes [None, idx] with the absent index as an undefined tensor: it was
    # recorded as present, and reading the graph for its shape class failed (a warning,
    # and the exact program per size).
    x, idx, idx2 = torch.randn(4, 5, 6), torch.tensor([0, 2]), torch.tensor([1, 3])
    cases = [lambda a, i, j: a[1:, i], lambda a, i, j: a[i, :, j],
             lambda a, i, j: a[None, ..., i], lambda a, i, j: a[:, i, 1:]]
    with eager_mode("fused"), caplog.at_level("INFO", logger="torchtpu"):
        xt, it, it2 = x.to(TPU), idx.to(TPU), idx2.to(TPU)
        for _ in range(3):
            for f in cases:
                assert torch.equal(f(xt, it, it2).cpu(), f(x, idx, idx2))
    assert not [r for r in caplog.records if "reading it failed" in r.getMessage()]


def test_pads_of_changing_size_log_no_meta_failure(caplog) -> None:
    # A second graph of the same structure is retraced with symbolic ints; constant_pad_nd's
    # meta kernel refuses symbolic pads, which FakeTensor logged as an ERROR with a
    # traceback at every call (the graph then runs at exact sizes, as it should).
    import logging

    with eager_mode("fused"), caplog.at_level(logging.DEBUG):
        for n in (7, 8, 9, 10):
            x = torch.randn(n)
            torch.testing.assert_close(F.pad(x.to(TPU), (0, 12 - n)).cpu(), F.pad(x, (0, 12 - n)))
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not failures, [r.getMessage() for r in failures]


def test_synchronize_from_another_thread_does_not_deadlock_a_flush() -> None:
    # A flush runs the shape-class hook (Python) under the pending graph's lock; a thread in
    # torch.tpu.synchronize held the GIL while waiting for that lock: both froze for good.
    from _subprocess import run_python

    r = run_python("""
        import threading, torch, torchtpu
        torchtpu.set_eager_mode("fused")
        done = threading.Event()
        def compute():
            for n in range(1, 40):  # new sizes: the Python hook runs at each flush
                a = torch.randn(n, 7, device="tpu")
                (a * 2 + 1).sum(0).cpu()
            done.set()
        def syncer():
            while not done.is_set():
                torch.tpu.synchronize()
                torchtpu._C.flush_pending()
        ts = [threading.Thread(target=compute), threading.Thread(target=syncer)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print("finished")
    """, timeout=240)
    assert r.returncode == 0 and "finished" in r.stdout, r.stdout + r.stderr


def test_a_reader_thread_sees_every_value_whole_while_another_records_writes() -> None:
    # One thread records whole and view writes into a tensor, another reads it (a host
    # copy, an op, a view): each read is some write's value, never zeros no call wrote, and
    # the process never crashes (a storage's buffer and pending value change together).
    from _subprocess import run_python

    r = run_python("""
        import threading, torch, torchtpu
        torchtpu.set_eager_mode("fused")
        x = torch.ones(64, device="tpu")
        stop = threading.Event()
        bad = []
        def writer():
            k = 0
            while not stop.is_set():
                k += 1
                x.fill_(float(k % 7 + 1))
                x[8:24].mul_(1.0)
        def reader():
            try:
                for i in range(1500):
                    v = (x.cpu(), (x * 1).cpu(), x[8:16].cpu())[i % 3]
                    if not (v[0] >= 1 and bool((v == v[0]).all())):
                        bad.append(v[:4].tolist())
            finally:
                stop.set()
        ts = [threading.Thread(target=writer), threading.Thread(target=reader)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print("bad reads", len(bad), bad[:3])
    """, timeout=240)
    assert r.returncode == 0 and "bad reads 0 " in r.stdout, r.stdout + r.stderr


def test_python_ints_past_int64_as_scalars_over_growing_lengths() -> None:
    # An int in [2**63, 2**64) is a uint64 Scalar in PyTorch. Over lengths 3, 4, 5 a fused
    # graph's shape class goes symbolic; such a scalar stays a constant of the class (never
    # a runtime size value), and wraps as the CPU's does. A scalar that changes between
    # lengths and ends past int64's range, too.
    cases = [lambda u: u + (2**64 - 1), lambda u: u.long() < 2**63,
             lambda u: u.long() * 2**63, lambda u: u.float() * (2**64 - 1)]
    with eager_mode("fused"):
        for fn in cases:
            for n in (3, 4, 5):
                u = torch.arange(n, dtype=torch.uint8) * 60
                assert torch.equal(fn(u.to(TPU)).cpu(), fn(u)), (n, fn(u))
        for n, s in ((6, 1), (7, 2), (8, 2**64 - 1)):
            u = torch.arange(n, dtype=torch.uint8) * 60
            assert torch.equal((u.to(TPU) + s).cpu(), u + s)


def _hook_failing_once(error: BaseException):
    """A fused graph hook that raises `error` at its first call, then is torchtpu's."""
    calls: list[int] = []

    def hook(*args):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return torchtpu._fused_graph_hook(*args)

    return hook


def test_ctrl_c_in_the_shape_class_hook_keeps_the_graph_pending() -> None:
    """A KeyboardInterrupt while a pending graph's shape class runs (Ctrl-C in its Python
    code) reaches the caller and leaves the graph pending: its values are computed at the
    next read, not failed for good."""
    torchtpu._C.set_fused_graph_hook(_hook_failing_once(KeyboardInterrupt()))
    try:
        with eager_mode("fused"):
            x = torch.arange(37.0).to(TPU)
            y = (x * 0.37).sin().cumsum(0)
            with pytest.raises(KeyboardInterrupt):
                y.sum().item()
            torch.testing.assert_close(y.cpu(), (torch.arange(37.0) * 0.37).sin().cumsum(0))
    finally:
        torchtpu._C.set_fused_graph_hook(torchtpu._fused_graph_hook)


def test_a_failing_shape_class_leaves_the_graph_to_its_exact_program() -> None:
    torchtpu._C.set_fused_graph_hook(_hook_failing_once(RuntimeError("padded run failed")))
    try:
        with eager_mode("fused"):
            x = torch.arange(41.0).to(TPU)
            y = (x * 0.41).cos().cumsum(0)
            with pytest.warns(UserWarning, match="padded run failed.*exact sizes"):
                got = y.cpu()
            torch.testing.assert_close(got, (torch.arange(41.0) * 0.41).cos().cumsum(0))
    finally:
        torchtpu._C.set_fused_graph_hook(torchtpu._fused_graph_hook)


def test_writes_and_reads_at_a_new_offset_compile_nothing() -> None:
    # A preallocated output filled column by column and a fixed-size cache written at a
    # position (`out[:, i] = x`, `cache[i] = k`, read back at another): a view's offset is a
    # runtime parameter of the fused program, so every position runs one program.
    w = torch.randn(6, 6)
    x0 = torch.randn(3, 6)
    with eager_mode("fused"):
        wt, x = w.to(TPU), x0.to(TPU)
        out = torch.zeros(3, 8, device=TPU)
        cache = torch.zeros(8, 3, 6, device=TPU)
        sums = []
        for i in range(8):
            x = torch.tanh(x @ wt)
            cache[i] = x
            out[:, i] = x.sum(1)
            sums.append((cache[max(i - 1, 0)] * 2).sum())
            torchtpu.synchronize()
            if i == 1:
                compiled = programs_obtained()
        assert programs_obtained() == compiled
        got_out, got_cache, got_sums = out.cpu(), cache.cpu(), [s.item() for s in sums]
    x, out, cache, want = x0, torch.zeros(3, 8), torch.zeros(8, 3, 6), []
    for i in range(8):
        x = torch.tanh(x @ w)
        cache[i] = x
        out[:, i] = x.sum(1)
        want.append((cache[max(i - 1, 0)] * 2).sum().item())
    torch.testing.assert_close(got_out, out)
    torch.testing.assert_close(got_cache, cache)
    assert got_sums == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_views_of_an_empty_value_are_read_without_a_warning(caplog) -> None:
    # A view of an empty storage (an in-place op on z[:], a zero-size batch reshaped) is
    # the empty value in the view's shape; reading it divided by its zero extent.
    b = torch.arange(5.0)
    with eager_mode("fused"), caplog.at_level(logging.WARNING, logger="torchtpu"):
        z = torch.zeros(0, 5, 1, 1, device=TPU)
        r = (z.view(0, 5) + b.to(TPU)).cpu()
        e = torch.zeros(0, device=TPU)
        e[:].add_(1)
        s = (torch.ones(4, device=TPU) + e.sum()).cpu()
    assert r.shape == (0, 5)
    assert s.tolist() == [1.0] * 4
    assert not [m for m in caplog.messages if "failed" in m], caplog.messages
