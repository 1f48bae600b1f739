"""Every lowering family over dtypes and mismatched ranks: no abort, no wrong value, no
internal lowering error (``_sweep.py`` beside this file, run in subprocesses so that an
abort is a failed test and not a dead test run)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from _subprocess import run_python

SWEEP = os.path.join(os.path.dirname(__file__), "_sweep.py")
# The cases split round-robin over this many processes, run at once (the sweep is one
# process's compiles; the shards use the other cores). Together they run every case.
SHARDS = 2


def test_lowering_sweep_agrees_with_cpu_and_never_aborts() -> None:
    with open(SWEEP) as f:
        code = f.read()
    with ThreadPoolExecutor(SHARDS) as pool:
        runs = list(pool.map(lambda k: run_python(code, timeout=900, SWEEP_SHARD=f"{k}/{SHARDS}"),
                             range(SHARDS)))
    for k, r in enumerate(runs):
        assert r.returncode == 0, (f"sweep shard {k}/{SHARDS} died (rc {r.returncode}):\n"
                                   f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        mismatches = [line for line in r.stdout.splitlines() if line.startswith("MISMATCH")]
        assert not mismatches, "\n".join(mismatches)
        assert "lowering_errors {}" in r.stdout, r.stdout[-2000:]
        assert "cases " in r.stdout
