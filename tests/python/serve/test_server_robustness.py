"""No single request harms the server: each hostile or extreme request gets a correct answer
or an error in OpenAI's shape (never a 5xx), and afterwards a greedy request returns the
same text as before it."""

import json
import math
import time

import httpx
import pytest

GREEDY = {"model": "tiny", "prompt": "To be, or not to be", "max_tokens": 6, "temperature": 0}


def _post(url: str, body: dict | None = None, raw: bytes | None = None,
          route: str = "/v1/completions") -> httpx.Response:
    # json.dumps writes NaN and Infinity, which httpx's encoder refuses to send.
    content = raw if raw is not None else json.dumps(body).encode()
    return httpx.post(url + route, content=content, timeout=60,
                      headers={"content-type": "application/json"})


def _is_openai_error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == status
    return err


@pytest.fixture(scope="module")
def url(served):
    return served.url


@pytest.fixture(scope="module")
def greedy_text(url):
    r = _post(url, GREEDY)
    assert r.status_code == 200
    return r.json()["choices"][0]["text"]


def _still_serves(url: str, greedy_text: str) -> None:
    r = _post(url, GREEDY)
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == greedy_text
    assert httpx.get(url + "/health").status_code == 200


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "Speak"}], "max_tokens": 4}


@pytest.mark.parametrize("route,body,param", [
    ("/v1/completions", dict(GREEDY, seed=2**64), "seed"),
    ("/v1/completions", dict(GREEDY, stop_token_ids=[2**70]), "stop_token_ids"),
    ("/v1/completions", dict(GREEDY, stop_token_ids=[10**6]), "stop_token_ids"),
    ("/v1/completions", dict(GREEDY, prompt=[2**70]), "prompt"),
    ("/v1/completions", dict(GREEDY, logit_bias={"99999999": 5}), "logit_bias"),
    ("/v1/completions", dict(GREEDY, logit_bias={"x": 5}), "logit_bias"),
    ("/v1/completions", dict(GREEDY, logit_bias={" 5": 5}), "logit_bias"),
    ("/v1/completions", dict(GREEDY, logit_bias={"\u0665": 5}), "logit_bias"),
    ("/v1/completions", dict(GREEDY, logit_bias={"5_0": 5}), "logit_bias"),
    ("/v1/completions", dict(GREEDY, max_tokens=0), "max_tokens"),
    ("/v1/completions", dict(GREEDY, stream_options={"include_usage": True}),
     "stream_options"),
    ("/v1/chat/completions", dict(CHAT, stream_options={"include_usage": False}),
     "stream_options"),
    ("/v1/completions", dict(GREEDY, suffix="!"), "suffix"),
    ("/v1/completions", dict(GREEDY, prompt_logprobs=21), "prompt_logprobs"),
    ("/v1/completions", dict(GREEDY, prompt_logprobs=-1), "prompt_logprobs"),
    ("/v1/completions", dict(GREEDY, n=2, best_of=1), "best_of"),
    ("/v1/completions", dict(GREEDY, best_of=2, stream=True), "best_of"),
    ("/v1/completions", dict(GREEDY, min_tokens=7), "min_tokens"),
    ("/v1/completions", dict(GREEDY, response_format={"type": "bogus"}), "response_format"),
    ("/v1/completions", dict(GREEDY, guided_json={"type": "bogus"}), "guided_json"),
    ("/v1/completions", dict(GREEDY, guided_regex="(a"), "guided_regex"),
    ("/v1/completions", dict(GREEDY, guided_regex="a", guided_choice=["b"]), "guided_choice"),
    ("/v1/completions", dict(GREEDY, guided_whitespace_pattern=" "), "guided_whitespace_pattern"),
    ("/v1/chat/completions", dict(CHAT, max_completion_tokens=0), "max_completion_tokens"),
    ("/v1/chat/completions", dict(CHAT, response_format={"type": "json_schema"}),
     "response_format"),
    ("/v1/chat/completions", dict(CHAT, tools=[{"type": "function", "function": {
        "name": "f", "parameters": {}}}]), "tools"),
    ("/v1/chat/completions", dict(CHAT, tools=[{"type": "function", "function": {
        "name": "bad name!"}}]), "tools"),
    ("/v1/chat/completions", dict(CHAT, functions=[{"name": "f"}]), "functions"),
    ("/v1/chat/completions", dict(CHAT, tool_choice="required"), "tool_choice"),
    ("/v1/chat/completions", dict(CHAT, chat_template_kwargs={"tokenize": True}),
     "chat_template_kwargs"),
    ("/v1/chat/completions", dict(CHAT, messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "x"}}]}]), "messages"),
])
def test_bad_request_is_a_400_naming_the_field(url, greedy_text, route, body, param):
    err = _is_openai_error(_post(url, body, route=route), 400)
    assert err["param"] == param and param.split(".")[0] in err["message"]
    _still_serves(url, greedy_text)


def test_too_many_sequences_in_one_request_is_a_400_before_any_work(url, greedy_text):
    # 300,000 one-token prompts fit the body limit; times n they would be ~10^7 sequences.
    t0 = time.perf_counter()
    err = _is_openai_error(_post(url, dict(GREEDY, prompt=[[5]] * 300_000, n=32)), 400)
    assert err["param"] == "prompt" and "9600000 sequences" in err["message"]
    assert "--max-request-sequences" in err["message"]
    assert time.perf_counter() - t0 < 10
    err = _is_openai_error(_post(url, dict(GREEDY, prompt=["a"] * 9, best_of=128)), 400)
    assert "1152 sequences" in err["message"]
    r = _post(url, dict(GREEDY, prompt=["a"] * 8, n=2, max_tokens=1))  # 16: served
    assert r.status_code == 200 and len(r.json()["choices"]) == 16
    _still_serves(url, greedy_text)


def test_tiny_temperature_is_greedy(url, greedy_text):
    for t in (1e-40, 5e-324, 1e-6):
        r = _post(url, dict(GREEDY, temperature=t))
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == greedy_text


@pytest.mark.parametrize("raw,match", [
    (b'{"model": "tiny", "prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", "too deeply"),
    (b'{"model": "tiny", "prompt": "\\ud800"}', "surrogate"),
    (b'{"model": "tiny", "prompt": "a\\udc00b"}', "surrogate"),
    (b'{"model": "tiny", "prompt": "\xff\xfe"}', "not valid JSON"),
    (b'{"model": "tiny", "prompt": "x", "temperature": NaN}', "temperature"),
    (b'{"model": "tiny", "prompt": "x", "top_p": Infinity}', "top_p"),
    (b"[1, 2]", "must be a JSON object"),
    (b"", "not valid JSON"),
])
def test_malformed_bodies_are_400(url, greedy_text, raw, match):
    err = _is_openai_error(_post(url, raw=raw), 400)
    assert match in err["message"]
    _still_serves(url, greedy_text)


@pytest.mark.parametrize("content_type,accepted", [
    ("application/json", True), ("application/json; charset=utf-8", True),
    ("application/vnd.api+json", True), (None, True),
    ("text/plain", False), ("application/x-www-form-urlencoded", False),
    ("multipart/form-data; boundary=x", False)])
def test_a_body_that_is_not_declared_json_is_refused(url, greedy_text, content_type, accepted):
    # FastAPI's rule, so vLLM's: JSON when declared so or undeclared. A form or text body is
    # what a web page may POST cross-origin without a preflight.
    body = json.dumps({"prompt": "x", "max_tokens": 1}).encode()
    headers = {} if content_type is None else {"content-type": content_type}
    r = httpx.post(url + "/v1/completions", content=body, headers=headers, timeout=60)
    if accepted:
        assert r.status_code == 200, r.text
    else:
        assert "must be JSON" in _is_openai_error(r, 400)["message"]
    _still_serves(url, greedy_text)


def test_oversized_body_is_413_without_stalling_the_loop(url, greedy_text):
    t0 = time.perf_counter()
    err = _is_openai_error(_post(url, raw=b'{"prompt": "' + b"a" * (5 << 20) + b'"}'), 413)
    assert "limit" in err["message"]
    assert time.perf_counter() - t0 < 5

    def chunks():  # no content-length: the limit is counted while reading
        yield b'{"prompt": "'
        for _ in range(80):
            yield b"a" * (64 << 10)
        yield b'"}'
    r = httpx.post(url + "/v1/completions", content=chunks(), timeout=60)
    _is_openai_error(r, 413)
    _still_serves(url, greedy_text)


def test_routes_and_methods_errors_have_openai_shape(url):
    assert "routes" in _is_openai_error(httpx.get(url + "/v2/nothing"), 404)["message"]
    _is_openai_error(httpx.get(url + "/v1/completions"), 405)
    _is_openai_error(httpx.get(url + "/v1/models/other"), 404)
    _is_openai_error(httpx.delete(url + "/health"), 405)
    # A 405 says which methods the route takes (RFC 9110), as FastAPI's own handler does.
    assert httpx.put(url + "/v1/completions").headers.get("allow") == "POST"
    assert set(httpx.delete(url + "/health").headers.get("allow").split(", ")) == {"GET", "HEAD"}


def test_health_body_is_empty_and_tokens_stay_private(url):
    r = httpx.get(url + "/health")
    assert r.status_code == 200 and r.content == b""
    r = httpx.head(url + "/health")  # probes that check with HEAD
    assert r.status_code == 200 and r.content == b""


def test_long_prompt_tokenizes_off_the_event_loop(served, url):
    # A 2 MB prompt takes the tokenizer a while; /health must answer meanwhile, much
    # faster than the tokenization itself (so it did not wait for it).
    import threading

    prompt = "the king " * 230_000
    t0 = time.perf_counter()
    served.app.tokenizer.encode(prompt)
    encode_s = time.perf_counter() - t0
    if encode_s < 0.4:
        pytest.skip(f"tokenizing took {encode_s:.2f} s: too fast to tell a stall from none")
    result = {}
    # Truncated, the prompt is tokenized whole (a prompt too long to fit whole is refused
    # from its size before the tokenizer sees it).
    body = dict(GREEDY, prompt=prompt, truncate_prompt_tokens=8)
    t = threading.Thread(target=lambda: result.update(r=_post(url, body)))
    t.start()
    latencies = []
    while t.is_alive():
        t0 = time.perf_counter()
        assert httpx.get(url + "/health", timeout=30).status_code == 200
        latencies.append(time.perf_counter() - t0)
        time.sleep(0.02)
    t.join()
    assert result["r"].status_code == 200, result["r"].text
    assert result["r"].json()["usage"]["prompt_tokens"] == 8
    assert len(latencies) >= 2 and max(latencies) < encode_s / 2, (latencies, encode_s)


@pytest.mark.parametrize("route,make", [
    ("/v1/completions", lambda text: dict(GREEDY, prompt=text)),
    ("/v1/completions", lambda text: dict(GREEDY, prompt=["To be", text])),
    ("/v1/chat/completions", lambda text: dict(CHAT, messages=[
        {"role": "system", "content": "Be brief"}, {"role": "user", "content": text}])),
])
def test_a_prompt_too_long_by_its_size_is_refused_untokenized(served, url, greedy_text,
                                                              route, make):
    from torchtpu.serve import prompts

    token_bytes = prompts.max_token_bytes(served.app.tokenizer)
    assert token_bytes == served.app.max_token_bytes and token_bytes >= 1
    max_len = served.app.engine.max_model_len
    text = "x" * (token_bytes * max_len + 1)  # at least max_len + 1 tokens, however split
    err = _is_openai_error(_post(url, make(text), route=route), 400)
    assert "maximum context length" in err["message"] and "at least" in err["message"], err
    assert err["param"] == ("prompt" if route == "/v1/completions" else "messages")
    # Truncated, or only echoed, the same prompt is served.
    if route == "/v1/completions":
        r = _post(url, dict(make(text), truncate_prompt_tokens=4, max_tokens=2))
        n = len(make(text)["prompt"]) if isinstance(make(text)["prompt"], list) else 1
        assert r.status_code == 200 and len(r.json()["choices"]) == n, r.text
        r = _post(url, dict(make(text), prompt=text, echo=True, max_tokens=0))
        assert r.status_code == 200 and r.json()["choices"][0]["text"] == text
    _still_serves(url, greedy_text)


def test_client_disconnect_aborts_a_non_streaming_request(served, url):
    engine = served.app.engine
    # 32 sequences of 250 tokens, 4 at a time: seconds of work for the tiny model.
    body = dict(GREEDY, max_tokens=250, ignore_eos=True, prompt="O", n=32)
    before = _aborted(url)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/completions", json=body, timeout=0.3)
    t0 = time.time()
    while engine.has_unfinished() and time.time() - t0 < 30:
        time.sleep(0.02)
    assert not engine.has_unfinished()
    assert _aborted(url) - before >= 16


def _gauges(url: str) -> dict[str, float]:
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting",
             "vllm:kv_cache_usage_perc")
    return {line.split("{")[0]: float(line.rsplit(" ", 1)[1])
            for line in httpx.get(url + "/metrics").text.splitlines()
            if line.startswith(names)}


def test_metrics_return_to_idle_after_the_last_request_is_aborted(served, url):
    """Aborts change the scheduler between steps: when they empty the engine no step
    follows, so the gauges must be refreshed by the abort itself."""
    engine = served.app.engine
    body = dict(GREEDY, max_tokens=250, ignore_eos=True, prompt="O", n=16)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + "/v1/completions", json=body, timeout=0.3)
    t0 = time.time()
    gauges = _gauges(url)
    while (engine.has_unfinished() or gauges["vllm:num_requests_waiting"]
           or gauges["vllm:num_requests_running"]) and time.time() - t0 < 30:
        time.sleep(0.05)
        gauges = _gauges(url)
    assert not engine.has_unfinished()
    assert gauges["vllm:num_requests_running"] == 0, gauges
    assert gauges["vllm:num_requests_waiting"] == 0, gauges
    assert gauges["vllm:kv_cache_usage_perc"] == engine.scheduler.kv_cache_usage


@pytest.mark.parametrize("route,body,param,forms", [
    ("/v1/completions", dict(GREEDY, prompt=[1.5]), "prompt",
     "str; list[str]; list[int]; list[list[int]]"),
    ("/v1/completions", dict(GREEDY, prompt=[[1, "a"]]), "prompt", "list[list[int]] at 0.1"),
    ("/v1/completions", dict(GREEDY, stop=5), "stop", "str; list[str]"),
    ("/v1/chat/completions", dict(CHAT, messages=[{"role": "user", "content": 5}]),
     "messages", "'messages.0.content' must be one of: str; list[TextPart]"),
    ("/v1/chat/completions", dict(CHAT, tool_choice="sometimes"), "tool_choice",
     "NamedToolChoice"),
])
def test_a_value_no_form_of_a_union_field_accepts_names_the_forms(url, route, body, param,
                                                                  forms):
    err = _is_openai_error(_post(url, body, route=route), 400)
    assert err["param"] == param and "must be one of" in err["message"], err
    assert forms in err["message"], err


def _aborted(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith("vllm:request_success_total{") and 'finished_reason="abort"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# --- every numeric field over the extremes ---------------------------------------------
EXTREMES = [0, -1, 1e-40, 1e300, 2**63, 2**64, -(2**64), math.nan, math.inf, -math.inf]
COMPLETION_FIELDS = {
    "max_tokens": lambda v: {"max_tokens": v},
    "temperature": lambda v: {"temperature": v},
    "top_p": lambda v: {"top_p": v},
    "top_k": lambda v: {"top_k": v, "temperature": 1.0},
    "min_p": lambda v: {"min_p": v, "temperature": 1.0},
    "seed": lambda v: {"seed": v, "temperature": 1.0},
    "n": lambda v: {"n": v},
    "best_of": lambda v: {"best_of": v},
    "presence_penalty": lambda v: {"presence_penalty": v},
    "frequency_penalty": lambda v: {"frequency_penalty": v},
    "repetition_penalty": lambda v: {"repetition_penalty": v},
    "logprobs": lambda v: {"logprobs": v},
    "min_tokens": lambda v: {"min_tokens": v},
    "truncate_prompt_tokens": lambda v: {"truncate_prompt_tokens": v},
    "logit_bias": lambda v: {"logit_bias": {"5": v}},
    "logit_bias_key": lambda v: {"logit_bias": {str(v): 1}},
    "stop_token_ids": lambda v: {"stop_token_ids": [v]},
    "allowed_token_ids": lambda v: {"allowed_token_ids": [v]},
    "prompt": lambda v: {"prompt": [v]},
}
CHAT_FIELDS = {
    "max_completion_tokens": lambda v: {"max_completion_tokens": v},
    "max_tokens": lambda v: {"max_tokens": v},
    "top_logprobs": lambda v: {"logprobs": True, "top_logprobs": v},
    "temperature": lambda v: {"temperature": v},
    "seed": lambda v: {"seed": v},
}


@pytest.mark.parametrize("route,fields", [("/v1/completions", COMPLETION_FIELDS),
                                          ("/v1/chat/completions", CHAT_FIELDS)])
def test_numeric_fields_at_extremes_never_break_the_engine(url, greedy_text, route, fields):
    base = GREEDY if route == "/v1/completions" else dict(CHAT, temperature=0)
    outcomes = {}
    for name, make in fields.items():
        for v in EXTREMES:
            r = _post(url, dict(base, **make(v)), route=route)
            assert r.status_code in (200, 400), (name, v, r.text)
            if r.status_code == 400:
                err = _is_openai_error(r, 400)
                assert err["param"] == name.removesuffix("_key") or name == "top_logprobs", \
                    (name, v, err)
            outcomes[(name, repr(v))] = r.status_code
            _still_serves(url, greedy_text)
    # The in-range values among the extremes are served, not refused.
    for name in ("temperature", "seed"):
        assert outcomes[(name, "0")] == 200
    assert outcomes[("seed", "-1")] == 200
    assert all(outcomes[(name, "nan")] == 400 for name in fields if name != "logit_bias_key")


@pytest.mark.parametrize("route,body", [
    ("/v1/completions", dict(GREEDY, n=None, stream=None, echo=None, presence_penalty=None,
                             frequency_penalty=None, ignore_eos=None, min_tokens=None,
                             include_stop_str_in_output=None, skip_special_tokens=None,
                             speculative=None, stream_options=None)),
    ("/v1/chat/completions", dict(CHAT, temperature=0, logprobs=None, n=None, stream=None,
                                  add_generation_prompt=None, continue_final_message=None)),
])
def test_explicit_null_is_the_fields_default(url, greedy_text, route, body):
    # Clients that send every field send null for the unset ones (OpenAI's schema makes
    # them nullable; vLLM takes null as the default).
    r = _post(url, body, route=route)
    assert r.status_code == 200, r.text
    if route == "/v1/completions":
        assert r.json()["choices"][0]["text"] == greedy_text
    r = _post(url, dict(GREEDY, stream=True, stream_options={"include_usage": None}))
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]")
    _is_openai_error(_post(url, dict(GREEDY, prompt=None)), 400)


def test_constraints_that_leave_no_token_are_a_400(served, url, greedy_text):
    eos = served.app.engine.tokenizer.eos_token_id
    err = _is_openai_error(_post(url, dict(GREEDY, allowed_token_ids=[eos], min_tokens=2)),
                           400)
    assert "masked every token" in err["message"]
    _still_serves(url, greedy_text)


def test_too_many_stop_strings_are_a_400(url, greedy_text):
    err = _is_openai_error(_post(url, dict(GREEDY, stop=[f"#{i:06d}" for i in range(300)])),
                           400)
    assert err["param"] == "stop" and "256" in err["message"]
    r = _post(url, dict(GREEDY, stop=[f"#{i:06d}" for i in range(256)]))
    assert r.status_code == 200
    _still_serves(url, greedy_text)


def test_response_ids_are_random(url):
    ids = {_post(url, GREEDY).json()["id"] for _ in range(3)}
    assert len(ids) == 3 and all(i.startswith("cmpl-") and len(i) > 20 for i in ids)
    assert _post(url, dict(GREEDY, request_id="abc")).json()["id"] == "cmpl-abc"


def test_client_gone_mid_body_is_not_a_server_error(served, url, greedy_text, caplog):
    import socket
    from urllib.parse import urlparse

    where = urlparse(url)
    body = json.dumps(GREEDY).encode()
    with socket.create_connection((where.hostname, where.port), timeout=10) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + body[:40])
    time.sleep(0.5)
    errors = [r for r in caplog.records if r.levelno >= 40]
    assert not errors, [r.getMessage() for r in errors]
    _still_serves(url, greedy_text)


def test_a_large_tokenization_does_not_hold_up_other_requests(url, served):
    # A multi-megabyte body takes seconds of tokenizing; it runs on a thread of its own
    # (with its own tokenizer). Here that thread is held busy: a small request is still
    # answered, the large one waits for its thread, and both counts are right.
    import concurrent.futures as cf
    import threading

    text = open(__import__("tiny_models").DATA).read() * 2
    small = "To be, or not to be"
    busy = threading.Event()
    served.app._large_pool.submit(busy.wait, 60)
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            big = pool.submit(_post, url, {"prompt": text}, None, "/tokenize")
            little = _post(url, {"prompt": small}, route="/tokenize")
            assert little.status_code == 200 and not big.done()
            busy.set()
            big = big.result()
    finally:
        busy.set()
    tok = served.app.tokenizer
    assert little.json()["count"] == len(tok.encode(small))
    assert big.status_code == 200 and big.json()["count"] == len(tok.encode(text))
