"""The router's Python side without replicas: its tokenizer gives the server's own prompt ids
(so its block hashes are the engine's), the launcher's core split and argument pass-through,
and the command line's errors."""

import contextlib
import json
import subprocess
import sys

import httpx
import pytest

from torchtpu.cli import _replica_args
from torchtpu.serve.router import PromptTokenizer, core_groups


@pytest.mark.parametrize("target,body", [
    ("/v1/completions", {"prompt": "O Romeo, Romeo, wherefore art thou Romeo?"}),
    ("/v1/completions", {"prompt": "O Romeo", "add_special_tokens": True}),
    ("/v1/completions", {"prompt": [5, 6, 7, 8]}),
    ("/v1/completions", {"prompt": "To be, or not to be", "truncate_prompt_tokens": 3}),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Who is the king?"}]}),
])
def test_prompt_tokenizer_matches_the_server(served, tiny_llama_dir, target, body):
    tokenizer = PromptTokenizer(tiny_llama_dir)
    ids = tokenizer(target, json.dumps(body).encode())
    # The server's own view: /tokenize, or the prompt a completion reports it used.
    if "messages" in body:
        want = httpx.post(served.url + "/tokenize", json={"messages": body["messages"]},
                          timeout=60).json()
        assert ids == want["tokens"]
        return
    # (The first completion may compile its programs: longer than httpx's 5 s on a busy
    # machine.)
    r = httpx.post(served.url + "/v1/completions",
                   json={**body, "max_tokens": 1}, timeout=120).json()
    assert len(ids) == r["usage"]["prompt_tokens"]
    if isinstance(body["prompt"], str) and "truncate_prompt_tokens" not in body:
        want = httpx.post(served.url + "/tokenize", json={
            "prompt": body["prompt"], "add_special_tokens": body.get("add_special_tokens")},
            timeout=60)
        assert ids == want.json()["tokens"]


def test_prompt_tokenizer_gives_none_for_what_the_replica_must_refuse(tiny_llama_dir):
    tokenizer = PromptTokenizer(tiny_llama_dir)
    assert tokenizer("/v1/completions", b"{not json") is None
    assert tokenizer("/v1/completions", b'{"prompt": []}') is None
    assert tokenizer("/v1/chat/completions", b'{"messages": 3}') is None


def test_prompt_tokenizer_does_not_tokenize_what_cannot_fit_the_context(tiny_llama_dir):
    # A prompt longer than any context, known from its size, is left to the replica (which
    # refuses it as fast); tokenizing megabytes here took seconds and gigabytes per request.
    tokenizer = PromptTokenizer(tiny_llama_dir, max_model_len=64)
    calls = []
    encode = tokenizer.tokenizer.encode
    tokenizer.tokenizer.encode = lambda *a, **k: calls.append(len(a[0])) or encode(*a, **k)
    huge = "ab " * 200_000
    assert tokenizer("/v1/completions", json.dumps({"prompt": huge}).encode()) is None
    chat = {"messages": [{"role": "user", "content": huge}]}
    assert tokenizer("/v1/chat/completions", json.dumps(chat).encode()) is None
    assert calls == []
    # Kept when the server would tokenize it too: truncated to its end.
    ids = tokenizer("/v1/completions", json.dumps(
        {"prompt": "ab " * 2000, "truncate_prompt_tokens": 5}).encode())
    assert ids is not None and len(ids) == 5


def test_core_groups_are_disjoint_and_cover_the_cpus():
    import os

    cpus = os.sched_getaffinity(0)
    groups = core_groups(len(cpus))
    assert all(len(g) == 1 for g in groups)
    assert set().union(*groups) == cpus
    assert core_groups(len(cpus) + 1) == [None] * (len(cpus) + 1)


def test_replica_args_drop_the_launchers_own_options():
    argv = ["--replicas", "3", "--model", "m", "--port=9000", "--host", "0.0.0.0",
            "--max-num-seqs", "8", "--kv-events-endpoint", "x", "--routing-mode", "round-robin"]
    assert _replica_args(argv) == ["--model", "m", "--max-num-seqs", "8"]


def test_router_command_line_errors():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "torchtpu.cli", "router", *args],
                              capture_output=True, text=True, timeout=120)

    r = run("--replica", "http://127.0.0.1:1", "--weights", "1,2")
    assert r.returncode == 2 and "--weights" in r.stderr
    r = run("--replica", "http://127.0.0.1:1", "--replica", "http://127.0.0.1:2",
            "--kv-events", "tcp://127.0.0.1:3", "--mode", "round-robin")
    assert r.returncode == 2 and "one per replica" in r.stderr
    r = run("--replica", "http://127.0.0.1/v1", "--mode", "round-robin")
    assert r.returncode == 2 and "expected http://HOST:PORT" in r.stderr


def test_serve_on_a_taken_port_fails_before_loading_the_model():
    # It loaded and warmed up the model (tens of seconds), said "listening", then failed to
    # bind (and a --replicas launcher restarted such a replica forever).
    import socket
    import time

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        start = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "torchtpu.cli", "serve", "--port", str(port)],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "--port" in r.stderr, r.stderr
    assert "warmed up" not in r.stderr and time.monotonic() - start < 60


def test_launcher_does_not_restart_a_replica_that_cannot_start(tmp_path, caplog):
    # Status 2 (its arguments, or a taken port) would repeat at every restart.
    import logging
    import time

    from torchtpu.serve.router import ReplicaLauncher

    caplog.set_level(logging.INFO, logger="torchtpu")
    launcher = ReplicaLauncher(1, 1, ["--max-num-seqs", "0"])
    launcher.start()
    try:
        deadline = time.monotonic() + 90
        while launcher.procs[0] is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert launcher.procs[0] is None
        assert any("cannot start" in r.getMessage() for r in caplog.records)
        assert not any("; starting it again in" in r.getMessage() for r in caplog.records)
    finally:
        launcher.stop()
    import os

    assert not os.path.exists(launcher.dir)  # its endpoints' folder is removed


@contextlib.contextmanager
def _router_process(*flags: str):
    """`torchtpu router` (round-robin over a replica that is down) with `flags`, answering
    on the yielded URL; stopped on exit."""
    import time

    from torchtpu._ports import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "torchtpu.cli", "router", "--replica",
                             "http://127.0.0.1:1", "--mode", "round-robin", "--port", str(port),
                             *flags], stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(url + "/health", timeout=10)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def test_router_request_size_limit_is_a_flag():
    with _router_process("--max-request-bytes", "1000") as url:
        r = httpx.post(url + "/v1/completions", content=json.dumps({"prompt": "x" * 2000}),
                       timeout=10)
        assert r.status_code == 413 and "limit of 1000 bytes" in r.text, r.text
        r = httpx.post(url + "/v1/completions", json={"prompt": "x" * 500}, timeout=10)
        assert r.status_code != 413, r.text  # under the limit: on to the (absent) replica


def test_idle_connections_at_the_limit_make_room_for_a_new_client():
    # A thread serves each connection: idle sockets (opened, nothing sent) up to the limit
    # locked every other client out for the keep-alive wait (120 s). At the limit, the one
    # idle the longest (1 s at least) is shut down for the new client.
    import socket
    import time

    idle = []
    with _router_process("--max-connections", "4") as url:
        port = int(url.rsplit(":", 1)[1])
        time.sleep(1.0)  # the start-up check's connection is gone (it would count at first)
        try:
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
            time.sleep(1.5)  # evictable once idle 1 s (a kept-alive client between requests is not)
            idle += [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
            time.sleep(0.2)
            for _ in range(3):
                r = httpx.get(url + "/health", timeout=10)  # no healthy replica: 503, answered
                assert r.status_code == 503, r.text
            metrics = httpx.get(url + "/metrics", timeout=10).text
            evicted = [line for line in metrics.splitlines()
                       if line.startswith("torchtpu_router:connections_evicted_total ")]
            assert evicted and float(evicted[0].split()[1]) >= 2, metrics
        finally:
            for s in idle:
                s.close()
