"""Ops without a lowering run on the CPU, are counted and warned once; or are errors on request.

The fallback op is ``aten::segment_reduce`` (``torch.segment_reduce``, sums of segments of
the rows): chosen because it has no lowering (the first test checks
that against ``torchtpu._C.lowered_ops()``, so a future lowering makes this file pick again
rather than silently test nothing).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import torchtpu

FALLBACK_OP = "aten::segment_reduce"
TPU = "tpu"
PYTHON_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))


def segment_sums(t: torch.Tensor) -> torch.Tensor:
    """Sums of the first 2 and the last 4 rows of `t` (6 rows)."""
    return torch.segment_reduce(t, "sum", lengths=torch.tensor([2, 4], device=t.device))


def test_op_has_no_lowering() -> None:
    lowered = set(torchtpu._C.lowered_ops())
    assert FALLBACK_OP not in lowered, f"{FALLBACK_OP} is lowered now; pick another op"
    assert "aten::_segment_reduce_backward" not in lowered
    assert "aten::add.Tensor" in lowered


def test_lowered_op_names_are_real_overloads() -> None:
    # A lowering registered under a name that is not an op overload is never found by the
    # dispatcher: the op it meant to lower silently falls back to the CPU. Our own ops
    # (torchtpu::, defined in torchtpu.ops) and the functional collectives compiled graphs
    # carry (_c10d_functional::), and prims:: ops decompositions emit, are held to the same
    # rule. Those ops are registered once the compile backend is loaded (prims.fma by
    # torch._decomp, torchtpu::rng_state by torchtpu.dynamo): loaded here, so the check does
    # not depend on which test ran first.
    import torchtpu.dynamo  # noqa: F401

    bad = []
    for name in torchtpu._C.lowered_ops():
        namespace, _, op = name.partition("::")
        assert namespace in ("aten", "prims", "torchtpu", "_c10d_functional"), name
        base, _, overload = op.partition(".")
        packet = getattr(getattr(torch.ops, namespace), base, None)
        if packet is None or overload and not hasattr(packet, overload):
            bad.append(name)
    assert not bad, f"lowerings registered under names that are not op overloads: {bad}"


def test_fallback_runs_counts_and_matches_cpu() -> None:
    x = torch.randn(6, 4)
    before = torchtpu.debug.metrics()["fallback_ops"].get(FALLBACK_OP, 0)
    sums = segment_sums(x.to(TPU))
    after = torchtpu.debug.metrics()["fallback_ops"].get(FALLBACK_OP, 0)
    assert after == before + 1
    assert sums.device.type == TPU
    torch.testing.assert_close(sums.cpu(), segment_sums(x))
    assert FALLBACK_OP in torchtpu.debug.report()


def test_lowered_op_does_not_fall_back() -> None:
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    (torch.ones(3, device=TPU) + 1).cpu()
    assert torchtpu.debug.metrics()["fallback_ops"] == before


def test_a_call_the_cpu_kernel_refuses_is_not_a_fallback() -> None:
    # A call whose meta kernel refused it runs on the CPU for PyTorch's own error; it
    # computed nothing there, so no warning and no count.
    before = dict(torchtpu.debug.metrics()["fallback_ops"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
            torch.zeros(3, device=TPU).add_(torch.ones(4, 3, device=TPU))
    assert torchtpu.debug.metrics()["fallback_ops"] == before


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("TORCHTPU_FALLBACK", None)
    full_env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env)
    return subprocess.run([sys.executable, "-W", "default", "-c", textwrap.dedent(code)],
                          env=full_env, capture_output=True, text=True, timeout=120)


def test_fallback_warns_once_per_op() -> None:
    # A fresh process, so that no earlier test has already triggered the warning.
    r = run_python(
        f"""
        import warnings, torch, torchtpu
        x = torch.randn(6, 4, device="tpu")
        lengths = torch.tensor([2, 4], device="tpu")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(3):
                torch.segment_reduce(x, "sum", lengths=lengths)
        msgs = [str(m.message) for m in w if "{FALLBACK_OP}" in str(m.message)]
        assert len(msgs) == 1, msgs
        assert "CPU" in msgs[0], msgs[0]
        assert torchtpu.debug.metrics()["fallback_ops"]["{FALLBACK_OP}"] == 3
        print("OK")
        """)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]


def test_fallback_error_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(6, 4, device=TPU)
    monkeypatch.setenv("TORCHTPU_FALLBACK", "error")
    before = torchtpu.debug.metrics()["fallback_ops"].get(FALLBACK_OP, 0)
    with pytest.raises(NotImplementedError, match=FALLBACK_OP):
        segment_sums(x)
    assert torchtpu.debug.metrics()["fallback_ops"].get(FALLBACK_OP, 0) == before
    # Lowered ops still run.
    assert (x + 1).sum().item() == pytest.approx(x.cpu().sum().item() + 24, rel=1e-5)


def test_an_op_with_no_lowering_and_no_cpu_kernel_says_so() -> None:
    # A CUDA-only op: PyTorch's fallback would blame "the 'CPU' backend" for tensors on tpu.
    with pytest.raises(NotImplementedError, match="cudnn_affine_grid_generator cannot run on "
                       "tpu.*no CPU kernel"):
        torch.cudnn_affine_grid_generator(torch.randn(1, 2, 3, device="tpu"), 1, 1, 2, 2)


def test_an_unknown_fallback_policy_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # At import, before any work: not hours into a job, at its first fallback.
    r = run_python("import torchtpu", TORCHTPU_FALLBACK="bogus")
    assert r.returncode != 0
    assert "TORCHTPU_FALLBACK='bogus' is not a fallback policy" in r.stderr
    x = torch.randn(6, 4, device=TPU)
    monkeypatch.setenv("TORCHTPU_FALLBACK", "bogus")  # set after import: at the fallback
    with pytest.raises(RuntimeError, match="TORCHTPU_FALLBACK='bogus' is not a fallback policy"):
        segment_sums(x)


def test_fallback_error_mode_in_fresh_process() -> None:
    r = run_python(
        """
        import torch, torchtpu
        x = torch.randn(6, 4, device="tpu")
        try:
            torch.segment_reduce(x, "sum", lengths=torch.tensor([2, 4], device="tpu"))
        except NotImplementedError as e:
            assert "aten::segment_reduce" in str(e), e
            print("OK")
        """,
        TORCHTPU_FALLBACK="error")
    assert r.returncode == 0 and "OK" in r.stdout, (r.stdout, r.stderr[-3000:])


def test_fallback_inplace_op_writes_tpu_tensor() -> None:
    # An in-place op without a lowering must write its result back into the tpu tensor.
    assert "aten::mvlgamma.out" not in set(torchtpu._C.lowered_ops())
    a = torch.rand(5) + 1.0
    out = torch.empty(5, device=TPU)
    torch.mvlgamma(a.to(TPU), 2, out=out)
    torch.testing.assert_close(out.cpu(), torch.mvlgamma(a, 2))


# In-place ops, least likely first to gain a lowering; the test uses the first whose
# in-place, functional and out= overloads have none. (Structured in-place ops reach the
# backend as their out= overload, e.g. mvlgamma_ -> aten::mvlgamma.out, so any of them may
# be counted.) Inputs are in (1, 1.9): mvlgamma of order 2 takes values above 0.5.
INPLACE_CANDIDATES = {
    "aten::mvlgamma": lambda t: t.mvlgamma_(2),
}


def fallbacks_of(base: str) -> int:
    counts = torchtpu.debug.metrics()["fallback_ops"]
    return sum(n for op, n in counts.items()
               if op in (base, base + "_") or op.startswith((base + ".", base + "_.")))


def test_fallback_inplace_op_on_view_writes_base() -> None:
    lowered = set(torchtpu._C.lowered_ops())
    name, fn = next(((n, f) for n, f in INPLACE_CANDIDATES.items()
                     if not {n, n + "_", n + ".out"} & lowered), (None, None))
    assert name is not None, f"all of {list(INPLACE_CANDIDATES)} are lowered; add a candidate"
    x = torch.rand(4, 5) * 0.9 + 1.0
    expected = x.clone()
    fn(expected[:, 1::2])
    t = x.to(TPU)
    before = fallbacks_of(name)
    fn(t[:, 1::2])
    assert fallbacks_of(name) == before + 1
    torch.testing.assert_close(t.cpu(), expected, rtol=1e-5, atol=1e-6)
