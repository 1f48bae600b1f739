"""Runs Python code in a fresh process with the repository's package first on the path.

For tests that need their own environment (a cache size, a device count) or must survive
an abort: the child's exit status and output come back as a CompletedProcess.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

REPO_PYTHON = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))


def run_python(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = REPO_PYTHON + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)
