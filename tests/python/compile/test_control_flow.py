"""torch.cond, torch's while_loop, scan and map in compiled graphs: lowered to
stablehlo.case and stablehlo.while inside the graph's one program, against the same code on
the CPU, forward and backward; data checks inside a branch or loop body, ops with no
lowering inside a branch, random draws inside a subgraph (refused); associative_scan and
nested_compile_region's subgraphs (lowered in place)."""

from __future__ import annotations

import pytest
import torch
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop

import torchtpu

TOL = dict(rtol=1e-5, atol=1e-5)


def _delta(before: dict, key: str) -> int:
    return torchtpu.debug.metrics().get(key, 0) - before.get(key, 0)


def gate(x, w):
    y = x @ w
    return torch.cond(y.mean() > 0, lambda y, w: (y @ w).relu(), lambda y, w: y.tanh() * 3,
                      (y, w))


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


def test_cond_takes_each_branch_inside_one_program() -> None:
    torch.manual_seed(0)
    x, w = torch.randn(4, 5), torch.randn(5, 5)
    compiled = torch.compile(gate, backend="tpu")
    fallbacks = dict(torchtpu.debug.metrics()["fallback_ops"])
    compiled(x.to("tpu"), w.to("tpu"))  # compile
    for sign in (1, -1):
        before = torchtpu.debug.metrics()
        got = compiled((sign * x).to("tpu"), w.to("tpu"))
        torch.testing.assert_close(got.cpu(), gate(sign * x, w), **TOL)
        assert _delta(before, "num_graph_executions") == 1
        assert _delta(before, "num_compiles") == 0
        assert _delta(before, "num_eager_ops") == 0
    assert gate(x, w).mean() != gate(-x, w).mean()  # both branches were exercised
    assert torchtpu.debug.metrics()["fallback_ops"] == fallbacks  # nothing ran on the CPU


def test_cond_gradients_match_the_cpu() -> None:
    torch.manual_seed(1)
    for sign in (1, -1):
        x, w = sign * torch.randn(4, 5).abs(), torch.randn(5, 5).abs()
        cpu = [x.clone().requires_grad_(), w.clone().requires_grad_()]
        tpu = [x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()]
        gate(*cpu).square().sum().backward()
        torch.compile(gate, backend="tpu")(*tpu).square().sum().backward()
        for a, b in zip(tpu, cpu):
            torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-4)


def test_nested_cond_and_a_cpu_predicate() -> None:
    def nested(x):
        def big(x):
            return torch.cond(x.max() > 1, lambda x: x + 10, lambda x: x - 10, (x,))
        return torch.cond(x.sum() > 0, big, lambda x: x * 0.5, (x,))

    compiled = torch.compile(nested, backend="tpu")
    x = torch.randn(3, 4)
    for v in (x.abs() + 1, -x.abs(), x.abs() * 0.01):
        torch.testing.assert_close(compiled(v.to("tpu")).cpu(), nested(v), **TOL)

    def by_flag(x, flag):
        return torch.cond(flag, lambda x: x + 1, lambda x: x - 1, (x,))

    compiled = torch.compile(by_flag, backend="tpu")
    for flag in (True, False):
        torch.testing.assert_close(compiled(x.to("tpu"), torch.tensor(flag)).cpu(),
                                   by_flag(x, torch.tensor(flag)), **TOL)


def test_cond_under_dynamic_shapes_compiles_per_size() -> None:
    # A graph holding a cond runs at exact sizes (no bucket rule for control flow).
    w = torch.randn(5, 5)
    compiled = torch.compile(gate, backend="tpu", dynamic=True)
    for n in (3, 6, 9):
        x = torch.randn(n, 5)
        torch.testing.assert_close(compiled(x.to("tpu"), w.to("tpu")).cpu(), gate(x, w), **TOL)


def iterate(x, w):
    def keep_going(k, s):
        return (k < 7) & (s.abs().sum() < 1e6)

    def step(k, s):
        return k + 1, (s @ w).tanh() + x

    return while_loop(keep_going, step,
                      (torch.zeros((), dtype=torch.int64, device=x.device), x * 0.5))


def test_while_loop_with_loop_invariant_inputs() -> None:
    torch.manual_seed(2)
    x, w = torch.randn(4, 5), torch.randn(5, 5)
    compiled = torch.compile(iterate, backend="tpu")
    compiled(x.to("tpu"), w.to("tpu"))
    before = torchtpu.debug.metrics()
    k, s = compiled(x.to("tpu"), w.to("tpu"))
    want_k, want_s = iterate(x, w)
    assert int(k.cpu()) == int(want_k) == 7
    torch.testing.assert_close(s.cpu(), want_s, **TOL)
    assert _delta(before, "num_graph_executions") == 1
    assert _delta(before, "num_eager_ops") == 0


def pick_rows(x, i):
    return torch.cond(x.sum() > 0, lambda x, i: x.index_select(0, i), lambda x, i: x[:2] * 2,
                      (x, i))


def test_a_failed_check_in_the_taken_branch_raises_as_eager_does() -> None:
    x = torch.randn(4, 3).abs()
    compiled = torch.compile(pick_rows, backend="tpu")
    good = torch.tensor([3, 1])
    torch.testing.assert_close(compiled(x.to("tpu"), good.to("tpu")).cpu(), pick_rows(x, good))
    bad = torch.tensor([3, 9])
    with pytest.raises(IndexError, match="index out of range in self"):
        pick_rows(x, bad)
    with pytest.raises(IndexError, match="index out of range in self"):
        compiled(x.to("tpu"), bad.to("tpu")).cpu()
    # The same index in the branch not taken is no error, as on the CPU.
    torch.testing.assert_close(compiled((-x).to("tpu"), bad.to("tpu")).cpu(), pick_rows(-x, bad))


def gather_loop(x, i):
    def keep_going(k, s):
        return k < 3

    def step(k, s):
        return k + 1, s.index_select(0, i) * 2

    return while_loop(keep_going, step,
                      (torch.zeros((), dtype=torch.int64, device=x.device), x.clone()))


def test_a_failed_check_in_a_loop_body_raises() -> None:
    x = torch.randn(4, 3)
    compiled = torch.compile(gather_loop, backend="tpu")
    good = torch.tensor([3, 1, 0, 2])
    torch.testing.assert_close(compiled(x.to("tpu"), good.to("tpu"))[1].cpu(),
                               gather_loop(x, good)[1])
    with pytest.raises(IndexError, match="index out of range in self"):
        compiled(x.to("tpu"), torch.tensor([3, 1, 0, 7], device="tpu"))[1].cpu()


def test_an_unlowered_op_in_a_branch_runs_the_cond_eagerly() -> None:
    def spectrum(x):
        return torch.cond(x.sum() > 0, lambda x: torch.linalg.eigvals(x).real.clone(),
                          lambda x: x[0] * 2, (x,))

    torch.manual_seed(3)
    x = torch.randn(4, 4)
    compiled = torch.compile(spectrum, backend="tpu")
    before = torchtpu.debug.metrics()
    for v in (x.abs(), -x.abs()):
        got = compiled(v.to("tpu")).cpu()
        want = spectrum(v)
        torch.testing.assert_close(got.sort().values, want.sort().values, rtol=1e-4, atol=1e-4)
    assert _delta(before, "num_out_of_graph_ops") >= 2  # the cond, on each call


def test_random_draws_inside_subgraphs_run_the_node_eagerly() -> None:
    # One generator state cannot serve a loop's iterations, or only the branch taken: such
    # a node runs as eager mode runs it, between compiled pieces.
    def noisy(x):
        return torch.cond(x.sum() > 0, lambda x: x + torch.rand_like(x), lambda x: x * 2, (x,))

    def dropped(x):
        return scan(lambda c, r: (c + torch.nn.functional.dropout(r, 0.5), c.clone()),
                    torch.zeros(4, device=x.device), x, dim=0)

    before = torchtpu.debug.metrics()
    positive = torch.compile(noisy, backend="tpu")(torch.ones(1000, device="tpu")).cpu()
    assert ((positive >= 1) & (positive < 2)).all() and positive.std() > 0.1
    negative = torch.compile(noisy, backend="tpu")(-torch.ones(3, device="tpu")).cpu()
    torch.testing.assert_close(negative, -2 * torch.ones(3))
    last, _ = torch.compile(dropped, backend="tpu")(torch.ones(50, 4, device="tpu"))
    assert 0 < float(last.sum().cpu()) < 400  # about half the 200 ones, scaled by 2
    assert _delta(before, "num_out_of_graph_ops") >= 3
    splits = torchtpu.debug.metrics()["graph_unlowered_splits"]
    assert any(k.startswith("higher_order::cond") and "random" in k for k in splits), splits

def rnn(x, h0, w, u):
    def step(h, xt):
        h = torch.tanh(xt @ w + h @ u)
        return h, h.clone()

    return scan(step, h0, x, dim=0)


def test_scan_runs_a_recurrence_inside_one_program() -> None:
    torch.manual_seed(4)
    x, w, u = torch.randn(10, 2, 5), torch.randn(5, 7) * 0.3, torch.randn(7, 7) * 0.3
    h0 = torch.zeros(2, 7)
    compiled = torch.compile(rnn, backend="tpu")
    args = [t.to("tpu") for t in (x, h0, w, u)]
    compiled(*args)
    before = torchtpu.debug.metrics()
    last, states = compiled(*args)
    want_last, want_states = rnn(x, h0, w, u)
    torch.testing.assert_close(last.cpu(), want_last, **TOL)
    torch.testing.assert_close(states.cpu(), want_states, **TOL)
    assert _delta(before, "num_graph_executions") == 1
    assert _delta(before, "num_eager_ops") == 0


def test_scan_gradients_match_the_cpu() -> None:
    torch.manual_seed(5)
    x, h0 = torch.randn(8, 2, 5), torch.zeros(2, 7)
    w, u = torch.randn(5, 7) * 0.3, torch.randn(7, 7) * 0.3
    cpu = [w.clone().requires_grad_(), u.clone().requires_grad_()]
    tpu = [w.to("tpu").requires_grad_(), u.to("tpu").requires_grad_()]
    rnn(x, h0, *cpu)[1].square().sum().backward()
    compiled = torch.compile(rnn, backend="tpu")
    compiled(x.to("tpu"), h0.to("tpu"), *tpu)[1].square().sum().backward()
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-4)


def test_scan_over_another_dim_with_several_carries_and_outputs() -> None:
    def two(x):
        def combine(c, xs):
            return (c[0] + xs[0], c[1] * xs[1]), (c[0] - xs[1], c[1] > 0)

        init = (torch.zeros(6, device=x.device), torch.ones(6, device=x.device))
        return scan(combine, init, (x, x.flip(1)), dim=1)

    x = torch.randn(6, 5)
    got = torch.utils._pytree.tree_leaves(torch.compile(two, backend="tpu")(x.to("tpu")))
    want = torch.utils._pytree.tree_leaves(two(x))
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, **TOL)


def test_map_applies_its_body_to_each_row() -> None:
    from functorch.experimental.control_flow import map as control_map

    def affine(x, w):
        return control_map(lambda r, w: r * w + 1, x, w)

    x, w = torch.randn(4, 5), torch.randn(5)
    torch.testing.assert_close(torch.compile(affine, backend="tpu")(x.to("tpu"), w.to("tpu")).cpu(),
                               affine(x, w), **TOL)


def test_a_failed_check_in_a_scan_body_raises() -> None:
    def pick(x, i):
        return scan(lambda c, xs: (c + xs.index_select(0, i), c.sum()),
                    torch.zeros(2, device=x.device), x, dim=0)

    x = torch.randn(6, 5)
    compiled = torch.compile(pick, backend="tpu")
    good = torch.tensor([1, 3])
    torch.testing.assert_close(compiled(x.to("tpu"), good.to("tpu"))[1].cpu(), pick(x, good)[1],
                               **TOL)
    with pytest.raises(IndexError, match="index out of range in self"):
        compiled(x.to("tpu"), torch.tensor([1, 30], device="tpu"))[1].cpu()


def test_associative_scan_and_nested_compile_regions_match_the_cpu() -> None:
    from torch._higher_order_ops.associative_scan import associative_scan

    def running(x):
        return associative_scan(lambda a, b: a * b + a, x, 0, combine_mode="generic")

    x = torch.rand(7, 3)
    torch.testing.assert_close(torch.compile(running, backend="tpu")(x.to("tpu")).cpu(),
                               running(x), **TOL)

    @torch.compiler.nested_compile_region
    def block(x, w):
        return (x @ w).sin() * 2

    def twice(x, w):
        return block(x, w) + block(x + 1, w)

    w = torch.randn(3, 3)
    cpu = [x.clone().requires_grad_(), w.clone().requires_grad_()]
    tpu = [x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()]
    want = twice(*cpu)
    with torch.no_grad():
        compiled = torch.compile(twice, backend="tpu")
        compiled(x.to("tpu"), w.to("tpu"))
        before = torchtpu.debug.metrics()
        torch.testing.assert_close(compiled(x.to("tpu"), w.to("tpu")).cpu(), want.detach(), **TOL)
        assert _delta(before, "num_graph_executions") == 1  # both calls in place, one program
        assert _delta(before, "num_eager_ops") == 0
    got = torch.compile(twice, backend="tpu")(*tpu)
    torch.testing.assert_close(got.cpu(), want, **TOL)
    want.sum().backward()
    got.sum().backward()
    for a, b in zip(tpu, cpu):
        torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL)


@pytest.mark.parametrize("flag", [torch.tensor([True]), torch.tensor([[False]]), torch.tensor(1),
                                  torch.tensor(0.0)], ids=["1-elem", "1x1", "int", "float"])
def test_a_predicate_of_one_element_of_any_dtype(flag: torch.Tensor) -> None:
    def by_flag(x, flag):
        return torch.cond(flag, lambda x: x + 1, lambda x: x - 1, (x,))

    x = torch.randn(3)
    got = torch.compile(by_flag, backend="tpu")(x.to("tpu"), flag.to("tpu"))
    torch.testing.assert_close(got.cpu(), by_flag(x, flag), **TOL)


def test_a_predicate_on_sizes_and_while_loops_under_dynamic_shapes() -> None:
    def by_length(x):
        return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x - 1, (x,))

    compiled = torch.compile(by_length, backend="tpu", dynamic=True)
    for n in (3, 6, 8):
        x = torch.arange(float(n))
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), by_length(x), **TOL)

    def halve(x):
        return while_loop(lambda k, s: k < s.shape[0], lambda k, s: (k + 1, s * 0.5),
                          (torch.zeros((), dtype=torch.int64, device=x.device), x.clone()))

    compiled = torch.compile(halve, backend="tpu", dynamic=True)
    for n in (3, 5):
        x = torch.ones(n)
        k, s = compiled(x.to("tpu"))
        assert int(k.cpu()) == n
        torch.testing.assert_close(s.cpu(), halve(x)[1], **TOL)


def test_cond_under_autocast_eager_and_compiled() -> None:
    x, w = torch.randn(4, 4), torch.randn(4, 4)

    def matmuls(x, w):
        return torch.cond(x.sum() > 0, lambda x, w: x @ w, lambda x, w: (x @ w).relu(), (x, w))

    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = matmuls(x, w)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        eager = matmuls(x.to("tpu"), w.to("tpu"))
        compiled = torch.compile(matmuls, backend="tpu")(x.to("tpu"), w.to("tpu"))
    for got in (eager, compiled):
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got.cpu().float(), want.float(), rtol=1e-2, atol=1e-2)


def test_tensor_constants_written_inside_subgraphs() -> None:
    def shifted(x):
        return torch.cond(x.sum() > 0, lambda x: x + torch.tensor([1.0, 2.0, 3.0], device=x.device),
                          lambda x: x * 2, (x,))

    def counted(x):
        return while_loop(lambda k, s: k < torch.tensor(5, dtype=torch.int32),
                          lambda k, s: (k + 2, s * 2),
                          (torch.zeros((), dtype=torch.int32, device=x.device), x))

    for x in (torch.ones(3), -torch.ones(3)):
        got = torch.compile(shifted, backend="tpu")(x.to("tpu"))
        torch.testing.assert_close(got.cpu(), shifted(x), **TOL)
    k, s = torch.compile(counted, backend="tpu")(torch.ones(3, device="tpu"))
    want_k, want_s = counted(torch.ones(3))
    assert int(k.cpu()) == int(want_k) == 6
    torch.testing.assert_close(s.cpu(), want_s, **TOL)


def test_a_size_predicate_in_a_graph_with_dynamic_dims_is_decided_at_the_true_size() -> None:
    # The graph runs at exact sizes (no bucket), so x.shape[0] > 6 is never read at a
    # bucket's size.
    def f(x, w):
        return x * 2, torch.cond(x.shape[0] > 6, lambda w: w * 2, lambda w: w - 1, (w,))

    compiled = torch.compile(f, backend="tpu")
    w = torch.ones(3)
    for n in (3, 5, 6, 7, 9):
        x = torch.randn(n)
        xt = x.to("tpu")
        torch._dynamo.mark_dynamic(xt, 0)
        torch.testing.assert_close(compiled(xt, w.to("tpu"))[1].cpu(), f(x, w)[1])


def test_checks_of_different_kinds_in_one_branch_raise_their_own_error() -> None:
    def pick_and_divide(x, i, d):
        return torch.cond(x.sum() > 0, lambda x, i, d: (x.index_select(0, i), x[:2] // d),
                          lambda x, i, d: (x[:2] + 0, x[:2] * 1), (x, i, d))

    x = torch.arange(1, 5)
    compiled = torch.compile(pick_and_divide, backend="tpu")
    good_i, good_d = torch.tensor([3, 1]), torch.tensor([2, 3])
    for got, want in zip(compiled(x.to("tpu"), good_i.to("tpu"), good_d.to("tpu")),
                         pick_and_divide(x, good_i, good_d)):
        assert torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as cpu_error:
        pick_and_divide(x, good_i, torch.tensor([2, 0]))
    with pytest.raises(RuntimeError, match="ZeroDivisionError") as tpu_error:
        compiled(x.to("tpu"), good_i.to("tpu"), torch.tensor([2, 0], device="tpu"))[1].cpu()
    assert type(tpu_error.value) is type(cpu_error.value)
    with pytest.raises(IndexError, match="index out of range in self"):
        compiled(x.to("tpu"), torch.tensor([3, 9], device="tpu"), good_d.to("tpu"))[0].cpu()
