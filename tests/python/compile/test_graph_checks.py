"""Data checks of compiled graphs are read at the next host read, not after every call:
a training step enqueues its graphs without waiting, and a bad index still raises."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtpu


def _lookup(table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return F.embedding(idx, table) * 2.0


def test_out_of_range_index_raises_at_the_next_host_read() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(_lookup, backend="tpu", dynamic=False)
    table = torch.randn(10, 4)
    good = compiled(table.to("tpu"), torch.tensor([1, 9]).to("tpu"))
    torch.testing.assert_close(good.cpu(), _lookup(table, torch.tensor([1, 9])))

    torchtpu._C.flush_data_checks()
    out = compiled(table.to("tpu"), torch.tensor([1, 10]).to("tpu"))  # 10 is out of range
    assert torchtpu._C.num_pending_data_checks() >= 1  # the call did not wait
    with pytest.raises(IndexError, match="compiled graph run earlier failed a data check"):
        out.cpu()
    # Reported once: the queue is empty afterwards and the device keeps working.
    assert torchtpu._C.num_pending_data_checks() == 0
    again = compiled(table.to("tpu"), torch.tensor([0, 3]).to("tpu"))
    torch.testing.assert_close(again.cpu(), _lookup(table, torch.tensor([0, 3])))


@pytest.mark.parametrize("wait", ["block_until_ready", "synchronize", "item"])
def test_every_way_of_waiting_reports_a_failed_check(wait: str) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(_lookup, backend="tpu", dynamic=False)
    out = compiled(torch.randn(10, 4).to("tpu"), torch.tensor([-20, 2]).to("tpu"))
    with pytest.raises(IndexError):
        if wait == "block_until_ready":
            torchtpu.block_until_ready(out)
        elif wait == "synchronize":
            torch.tpu.synchronize()
        else:
            out.sum().item()


def test_training_step_enqueues_without_host_reads() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32)).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    loss_fn = torch.compile(
        lambda x, y: F.cross_entropy(model(x).reshape(-1, 32), y.reshape(-1)), backend="tpu")
    opt_step = torch.compile(opt.step, backend="tpu")
    x = torch.randint(0, 32, (4, 8)).to("tpu")
    y = torch.randint(0, 32, (4, 8)).to("tpu")

    def step() -> torch.Tensor:
        loss = loss_fn(x, y)
        loss.backward()
        opt_step()
        opt.zero_grad(set_to_none=True)
        return loss

    first = step().item()  # compiles
    torchtpu._C.flush_data_checks()
    torchtpu.debug.reset_metrics()
    loss = step()
    m = torchtpu.debug.metrics()
    assert m.get("num_transfers_to_host", 0) == 0, m
    assert m.get("num_graph_executions", 0) == 3  # forward, backward, optimizer
    assert m.get("num_data_checks_deferred", 0) >= 1
    assert m.get("num_donated_inputs", 0) == 3  # SGD updates each parameter in place
    assert loss.item() < first
    assert torchtpu._C.num_pending_data_checks() == 0


def _linalg_mix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    spd = a @ a.mT + torch.eye(a.shape[-1], device=a.device)
    return torch.linalg.solve(a, b) + torch.linalg.inv(a) @ b + torch.linalg.cholesky(spd)


@pytest.mark.parametrize("spatial", [2, 3])
def test_max_unpool_checks_its_indices_as_the_cpu_does(spatial: int) -> None:
    """max_unpool compiles to its own lowering (not core ATen's decomposition into an index
    put): values as the CPU's, and an invalid index raises the CPU's RuntimeError."""
    torch._dynamo.reset()
    pool, unpool = (F.max_pool2d, F.max_unpool2d) if spatial == 2 else (F.max_pool3d,
                                                                         F.max_unpool3d)
    x = torch.randn((1, 2) + (4,) * spatial)
    y, i = pool(x, 2, return_indices=True)
    compiled = torch.compile(lambda y, i: unpool(y, i, 2), backend="tpu", dynamic=False)
    torch.testing.assert_close(compiled(y.to("tpu"), i.to("tpu")).cpu(), unpool(y, i, 2))
    bad = i.clone()
    bad.view(-1)[0] = 10_000
    with pytest.raises(RuntimeError, match="invalid max index") as cpu_error:
        unpool(y, bad, 2)
    with pytest.raises(type(cpu_error.value), match=f"max_unpool{spatial}d.*invalid max index"):
        compiled(y.to("tpu"), bad.to("tpu")).cpu()


def test_linalg_error_checks_compile_as_data_checks() -> None:
    # linalg.inv, solve and cholesky check LAPACK's info with aten._linalg_check_errors, an
    # effectful op that AOTAutograd wraps in with_effects (an effect token through the
    # graph): the graph compiled refused it before; now the check is a data check raising
    # torch.linalg.LinAlgError, and values and gradients are the CPU's.
    torch._dynamo.reset()
    torch.manual_seed(0)
    compiled = torch.compile(_linalg_mix, backend="tpu")
    a, b = torch.randn(3, 4, 4), torch.randn(3, 4, 4)
    a_cpu, a_tpu = a.clone().requires_grad_(True), a.to("tpu").requires_grad_(True)
    expected, actual = _linalg_mix(a_cpu, b), compiled(a_tpu, b.to("tpu"))
    torch.testing.assert_close(actual.cpu(), expected.detach(), rtol=1e-4, atol=1e-4)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(a_tpu.grad.cpu(), a_cpu.grad, rtol=1e-4, atol=1e-4)

    singular = torch.zeros(3, 4, 4, device="tpu")
    with pytest.raises(torch.linalg.LinAlgError, match="torch.linalg.solve.*singular"):
        compiled(singular, b.to("tpu")).cpu()
    # The device keeps working after the reported failure.
    torch.testing.assert_close(compiled(a.to("tpu"), b.to("tpu")).cpu(),
                               _linalg_mix(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fn", [lambda x: x.max(), lambda x: x.min(), lambda x: x.max(0).values,
                                lambda x: x.min(0).indices],
                         ids=["max", "min", "max_dim", "min_dim"])
def test_max_min_over_no_elements_raise_as_on_the_cpu(fn) -> None:
    # The reduce's init value (-inf / inf) came back where the CPU raises: max() and min()
    # have no identity.
    torch._dynamo.reset()
    # (The CPU raises IndexError for the dim forms; a compile refusal is a RuntimeError.)
    x = torch.randn(0, 3)
    with pytest.raises((RuntimeError, IndexError), match="Expected reduction dim"):
        fn(x)
    with pytest.raises(RuntimeError, match="Expected reduction dim"):
        torch.compile(fn, backend="tpu")(x.to("tpu"))
    y = torch.randn(2, 3)
    torch.testing.assert_close(torch.compile(fn, backend="tpu")(y.to("tpu")).cpu(), fn(y))


def test_sdpa_backward_at_a_symbolic_head_dim() -> None:
    # AOTAutograd hands the backward SDPA's scale, a float computed from the head dim, as a
    # graph input: the runner refused it ("graph input pow_2 is SymFloat, not a tensor").
    torch._dynamo.reset()
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for head_dim in (8, 16):
        qkv = [torch.randn(2, 3, 5, head_dim) for _ in range(3)]
        cpu = [t.clone().requires_grad_() for t in qkv]
        dev = [t.to("tpu").requires_grad_() for t in qkv]
        fn(*cpu).pow(2).sum().backward()
        compiled(*dev).pow(2).sum().backward()
        for a, b in zip(dev, cpu):
            torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-4)


def test_fma_runs_in_the_compiled_program() -> None:
    # prims.fma (a decomposition's fused multiply-add) had no lowering: the graph was cut
    # around it and the op ran eagerly between compiled pieces.
    from torchtpu.dynamo import split

    torch._dynamo.reset()
    split.unlowered_splits.clear()
    fn = lambda a, b, c: torch.ops.prims.fma(a, b, c) * 2  # noqa: E731
    args = [torch.randn(4, 5) for _ in range(3)]
    got = torch.compile(fn, backend="tpu")(*(t.to("tpu") for t in args))
    torch.testing.assert_close(got.cpu(), (args[0] * args[1] + args[2]) * 2)
    assert not split.unlowered_splits, split.unlowered_splits
