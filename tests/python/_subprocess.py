"""Runs Python code in a fresh process with the repository's package first on the path.

For tests that need their own environment (a cache size, a device count) or must survive
an abort: the child's exit status and output come back as a CompletedProcess. Also the two
helpers of tests that start servers: a free loopback port, waiting for /health, and
stopping them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

REPO_PYTHON = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))


def run_python(code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = REPO_PYTHON + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def free_port() -> int:
    """torchtpu._ports.free_port (a port never handed out twice), imported at the call:
    ranks that run_ranks spawns import this module before their environment is set."""
    from torchtpu._ports import free_port as pick

    return pick()


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> None:
    """Waits until `url`/health answers 200; raises if `proc` exits or `timeout` passes."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with {proc.returncode} while starting")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} not healthy after {timeout} s")


def stop_processes(procs: list[subprocess.Popen | None]) -> None:
    """SIGTERM to every live process, then waits for each (20 s) and kills what is left."""
    live = [p for p in procs if p is not None]
    for p in live:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in live:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
