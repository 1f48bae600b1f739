"""Per-op work of the eager dispatch path against a recorded budget: counts, not times.

Times on a shared machine swing by 2-10x; the work an op does on the dispatching thread does
not. For a handful of representative eager ops this counts, per call in steady state
(signature cached): PJRT calls, program executions, device buffers created, and heap
allocations made by the calling thread (a small allocation counter preloaded into a child
process; glibc only), the least of three rounds of 50 calls. Each must stay within ``dispatch_budget.json``. A change that makes
an op do more fails here and says which count grew; a change that makes it do less should
lower the budget: ``TORCHTPU_RECORD_DISPATCH_BUDGET=1 pytest tests/python/perf`` rewrites
the file from the measurements.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys

import pytest
from _subprocess import REPO_PYTHON

HERE = os.path.dirname(os.path.abspath(__file__))
BUDGET = os.path.join(HERE, "dispatch_budget.json")

MEASURE = r"""
import ctypes, json, sys
import torch, torchtpu

counter = ctypes.CDLL(sys.argv[1])
counter.alloc_counter_stop.restype = ctypes.c_long
C = torchtpu._C
a = torch.randn(64, 64, device="tpu")
b = torch.randn(64, 64, device="tpu")
target = torch.randn(64, 64, device="tpu")
index = torch.arange(0, 64, 2, device="tpu")
cases = {
    "add": lambda: torch.add(a, b),
    "add_inplace": lambda: target.add_(b),
    "mul_python_scalar": lambda: a * 2.5,
    "matmul": lambda: a @ b,
    "sum_dim": lambda: a.sum(1),
    "relu": lambda: torch.relu(a),
    "slice_mul": lambda: a[1:].mul(b[1:]),
    "index_select": lambda: a.index_select(0, index),
}
n = 50
out = {}
for name, fn in cases.items():
    for _ in range(5):
        fn()
    # The least of three rounds: a wait that found the device busy on a loaded machine may
    # allocate now and then (a sleeping waiter), which is not the op's dispatch work.
    rounds = []
    for _ in range(3):
        torchtpu.synchronize()
        pjrt = C.pjrt_calls_on_this_thread()
        executions = C.counters().get("num_executions", 0)
        buffers = C.memory_stats(0)["num_device_alloc"]
        counter.alloc_counter_start()
        for _ in range(n):
            fn()
        heap = counter.alloc_counter_stop()
        rounds.append({
            "pjrt_calls": (C.pjrt_calls_on_this_thread() - pjrt) / n,
            "executions": (C.counters().get("num_executions", 0) - executions) / n,
            "device_buffers": (C.memory_stats(0)["num_device_alloc"] - buffers) / n,
            "heap_allocations": heap / n,
        })
    out[name] = {k: min(r[k] for r in rounds) for k in rounds[0]}
    torchtpu.synchronize()
print(json.dumps(out))
"""


def _build_counter(tmp_path) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the allocation counter (cc/gcc)")
    lib = str(tmp_path / "alloc_counter.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", lib,
                    os.path.join(HERE, "alloc_counter.c")], check=True, capture_output=True,
                   timeout=120)
    return lib


def _measure(tmp_path) -> dict[str, dict[str, float]]:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("the allocation counter forwards to glibc's allocator (Linux, glibc only)")
    lib = _build_counter(tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_PYTHON + os.pathsep + env.get("PYTHONPATH", "")
    env["LD_PRELOAD"] = lib
    proc = subprocess.run([sys.executable, "-c", MEASURE, lib], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_eager_ops_stay_within_their_dispatch_budget(tmp_path) -> None:
    measured = _measure(tmp_path)
    print(json.dumps(measured, indent=1))
    if os.environ.get("TORCHTPU_RECORD_DISPATCH_BUDGET") == "1":
        with open(BUDGET, "w") as f:
            json.dump(measured, f, indent=2, sort_keys=True)
            f.write("\n")
        pytest.skip(f"recorded the measurements as the new budget in {BUDGET}")
    with open(BUDGET) as f:
        budget = json.load(f)
    assert set(measured) == set(budget), "dispatch_budget.json and the measured ops differ"
    over = []
    for op, counts in measured.items():
        for what, value in counts.items():
            if value > budget[op][what] + 1e-9:
                over.append(f"{op}: {what} {value:g} per call > budget {budget[op][what]:g}")
    assert not over, ("eager dispatch does more work than its recorded budget:\n  " +
                      "\n  ".join(over))
