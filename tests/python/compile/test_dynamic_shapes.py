"""Varying shapes under torch.compile(backend="tpu").

By default a graph with symbolic sizes whose ops all have a rule for padded dims
(dynamo/buckets/rules.py) runs padded to shape buckets: one static program per bucket,
true sizes as runtime values, results equal to the unpadded computation. Other graphs
compile once per exact size (exact results, every recompilation counted), with the reason
logged. TORCHTPU_SHAPE_BUCKETS=off pads none."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from torchtpu.dynamo.backend import bucket_policy, bucket_size


class TinyDecoder(torch.nn.Module):
    """Embedding, causal self-attention over sequences of variable length, MLP, LM head.

    Tokens are [n] (one sequence) or [b, n]: a batched linear merges the batch and sequence
    dims in a reshape, whose rows stay padded per sequence under buckets."""

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


def test_reshape_that_merges_a_dynamic_dim_runs_padded() -> None:
    torch._dynamo.reset()
    lin, lin_tpu = _twin_linears()
    compiled = torch.compile(lambda x: lin_tpu(x).transpose(-2, -1), backend="tpu", dynamic=True)
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    for n in (3, 5, 7):
        x = torch.randn(2, n, 16)
        out = compiled(x.to("tpu"))
        torch.testing.assert_close(out.cpu(), lin(x).transpose(-2, -1), rtol=1e-5, atol=1e-5)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 1


def test_bucket_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "auto")
    assert [bucket_size(n) for n in (1, 16, 17, 33, 100, 129)] == [16, 16, 32, 64, 128, 256]
    assert bucket_policy() == "pad"
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "8,24")
    assert [bucket_size(n) for n in (3, 8, 9, 24, 25)] == [8, 8, 24, 24, 32]
    assert bucket_policy() == "pad"
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "off")
    assert bucket_policy() == "off"
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS")
    assert bucket_policy() == "pad"
    for bad in ("16,x", f"16,{2**62}"):
        monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", bad)
        with pytest.raises(ValueError, match="comma-separated list of positive sizes"):
            bucket_policy()
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS")
    monkeypatch.setenv("TORCHTPU_MIN_BUCKET", "4")
    assert [bucket_size(n) for n in (1, 4, 5, 9)] == [4, 4, 8, 16]
    for bad in ("abc", "0", "-8", str(2**62)):  # int() error, silently 1, a TypeError, before
        monkeypatch.setenv("TORCHTPU_MIN_BUCKET", bad)
        with pytest.raises(ValueError, match="TORCHTPU_MIN_BUCKET=.*positive integer"):
            bucket_size(3)


def test_op_without_a_rule_keeps_its_graph_exact(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # flip depends on where the dim ends: no rule, so exact sizes (logged with the op);
    # a pointwise op needs no entry of its own (atan: one graph for the bucket).
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    for fn, graphs in ((lambda x: x.flip(-1) * 2, 3), (lambda x: x.atan() * 2, 1)):
        torch._dynamo.reset()
        f = torch.compile(fn, backend="tpu")
        before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
        with caplog.at_level("INFO", logger="torchtpu.compile"):
            for n in (5, 9, 13):
                x = torch.randn(2, n)
                xt = x.to("tpu")
                torch._dynamo.mark_dynamic(xt, 1)
                torch.testing.assert_close(f(xt).cpu(), fn(x))
        assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == graphs
    assert "aten.flip.default" in caplog.text
    assert "has no rule for padded dims" in caplog.text


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
    # linear reshapes [2, n, k] -> [2n, k], two runs of padded rows.
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


def test_running_sum_over_merged_rows_masks_their_padding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A running sum over the merged [b*n] rows reads across the runs of padded rows: their
    # padding is zeroed first, so it runs padded and exact.
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()
    lin, lin_tpu = _twin_linears()
    compiled = torch.compile(lambda x: lin_tpu(x).reshape(-1, 8).cumsum(0), backend="tpu",
                             dynamic=True)
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    with torch.no_grad():
        for n in (3, 5, 7):
            x = torch.randn(2, n, 16)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(),
                                       lin(x).reshape(-1, 8).cumsum(0), rtol=1e-5, atol=1e-5)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 1


def test_positions_in_merged_rows_keep_the_graph_exact(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # argmax over merged rows returns positions of the true layout, which the padded rows
    # do not have: exact sizes, with why.
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()
    lin, lin_tpu = _twin_linears()
    compiled = torch.compile(lambda x: lin_tpu(x).reshape(-1, 8).argmax(0), backend="tpu",
                             dynamic=True)
    with caplog.at_level("INFO", logger="torchtpu.compile"), torch.no_grad():
        for n in (3, 5, 7):
            x = torch.randn(2, n, 16)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(),
                                       lin(x).reshape(-1, 8).argmax(0))
    assert "positions in merged padded rows" in caplog.text


def test_fixed_length_slices_of_a_dynamic_dim_run_padded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A fixed window of a padded dim is a static slice of its true elements.
    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    torch._dynamo.reset()

    def f(x: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x + b[1:5], b[0:6:2] * 2, p[:, :1] * p  # p[:, :1]: Hugging Face's mask code

    compiled = torch.compile(f, backend="tpu")
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    for n in (6, 9, 16):
        x, b, p = torch.randn(3, 4), torch.randn(n), torch.arange(n).repeat(2, 1)
        bt, pt = b.to("tpu"), p.to("tpu")
        torch._dynamo.mark_dynamic(bt, 0)
        torch._dynamo.mark_dynamic(pt, 1)
        got = [t.cpu() for t in compiled(x.to("tpu"), bt, pt)]
        for g, e in zip(got, f(x, b, p)):
            torch.testing.assert_close(g, e)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] - before == 1


def test_graph_xla_will_not_compile_padded_falls_back_to_exact_sizes(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # No padded program is known to be refused; a refusal (injected here) must not fail
    # the call: the graph compiles per exact size from then on, with the reason.
    from torchtpu.dynamo import runner

    real = runner.build_plan

    def refusing(gm: torch.fx.GraphModule, values: dict, bucketed: bool = False) -> object:
        if bucketed:
            raise RuntimeError("XLA: injected refusal")
        return real(gm, values, bucketed)

    monkeypatch.delenv("TORCHTPU_SHAPE_BUCKETS", raising=False)
    monkeypatch.setattr(runner, "build_plan", refusing)
    torch._dynamo.reset()
    w, bias = torch.randn(16, 8), torch.randn(8)
    w_tpu, bias_tpu = w.to("tpu"), bias.to("tpu")
    compiled = torch.compile(lambda x: x @ w_tpu + bias_tpu, backend="tpu", dynamic=True)
    with caplog.at_level("WARNING", logger="torchtpu.compile"):
        for b, n in ((2, 3), (3, 5)):
            x = torch.randn(b, n, 16)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), x @ w + bias, rtol=1e-5,
                                       atol=1e-5)
    assert "XLA did not compile it padded: XLA: injected refusal" in caplog.text


@pytest.mark.parametrize("policy", ["", "auto"])
def test_product_over_two_dynamic_dims_runs_padded(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # dynamic=True makes batch and length dynamic: both padded, one executable, exact.
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
    # Batched, the linears merge batch and length: the forward saves those activations in
    # their padded layout and the backward takes them as they are. Padded under the default
    # policy; an SGD loop against the CPU's.
    cpu, model, compiled, before = _compiled_twins(monkeypatch, dynamic=None)
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=0.1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
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
    # Two layers' masks: the same computation twice, which XLA may merge into one result;
    # each output is a tensor of its own.
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


@pytest.mark.parametrize("policy", ["auto", "off"])
def test_interpolation_whose_scale_is_a_ratio_of_sizes_matches_the_cpu(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, policy: str) -> None:
    # Nearest interpolation to a fixed size scales indices by in/out: a float computed from
    # a symbolic size, which must not be truncated to an int; a scale factor decomposes
    # through prims.convert_element_type and true_divide. Such a float is a constant of a
    # program at exact sizes: the plan says so (it tried a padded program, which failed to
    # lower, and warned).
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", policy)
    torch._dynamo.reset()
    caplog.set_level("INFO", logger="torchtpu.compile")

    def to_size(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x.unsqueeze(0), size=(5, 7), mode="nearest")

    def by_factor(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x.unsqueeze(0), scale_factor=2.0, mode="nearest")

    for f in (to_size, by_factor):
        compiled = torch.compile(f, backend="tpu", dynamic=True)
        for shape in [(3, 4, 5), (2, 6, 6), (3, 7, 3)]:
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x))
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert (policy == "auto") == ("a float computed from sizes" in caplog.text)


def test_symbolic_slice_steps_and_effect_tokens_compile_dynamic() -> None:
    # A step passed as an argument is a SymInt under dynamic=True: the bucket rules read
    # it as a number (TypeError); it now keeps its graph at exact sizes. linalg ops add an
    # effect token, a placeholder that is None at run time, which size binding read.
    torch._dynamo.reset()
    x, src = torch.randn(20, 4), torch.randn(5, 4)
    scatter = torch.compile(lambda x, s, a, st: torch.slice_scatter(x, s, 0, a, 20, st),
                            backend="tpu", dynamic=True)
    for a in (10, 11):
        got = scatter(x.to("tpu"), src.to("tpu"), a, 2).cpu()
        assert torch.equal(got, torch.slice_scatter(x, src, 0, a, 20, 2))
    every = torch.compile(lambda x, st: x[1::st] * 2, backend="tpu", dynamic=True)
    for st in (2, 3):
        assert torch.equal(every(x.to("tpu"), st).cpu(), x[1::st] * 2)
    a = torch.randn(3, 3) + 3 * torch.eye(3)
    inv = torch.compile(torch.linalg.inv, backend="tpu", dynamic=True)
    torch.testing.assert_close(inv(a.to("tpu")).cpu(), torch.linalg.inv(a), atol=1e-5, rtol=1e-5)
    b = torch.randn(4, 4) + 4 * torch.eye(4)
    torch.testing.assert_close(inv(b.to("tpu")).cpu(), torch.linalg.inv(b), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_bool_mask_over_leading_dims_puts_like_eager(dynamic: bool) -> None:
    # y[mask] = v with a mask over the first dims only (padding positions of [B, T, D]
    # activations): compiled graphs refused the bool index ("index tensors must be
    # integer"); a value the same for every selected position is a where over the mask.
    torch._dynamo.reset()

    def put(x, m, v, rows):
        y = x.clone()
        y[m] = v
        y[:, rows] = 0.5
        return torch.index_put(y, (m,), v, accumulate=True)

    f = torch.compile(put, backend="tpu", dynamic=dynamic)
    for t in (6, 9):
        x, v = torch.randn(3, t, 4), torch.randn(4)
        m, rows = torch.rand(3, t) > 0.5, torch.rand(t) > 0.5
        got = f(x.to("tpu"), m.to("tpu"), v.to("tpu"), rows.to("tpu")).cpu()
        torch.testing.assert_close(got, put(x, m, v, rows))


GATHERS = {
    "x[:, idx]": (lambda x, i: x[:, i] * 2,
                  lambda n: (torch.randn(n, 7, 3), torch.randint(0, 7, (n + 2,)))),
    "x[:, :, idx]": (lambda x, i: x[:, :, i].sin(),
                     lambda n: (torch.randn(2, n, 6), torch.randint(0, 6, (n,)))),
    "x[i, :, j]": (lambda x, i, j: x[i, :, j].sin(),
                   lambda n: (torch.randn(4, n, 6), torch.randint(0, 4, (n,)),
                              torch.randint(0, 6, (n,)))),
    "index_select(1)": (lambda x, i: x.index_select(1, i).sin(),
                        lambda n: (torch.randn(n, 7), torch.randint(0, 7, (n,)))),
    "interpolate nearest": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest").sin(),
                            lambda n: (torch.randn(1, 2, n),)),
    "interpolate linear": (lambda x: F.interpolate(x, scale_factor=2, mode="linear").sin(),
                           lambda n: (torch.randn(1, 2, n),)),
}


@pytest.mark.parametrize("name", list(GATHERS))
def test_gradients_of_indexing_along_later_dims_match_cpu(name: str) -> None:
    # Their backward graphs accumulate the gradient with index_put over [None, idx] (or
    # [i, None, j]): the bucket rule laid the values out as if the index were at dim 0
    # ("expand: the requested shape has too few dimensions" at compile time).
    torch._dynamo.reset()
    f, make = GATHERS[name]
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for n in (5, 9, 13):
        args = make(n)
        cpu = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
        dev = [a.to("tpu").requires_grad_(a.is_floating_point()) for a in args]
        out, ref = compiled(*dev), f(*cpu)
        out.backward(torch.ones_like(out))
        ref.backward(torch.ones_like(ref))
        torch.testing.assert_close(out.cpu(), ref.detach())
        for d, c in zip(dev, cpu):
            if c.grad is not None:
                torch.testing.assert_close(d.grad.cpu(), c.grad, msg=lambda m, n=n: f"{n}: {m}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("dynamic", ["mark", "all"])
def test_half_precision_linear_backward_with_a_dynamic_batch_matches_cpu(
        dtype: torch.dtype, dynamic: str) -> None:
    # The padded backward's weight gradient is a bf16 x bf16 = f32 product over masked
    # operands, which XLA's CPU runtime ran to zeros or garbage (NaN, 1e38) without an
    # error, or refused ("DotThunk: BF16 x BF16 = F32"): CPU plugins widen the operands.
    torch._dynamo.reset()
    torch.manual_seed(0)
    lin = torch.nn.Linear(12, 32).to(dtype)
    lin_t = torch.nn.Linear(12, 32).to(dtype).to("tpu")
    lin_t.load_state_dict(lin.state_dict())
    compiled = torch.compile(lin_t, backend="tpu", dynamic=True if dynamic == "all" else None)
    for n in (5, 7, 20):
        x = torch.randn(n, 12, dtype=dtype)
        xt = x.to("tpu")
        if dynamic == "mark":
            torch._dynamo.mark_dynamic(xt, 0)
        lin.zero_grad()
        lin_t.zero_grad()
        compiled(xt).float().square().mean().backward()
        lin(x).float().square().mean().backward()
        for p, q in ((lin_t.weight, lin.weight), (lin_t.bias, lin.bias)):
            torch.testing.assert_close(p.grad.cpu(), q.grad, atol=2e-2, rtol=2e-2)


def test_integer_division_checks_only_true_divisors() -> None:
    # Padded divisors are zeros: the ZeroDivisionError check read them and failed every
    # integer //, %, fmod and rounding div under dynamic shapes.
    torch._dynamo.reset()

    def f(a, b):
        return (a // b, a % b, torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc"),
                torch.div(a, b, rounding_mode="floor"))

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for n in (5, 9, 13):
        a = torch.randint(-50, 50, (n,))
        b = torch.randint(1, 7, (n,)) * (torch.randint(0, 2, (n,)) * 2 - 1)
        for got, want in zip(compiled(a.to("tpu"), b.to("tpu")), f(a, b)):
            assert torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(torch.arange(6).to("tpu"), torch.tensor([1, 2, 0, 1, 1, 1]).to("tpu"))[0].cpu()


@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin", "mean"])
def test_scatter_reduce_without_self_keeps_unwritten_positions(reduce: str) -> None:
    # Padded index entries land on position 0 with the reduction's identity: harmless when
    # self takes part, but with include_self=False position 0 counted as written.
    torch._dynamo.reset()

    def f(x, i, s):
        return x.scatter_reduce(0, i, s, reduce, include_self=False)

    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for n in (5, 9):
        x = torch.full((6,), 5.0)
        i, s = torch.randint(1, 6, (n,)), torch.randn(n)
        torch.testing.assert_close(compiled(x.to("tpu"), i.to("tpu"), s.to("tpu")).cpu(),
                                   f(x, i, s))


def test_programs_per_exact_size_warn_past_the_recompile_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With buckets off each new size compiles one more program of the same graph: past
    # TORCHTPU_RECOMPILE_LIMIT a warning says so, once.
    monkeypatch.setenv("TORCHTPU_SHAPE_BUCKETS", "off")
    monkeypatch.setenv("TORCHTPU_RECOMPILE_LIMIT", "2")
    torch._dynamo.reset()
    f = torch.compile(lambda x: (x * 2).sum(0), backend="tpu", dynamic=True)
    with pytest.warns(UserWarning, match=r"compiled 3 programs, one per exact size \(limit 2; "
                      r"TORCHTPU_SHAPE_BUCKETS=off\)") as record:
        for n in (3, 5, 17, 20):
            x = torch.randn(n, 2)
            torch.testing.assert_close(f(x.to("tpu")).cpu(), (x * 2).sum(0))
    assert sum("one per exact size" in str(w.message) for w in record) == 1


def test_a_recompile_limit_of_zero_warns_at_the_first_compile(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHTPU_RECOMPILE_LIMIT", "0")
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match=r"has compiled 1 graphs \(limit 0\)"):
        out = torch.compile(lambda x: x * 2, backend="tpu")(torch.ones(2, device="tpu"))
    assert out.cpu().tolist() == [2.0, 2.0]
    torch._dynamo.reset()


def test_an_unwritable_dump_dir_is_reported_and_the_compile_goes_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path, caplog) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("TORCHTPU_DUMP_DIR", str(blocked / "dumps"))
    torch._dynamo.reset()
    with caplog.at_level("WARNING"):
        out = torch.compile(lambda x: x - 1, backend="tpu")(torch.ones(2, device="tpu"))
    assert out.cpu().tolist() == [0.0, 0.0]
    assert "(TORCHTPU_DUMP_DIR)" in caplog.text
    torch._dynamo.reset()


def test_a_malformed_recompile_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHTPU_RECOMPILE_LIMIT", "abc")
    torch._dynamo.reset()
    with pytest.raises(Exception, match="TORCHTPU_RECOMPILE_LIMIT='abc': expected a whole number"):
        torch.compile(lambda x: x + 1, backend="tpu")(torch.ones(2, device="tpu"))
    torch._dynamo.reset()
