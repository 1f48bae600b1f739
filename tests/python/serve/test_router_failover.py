"""torchtpu router in front of 3 real replicas (``torchtpu serve`` processes on the tiny random
Llama, publishing KV events): requests route by prefix, and when one replica is killed
under load, every request that had not started streaming completes on another replica,
streams it had started end with an error event, the router stays up, and the replica is
admitted again when it returns. Bounded: small model, small shapes, bounded waits."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from _subprocess import free_port, stop_processes, wait_healthy

SERVE_ARGS = ["--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens", "64",
              "--page-size", "16"]
START_TIMEOUT = 240


def _metric(text: str, name: str, replica: str | None = None) -> float:
    for line in text.splitlines():
        if line.startswith(name + (f'{{replica="{replica}"}}' if replica else " ")):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


class Cluster:
    def __init__(self, model_dir: str, tmp: str) -> None:
        self.model_dir, self.tmp = model_dir, tmp
        self.ports = [free_port() for _ in range(3)]
        self.urls = [f"http://127.0.0.1:{p}" for p in self.ports]
        self.names = [f"127.0.0.1:{p}" for p in self.ports]
        self.replicas: list[subprocess.Popen | None] = [None] * 3
        self.router = self.router_url = None
        self.approx = self.approx_url = None  # a second router, without KV events

    def start_replica(self, i: int) -> subprocess.Popen:
        log = open(os.path.join(self.tmp, f"replica{i}.log"), "ab")
        self.replicas[i] = subprocess.Popen(
            [sys.executable, "-m", "torchtpu.cli", "serve", "--model", self.model_dir,
             "--port", str(self.ports[i]), "--kv-events-endpoint", f"ipc://{self.tmp}/r{i}.ev",
             "--kv-events-replay-endpoint", f"ipc://{self.tmp}/r{i}.replay", *SERVE_ARGS],
            stdout=log, stderr=subprocess.STDOUT)
        return self.replicas[i]

    def start_router(self, events: bool = True) -> tuple[subprocess.Popen, str]:
        port = free_port()
        args = [sys.executable, "-m", "torchtpu.cli", "router", "--model", self.model_dir,
                "--port", str(port), "--health-interval", "0.2"]
        for i, url in enumerate(self.urls):
            args += ["--replica", url]
            if events:
                args += ["--kv-events", f"ipc://{self.tmp}/r{i}.ev",
                         "--kv-events-replay", f"ipc://{self.tmp}/r{i}.replay"]
        log = open(os.path.join(self.tmp, f"router{'' if events else '-approx'}.log"), "ab")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        return proc, f"http://127.0.0.1:{port}"

    def metrics(self, url: str | None = None) -> str:
        return httpx.get((url or self.router_url) + "/metrics", timeout=10).text

    def stop(self) -> None:
        stop_processes([self.router, self.approx, *self.replicas])


@pytest.fixture(scope="module")
def cluster(tiny_llama_dir, tmp_path_factory):
    c = Cluster(tiny_llama_dir, str(tmp_path_factory.mktemp("router")))
    try:
        for i in range(3):
            c.start_replica(i)
        c.router, c.router_url = c.start_router()
        c.approx, c.approx_url = c.start_router(events=False)
        for i in range(3):
            wait_healthy(c.urls[i], c.replicas[i], START_TIMEOUT)
        for url, proc in ((c.router_url, c.router), (c.approx_url, c.approx)):
            wait_healthy(url, proc, 60)
            deadline = time.monotonic() + 30  # the router admits every replica
            while time.monotonic() < deadline:
                m = c.metrics(url)
                if all(_metric(m, "torchtpu_router:replica_healthy", n) == 1 for n in c.names):
                    break
                time.sleep(0.2)
        yield c
    finally:
        c.stop()
        for name in os.listdir(c.tmp):
            if name.endswith(".log"):
                with open(os.path.join(c.tmp, name), errors="replace") as f:
                    tail = f.read()[-3000:]
                print(f"--- {name} ---\n{tail}")


@pytest.mark.parametrize("events", [True, False], ids=["kv-events", "approximate"])
def test_routes_shared_prefixes_to_one_replica(cluster, events):
    url = cluster.router_url if events else cluster.approx_url
    system = f"You are a careful assistant for the kingdom of Denmark ({events}). " * 6
    for i in range(6):
        r = httpx.post(url + "/v1/completions", timeout=60, json={
            "prompt": system + f"Question {i}: who is the king?", "max_tokens": 2,
            "temperature": 0})
        assert r.status_code == 200, r.text
        time.sleep(0.3)  # the replica's events reach the router
    m = cluster.metrics(url)
    counts = [_metric(m, "torchtpu_router:replica_requests_total", n) for n in cluster.names]
    assert max(counts) == 6, counts  # all six with the same system prompt on one replica
    assert _metric(m, "torchtpu_router:prefix_hit_ratio") > 0.5
    busy = cluster.names[counts.index(6)]
    if events:  # the replica's own events confirm what the router routed
        assert _metric(m, "torchtpu_router:replica_confirmed_blocks", busy) > 0
        assert _metric(m, "torchtpu_router:replica_kv_event_batches_total", busy) > 0
    else:  # its routing history is all it knows
        assert _metric(m, "torchtpu_router:replica_confirmed_blocks", busy) == 0
        assert _metric(m, "torchtpu_router:replica_routed_blocks", busy) > 0


def test_killing_a_replica_under_load(cluster):
    url = cluster.router_url + "/v1/completions"
    results, started = {}, {}
    kill_at = threading.Event()

    def stream(i: int) -> None:
        events = []
        try:
            with httpx.stream("POST", url, timeout=120, json={
                    "prompt": f"Stream {i} of the tragedy of Hamlet, prince", "max_tokens": 120,
                    "temperature": 0, "ignore_eos": True, "stream": True}) as r:
                status = r.status_code
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        if not events:
                            started[i] = kill_at.is_set()  # True: first data after the kill
                        events.append(line[6:])
            results[i] = ("stream", status, events)
        except httpx.HTTPError as e:
            results[i] = ("stream", type(e).__name__, events)

    def plain(i: int) -> None:
        try:
            r = httpx.post(url, timeout=120, json={
                "prompt": f"Request {i} of the tragedy of Hamlet, prince", "max_tokens": 120,
                "temperature": 0, "ignore_eos": True})
            results[i] = ("plain", r.status_code, r.json())
        except httpx.HTTPError as e:
            results[i] = ("plain", type(e).__name__, None)

    threads = [threading.Thread(target=stream if i % 2 else plain, args=(i,)) for i in range(18)]
    for t in threads:
        t.start()
    # Kill the busiest replica once some streams have started.
    deadline = time.monotonic() + 60
    while len(started) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    m = cluster.metrics()
    in_flight = [_metric(m, "torchtpu_router:replica_in_flight", n) for n in cluster.names]
    victim = in_flight.index(max(in_flight))
    cluster.replicas[victim].send_signal(signal.SIGKILL)
    kill_at.set()
    for t in threads:
        t.join(timeout=180)
    assert len(results) == 18

    cut = 0
    for i, (kind, status, body) in sorted(results.items()):
        assert status == 200, (i, kind, status, body)
        if kind == "plain":  # never streaming: always completes, on another replica if need be
            assert body["choices"][0]["finish_reason"] == "length", body
            assert body["usage"]["completion_tokens"] == 120
            continue
        assert body[-1] == "[DONE]", body[-3:]
        last = json.loads(body[-2])
        if "error" in last:  # a stream the dead replica had started: an error event
            cut += 1
            assert last["error"]["code"] == 502
            assert started.get(i) is False, "only a stream that started before the kill is cut"
        else:
            assert last["choices"][0]["finish_reason"] == "length"
    m = cluster.metrics()
    assert _metric(m, "torchtpu_router:replica_healthy", cluster.names[victim]) == 0
    assert _metric(m, "torchtpu_router:stream_errors_total") == cut
    # The kill hit work in flight: something was cut or moved to another replica.
    assert cut + _metric(m, "torchtpu_router:retries_total") >= 1

    # The router stays up and serves on the others.
    r = httpx.post(url, timeout=60, json={"prompt": "After the fall", "max_tokens": 3})
    assert r.status_code == 200, r.text
    assert httpx.get(cluster.router_url + "/health").status_code == 200

    # The replica returns (its supervisor restarts it) and is admitted again.
    before = _metric(m, "torchtpu_router:replica_requests_total", cluster.names[victim])
    proc = cluster.start_replica(victim)
    wait_healthy(cluster.urls[victim], proc, START_TIMEOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = cluster.metrics()
        if _metric(m, "torchtpu_router:replica_healthy", cluster.names[victim]) == 1:
            break
        time.sleep(0.2)
    assert _metric(m, "torchtpu_router:replica_healthy", cluster.names[victim]) == 1
    # Concurrent requests with new prefixes spread by load: the returned replica takes some.
    outs = []
    workers = [threading.Thread(target=lambda i=i: outs.append(httpx.post(url, timeout=120, json={
        "prompt": f"Fresh start {i}", "max_tokens": 40, "ignore_eos": True}).status_code))
        for i in range(9)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert outs == [200] * 9
    after = _metric(cluster.metrics(), "torchtpu_router:replica_requests_total",
                    cluster.names[victim])
    assert after > before
