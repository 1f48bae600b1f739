"""`torchtpu serve` stopped as supervisors stop it: SIGTERM (systemd, Docker, Kubernetes) or
SIGINT (Ctrl-C) drains the requests in flight, runs the server's and the engine's cleanup
(closing the KV-event publisher, which sends what it still holds) and exits with 0 (uvicorn
raises the signal again after draining: SIGTERM's default action killed the process before
its cleanup, with status 143)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import httpx
import pytest
from _subprocess import free_port, wait_healthy

SERVE_ARGS = ["--max-model-len", "128", "--max-num-seqs", "2", "--max-num-batched-tokens", "32",
              "--page-size", "16"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_drains_cleans_up_and_exits_with_0(signum: int, tiny_llama_dir, tmp_path
                                                    ) -> None:
    port = free_port()
    endpoint = f"ipc://{tmp_path}/events"
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchtpu.cli", "serve", "--model", tiny_llama_dir, "--port",
         str(port), "--kv-events-endpoint", endpoint, *SERVE_ARGS],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, 240)
        answers: list[int] = []

        def ask() -> None:
            r = httpx.post(url + "/v1/completions", timeout=120,
                           json={"prompt": "hello there", "max_tokens": 24, "temperature": 0,
                                 "ignore_eos": True})
            answers.append(r.status_code)

        asker = threading.Thread(target=ask)
        asker.start()
        # The request is in flight (in the running batch) when the signal comes.
        for _ in range(1200):
            if _running(httpx.get(url + "/metrics", timeout=10).text) >= 1 or answers:
                break
            threading.Event().wait(0.05)
        proc.send_signal(signum)
        asker.join(timeout=120)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert answers == [200], stderr[-3000:]
    assert proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    # The cleanup ran: the engine (and its KV-event publisher) closed.
    assert "torchtpu serve: stopped" in stderr, stderr[-3000:]


def _running(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
