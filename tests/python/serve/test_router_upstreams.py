"""The router against replicas that misbehave, and clients that do: scripted fake replicas
(raw sockets, no engine) behind a real ``torchtpu router`` process. A replica whose host
drops connections, or one that accepts and never answers, must not stall the health
checks of the others; interim (1xx) responses, repeated and connection-scoped headers,
extension methods and upper-case media types pass as HTTP says; a client that sends its
request slowly gets 408, one whose body or header is over the limit reads its 413 / 431
(not a reset); the command line refuses what would overflow. Bounded: no model, a few
seconds per test."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest
from _subprocess import free_port, stop_processes, wait_healthy

METRICS = (b"vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
           b"vllm:kv_cache_usage_perc 0\n")


def _response(status: str, body: bytes, content_type: str = "application/json",
              extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class FakeReplica:
    """A replica speaking raw HTTP/1.1: /health and /metrics answer; POST or any method on
    /echo returns the request line and header lines it received; /early-hints sends a 103
    before its 200; /sse-upper streams events under ``Text/Event-Stream``; `silent` makes
    it accept connections and never answer."""

    def __init__(self, host: str = "127.0.0.1", silent: bool = False) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"
        self.silent = silent
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.silent:
                self.held.append(conn)  # never answered, never closed
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        data = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, data = data.split(b"\r\n\r\n", 1)
                lines = head.decode("latin-1").split("\r\n")
                length = next((int(v) for k, _, v in (h.partition(":") for h in lines[1:])
                               if k.strip().lower() == "content-length"), 0)
                while len(data) < length:
                    data += conn.recv(65536)
                data = data[length:]
                conn.sendall(self._answer(lines))

    def _answer(self, lines: list[str]) -> bytes:
        path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else ""
        if path == "/health":
            return _response("200 OK", b"{}")
        if path == "/metrics":
            return _response("200 OK", METRICS, "text/plain")
        if path == "/echo":
            return _response("200 OK", json.dumps({"request_line": lines[0],
                                                   "headers": lines[1:]}).encode())
        if path == "/early-hints":
            return (b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" +
                    _response("200 OK", b'{"final": true}'))
        if path == "/sse-upper":
            events = b"".join(b"%x\r\n%s\r\n" % (len(e), e)
                              for e in (b"data: 1\n\n", b"data: [DONE]\n\n"))
            return (b"HTTP/1.1 200 OK\r\nContent-Type: Text/Event-Stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + events + b"0\r\n\r\n")
        return _response("404 Not Found", b'{"error": "not found"}')

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


def _start_router(replicas: list[str], *extra: str, host: str = "127.0.0.1",
                  timeout: float = 30) -> tuple[subprocess.Popen, str]:
    port = free_port()
    args = [sys.executable, "-m", "torchtpu.cli", "router", "--mode", "round-robin",
            "--host", host, "--port", str(port), "--health-interval", "0.2", *extra]
    for r in replicas:
        args += ["--replica", r]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout)
    except Exception:
        stop_processes([proc])
        raise
    return proc, url


def _raw(url: str, data: bytes, timeout: float = 10) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
    return out


@pytest.fixture(scope="module")
def routed():
    replica = FakeReplica()
    proc, url = _start_router([replica.url], "--request-timeout", "1",
                              "--max-request-bytes", str(1 << 20))
    try:
        yield url
    finally:
        stop_processes([proc])
        replica.close()
        assert proc.returncode in (0, -15), proc.stderr.read().decode(errors="replace")


def test_repeated_and_connection_scoped_headers_and_extension_methods(routed):
    reply = _raw(routed, b"BREW /echo HTTP/1.1\r\nHost: x\r\nCookie: a=1\r\nCookie: b=2\r\n"
                         b"X-Hop: secret\r\nConnection: close, X-Hop\r\nContent-Length: 0\r\n\r\n")
    head, body = reply.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), reply
    seen = json.loads(body)
    assert seen["request_line"] == "BREW /echo HTTP/1.1"
    headers = [h.lower() for h in seen["headers"]]
    assert "cookie: a=1" in headers and "cookie: b=2" in headers  # both, in order
    assert headers.index("cookie: a=1") < headers.index("cookie: b=2")
    assert not any(h.startswith("x-hop") for h in headers)  # the client's next hop only


def test_interim_responses_are_not_the_final_one(routed):
    r = httpx.get(routed + "/early-hints", timeout=10)
    assert r.status_code == 200 and r.json() == {"final": True}


def test_media_types_are_case_insensitive(routed):
    r = httpx.get(routed + "/sse-upper", timeout=10)
    assert r.status_code == 200
    assert r.headers.get("cache-control") == "no-cache"  # relayed as a stream
    assert r.text == "data: 1\n\ndata: [DONE]\n\n"


def test_a_slow_request_gets_408(routed):
    host, port = routed.removeprefix("http://").rsplit(":", 1)
    start = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=15) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        reply = s.recv(65536)
    assert reply.startswith(b"HTTP/1.1 408"), reply
    assert b'"type": "BadRequestError"' in reply, reply
    assert time.monotonic() - start < 10


def test_oversized_bodies_and_headers_are_answered_not_reset(routed):
    host, port = routed.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=20)
    # The client writes its whole 4 MiB body before reading, as requests and httpx do.
    conn.request("POST", "/v1/completions", body=b"x" * (4 << 20),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 413 and b"limit" in r.read()
    conn.close()
    reply = _raw(routed, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 70000 +
                 b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431") and b'"type": "BadRequestError"' in reply, reply
    assert httpx.get(routed + "/health", timeout=10).status_code == 200  # still serving


def test_head_of_the_routers_own_routes(routed):
    r = httpx.head(routed + "/health", timeout=10)
    assert r.status_code == 200 and r.content == b""
    assert httpx.head(routed + "/metrics", timeout=10).status_code == 200


def _blackhole() -> tuple[socket.socket, list[socket.socket], str]:
    """A listening socket whose accept queue is full: the kernel drops further SYNs, so a
    connect to it hangs (a host that drops packets) instead of being refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(8):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    time.sleep(0.2)
    probe = socket.socket()
    probe.settimeout(1)
    try:
        probe.connect(("127.0.0.1", port))
        hangs = False
    except TimeoutError:
        hangs = True
    except OSError:
        hangs = False
    finally:
        probe.close()
    if not hangs:
        listener.close()
        for c in fillers:
            c.close()
        pytest.skip("this kernel refuses, rather than drops, connections to a full backlog")
    return listener, fillers, f"http://127.0.0.1:{port}"


def test_unreachable_and_silent_replicas_do_not_stall_health_checks():
    good, silent = FakeReplica(), FakeReplica(silent=True)
    listener, fillers, dropped = _blackhole()
    start = time.monotonic()
    proc, url = _start_router([dropped, silent.url, good.url], timeout=20)
    try:
        # The good replica was admitted at start-up although the others never answer (each
        # check bounded by the 2 s health timeout, all run concurrently).
        assert time.monotonic() - start < 15
        for _ in range(3):
            r = httpx.get(url + "/echo", timeout=10)
            assert r.status_code == 200 and r.headers["x-torchtpu-replica"].endswith(
                f":{good.port}")
        healthy = {line.split("{")[1].split("}")[0]: line.rsplit(" ", 1)[1]
                   for line in httpx.get(url + "/metrics", timeout=10).text.splitlines()
                   if line.startswith("torchtpu_router:replica_healthy{")}
        assert sorted(healthy.values()) == ["0", "0", "1"], healthy
        # Each replica is checked on its own interval: the good one's death shows within
        # about one interval, not behind the others' 2 s timeouts.
        good.close()
        dead_at = time.monotonic()
        while httpx.get(url + "/health", timeout=10).status_code == 200:
            assert time.monotonic() - dead_at < 1.5, "the dead replica is still admitted"
            time.sleep(0.05)
    finally:
        stop_processes([proc])
        good.close()
        silent.close()
        listener.close()
        for c in fillers:
            c.close()


class TricklingReplica(FakeReplica):
    """Answers /health one byte every 0.3 s: each read is quick, the exchange never ends."""

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                for b in _response("200 OK", b"{}" * 200):
                    conn.sendall(bytes([b]))
                    time.sleep(0.3)
            except OSError:
                return


def test_a_replica_that_trickles_fails_its_check_in_time():
    good, slow = FakeReplica(), TricklingReplica()
    start = time.monotonic()
    proc, url = _start_router([slow.url, good.url], timeout=20)
    try:
        assert time.monotonic() - start < 15  # start-up's first round is bounded too
        good.close()
        dead_at = time.monotonic()
        while httpx.get(url + "/health", timeout=10).status_code == 200:
            assert time.monotonic() - dead_at < 1.5
            time.sleep(0.05)
    finally:
        stop_processes([proc])
        assert proc.returncode in (0, -15)  # SIGTERM ends it: no check holds it
        slow.close()


def test_ipv6_replicas_and_host_names():
    try:
        replica = FakeReplica("::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    proc, url = _start_router([replica.url], host="localhost")
    try:
        r = httpx.get(url + "/echo", timeout=10)
        assert r.status_code == 200
        assert r.headers["x-torchtpu-replica"] == f"[::1]:{replica.port}"
        assert f"Host: [::1]:{replica.port}" in r.json()["headers"]
    finally:
        stop_processes([proc])
        replica.close()


@pytest.mark.parametrize("args,message", [
    (["--replica", "http://127.0.0.1:9", "--replica", "127.0.0.1:9/"], "given twice"),
    (["--replica", "http://127.0.0.1:9", "--max-request-bytes", "99999999999999999999"],
     "out of range"),
    (["--replica", "http://127.0.0.1:9", "--spill-threshold", "99999999999"], "out of range"),
    (["--replica", "http://127.0.0.1:9", "--block-size", "99999999999"], "out of range"),
    (["--replica", "http://127.0.0.1:9", "--health-interval", "1e7"], "from 0.001 to 86400"),
    (["--replica", "http://127.0.0.1:9", "--weights", "nan,1,1"], "--weights"),
    (["--replica", "http://127.0.0.1:9", "--weights", "inf,1,1"], "--weights"),
    (["--replica", "http://::1:9"], "brackets"),
])
def test_command_line_values_that_would_overflow_are_refused(args, message):
    r = subprocess.run([sys.executable, "-m", "torchtpu.cli", "router", "--mode", "round-robin",
                        "--port", str(free_port()), *args], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert message in r.stderr and "Traceback" not in r.stderr
