"""Device waits poll before they sleep (TORCHTPU_POLL_US), counted per wait.

A host read of a result handed to the plugin's worker would otherwise sleep and be woken,
which costs more than a small program; a wait for a long program sleeps at once when the
last wait for that program outlasted the budget (polling would only take a core from the
program). The counts are what is checked, not times: every wait is counted once, as
`device_waits_polled` (ended while polling) or `device_waits_slept` (among them
`device_waits_slept_at_once`); with polling off, a wait whose event is not ready at once
sleeps.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _subprocess import run_python

# Synced 64x64 adds (the CPU plugins hand them to their worker pool), then twice a chain
# of 512x512 matmuls read back once (long enough that its wait finds the event not ready:
# the read's program, a sum, is waited for the whole chain).
WORKLOAD = """
import json, torch, torchtpu
a = torch.randn(64, 64, device="tpu")
torchtpu.block_until_ready(a + a)
keys = ("device_waits_polled", "device_waits_slept", "device_waits_slept_at_once")
def delta(before):
    after = torchtpu._C.counters()
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}
c = torchtpu._C.counters()
for _ in range(50):
    torchtpu.block_until_ready(a + a)
adds = delta(c)
def chain():
    m = torch.randn(512, 512, device="tpu")
    for _ in range(20):
        m = torch.tanh(m @ m)
    return m.sum().item()
c = torchtpu._C.counters()
value = chain()
first = delta(c)
c = torchtpu._C.counters()
chain()
second = delta(c)
print(json.dumps({"adds": adds, "chain": first, "again": second, "finite": value == value}))
"""


def _run(**env: str) -> dict:
    out = run_python(WORKLOAD, timeout=300, **env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_device_wait_is_counted_once() -> None:
    r = _run()
    adds = r["adds"]["device_waits_polled"] + r["adds"]["device_waits_slept"]
    assert adds == 50, r
    # A 64x64 add arrives within microseconds: most of its waits end while polling.
    assert r["adds"]["device_waits_polled"] >= 10, r
    chain = r["chain"]["device_waits_polled"] + r["chain"]["device_waits_slept"]
    assert chain >= 1, r
    assert r["finite"], r


def test_a_wait_for_a_long_program_sleeps_at_once_the_next_time() -> None:
    r = _run()
    # The chain's read outlasted the budget the first time; the same read sleeps at once.
    assert r["chain"]["device_waits_slept"] >= 1, r
    assert r["again"]["device_waits_slept_at_once"] >= 1, r


def test_polling_off_sleeps_in_every_wait_not_ready_at_once() -> None:
    r = _run(TORCHTPU_POLL_US="0")
    # The 512x512 chain is not done when its wait begins; with no polling budget it sleeps.
    assert r["chain"]["device_waits_slept"] >= 1, r
    assert r["adds"]["device_waits_polled"] + r["adds"]["device_waits_slept"] == 50, r


def test_invalid_budget_is_an_error_at_device_start() -> None:
    out = run_python("import torch, torchtpu; torch.ones(1, device='tpu')",
                     TORCHTPU_POLL_US="soon")
    assert out.returncode != 0
    assert ("TORCHTPU_POLL_US='soon' is not a polling budget in microseconds "
            "(expected 0..1000000; 0 turns polling off; default 1000)") in out.stderr, (
        out.stderr[-2000:])


CPU_SYNC = """
import json, os, resource, torch, torchtpu
x = torch.randn(64, 64)
a = x.to("tpu")
y = torch.nn.functional.gelu(a @ a + 1).sum(0)
ok = torch.allclose(y.cpu(), torch.nn.functional.gelu(x @ x + 1).sum(0), atol=1e-4, rtol=1e-4)
torchtpu.block_until_ready(a + a)
switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
for _ in range(50):
    torchtpu.block_until_ready(a + a)
switches = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                        torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
    b = torch.randn(768, 768, device="tpu")
    torchtpu.block_until_ready(b @ b)
device_us = max((e.device_time_total for e in prof.key_averages() if e.key == "aten::mm"),
                default=0.0)
info = torchtpu.debug.plugin()
print(json.dumps({"ok": ok, "switches": switches, "device_us": device_us,
                  "cpu_async": info["cpu_async"], "plugin": info["name"]}))
"""


def test_a_cpu_plugin_set_to_run_programs_on_the_calling_thread():
    # TORCHTPU_CPU_ASYNC=0 (the XLA CPU plugin's `asynchronous` option): the same results,
    # no hand-off to the plugin's worker threads per program (no thread switches), and the
    # profiler still times a program by its run (its enqueue
    # time is taken before the call, which returns only once the program ran).
    got = {}
    for value in ("0", "1"):
        r = run_python(CPU_SYNC, TORCHTPU_CPU_ASYNC=value, TORCHTPU_CACHE_DIR="")
        assert r.returncode == 0, r.stderr[-2000:]
        got[value] = json.loads(r.stdout.strip().splitlines()[-1])
        assert got[value]["ok"] and got[value]["device_us"] > 0, got[value]
    if got["0"]["plugin"] == "xla-cpu-pjrt":  # it has no such option: not sent, None
        assert got["0"]["cpu_async"] is None and got["1"]["cpu_async"] is None, got
    else:
        assert got["0"]["cpu_async"] is False and got["1"]["cpu_async"] is True, got
        assert got["0"]["switches"] < 5, got  # handed off, each add may switch (18 of 50)
    r = run_python("import torch, torchtpu; torch.ones(1, device='tpu')",
                   TORCHTPU_CPU_ASYNC="yes")
    assert r.returncode != 0 and "TORCHTPU_CPU_ASYNC='yes' is not 0" in r.stderr, r.stderr
