"""When the engine itself fails (here: its model runner loses its KV caches, as a device
error would leave it), in-flight requests get a 503 in OpenAI's shape, /health says so
without internals, later requests get 503, and ``serve()`` returns 1 so the process exits
for its supervisor to restart it: never a server that stays up answering 500s."""

import json
import socket
import threading
import time

import httpx
from conftest import ENGINE_ARGS, RunningServer

from torchtpu.serve import LLMEngine

LONG = {"prompt": "O Romeo", "max_tokens": 250, "temperature": 0, "ignore_eos": True, "n": 16}


def _break(engine) -> None:
    while not engine.has_unfinished():
        time.sleep(0.005)
    engine.runner.k_caches = None  # the next forward call raises inside step()


def test_engine_failure_gives_503s_and_a_private_health(tiny_llama_dir):
    srv = RunningServer(LLMEngine(tiny_llama_dir, **ENGINE_ARGS))
    try:
        url, result, streaming = srv.url, {}, threading.Event()

        def stream() -> None:
            with httpx.stream("POST", url + "/v1/completions",
                              json=dict(LONG, n=1, stream=True), timeout=60) as r:
                result["events"] = []
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        result["events"].append(line[6:])
                        streaming.set()

        threads = [threading.Thread(target=stream), threading.Thread(
            target=lambda: result.update(plain=httpx.post(url + "/v1/completions", json=LONG,
                                                          timeout=60)))]
        threads[0].start()
        assert streaming.wait(30)
        threads[1].start()
        _break(srv.app.engine)
        for t in threads:
            t.join(timeout=60)
        r = result["plain"]
        assert r.status_code == 503
        assert r.json()["error"]["type"] == "ServiceUnavailableError"
        assert r.json()["error"]["code"] == 503
        # The stream was open: it ends with an error event in OpenAI's shape, then [DONE].
        events = result["events"]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == 503
        health = httpx.get(url + "/health")
        assert health.status_code == 503
        body = health.json()
        assert set(body["error"]) == {"message", "type", "param", "code"}
        assert "Traceback" not in health.text and "k_caches" not in health.text
        assert "NoneType" not in health.text and "[" not in body["error"]["message"]
        later = httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 2})
        assert later.status_code == 503 and later.json()["error"]["code"] == 503
    finally:
        srv.stop()


def test_serve_returns_1_when_the_engine_dies(tiny_llama_dir):
    from torchtpu.serve.server import serve

    engine = LLMEngine(tiny_llama_dir, **ENGINE_ARGS)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = {}
    thread = threading.Thread(target=lambda: result.update(rc=serve(engine, sock=sock)))
    thread.start()
    for _ in range(100):
        try:
            if httpx.get(url + "/health").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.1)
    inflight = threading.Thread(target=lambda: result.update(r=httpx.post(
        url + "/v1/completions", json=LONG, timeout=60)))
    inflight.start()
    _break(engine)
    inflight.join(timeout=60)
    thread.join(timeout=60)
    assert result["r"].status_code == 503
    assert not thread.is_alive() and result["rc"] == 1
