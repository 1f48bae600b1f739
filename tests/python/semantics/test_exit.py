"""A process that ran a backward on tpu exits cleanly, every time.

The last node of a backward runs on the tpu device's autograd worker, which drops its
reference to the backward's task just after waking the caller; that task holds a Python
object, so when the caller exits at once the drop could land in the interpreter's
finalization and abort the process ("terminate called without an active exception").
torchtpu's exit wait (torchtpu/_exit.py) drains the workers first. The race needs no load
to show: without the wait about a third of these exits aborted, so six runs side
by side is a bounded regression test.
"""

from __future__ import annotations

import os
import subprocess
import sys

from _subprocess import REPO_PYTHON

_SCRIPT = """
import torch, torchtpu
x = torch.ones(4, device="tpu:1", requires_grad=True)  # the second device's worker
(x * 2).sum().backward()
x = torch.ones(4, device="tpu", requires_grad=True)
(x * 2).sum().backward()  # the process ends right after
"""


def test_exit_right_after_backward_never_aborts() -> None:
    env = dict(os.environ, TORCHTPU_NUM_DEVICES="2")
    env["PYTHONPATH"] = REPO_PYTHON + os.pathsep + env.get("PYTHONPATH", "")
    failures = []
    for _ in range(3):  # 6 exits, two at a time: 10-25 s on two loaded cores
        procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=120)
            if p.returncode != 0:
                failures.append(f"exit status {p.returncode}: {err[-500:]}")
    assert not failures, failures
