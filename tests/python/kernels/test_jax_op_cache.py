"""The persistent executable cache covers JAX ops: a second process that runs the same ops
(eager, compiled, with gradients) compiles nothing, neither in the plugin nor in jaxlib."""

from __future__ import annotations

import json
import os

from _subprocess import run_python

KERNELS = os.path.dirname(os.path.abspath(__file__))

SCRIPT = f"""
import json, sys
sys.path.insert(0, {KERNELS!r})
import jax
jax_compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: jax_compiles.append(name) if "backend_compile" in name else None)
import torch, torchtpu
from _jax_kernels import RMS_ROPE, SOFTMAX, WRITE_ROWS, rope_tables

cos, sin = [t.to("tpu") for t in rope_tables(4, 16)]
x = torch.randn(2, 4, 2, 16, device="tpu")
w = torch.ones(16, device="tpu", requires_grad=True)
RMS_ROPE(x, w, cos, sin).sum().backward()                      # eager, with jax.vjp
step = torch.compile(lambda x, w: SOFTMAX(RMS_ROPE(x, w, cos, sin).reshape(16, 16)).sum(),
                     backend="tpu")
step(x, w).backward()                                          # compiled forward + backward
WRITE_ROWS(torch.zeros(8, 4, device="tpu"), torch.ones(2, 4, device="tpu"),
           torch.tensor([1], dtype=torch.int32, device="tpu"))
torchtpu.synchronize()
m = torchtpu.debug.metrics()
print(json.dumps({{"compiles": m.get("num_compiles", 0),
                  "disk_hits": m.get("num_compile_cache_hits_disk", 0),
                  "jax_compiles": len(jax_compiles)}}))
"""


def _run(cache_dir: str) -> dict:
    r = run_python(SCRIPT, timeout=300, TORCHTPU_CACHE_DIR=cache_dir)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_second_process_compiles_nothing(tmp_path) -> None:
    first = _run(str(tmp_path))
    assert first["compiles"] > 0
    second = _run(str(tmp_path))
    assert second == {"compiles": 0, "disk_hits": first["compiles"], "jax_compiles": 0}
