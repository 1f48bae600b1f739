"""The OpenAI-compatible server, driven by the real `openai` client (and raw HTTP for the
malformed cases)."""

import json
import time

import httpx
import openai
import pytest


@pytest.fixture(scope="module")
def server(served):
    return served.app, served.url


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server[1] + "/v1", api_key="none", max_retries=0)


def _wait_idle(app, timeout=30):
    t0 = time.time()
    while app.engine.has_unfinished() and time.time() - t0 < timeout:
        time.sleep(0.05)
    assert not app.engine.has_unfinished()


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(server[1] + "/health").status_code == 200
    # vLLM's model card: OpenAI's fields, and root, parent, max_model_len, permission.
    card = httpx.get(server[1] + "/v1/models").json()["data"][0]
    assert {"id", "object", "created", "owned_by", "root", "parent", "max_model_len",
            "permission"} <= set(card) and card["parent"] is None
    assert card["permission"][0]["object"] == "model_permission"
    one = httpx.get(server[1] + "/v1/models/tiny").json()
    assert set(one) == set(card) and one["id"] == "tiny"


def test_completion_matches_offline_greedy(server, client):
    app, _ = server
    r = client.completions.create(model="tiny", prompt="To be, or not to be", max_tokens=12,
                                  temperature=0)
    ids = app.engine.tokenizer.encode("To be, or not to be")
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == 12 or r.choices[0].finish_reason == "stop"
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # Streaming gives the same text, chunk by chunk.
    stream = client.completions.create(model="tiny", prompt="To be, or not to be",
                                       max_tokens=12, temperature=0, stream=True)
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert text == r.choices[0].text
    # Every field of OpenAI's response object, system_fingerprint as vLLM sends it (null).
    assert "system_fingerprint" in r.model_dump(exclude_unset=True)
    assert r.system_fingerprint is None


def test_streamed_logprob_offsets_equal_the_whole_responses(client):
    # A stop string holds text back; each chunk's offsets started at the text sent so far,
    # which lagged behind the tokens (the first two tokens both at 0).
    kw = dict(model="tiny", prompt="To be, or not to be", max_tokens=12, temperature=0,
              logprobs=1, stop=["zzzzzzzzzzzz"])
    whole = client.completions.create(**kw).choices[0].logprobs
    offsets, tokens = [], []
    for c in client.completions.create(stream=True, **kw):
        if c.choices and c.choices[0].logprobs:
            offsets += c.choices[0].logprobs.text_offset
            tokens += c.choices[0].logprobs.tokens
    assert tokens == whole.tokens
    assert offsets == whole.text_offset


def test_chat_streaming_and_not(client):
    msgs = [{"role": "system", "content": "You are a poet."},
            {"role": "user", "content": "Speak of the king."}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10,
                                       temperature=0, seed=1)
    assert r.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == r.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")


def test_seeded_sampling_is_reproducible_and_logprobs(client):
    kw = dict(model="tiny", prompt="Now is the winter", max_tokens=8, temperature=1.0,
              top_p=0.9, seed=1234, logprobs=3)
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    assert a.choices[0].text == b.choices[0].text
    lp = a.choices[0].logprobs
    assert len(lp.token_logprobs) == a.usage.completion_tokens
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(len(t) <= 4 for t in lp.top_logprobs)  # the sampled token and the top 3


def test_stop_string(client):
    r = client.completions.create(model="tiny", prompt="To be", max_tokens=40, temperature=0)
    full = r.choices[0].text
    if len(full.strip()) < 4:
        pytest.skip("greedy text too short to cut")
    stop = full.strip()[2:4]
    r2 = client.completions.create(model="tiny", prompt="To be", max_tokens=40, temperature=0,
                                   stop=[stop])
    assert r2.choices[0].finish_reason == "stop"
    assert r2.choices[0].text == full[: full.index(stop)]


@pytest.mark.parametrize("body,status,match", [
    (b"{not json", 400, "not valid JSON"),
    (json.dumps({"model": "nope", "prompt": "hi"}).encode(), 404, "does not exist"),
    (json.dumps({"model": "tiny", "prompt": "hi " * 400}).encode(), 400, "maximum context"),
    (json.dumps({"model": "tiny", "prompt": "hi", "temperature": -1}).encode(), 400, "temperature"),
    (json.dumps({"model": "tiny", "prompt": "hi", "top_p": 0}).encode(), 400, "top_p"),
    (json.dumps({"model": "tiny", "prompt": "hi", "max_tokens": 0}).encode(), 400, "max_tokens"),
    (json.dumps({"model": "tiny", "prompt": []}).encode(), 400, "prompt"),
])
def test_bad_requests_get_openai_errors(server, body, status, match):
    r = httpx.post(server[1] + "/v1/completions", content=body,
                   headers={"content-type": "application/json"})
    assert r.status_code == status
    err = r.json()["error"]
    assert match in err["message"] and err["code"] == status
    assert httpx.get(server[1] + "/health").status_code == 200


def test_openai_client_sees_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="presence_penalty"):
        client.completions.create(model="tiny", prompt="x", presence_penalty=5)


def test_disconnect_mid_stream_frees_pages(server):
    app, url = server
    _wait_idle(app)
    sched = app.engine.scheduler
    body = {"model": "tiny", "prompt": "O Romeo, Romeo", "max_tokens": 150, "stream": True,
            "ignore_eos": True}
    with httpx.stream("POST", url + "/v1/completions", json=body) as r:
        for i, _ in enumerate(r.iter_lines()):
            if i >= 6:
                break  # leave mid-stream
    _wait_idle(app)
    sched.reset_prefix_cache()
    assert sched.num_free_pages == sched.num_total_pages


def test_concurrent_requests_all_complete_and_metrics(server, client):
    import concurrent.futures as cf

    app, url = server
    prompts = [f"Line {i}: " + "the king " * (i * 3 + 1) for i in range(10)]
    with cf.ThreadPoolExecutor(10) as pool:
        outs = list(pool.map(lambda p: client.completions.create(
            model="tiny", prompt=p, max_tokens=20, temperature=0, extra_body={"ignore_eos": True}),
            prompts))
    assert all(o.usage.completion_tokens == 20 for o in outs)
    text = httpx.get(url + "/metrics").text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:generation_tokens_total", "vllm:inter_token_latency_seconds_count"):
        assert name in text, name


def _metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_queue_and_prefill_time_histograms(server, client):
    app, url = server
    _wait_idle(app)
    names = [f"vllm:{m}_seconds_{s}" for m in ("request_queue_time", "request_prefill_time",
                                                "time_to_first_token") for s in ("count", "sum")]
    before = httpx.get(url + "/metrics").text
    prompts = [f"Request {i}: " + "the queen " * (5 * i + 2) for i in range(3)]
    for p in prompts:
        client.completions.create(model="tiny", prompt=p, max_tokens=2, temperature=0)
    after = httpx.get(url + "/metrics").text
    d = {n: _metric(after, n) - _metric(before, n) for n in names}
    assert d["vllm:request_queue_time_seconds_count"] == 3
    assert d["vllm:request_prefill_time_seconds_count"] == 3
    assert d["vllm:request_queue_time_seconds_sum"] >= 0
    assert d["vllm:request_prefill_time_seconds_sum"] > 0  # a prefill step takes time
    # Queue time then prefill time make up the time to first token, request by request.
    assert d["vllm:request_queue_time_seconds_sum"] + d["vllm:request_prefill_time_seconds_sum"] \
        == pytest.approx(d["vllm:time_to_first_token_seconds_sum"], rel=1e-6, abs=1e-6)


def test_request_size_and_phase_histograms(server, client):
    # vLLM's per-request histograms (tokens, max_tokens, decode and inference time) and
    # tokens per engine step; no `_created` series beside them (vLLM turns those off).
    app, url = server
    _wait_idle(app)
    names = ["vllm:request_prompt_tokens_count", "vllm:request_prompt_tokens_sum",
             "vllm:request_generation_tokens_sum", "vllm:request_params_max_tokens_sum",
             "vllm:request_decode_time_seconds_count", "vllm:request_inference_time_seconds_count",
             "vllm:iteration_tokens_total_sum"]
    before = httpx.get(url + "/metrics").text
    r = client.completions.create(model="tiny", prompt="A walrus sings", max_tokens=5,
                                  temperature=0, extra_body={"ignore_eos": True})
    after = httpx.get(url + "/metrics").text
    d = {n: _metric(after, n) - _metric(before, n) for n in names}
    assert d["vllm:request_prompt_tokens_count"] == 1
    assert d["vllm:request_prompt_tokens_sum"] == r.usage.prompt_tokens
    assert d["vllm:request_generation_tokens_sum"] == 5
    assert d["vllm:request_params_max_tokens_sum"] == 5
    assert d["vllm:request_decode_time_seconds_count"] == 1
    assert d["vllm:request_inference_time_seconds_count"] == 1
    # The prompt, then one token per decode step (the last sampled token is not computed).
    assert d["vllm:iteration_tokens_total_sum"] == r.usage.prompt_tokens + 4
    assert "_created" not in after


def test_tokenize_returns_token_strings_on_request(server):
    # vLLM's return_token_strs: each id's token string, null unless asked for.
    app, url = server
    body = {"model": "tiny", "prompt": "Hello there"}
    plain = httpx.post(url + "/tokenize", json=body, timeout=30).json()
    assert plain["token_strs"] is None
    asked = httpx.post(url + "/tokenize", json=dict(body, return_token_strs=True),
                       timeout=30).json()
    assert asked["tokens"] == plain["tokens"]
    assert asked["token_strs"] == app.engine.tokenizer.convert_ids_to_tokens(plain["tokens"])
    assert len(asked["token_strs"]) == asked["count"]
