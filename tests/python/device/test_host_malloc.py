"""The host allocator policy of CPU plugins (runtime/host_malloc.h), by what it changes.

The policy is applied once, when the device starts on a CPU plugin, so each case runs in a
fresh process with its own TORCHTPU_HOST_MALLOC. The work it saves is counted, not timed:
minor page faults (getrusage's ru_minflt, in-process) per step of a fixed-shape workload
whose every step allocates and frees large host buffers. Under glibc's defaults each such
buffer is a fresh mmap whose every page faults in; under the policy the freed blocks are
reused, so a step in steady state faults in (almost) nothing. Fault counts do not depend on
the machine's load.
"""

from __future__ import annotations

import json

import pytest
import torch
from _subprocess import run_python

import torchtpu

# Steps of the workload: two 48 MiB results per step (above glibc's largest mmap threshold,
# so its defaults map each one afresh: 2 x 12,288 faults of 4 KiB pages).
WORKLOAD = r"""
import json, resource, torch, torchtpu
x = torch.ones(12 * 2**20, device="tpu")

def step():
    y = x * 2
    z = y + 1
    return z[0].item()  # waits for the step's programs

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

for _ in range(10):
    step()
before = faults()
for _ in range(20):
    step()
per_step = (faults() - before) / 20
print(json.dumps({"policy": torchtpu.debug.plugin()["host_malloc"], "faults": per_step}))
"""

# Faults per step of WORKLOAD after 10 warm-up steps, averaged over 20: under the policy
# the heap reaches its high-water mark in the first steps, and a later step faults in a
# buffer's pages (12,288) only when the plugin's asynchronous frees leave one more result
# alive than before, a few times at most; measured 0-1,229 (glibc's defaults: 24,578).
FAULT_BUDGET_PER_STEP = 3000


def _run(**env: str) -> dict:
    out = run_python(WORKLOAD, timeout=300, **env)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _on_cpu_plugin() -> bool:
    torch.ones(1, device="tpu")
    return torchtpu.debug.plugin()["platform"] == "cpu"


def test_policy_keeps_large_buffers_faulted_in_on_the_cpu_plugin() -> None:
    if not _on_cpu_plugin():
        pytest.skip("the policy applies to CPU plugins only")
    retained = _run()
    assert retained["policy"] == "retain"
    system = _run(TORCHTPU_HOST_MALLOC="system")
    assert system["policy"] == "system"
    assert retained["faults"] <= FAULT_BUDGET_PER_STEP, (
        f"{retained['faults']:.0f} minor faults per step under the policy (budget "
        f"{FAULT_BUDGET_PER_STEP}; glibc's defaults: {system['faults']:.0f})")


def test_explicit_retain_is_the_default() -> None:
    if not _on_cpu_plugin():
        pytest.skip("the policy applies to CPU plugins only")
    assert _run(TORCHTPU_HOST_MALLOC="retain")["policy"] == "retain"


def test_invalid_value_is_an_error_at_device_start() -> None:
    out = run_python("import torch, torchtpu; torch.ones(1, device='tpu')",
                     TORCHTPU_HOST_MALLOC="keep")
    assert out.returncode != 0
    assert "TORCHTPU_HOST_MALLOC='keep' is not a host allocator policy" in out.stderr, (
        out.stderr[-2000:])
    assert "'retain'" in out.stderr and "'system'" in out.stderr
