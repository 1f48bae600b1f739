"""What the router's clients can send it, against one real replica (``torchtpu serve`` on the
tiny random Llama): a client that hangs up mid-request makes the replica abort it (it stops
generating), ``Expect: 100-continue`` is answered, and a fixed list of malformed requests
(bad HTTP, huge or bogus Content-Length, non-JSON bodies, extreme numbers) each get an
OpenAI-style error while the router stays up. Bounded: one small replica, short requests."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
from _subprocess import free_port, stop_processes, wait_healthy

SERVE_ARGS = ["--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens", "64",
              "--page-size", "16"]
LONG = 230  # tokens: seconds of generation on the tiny model, so a hang-up lands mid-way


class Stack:
    def __init__(self, model_dir: str, tmp: str) -> None:
        self.tmp = tmp
        rport, port = free_port(), free_port()
        self.replica_url = f"http://127.0.0.1:{rport}"
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.procs = []
        for name, args in (
                ("replica", ["serve", "--model", model_dir, "--port", str(rport), *SERVE_ARGS]),
                ("router", ["router", "--model", model_dir, "--port", str(port),
                            "--replica", self.replica_url, "--health-interval", "0.2"])):
            log = open(os.path.join(tmp, f"{name}.log"), "ab")
            self.procs.append(subprocess.Popen([sys.executable, "-m", "torchtpu.cli", *args],
                                               stdout=log, stderr=subprocess.STDOUT))
        wait_healthy(self.replica_url, self.procs[0], 240)
        wait_healthy(self.url, self.procs[1], 60)

    def replica_metric(self, prefix: str, contains: str = "") -> float:
        total = 0.0
        for line in httpx.get(self.replica_url + "/metrics", timeout=10).text.splitlines():
            if line.startswith(prefix) and contains in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def aborted(self) -> float:
        return self.replica_metric("vllm:request_success_total", 'finished_reason="abort"')

    def stop(self) -> None:
        stop_processes(self.procs)


@pytest.fixture(scope="module")
def stack(tiny_llama_dir, tmp_path_factory):
    s = Stack(tiny_llama_dir, str(tmp_path_factory.mktemp("router-robustness")))
    try:
        yield s
    finally:
        s.stop()
        router_alive = s.procs[1].returncode in (0, -signal.SIGTERM)
        for name in ("replica.log", "router.log"):
            with open(os.path.join(s.tmp, name), errors="replace") as f:
                print(f"--- {name} ---\n{f.read()[-3000:]}")
        assert router_alive, f"the router ended with {s.procs[1].returncode}"


def _raw(port: int, data: bytes, read_until_close: bool = True, timeout: float = 30) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while read_until_close:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out and b"Connection: close" not in out.split(b"\r\n\r\n")[0]:
                head, _, body = out.partition(b"\r\n\r\n")
                length = [int(h.split(b":")[1]) for h in head.split(b"\r\n")
                          if h.lower().startswith(b"content-length:")]
                if length and len(body) >= length[0]:
                    break
        return out


def _status_and_error(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body)


def _until(cond, timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def test_a_client_that_hangs_up_mid_stream_aborts_the_replicas_request(stack):
    before = stack.aborted()
    counted = _router_metric(stack.url, "torchtpu_router:client_disconnects_total")
    with httpx.stream("POST", stack.url + "/v1/completions", timeout=60, json={
            "prompt": "To be, or not to be", "max_tokens": LONG, "ignore_eos": True,
            "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["x-torchtpu-replica"] == stack.replica_url.removeprefix("http://")
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # one event, then hang up
    assert _until(lambda: stack.aborted() == before + 1), "the replica did not abort"
    # Counted though the hang-up showed as a failed write to the client, not while waiting.
    assert _until(lambda: _router_metric(
        stack.url, "torchtpu_router:client_disconnects_total") == counted + 1)


def test_a_client_that_hangs_up_before_a_plain_response_aborts_it(stack):
    before = stack.aborted()
    body = json.dumps({"prompt": "Something is rotten", "max_tokens": LONG,
                       "ignore_eos": True}).encode()
    with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        assert _until(lambda: stack.replica_metric("vllm:num_requests_running") == 1, 30)
    # Nothing was written back yet: the router notices the hang-up while it waits.
    assert _until(lambda: stack.aborted() == before + 1), "the replica did not abort"
    m = httpx.get(stack.url + "/metrics").text
    assert "torchtpu_router:client_disconnects_total" in m


def test_expect_100_continue(stack):
    body = json.dumps({"prompt": "Hello", "max_tokens": 2}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    with socket.create_connection(("127.0.0.1", stack.port), timeout=30) as s:
        s.sendall(head)
        interim = s.recv(4096)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n", interim
        s.sendall(body)
        out = b""
        while b"\r\n\r\n" not in out or not out.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    assert out.startswith(b"HTTP/1.1 200"), out[:200]
    assert json.loads(out.partition(b"\r\n\r\n")[2])["choices"][0]["text"] is not None
    # Over the size limit: refused at once, without the body.
    status, err = _status_and_error(_raw(stack.port, (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
        b"Content-Length: 1000000000000\r\n\r\n")))
    assert status == 413 and err["error"]["code"] == 413
    status, err = _status_and_error(_raw(stack.port, (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n"
        b"Content-Length: 2\r\n\r\n")))
    assert status == 417 and "Expect" in err["error"]["message"]


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl command line client")
def test_curl_with_expect_100_continue_does_not_wait(stack, tmp_path):
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"prompt": "Alas, poor Yorick! " * 8, "max_tokens": 1}))
    start = time.monotonic()
    out = subprocess.run(
        ["curl", "-sS", "-H", "Expect: 100-continue", "--expect100-timeout", "20",
         "-H", "Content-Type: application/json", "--data-binary", f"@{body}",
         stack.url + "/v1/completions"], capture_output=True, timeout=60, check=True)
    assert time.monotonic() - start < 15
    assert json.loads(out.stdout).get("choices"), out.stdout


def _stream_over_http_1_0(port: int) -> tuple[bytes, bytes]:
    body = json.dumps({"prompt": "Hello", "max_tokens": 4, "ignore_eos": True,
                       "stream": True, "seed": 3, "temperature": 0}).encode()
    raw = _raw(port, b"POST /v1/completions HTTP/1.0\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    head, _, events = raw.partition(b"\r\n\r\n")
    return head, events


def test_a_stream_to_an_http_1_0_client_is_not_chunked(stack):
    # HTTP/1.0 has no chunked encoding: the events come as they are and the connection
    # closes after them, as the replica (uvicorn) itself answers such a client.
    texts = []
    for port in (int(stack.replica_url.rsplit(":", 1)[1]), stack.port):
        head, events = _stream_over_http_1_0(port)
        assert head.split(b" ")[1] == b"200", head
        assert b"transfer-encoding" not in head.lower(), head
        data = [line[6:] for line in events.split(b"\n") if line.startswith(b"data: ")]
        assert data[-1] == b"[DONE]", events[-200:]
        texts.append("".join(json.loads(d)["choices"][0]["text"] for d in data[:-1]))
    assert texts[0] == texts[1], texts  # greedy: the router passes the replica's stream on
    assert httpx.get(stack.url + "/health", timeout=10).status_code == 200


RAW_CASES = {
    "garbage": b"GARBAGE\r\n\r\n",
    "bad method line": b"POST\r\nHost: x\r\n\r\n",
    "content-length overflow": (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Length: 99999999999999999999999\r\n\r\n"),
    "negative content-length": (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Length: -1\r\n\r\n"),
    "huge content-length": (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Length: 18446744073709551615\r\n\r\n"),
    "two content-lengths": (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2"
                            b"\r\nContent-Length: 3\r\n\r\n{}"),
    "bad chunk size": (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
    "huge header": b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
}


@pytest.mark.parametrize("name", list(RAW_CASES))
def test_malformed_http_gets_an_error_not_a_crash(stack, name):
    status, err = _status_and_error(_raw(stack.port, RAW_CASES[name]))
    assert status in (400, 413, 431), (name, status, err)  # 431: a header over the limit
    assert err["error"]["code"] == status and err["error"]["message"]
    assert httpx.get(stack.url + "/health", timeout=10).status_code == 200


BIG = 2**64
BODY_CASES = [
    b"", b"not json", b"{", b"[]", b"null", b"\xff\xfe\x00", b'{"prompt": 1e999}',
    b'{"prompt": "\xff\xfe"}', b'{"prompt": "x", "max_tokens": -1}',
    b'{"prompt": "x", "max_tokens": %d}' % BIG, b'{"prompt": "x", "max_tokens": NaN}',
    b'{"prompt": "x", "max_tokens": 1.5}', b'{"prompt": "x", "temperature": NaN}',
    b'{"prompt": "x", "temperature": Infinity}', b'{"prompt": "x", "temperature": -1}',
    b'{"prompt": "x", "top_p": 0}', b'{"prompt": "x", "n": 0}',
    b'{"prompt": "x", "n": %d}' % BIG, b'{"prompt": "x", "seed": %d}' % BIG,
    b'{"prompt": "x", "top_k": -2}', b'{"prompt": "x", "logprobs": %d}' % BIG,
    b'{"prompt": [%d]}' % BIG, b'{"prompt": [-1]}', b'{"prompt": []}',
    b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}",
]


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_bad_bodies_get_openai_errors(stack, route):
    with httpx.Client(timeout=60) as client:
        for body in BODY_CASES:
            if route.endswith("chat/completions"):
                body = body.replace(b'"prompt": "x"',
                                    b'"messages": [{"role": "user", "content": "x"}]')
                body = body.replace(b'"prompt": ', b'"messages": ')
            r = client.post(stack.url + route, content=body,
                            headers={"Content-Type": "application/json"})
            assert 400 <= r.status_code < 500, (body[:80], r.status_code, r.text[:300])
            err = r.json()["error"]
            assert err["message"] and err["code"] == r.status_code, (body[:80], err)
        # And the router still routes.
        r = client.post(stack.url + "/v1/completions", json={"prompt": "Fine", "max_tokens": 1})
        assert r.status_code == 200, r.text


def _router_metric(url: str, name: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the router's /metrics")


def test_an_upstream_connection_the_replica_closed_is_not_used(stack):
    """The replica (uvicorn) closes a kept-alive connection after 5 s idle. The router finds
    that out before it writes a request there, so the request costs no failed round trip,
    and its time in the router beyond the replica's (added_latency) is measured."""
    names = ("torchtpu_router:stale_upstreams_total", "torchtpu_router:upstream_connects_total",
             "torchtpu_router:retries_total", "torchtpu_router:added_latency_seconds_count",
             "torchtpu_router:added_latency_seconds_sum")
    body = {"prompt": "Good night, sweet prince", "max_tokens": 1}
    with httpx.Client(timeout=60) as client:
        assert client.post(stack.url + "/v1/completions", json=body).status_code == 200
        before = {n: _router_metric(stack.url, n) for n in names}
        time.sleep(5.5)  # past uvicorn's keep-alive timeout
        start = time.perf_counter()
        r = client.post(stack.url + "/v1/completions", json=body)
        took = time.perf_counter() - start
        assert r.status_code == 200, r.text
    after = {n: _router_metric(stack.url, n) for n in names}
    d = {n.split(":")[1]: after[n] - before[n] for n in names}
    assert d["stale_upstreams_total"] >= 1, d
    assert d["upstream_connects_total"] == 1, d
    assert d["retries_total"] == 0, d
    assert d["added_latency_seconds_count"] == 1, d
    assert 0 < d["added_latency_seconds_sum"] < took, (d, took)
    metrics = httpx.get(stack.url + "/metrics").text
    for name in ("routing_latency_seconds", "tokenize_latency_seconds", "added_latency_seconds"):
        assert f'torchtpu_router:{name}{{quantile="0.5"}}' in metrics, name
    assert "torchtpu_router:load_spills_withheld_total 0" in metrics


def test_head_requests_and_replica_headers_pass_through(stack):
    """A HEAD request gets the replica's answer header with no body (a 405 whose
    Content-Length counts the body a GET would get), at once; the replica stays in rotation
    and the kept-alive connection serves the next request. The replica's end-to-end headers
    reach the client (Allow of a 405, the Location of a redirect, made relative to the
    router), and a target with a query string is routed like its path."""
    def upstream_errors() -> float:
        lines = httpx.get(stack.url + "/metrics", timeout=10).text.splitlines()
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines
                   if line.startswith("torchtpu_router:replica_upstream_errors_total"))

    errors = _router_metric(stack.url, "torchtpu_router:failed_requests_total")
    upstream_before = upstream_errors()
    direct = httpx.head(stack.replica_url + "/v1/completions", timeout=30)
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        start = time.monotonic()
        r = client.head("/v1/completions")
        # It waited ~5 s (the replica's keep-alive) for a body a HEAD answer has not.
        assert time.monotonic() - start < 4, "the router waited for a body HEAD has not"
        assert r.status_code == direct.status_code == 405
        assert r.content == b""
        assert r.headers["allow"] == direct.headers["allow"]
        assert r.headers["content-length"] == direct.headers["content-length"]
        ok = client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert ok.status_code == 200, ok.text
        assert client.get("/health").status_code == 200
    assert _router_metric(stack.url, "torchtpu_router:failed_requests_total") == errors
    assert upstream_errors() == upstream_before

    body = {"prompt": "hi", "max_tokens": 2}
    moved = httpx.post(stack.url + "/v1/completions/", json=body, timeout=30)
    assert moved.status_code == 307 and moved.headers["location"] == "/v1/completions"
    followed = httpx.post(stack.url + "/v1/completions/", json=body, timeout=30,
                          follow_redirects=True)
    assert followed.status_code == 200, followed.text

    routed = _router_metric(stack.url, "torchtpu_router:routed_requests_total")
    r = httpx.post(stack.url + "/v1/completions?trace=1", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert _router_metric(stack.url, "torchtpu_router:routed_requests_total") == routed + 1
