"""The eager overhead benchmark runs end to end, and its record joins the trend file.

``bench/eager_overhead.py --quick --json`` appends one JSON record per run to
``$TORCHTPU_BENCH_TREND`` (default ``build/bench/eager_overhead.jsonl`` in the checkout),
so the test suite keeps a history of the small-op latency, its breakdown and its counts.
Times are not asserted (they depend on the machine's load); the record's shape is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from _subprocess import REPO_PYTHON

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_eager_overhead_bench_appends_a_trend_record() -> None:
    trend = os.environ.get("TORCHTPU_BENCH_TREND",
                           os.path.join(ROOT, "build", "bench", "eager_overhead.jsonl"))
    before = 0
    if os.path.exists(trend):
        with open(trend) as f:
            before = sum(1 for _ in f)
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_PYTHON + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "eager_overhead.py"),
                           "--quick", "--json", trend], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "add 64x64" in proc.stdout and "dispatch" in proc.stdout
    with open(trend) as f:
        lines = f.read().splitlines()
    assert len(lines) == before + 1
    record = json.loads(lines[-1])
    assert record["bench"] == "eager_overhead"
    assert {(c["case"], c["mode"]) for c in record["cases"]} == {
        (case, mode) for case in ("add 64x64", "matmul 1024x1024") for mode in ("op", "fused")}
    for c in record["cases"]:
        assert c["cpu_us"] > 0 and c["tpu_us"] > 0
    assert set(record["breakdown_us"]) >= {"dispatch", "key", "bind", "execute", "complete",
                                           "wait"}
    assert record["counts_per_op"]["executions"] == 1
