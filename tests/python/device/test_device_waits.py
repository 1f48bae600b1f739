"""Device waits poll before they sleep (TORCHTPU_POLL_US), counted per wait.

A host read of a result handed to the plugin's worker would otherwise sleep and be woken,
which costs more than a small program. The counts are what is checked, not times: every
wait is counted once, as `device_waits_polled` (ended while polling) or
`device_waits_slept`; with polling off, a wait whose event is not ready at once sleeps.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _subprocess import run_python

# Synced 64x64 adds (the CPU plugins hand them to their worker pool), then a 512x512 matmul
# chain read back once (long enough that its wait finds the event not ready).
WORKLOAD = """
import json, torch, torchtpu
a = torch.randn(64, 64, device="tpu")
torchtpu.block_until_ready(a + a)
c0 = torchtpu._C.counters()
for _ in range(50):
    torchtpu.block_until_ready(a + a)
c1 = torchtpu._C.counters()
m = torch.randn(512, 512, device="tpu")
for _ in range(20):
    m = torch.tanh(m @ m)
value = m.sum().item()
c2 = torchtpu._C.counters()
keys = ("device_waits_polled", "device_waits_slept")
print(json.dumps({"adds": {k: c1.get(k, 0) - c0.get(k, 0) for k in keys},
                  "chain": {k: c2.get(k, 0) - c1.get(k, 0) for k in keys},
                  "finite": value == value}))
"""


def _run(**env: str) -> dict:
    out = run_python(WORKLOAD, timeout=300, **env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_device_wait_is_counted_once() -> None:
    r = _run()
    adds = r["adds"]["device_waits_polled"] + r["adds"]["device_waits_slept"]
    assert adds == 50, r
    chain = r["chain"]["device_waits_polled"] + r["chain"]["device_waits_slept"]
    assert chain >= 1, r
    assert r["finite"], r


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
