"""``torch.compile(backend="tpu")`` takes ``mode=`` and ``options=`` as PyTorch's own
backends do: valid names are accepted (and ignored, with a debug log), unknown ones raise
with the valid names, and the compiled results are those of the default mode."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

import torchtpu  # noqa: F401


def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w).sum(-1)


@pytest.fixture()
def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 8), torch.randn(8, 3)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_modes_accepted(mode: str, inputs, caplog) -> None:
    torch._dynamo.reset()
    x, w = inputs
    compiled = torch.compile(fn, backend="tpu", mode=mode)
    with caplog.at_level(logging.DEBUG, logger="torchtpu.compile"):
        got = compiled(x.to("tpu"), w.to("tpu"))
    torch.testing.assert_close(got.cpu(), fn(x, w), rtol=1e-5, atol=1e-5)
    if mode != "default":
        assert any(mode in r.getMessage() for r in caplog.records)


def test_options_accepted_and_logged(inputs, caplog) -> None:
    torch._dynamo.reset()
    x, w = inputs
    compiled = torch.compile(fn, backend="tpu",
                             options={"max_autotune": True, "epilogue_fusion": False})
    with caplog.at_level(logging.DEBUG, logger="torchtpu.compile"):
        got = compiled(x.to("tpu"), w.to("tpu"))
    torch.testing.assert_close(got.cpu(), fn(x, w), rtol=1e-5, atol=1e-5)
    assert any("max_autotune" in r.getMessage() and "ignored" in r.getMessage()
               for r in caplog.records)


def test_unknown_mode_raises_with_valid_names(inputs) -> None:
    torch._dynamo.reset()
    x, w = inputs
    with pytest.raises(Exception, match="max-autotune") as e:
        torch.compile(fn, backend="tpu", mode="fastest")(x.to("tpu"), w.to("tpu"))
    assert "fastest" in str(e.value)


def test_unknown_option_raises(inputs) -> None:
    torch._dynamo.reset()
    x, w = inputs
    with pytest.raises(Exception, match="not_an_option"):
        torch.compile(fn, backend="tpu", options={"not_an_option": 1})(x.to("tpu"), w.to("tpu"))


def test_mode_and_options_together_rejected_by_pytorch() -> None:
    with pytest.raises(RuntimeError, match="Either mode or options"):
        torch.compile(fn, backend="tpu", mode="max-autotune", options={"max_autotune": True})


def test_default_backend_compiles_tpu_graphs_with_the_tpu_backend() -> None:
    # torch.compile(model) with no backend is Inductor, whose "tpu" device is another
    # project's Pallas generator ("No module named 'torch_tpu'" once a graph had a pointwise
    # op): graphs on tpu go to the tpu backend; a training step compares with the CPU.
    from torchtpu._default_compile import _on_tpu

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))
    ref = copy.deepcopy(model)
    x = torch.randn(5, 8)
    on_tpu = model.to("tpu")
    before = torchtpu.debug.metrics().get("num_graphs_compiled", 0)
    compiled = torch.compile(on_tpu, mode="max-autotune")
    out = compiled(x.to("tpu"))
    out.square().sum().backward()
    ref(x).square().sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref(x).detach(), rtol=1e-5, atol=1e-5)
    for p, q in zip(on_tpu.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5)
    assert torchtpu.debug.metrics()["num_graphs_compiled"] > before  # the tpu backend's graphs
    f = torch.compile(lambda a: torch.relu(a) * 2 + 1)
    torch.testing.assert_close(f(x.to("tpu")).cpu(), torch.relu(x) * 2 + 1)
    made = torch.compile(lambda n: torch.ones(3, device="tpu") * n)  # no tensor input
    torch.testing.assert_close(made(2.5).cpu(), torch.full((3,), 2.5))
    # Graphs on the CPU stay Inductor's.
    assert not _on_tpu(torch.nn.Linear(2, 2), [torch.ones(2)])
    assert _on_tpu(torch.nn.Linear(2, 2).to("tpu"), [torch.ones(2)])
