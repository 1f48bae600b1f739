"""Varying shapes under torch.compile(backend="tpu").

By default an inference graph with symbolic sizes whose ops are all checked under shape
buckets (dynamo/checked_ops.py) is padded to buckets: XLA tracks the true sizes, the number
of executables stays bounded, and results equal the unpadded computation. Other graphs
compile once per exact size (exact results, every recompilation counted).
TORCHTPU_SHAPE_BUCKETS=auto pads every graph without a known hazard; =off pads none."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.dynamo import backend
from torchtpu.dynamo.backend import bucket_policy, bucket_size


class TinyDecoder(torch.nn.Module):
    """Embedding, causal self-attention over sequences of variable length, MLP, LM head.

    Tokens are [n] (one sequence) or [b, n]: a batched linear merges the batch and sequence
    dims in a reshape, which the backend rewrites away under buckets (merged_dims.py)."""

    def __init__(self, vocab: int = 32, dim: int = 16) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 32), torch.nn.GELU(),
                                       torch.nn.Linear(32, dim))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / 4.0
        n = tokens.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
        x = x + scores.softmax(-1) @ v
        x = x + self.mlp(self.norm(x))
        return self.head(x)


def _twin_decoders() -> tuple[TinyDecoder, TinyDecoder]:
    """The same TinyDecoder on the CPU and on tpu (identical weights)."""
    torch.manual_seed(0)
    cpu = TinyDecoder()
    model = TinyDecoder().to("tpu")
    model.load_state_dict({k: v.to("tpu") for k, v in cpu.state_dict().items()})
    return cpu, model


def _compiled_twins(monkeypatch: pytest.MonkeyPatch, policy: str = "",
                    dynamic: bool | None = True) -> tuple:
    """(CPU decoder, its twin on tpu, the twin compiled, graphs compiled so far) under the
    bucket policy `policy` (empty: the default) and a fresh Dynamo."""
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", policy)
    torch._dynamo.reset()
    cpu, model = _twin_decoders()
    compiled = torch.compile(model, backend="tpu", dynamic=dynamic)
    return cpu, model, compiled, torchtpu.debug.metrics().get("num_graphs_compiled", 0)


def _twin_linears() -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """The same Linear(16, 8) on the CPU and on tpu (identical weights)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 8)
    lin_tpu = torch.nn.Linear(16, 8).to("tpu")
    lin_tpu.load_state_dict({k: v.to("tpu") for k, v in lin.state_dict().items()})
    return lin, lin_tpu


def test_reshape_that_merges_a_dynamic_dim_compiles_per_size() -> None:
    torch._dynamo.reset()
    lin, lin_tpu = _twin_linears()
    compiled = torch.compile(lambda x: lin_tpu(x).transpose(-2, -1), backend="tpu", dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(2, n, 16)
        out = compiled(x.to("tpu"))
        torch.testing.assert_close(out.cpu(), lin(x).transpose(-2, -1), rtol=1e-5, atol=1e-5)


def test_bucket_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "auto")
    assert [bucket_size(n) for n in (1, 16, 17, 33, 100, 129)] == [16, 16, 32, 64, 128, 256]
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "8,24")
    assert [bucket_size(n) for n in (3, 8, 9, 24, 25)] == [8, 8, 24, 24, 32]
    assert bucket_policy() == "all"
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "off")
    assert bucket_policy() == "off"
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS")
    assert bucket_policy() == "checked"
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "16,x")
    with pytest.raises(ValueError, match="comma-separated list of positive sizes"):
        bucket_policy()


def test_default_policy_keeps_unchecked_ops_exact_and_auto_pads_them(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # atan is not on the checked list: exact sizes by default (logged, with the op), one
    # executable per bucket with TORCHTPU_SHAPE_BUCKETS=auto. Both exact.
    for policy, graphs in (("", 3), ("auto", 1)):
        monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", policy)
        torch._dynamo.reset()
        f = torch.compile(lambda x: x.atan() * 2, backend="tpu")
        before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
        with caplog.at_level("INFO", logger="torchtpu.compile"):
            for n in (5, 9, 13):
                x = torch.randn(2, n)
                xt = x.to("tpu")
                torch._dynamo.mark_dynamic(xt, 1)
                torch.testing.assert_close(f(xt).cpu(), x.atan() * 2)
        assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == graphs, policy
    assert "aten.atan.default" in caplog.text
    assert "not among the ops checked under shape buckets" in caplog.text


def test_hundred_lengths_use_few_executables_and_exact_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The default policy.
    cpu, model, compiled, before = _compiled_twins(monkeypatch)
    worst = 0.0
    for n in range(1, 101):
        tokens = torch.randint(0, 32, (n,))
        with torch.no_grad():
            out = compiled(tokens.to("tpu"))
        assert out.shape == (n, 32)
        with torch.no_grad():
            expected = cpu(tokens)
        worst = max(worst, (out.cpu() - expected).abs().max().item())
    graphs = torchtpu.debug.metrics()["num_graphs_compiled"] - before
    assert graphs <= 8, graphs
    assert worst < 1e-4, worst


def test_batched_sweep_rewrites_merged_rows_and_stays_exact(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # [2, n] tokens, lengths varying naturally (no mark_dynamic), default policy: every
    # linear reshapes [2, n, k] -> [2n, k]; the backend runs those products on the
    # unmerged tensors.
    cpu, model, compiled, before = _compiled_twins(monkeypatch, dynamic=None)
    worst = 0.0
    with caplog.at_level("INFO", logger="torchtpu.compile"), torch.no_grad():
        for n in range(1, 41):
            tokens = torch.randint(0, 32, (2, n))
            out = compiled(tokens.to("tpu"))
            assert out.shape == (2, n, 32)
            worst = max(worst, (out.cpu() - cpu(tokens)).abs().max().item())
    graphs = torchtpu.debug.metrics()["num_graphs_compiled"] - before
    # One static graph for the first length, then buckets 16, 32, 64.
    assert graphs <= 4, graphs
    assert worst < 1e-4, worst
    assert "merged dynamic rows rewritten" in caplog.text
    assert "compiles per exact size" not in caplog.text


def test_sums_over_merged_rows_run_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    # A sum over the merged [b*n] rows (a bias gradient's shape) is a sum over b and n of
    # the unmerged rows; so is permute(g) @ x over them (a weight gradient's).
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "auto")
    torch._dynamo.reset()
    lin, lin_tpu = _twin_linears()

    def f(x: torch.Tensor, linear: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
        rows = linear(x).reshape(-1, 8)
        return rows.sum(0), rows.t() @ x.reshape(-1, 16)

    compiled = torch.compile(lambda x: f(x, lin_tpu), backend="tpu")
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    with torch.no_grad():
        for n in (3, 5, 7, 11):
            x = torch.randn(2, n, 16)
            got = compiled(x.to("tpu"))
            for g, want in zip(got, f(x, lin)):
                torch.testing.assert_close(g.cpu(), want, rtol=1e-5, atol=1e-5)
    # n=3 static, then one padded graph for 5, 7 and 11 (bucket 16)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 2


def test_merged_rows_read_across_compile_per_exact_size(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A running sum over the merged [b*n] rows cannot run on padded rows: exact-size, with why.
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "auto")
    torch._dynamo.reset()
    lin, lin_tpu = _twin_linears()
    compiled = torch.compile(lambda x: lin_tpu(x).reshape(-1, 8).cumsum(0), backend="tpu")
    with caplog.at_level("WARNING", logger="torchtpu.compile"), torch.no_grad():
        for n in (3, 5, 7):
            x = torch.randn(2, n, 16)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(),
                                       lin(x).reshape(-1, 8).cumsum(0), rtol=1e-5, atol=1e-5)
    assert "reads across merged dynamic rows" in caplog.text


def test_fixed_length_slices_of_a_dynamic_dim_run_padded_as_gathers(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # Padded, XLA returned b[1:5] with corrupt size metadata and the process aborted; the
    # backend rewrites such slices as index_select with constant indices (fixed_slices.py).
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()

    def f(x: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x + b[1:5], b[0:6:2] * 2, p[:, :1] * p  # p[:, :1]: Hugging Face's mask code

    compiled = torch.compile(f, backend="tpu")
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    with caplog.at_level("INFO", logger="torchtpu.compile"):
        for n in (6, 9, 16):
            x, b, p = torch.randn(3, 4), torch.randn(n), torch.arange(n).repeat(2, 1)
            bt, pt = b.to("tpu"), p.to("tpu")
            torch._dynamo.mark_dynamic(bt, 0)
            torch._dynamo.mark_dynamic(pt, 1)
            got = [t.cpu() for t in compiled(x.to("tpu"), bt, pt)]
            for g, e in zip(got, f(x, b, p)):
                torch.testing.assert_close(g, e)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 1
    assert "fixed-length slices of a dynamic dim rewritten as gathers" in caplog.text


def test_graph_xla_will_not_compile_padded_falls_back_to_exact_sizes(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # A graph the hazard checks let through but XLA's padder rejects (a RET_CHECK on the
    # bias add after a product over two dynamic dims) compiles per exact size instead of
    # failing. The hazard checks do catch this one, and the lowering now makes such a
    # product's rows static (graph_spec._static_product_rows), which XLA accepts; both
    # are switched off here to reach the fallback.
    from torchtpu.dynamo import graph_spec
    from torchtpu.ops import matmul_nd

    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "auto")
    monkeypatch.setattr(backend, "bucketing_hazard", lambda gm, saved=None: None)
    monkeypatch.setattr(graph_spec, "_static_product_rows", lambda node: [])
    torch._dynamo.reset()
    w, bias = torch.randn(16, 8), torch.randn(8)
    w_tpu, bias_tpu = w.to("tpu"), bias.to("tpu")
    compiled = torch.compile(lambda x: matmul_nd(x, w_tpu) + bias_tpu, backend="tpu",
                             dynamic=True)
    with caplog.at_level("WARNING", logger="torchtpu.compile"):
        for b, n in ((2, 3), (3, 5)):
            x = torch.randn(b, n, 16)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), x @ w + bias, rtol=1e-5,
                                       atol=1e-5)
    assert "XLA did not compile it padded" in caplog.text


@pytest.mark.parametrize("policy", ["", "auto"])
def test_product_over_two_dynamic_dims_runs_padded(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # dynamic=True makes batch and length dynamic. XLA's dot merges the two (padded, it
    # returned garbage, no error); the lowering makes both static before the product and
    # marks the result's again (graph_spec._static_product_rows): one executable, exact.
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", policy)
    torch._dynamo.reset()
    lin, lin_tpu = _twin_linears()
    compiled = torch.compile(lambda x: x @ lin_tpu.weight.T, backend="tpu", dynamic=True)
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    with torch.no_grad():
        for b, n in ((2, 3), (3, 5), (2, 5), (5, 11)):
            x = torch.randn(b, n, 16)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), x @ lin.weight.T,
                                       rtol=1e-5, atol=1e-5)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 1


def test_training_step_with_dynamic_batch_and_length_matches_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Batch and length both dynamic in a training step: the forward's products, and the
    # backward's weight gradients over rows of two dynamic dims, padded to buckets.
    cpu, model, compiled, before = _compiled_twins(monkeypatch)
    for b, n in ((2, 3), (3, 5), (5, 17), (3, 30)):
        tokens = torch.randint(0, 32, (b, n + 1))
        x, y = tokens[:, :-1], tokens[:, 1:]
        for m in (cpu, model):
            m.zero_grad()
        loss_cpu = F.cross_entropy(cpu(x).flatten(0, 1), y.flatten())
        loss_cpu.backward()
        loss = F.cross_entropy(compiled(x.to("tpu")).flatten(0, 1), y.to("tpu").flatten())
        loss.backward()
        assert loss.item() == pytest.approx(loss_cpu.item(), rel=1e-5), f"b={b} n={n}"
        for (name, p_cpu), p in zip(cpu.named_parameters(), model.parameters()):
            torch.testing.assert_close(p.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, name=name: f"{name} (b={b} n={n}): {m}")
    # Buckets (16, 16) and (16, 32): a forward and a backward graph each.
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 4


def test_matmul_nd_matches_torch_matmul_and_checks_ranks() -> None:
    from torchtpu.ops import matmul_nd

    x, w, y = torch.randn(2, 3, 4), torch.randn(4, 5), torch.randn(2, 4, 6)
    torch.testing.assert_close(matmul_nd(x, w), x @ w)
    torch.testing.assert_close(matmul_nd(x, y), x @ y)
    f = torch.compile(matmul_nd, backend="tpu")
    torch.testing.assert_close(f(x.to("tpu"), w.to("tpu")).cpu(), x @ w, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="operands of rank 3 and 1"):
        matmul_nd(x, torch.randn(4))


def test_exact_size_policy_counts_one_graph_per_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "off")
    torch._dynamo.reset()
    f = torch.compile(lambda x: (x.softmax(-1) * 2).sum(-1), backend="tpu", dynamic=True)
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    for n in (3, 4, 5, 4, 3):
        x = torch.randn(2, n)
        torch.testing.assert_close(f(x.to("tpu")).cpu(), (x.softmax(-1) * 2).sum(-1))
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 3


@pytest.mark.parametrize("buckets,graphs", [("off", 6), ("", 4), ("auto", 4)])
def test_dynamic_training_step_gradients_match_cpu(buckets: str, graphs: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Forward and backward graphs: one pair per length exact-size (off), per bucket
    # padded (the default: every op of this step is checked under buckets; and auto).
    cpu, model, compiled, before = _compiled_twins(monkeypatch, buckets)
    for n in (5, 11, 20):
        tokens = torch.randint(0, 32, (n + 1,))
        for m in (cpu, model):
            m.zero_grad()
        loss_cpu = F.cross_entropy(cpu(tokens[:-1]), tokens[1:])
        loss_cpu.backward()
        t = tokens.to("tpu")
        logits = compiled(t[:-1])
        loss = F.cross_entropy(logits, t[1:])
        loss.backward()
        assert loss.item() == pytest.approx(loss_cpu.item(), rel=1e-5)
        for (name, p_cpu), p in zip(cpu.named_parameters(), model.parameters()):
            torch.testing.assert_close(p.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5,
                                       msg=lambda m, name=name: f"{name} (n={n}): {m}")
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == graphs


def test_batched_training_loop_over_varying_lengths_uses_buckets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Batched, the linears merge batch and length: the forward returns those activations
    # unmerged and the backward computes weight and bias gradients per row of the
    # unmerged tensors (merged_dims.py). Padded under the default policy; an SGD loop
    # against the CPU's.
    cpu, model, compiled, before = _compiled_twins(monkeypatch, dynamic=None)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    restaged = torchtpu.debug.metrics().get("num_dynamic_results_restaged", 0)
    for n in (3, 5, 9, 16, 17, 30):
        tokens = torch.randint(0, 32, (2, n + 1))
        x, y = tokens[:, :-1], tokens[:, 1:]
        loss_cpu = F.cross_entropy(cpu(x).flatten(0, 1), y.flatten())
        loss_cpu.backward()
        opt_cpu.step()
        opt_cpu.zero_grad()
        loss = F.cross_entropy(compiled(x.to("tpu")).flatten(0, 1), y.to("tpu").flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        assert loss.item() == pytest.approx(loss_cpu.item(), rel=1e-5), f"n={n}"
    for (name, p_cpu), p in zip(cpu.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m, name=name: f"{name}: {m}")
    # n=3 exact (Dynamo's first, static, compile), then buckets 16 and 32: a forward and
    # a backward graph each.
    metrics = torchtpu.debug.metrics()
    assert metrics["num_graphs_compiled"] - before == 6
    # Padded results leave their programs compact and static: the backward reads the
    # forward's saved activations where they are, with no trip through the host.
    assert metrics.get("num_dynamic_results_restaged", 0) == restaged


@pytest.mark.parametrize("policy", ["off", ""])
def test_output_that_is_a_view_of_an_input_with_symbolic_sizes(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # AOTAutograd rebuilds such an output from the caller's tensor by replaying the view
    # the returned tensor has (it cannot replay view ops with symbolic arguments), so the
    # graph must return a real view of the input, not a fresh buffer.
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", policy)
    torch._dynamo.reset()
    m = torch.arange(64 * 64.0).view(64, 64)
    m_tpu = m.to("tpu")
    f = lambda m, k: (m[:k, 1:k + 1], m[2:k].t())  # noqa: E731
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for k in (3, 5, 9):
        got = compiled(m_tpu, k)
        for g, want in zip(got, f(m, k)):
            torch.testing.assert_close(g.cpu(), want)
        assert got[0].untyped_storage().data_ptr() == m_tpu.untyped_storage().data_ptr()


def test_a_value_computed_twice_is_returned_twice_with_true_sizes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Two layers' masks: the same computation twice, which XLA merges into one result. A
    # repeated dynamic result came back without size metadata (garbage sizes, an abort),
    # so the graph returns it once and the runner hands out a copy for the second.
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()
    mask = torch.ones(32, 32, dtype=torch.bool).tril()
    mask_tpu = mask.to("tpu")

    def f(x: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n = x.shape[0]
        first, second = ~m[:n, :n], ~m[:n, :n]
        return first, x.t(), second, torch.ops.aten.alias(x) * 2, (x * 2).view(x.shape)

    compiled = torch.compile(f, backend="tpu")
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    for n in (3, 5, 9, 13):
        x = torch.randn(n, n)
        got = compiled(x.to("tpu"), mask_tpu)
        for g, want in zip(got, f(x, mask)):
            torch.testing.assert_close(g.cpu(), want)
        assert got[0].data_ptr() != got[2].data_ptr()
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 2  # static, bucket 16
