"""torch.compile(backend="tpu"): compiled == eager == CPU, caches, recompilation accounting."""

from __future__ import annotations

import copy
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torchtpu

torch._dynamo.config.cache_size_limit = 64


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)
    )


def _fresh() -> None:
    torch._dynamo.reset()


def test_compiled_mlp_forward_backward_matches_eager_and_cpu() -> None:
    _fresh()
    cpu = _mlp()
    eager = copy.deepcopy(cpu).to("tpu")
    compiled_model = copy.deepcopy(cpu).to("tpu")
    compiled = torch.compile(compiled_model, backend="tpu")
    x = torch.randn(8, 16)
    y = torch.randint(0, 4, (8,))
    losses = []
    for model, dev in ((cpu, "cpu"), (eager, "tpu"), (compiled, "tpu")):
        loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
        loss.backward()
        losses.append(loss.item())
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert losses[2] == pytest.approx(losses[0], rel=1e-5)
    for p_cpu, p_eager, p_comp in zip(cpu.parameters(), eager.parameters(),
                                      compiled_model.parameters()):
        torch.testing.assert_close(p_comp.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(p_comp.grad.cpu(), p_eager.grad.cpu(), rtol=1e-4, atol=1e-5)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] >= 2  # forward and backward


def test_compiled_training_loop_matches_eager() -> None:
    _fresh()
    x = torch.randn(32, 16)
    y = torch.randint(0, 4, (32,))
    runs = {}
    for mode in ("eager", "compiled"):
        model = _mlp().to("tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        step_model = torch.compile(model, backend="tpu") if mode == "compiled" else model
        losses = []
        for _ in range(10):
            opt.zero_grad()
            loss = F.cross_entropy(step_model(x.to("tpu")), y.to("tpu"))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs[mode] = losses
    assert runs["compiled"] == pytest.approx(runs["eager"], rel=1e-4)
    assert runs["compiled"][-1] < runs["compiled"][0]


def test_scalar_data_is_a_runtime_input() -> None:
    # Two graphs that differ only in a constant lower to the same module text (the
    # constant is a runtime parameter), so the second one compiles nothing.
    _fresh()
    x = torch.randn(4, device="tpu")
    a = torch.compile(lambda t: t * 2.5 + 1, backend="tpu")(x)
    before = torchtpu.debug.metrics()
    b = torch.compile(lambda t: t * 3.5 + 1, backend="tpu")(x)
    after = torchtpu.debug.metrics()
    torch.testing.assert_close(a.cpu(), x.cpu() * 2.5 + 1)
    torch.testing.assert_close(b.cpu(), x.cpu() * 3.5 + 1)
    assert after.get("num_compiles", 0) == before.get("num_compiles", 0)
    assert after["num_graphs_compiled"] == before["num_graphs_compiled"] + 1
    hits = after.get("num_compile_cache_hits_memory", 0) - before.get(
        "num_compile_cache_hits_memory", 0)
    assert hits >= 1


def test_recompilation_is_counted_with_its_reason() -> None:
    _fresh()

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    compiled = torch.compile(f, backend="tpu", dynamic=False)
    compiled(torch.randn(4, device="tpu"))
    compiled(torch.randn(5, device="tpu"))
    m = torchtpu.debug.metrics()
    assert m["num_recompiles"] >= 1
    assert any("[4]" in r and "[5]" in r for r in m["recompile_reasons"]), m["recompile_reasons"]
    assert "recompilations" in torchtpu.debug.report()


_SCALE_BY_TWO = True


def test_recompilation_on_other_state_names_dynamos_failed_guard() -> None:
    # Same inputs, but a global the graph read changed: the reason is Dynamo's guard.
    global _SCALE_BY_TWO
    _fresh()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 if _SCALE_BY_TWO else x * 3

    compiled = torch.compile(f, backend="tpu", dynamic=False)
    x = torch.randn(4, device="tpu")
    try:
        compiled(x)
        _SCALE_BY_TWO = False
        torch.testing.assert_close(compiled(x).cpu(), x.cpu() * 3)
    finally:
        _SCALE_BY_TWO = True
    reasons = torchtpu.debug.metrics()["recompile_reasons"]
    assert any("same inputs; Dynamo's failed guard:" in r and "_SCALE_BY_TWO" in r
               for r in reasons), reasons


def test_a_new_frame_after_dynamo_reset_is_not_a_recompilation() -> None:
    # Dynamo numbers frames from 0 again after a reset: the new frame 0 is no recompile of
    # the old one.
    _fresh()
    torch.compile(lambda x: x + 1, backend="tpu")(torch.randn(4, device="tpu"))
    torch._dynamo.reset()
    before = torchtpu.debug.metrics()["num_recompiles"]
    torch.compile(lambda x, y: x * y, backend="tpu")(torch.randn(3, device="tpu"),
                                                      torch.randn(3, device="tpu"))
    assert torchtpu.debug.metrics()["num_recompiles"] == before


def test_graph_breaks_are_counted_and_reported() -> None:
    _fresh()

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2

    out = torch.compile(f, backend="tpu")(torch.ones(3, device="tpu"))
    torch.testing.assert_close(out.cpu(), torch.full((3,), 4.0))
    m = torchtpu.debug.metrics()
    assert m["num_graph_breaks"] >= 1
    assert "graph breaks" in torchtpu.debug.report()


def test_dump_dir_writes_each_module(tmp_path: pathlib.Path) -> None:
    script = textwrap.dedent(
        """
        import torch, torchtpu
        f = torch.compile(lambda x: torch.relu(x) + 3, backend="tpu")
        f(torch.randn(6, device="tpu"))
        """
    )
    env = dict(os.environ, TORCHTPU_DUMP_DIR=str(tmp_path), TORCHTPU_CACHE_DIR=str(tmp_path / "c"))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    modules = list(tmp_path.glob("module_*.mlir"))
    assert modules, list(tmp_path.iterdir())
    assert any("func.func public @main" in p.read_text() for p in modules)
    assert list(tmp_path.glob("graph_*.fx.txt"))


_SECOND_PROCESS = textwrap.dedent(
    """
    import json, torch, torchtpu
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    model = model.to("tpu")
    torchtpu.debug.reset_metrics()
    out = torch.compile(model, backend="tpu")(torch.ones(8, 16, device="tpu"))
    out.sum().backward()
    m = torchtpu.debug.metrics()
    print(json.dumps({k: m.get(k, 0) for k in
          ("num_compiles", "num_compile_cache_hits_disk", "num_disk_cache_corrupt")}),
          float(out.sum().item()))
    """
)


def _run_model_process(cache: pathlib.Path) -> tuple[dict, float]:
    import json

    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-c", _SECOND_PROCESS], env=env, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    line = r.stdout.strip().splitlines()[-1]
    stats, value = line.rsplit(" ", 1)
    return json.loads(stats), float(value)


def test_second_process_compiles_nothing(tmp_path: pathlib.Path) -> None:
    first, v1 = _run_model_process(tmp_path)
    assert first["num_compiles"] > 0
    second, v2 = _run_model_process(tmp_path)
    assert second["num_compiles"] == 0, second
    assert second["num_compile_cache_hits_disk"] >= first["num_compiles"] - 1
    assert v2 == v1


def test_corrupted_cache_file_is_recovered(tmp_path: pathlib.Path) -> None:
    first, v1 = _run_model_process(tmp_path)
    entries = sorted(tmp_path.rglob("*.pjrtexe"))
    assert entries
    for e in entries:
        data = bytearray(e.read_bytes())
        data[len(data) // 2] ^= 0xFF
        e.write_bytes(bytes(data))
    second, v2 = _run_model_process(tmp_path)
    assert second["num_disk_cache_corrupt"] == len(entries), second
    assert second["num_compiles"] == len(entries)
    assert v2 == v1
    third, _ = _run_model_process(tmp_path)
    assert third["num_compiles"] == 0 and third["num_disk_cache_corrupt"] == 0


def test_mutated_input_is_updated_in_place_through_donation() -> None:
    def write_rows(cache: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        cache.index_copy_(0, rows, values)
        return cache.sum(0)

    compiled = torch.compile(write_rows, backend="tpu", dynamic=False)
    cache_cpu = torch.randn(64, 8)
    cache = cache_cpu.to("tpu")
    view = cache[3:5]  # a view of the same storage sees every update
    before = torchtpu.debug.metrics().get("num_donated_inputs", 0)
    for step in range(3):
        rows = torch.tensor([step, 10 + step])
        values = torch.randn(2, 8)
        expected_sum = write_rows(cache_cpu, rows, values)
        got_sum = compiled(cache, rows.to("tpu"), values.to("tpu"))
        torch.testing.assert_close(got_sum.cpu(), expected_sum)
        torch.testing.assert_close(cache.cpu(), cache_cpu)
        torch.testing.assert_close(view.cpu(), cache_cpu[3:5])
    assert torchtpu.debug.metrics()["num_donated_inputs"] - before == 3


def test_mutated_input_shared_with_a_live_output_is_not_donated() -> None:
    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1.0)
        return x * 2

    compiled = torch.compile(bump, backend="tpu", dynamic=False)
    x = torch.zeros(4, device="tpu")
    y = compiled(x)
    z = compiled(x)  # x's buffer is the one the first call wrote back
    torch.testing.assert_close(x.cpu(), torch.full((4,), 2.0))
    torch.testing.assert_close(y.cpu(), torch.full((4,), 2.0))
    torch.testing.assert_close(z.cpu(), torch.full((4,), 4.0))


def test_checkpointed_batch_norm_trains_like_aot_eager_on_the_cpu() -> None:
    # The running statistics are mutated by the forward and the checkpointed block is
    # recomputed in the backward from the same buffers: the mutation stays in the graph
    # (as Inductor and aot_eager compile it), so the buffers saved for the backward are
    # the ones it wrote. PyTorch's compiled semantics: statistics updated once per step
    # (eager checkpointing updates them again when it recomputes).
    from torch.utils.checkpoint import checkpoint

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(lambda t: torch.relu(self.bn(self.conv(t))), x,
                              use_reentrant=False).sum()

    torch.manual_seed(0)
    ref = Block()
    model = copy.deepcopy(ref).to("tpu")
    ref_step = torch.compile(ref, backend="aot_eager")
    step = torch.compile(model, backend="tpu")
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8)
        expected = ref_step(x)
        expected.backward()
        got = step(x.to("tpu"))
        got.backward()
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-4)
    for name, buf in ref.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name].cpu(), buf)
    for name, p in ref.named_parameters():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad.cpu(), p.grad,
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dynamic", [False, True])
def test_dropout_recomputed_by_checkpointing_replays_its_forward_draws(dynamic: bool) -> None:
    # AOTAutograd wraps a random op that the backward recomputes in
    # run_and_save_rng_state / run_with_rng_state (the graph was refused): the backward
    # must draw the forward's mask, so the bias gradient is the kept positions' upstream.
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 32).to("tpu")

    def f(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = checkpoint(lambda t: F.dropout(torch.relu(lin(t)), 0.5, training=True), x,
                       use_reentrant=False)
        return y, (y * g).sum()

    step = torch.compile(f, backend="tpu", dynamic=dynamic)
    masks = []
    for n in (8, 5, 11) if dynamic else (8, 8):
        x, g = torch.randn(n, 32, device="tpu"), torch.randn(n, 32, device="tpu")
        lin.zero_grad()
        y, loss = step(x, g)
        loss.backward()
        kept = (y != 0).cpu()
        torch.testing.assert_close(lin.bias.grad.cpu(), (g.cpu() * kept * 2).sum(0))
        masks.append(kept)
    assert not torch.equal(masks[0][:5], masks[1][:5])  # each call draws anew
