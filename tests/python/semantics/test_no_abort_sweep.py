"""Every lowering family over dtypes and mismatched ranks: no abort, no wrong value, no
internal lowering error (``_sweep.py`` beside this file, run in a subprocess so that an
abort is a failed test and not a dead test run)."""

from __future__ import annotations

import os

from _subprocess import run_python

SWEEP = os.path.join(os.path.dirname(__file__), "_sweep.py")


def test_lowering_sweep_agrees_with_cpu_and_never_aborts() -> None:
    with open(SWEEP) as f:
        r = run_python(f.read(), timeout=900)
    assert r.returncode == 0, f"the sweep died (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    mismatches = [line for line in r.stdout.splitlines() if line.startswith("MISMATCH")]
    assert not mismatches, "\n".join(mismatches)
    assert "lowering_errors {}" in r.stdout, r.stdout[-2000:]
    assert "cases " in r.stdout
