"""examples/ddp_train.py and examples/fsdp2_train.py run as a user runs them: under
`torchrun --nproc-per-node 2` (its own rendezvous and environment, not our launcher), a few
steps each, the FSDP2 run writing a DCP checkpoint."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(300)

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                        "examples"))


def torchrun(script: str, *args: str) -> str:
    """Rank 0's output of `script` run by torchrun on 2 processes (fails with the output of
    every rank when a rank fails)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", os.path.join(EXAMPLES, script), *args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"{script} exited {r.returncode}:\n{r.stdout}\n{r.stderr[-4000:]}"
    return r.stdout


def losses(out: str) -> list[float]:
    return [float(v) for v in re.findall(r"loss (\S+)", out)]


def test_ddp_example_under_torchrun() -> None:
    out = torchrun("ddp_train.py", "--steps", "3", "--batch", "8")
    got = losses(out)
    assert len(got) == 1 and math.isfinite(got[0]), out
    assert "3 steps on 2 ranks" in out and "transport host_staged" in out, out


def test_fsdp2_example_under_torchrun(tmp_path) -> None:
    ckpt = tmp_path / "ckpt"
    out = torchrun("fsdp2_train.py", "--steps", "2", "--batch", "2", "--context", "8",
                   "--checkpoint", str(ckpt))
    got = losses(out)
    assert len(got) == 1 and math.isfinite(got[0]), out
    assert "2 steps on 2 ranks" in out and "transport host_staged" in out, out
    assert (ckpt / ".metadata").exists(), sorted(p.name for p in ckpt.iterdir())
