"""Every field of the completions and chat request models is honoured (checked here by
its effect on the output) or rejected with a 400 naming it; none is silently ignored.

The test list is built from the models themselves, so a field added without a check here
fails ``test_every_field_has_a_check``."""

import json
import re

import httpx
import pytest

from torchtpu.serve.protocol import (
    INFORMATIONAL,
    ChatCompletionRequest,
    CompletionRequest,
    Message,
    unsupported_fields,
)

FORCED = 40  # a token id logit_bias can force


class Endpoint:
    def __init__(self, url: str, chat: bool, tokenizer) -> None:
        self.url, self.chat, self.tok = url, chat, tokenizer
        self.route = "/v1/chat/completions" if chat else "/v1/completions"
        self.base = {"model": "tiny", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
        if chat:
            self.base["messages"] = [{"role": "user", "content": "Speak of the king."}]
        else:
            self.base["prompt"] = "To be, or not to be"

    def post(self, **fields) -> httpx.Response:
        body = {k: v for k, v in dict(self.base, **fields).items() if v is not None}
        return httpx.post(self.url + self.route, content=json.dumps(body), timeout=60,
                          headers={"content-type": "application/json"})

    def ok(self, **fields) -> dict:
        r = self.post(**fields)
        assert r.status_code == 200, r.text
        return r.json()

    def refused(self, param: str, **fields) -> None:
        r = self.post(**fields)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == param and param in err["message"], err

    def texts(self, body: dict) -> list[str]:
        return [c["message"]["content"] if self.chat else c["text"] for c in body["choices"]]

    def text(self, **fields) -> str:
        return self.texts(self.ok(**fields))[0]

    def stream_text(self, **fields) -> tuple[str, list[dict]]:
        body = dict(self.base, stream=True, **fields)
        with httpx.stream("POST", self.url + self.route, json=body, timeout=60) as r:
            chunks = [json.loads(line[6:]) for line in r.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        piece = (lambda c: c["delta"].get("content") or "") if self.chat else \
            (lambda c: c["text"])
        return "".join(piece(c) for ch in chunks for c in ch["choices"]), chunks


def _seeded_texts(e: Endpoint, **fields) -> list[str]:
    return [e.text(temperature=1.5, seed=s, **fields) for s in range(4)]


# --- checks: fn(endpoint) --------------------------------------------------------------
def c_model(e):
    e.ok(model="tiny")
    assert e.post(model="other").status_code == 404


def c_temperature(e):
    greedy = e.text()
    assert e.text(temperature=1e-30) == greedy
    assert any(t != greedy for t in _seeded_texts(e))
    # vLLM bounds it below only (OpenAI's API stops at 2): near-uniform draws, finite.
    assert e.text(temperature=2.5, seed=0) == e.text(temperature=2.5, seed=0)
    assert e.ok(temperature=1e30, seed=1, ignore_eos=True)["usage"]["completion_tokens"] == 8
    e.refused("temperature", temperature=-0.1)


def c_top_p(e):
    assert set(_seeded_texts(e, top_p=1e-9)) == {e.text()}


def c_top_k(e):
    assert set(_seeded_texts(e, top_k=1)) == {e.text()}


def c_min_p(e):
    assert set(_seeded_texts(e, min_p=1.0)) == {e.text()}


def c_seed(e):
    a = _seeded_texts(e)
    assert a == _seeded_texts(e) and len(set(a)) > 1


def c_n(e):
    body = e.ok(n=3, temperature=1.5, seed=5)
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert len(set(e.texts(body))) > 1
    assert body["usage"]["completion_tokens"] == 3 * 8


def c_best_of(e):
    # best_of=4 returns the sequence with the best mean logprob among the 4 that n=4 (same
    # seed, so the same sequences) returns.
    lp = {"logprobs": 0} if not e.chat else {"logprobs": True}
    all4 = e.ok(n=4, temperature=1.5, seed=9, **lp)
    def mean(c):
        values = c["logprobs"]["token_logprobs"] if not e.chat else \
            [t["logprob"] for t in c["logprobs"]["content"]]
        return sum(values) / len(values)
    best = max(all4["choices"], key=mean)
    one = e.ok(n=1, best_of=4, temperature=1.5, seed=9)
    assert len(one["choices"]) == 1
    assert e.texts(one)[0] == e.texts({"choices": [best]})[0]
    assert one["usage"]["completion_tokens"] == 4 * 8


def c_stop(e):
    full = e.text(max_tokens=16)
    stop = full[3:5]
    body = e.ok(max_tokens=16, stop=[stop], ignore_eos=False)
    assert e.texts(body)[0] == full[:full.index(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["choices"][0]["stop_reason"] == stop  # vLLM's field: what stopped it
    assert e.ok(max_tokens=16)["choices"][0]["stop_reason"] is None


def c_include_stop_str_in_output(e):
    full = e.text(max_tokens=16)
    stop = full[3:5]
    got = e.text(max_tokens=16, stop=stop, include_stop_str_in_output=True)
    assert got == full[:full.index(stop) + len(stop)]
    # A stop token's text too (an end-of-sequence token is special, so skipped anyway).
    forced = dict(logit_bias={str(FORCED): 100}, stop_token_ids=[FORCED], ignore_eos=False)
    assert e.text(**forced, include_stop_str_in_output=True) == e.tok.decode([FORCED])
    assert e.text(**forced) == ""


def c_stream(e):
    text, chunks = e.stream_text()
    assert text == e.text() and len(chunks) > 1


def c_stream_options(e):
    _, chunks = e.stream_text(stream_options={"include_usage": True})
    assert chunks[-1]["usage"]["completion_tokens"] == 8 and chunks[-1]["choices"] == []
    _, chunks = e.stream_text(stream_options={"include_usage": False})
    assert all("usage" not in c for c in chunks)
    # vLLM's continuous_usage_stats: every chunk carries its usage so far (a chat's first,
    # the role's, with 0 completion tokens).
    _, chunks = e.stream_text(stream_options={"include_usage": True,
                                              "continuous_usage_stats": True})
    assert all(c["usage"] for c in chunks), chunks
    counts = [c["usage"]["completion_tokens"] for c in chunks[:-1]]
    assert counts and counts == sorted(counts) and counts[-1] == 8
    assert all(c["usage"]["prompt_tokens"] == chunks[-1]["usage"]["prompt_tokens"]
               for c in chunks if c["usage"])


def c_penalty(name, bad=2.5):
    def check(e):
        assert e.text(max_tokens=16, **{name: 2.0}) != e.text(max_tokens=16)
        e.refused(name, **{name: bad})
    return check


def c_logit_bias(e):
    forced = e.tok.decode([FORCED])
    assert e.text(logit_bias={str(FORCED): 100}) == forced * 8
    # Past +-100 clamped, as vLLM does (not refused): 1e30 forces like 100, and no value
    # overflows the logits.
    assert e.text(logit_bias={str(FORCED): 1e30}) == forced * 8
    assert forced not in e.text(logit_bias={str(FORCED): -1e30}, max_tokens=16)


def c_informational(name, value):
    def check(e):
        assert e.text(**{name: value}) == e.text()
    return check


def c_stop_token_ids(e):
    body = e.ok(logit_bias={str(FORCED): 100}, stop_token_ids=[FORCED], ignore_eos=False)
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] == 1 and e.texts(body) == [""]
    assert body["choices"][0]["stop_reason"] == FORCED


def c_ignore_eos(e):
    eos = str(e.tok.eos_token_id)
    stopped = e.ok(logit_bias={eos: 100}, ignore_eos=False)
    assert stopped["usage"]["completion_tokens"] == 1
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["choices"][0]["stop_reason"] is None  # end of sequence, as vLLM
    kept = e.ok(logit_bias={eos: 100}, ignore_eos=True)
    assert kept["usage"]["completion_tokens"] == 8
    assert kept["choices"][0]["finish_reason"] == "length"


def c_min_tokens(e):
    body = e.ok(logit_bias={str(e.tok.eos_token_id): 100}, ignore_eos=False, min_tokens=3)
    assert body["usage"]["completion_tokens"] == 4
    assert body["choices"][0]["finish_reason"] == "stop"
    e.refused("min_tokens", min_tokens=9)


def c_skip_special_tokens(e):
    special = e.tok.convert_tokens_to_ids("<|im_start|>")
    bias = {str(special): 100}
    assert e.text(logit_bias=bias, max_tokens=2) == ""
    assert e.text(logit_bias=bias, max_tokens=2, skip_special_tokens=False) == \
        "<|im_start|>" * 2


def c_speculative(e):
    # The shared server does not speculate, so the flag changes nothing here; what it does
    # where the server speculates is checked in test_speculative.py.
    assert e.text(speculative=False) == e.text(speculative=True) == e.text()
    e.refused("speculative", speculative="yes")


def c_allowed_token_ids(e):
    assert e.text(allowed_token_ids=[FORCED]) == e.tok.decode([FORCED]) * 8
    e.refused("allowed_token_ids", allowed_token_ids=[10**7])


def c_truncate_prompt_tokens(e):
    assert e.ok(truncate_prompt_tokens=3)["usage"]["prompt_tokens"] == 3
    full = e.ok()["usage"]["prompt_tokens"]
    assert e.ok(truncate_prompt_tokens=-1)["usage"]["prompt_tokens"] == full


def c_add_special_tokens(e):
    # The tiny tokenizer adds no special tokens, so both settings count the same ids as
    # the tokenizer does with that setting.
    text = "To be, or not to be" if not e.chat else e.tok.apply_chat_template(
        e.base["messages"], add_generation_prompt=True, tokenize=False)
    for flag in (True, False):
        want = len(e.tok.encode(text, add_special_tokens=flag))
        assert e.ok(add_special_tokens=flag)["usage"]["prompt_tokens"] == want


def c_request_id(e):
    body = e.ok(request_id="abc-1")
    assert body["id"] == ("chatcmpl-abc-1" if e.chat else "cmpl-abc-1")


def c_prompt(e):
    short, long = e.ok(prompt="A"), e.ok(prompt="A much longer prompt than that")
    assert short["usage"]["prompt_tokens"] < long["usage"]["prompt_tokens"]
    assert len(e.ok(prompt=["A", "B"])["choices"]) == 2
    assert e.ok(prompt=[5, 6, 7])["usage"]["prompt_tokens"] == 3
    assert len(e.ok(prompt=[[5, 6], [7]])["choices"]) == 2


def c_max_tokens(e):
    assert e.ok(max_tokens=3)["usage"]["completion_tokens"] == 3
    # Absent: 16 (OpenAI's and vLLM's default); null: the rest of the context (vLLM's).
    body = {k: v for k, v in e.base.items() if k != "max_tokens"}
    usage = httpx.post(e.url + e.route, json=body, timeout=60).json()["usage"]
    assert usage["completion_tokens"] == 16
    context = httpx.get(e.url + "/v1/models").json()["data"][0]["max_model_len"]
    usage = httpx.post(e.url + e.route, json=dict(body, max_tokens=None), timeout=60).json()
    assert usage["usage"]["completion_tokens"] == context - usage["usage"]["prompt_tokens"]
    # Each prompt's own rest (it was the longest prompt's rest for all of them).
    prompts = [[5] * 3, [5] * 40]
    out = httpx.post(e.url + e.route, json=dict(body, max_tokens=None, prompt=prompts,
                                                logprobs=0), timeout=120).json()
    got = [len(c["logprobs"]["tokens"]) for c in sorted(out["choices"], key=lambda c: c["index"])]
    assert got == [context - 3, context - 40]


def c_echo(e):
    assert e.text(echo=True) == "To be, or not to be" + e.text()
    body = e.ok(echo=True, max_tokens=0)
    assert e.texts(body) == ["To be, or not to be"] and body["usage"]["completion_tokens"] == 0
    # Streamed, the echo is a chunk of its own, with the fields every other chunk has.
    text, chunks = e.stream_text(echo=True)
    assert text == e.text(echo=True)
    keys = {frozenset(c) for ch in chunks for c in ch["choices"]}
    assert len(keys) == 1 and "stop_reason" in next(iter(keys)), keys
    # With logprobs the echoed prompt's tokens have them too (null for the first).
    lp = e.ok(echo=True, max_tokens=0, logprobs=1)["choices"][0]["logprobs"]
    assert "".join(lp["tokens"]) == "To be, or not to be" and lp["token_logprobs"][0] is None
    assert all(v < 0 for v in lp["token_logprobs"][1:])


def c_prompt_logprobs(e):
    body = e.ok(prompt_logprobs=2)
    plp = body["prompt_logprobs"] if e.chat else body["choices"][0]["prompt_logprobs"]
    assert len(plp) == body["usage"]["prompt_tokens"] and plp[0] is None
    assert all(2 <= len(entry) <= 3 for entry in plp[1:])
    assert "prompt_logprobs" not in e.ok()["choices"][0]
    e.refused("prompt_logprobs", prompt_logprobs=21)
    e.refused("prompt_logprobs", prompt_logprobs=1, stream=True)


def c_logprobs_completion(e):
    lp = e.ok(logprobs=2)["choices"][0]["logprobs"]
    assert len(lp["token_logprobs"]) == 8 and all(len(t) in (2, 3) for t in lp["top_logprobs"])
    assert e.ok()["choices"][0]["logprobs"] is None
    # The sampled token is among them (up to logprobs + 1 entries, as OpenAI and vLLM).
    lp = e.ok(logprobs=0, temperature=1.5, seed=3)["choices"][0]["logprobs"]
    assert lp["top_logprobs"] == [{t: v} for t, v in zip(lp["tokens"], lp["token_logprobs"])]
    _streamed_logprobs_are_complete(e, logprobs=1)


def _streamed_logprobs_are_complete(e, **lp):
    """Tokens whose text is held back (here: it could begin a long stop string) still
    stream their logprobs, in chunks with empty text."""
    text, chunks = e.stream_text(stop=["a stop string the model will not write"], **lp)
    entries = [c["logprobs"] for ch in chunks for c in ch["choices"] if c.get("logprobs")]
    n = sum(len(x["content"] if e.chat else x["tokens"]) for x in entries)
    assert n == 8 and text == e.text(**lp)


def c_messages(e):
    a = e.ok(messages=[{"role": "user", "content": "Hi"}])["usage"]["prompt_tokens"]
    b = e.ok(messages=[{"role": "user", "content": "Hi there, my good lord"}])
    assert a < b["usage"]["prompt_tokens"]
    # Text parts are joined with newlines, as vLLM joins them (they were run together).
    parts = [{"type": "text", "text": "Speak of"}, {"type": "text", "text": "the king."}]
    joined = [{"role": "user", "content": "Speak of\nthe king."}]
    assert e.ok(messages=[{"role": "user", "content": parts}]) | {"id": 0, "created": 0} == \
        e.ok(messages=joined) | {"id": 0, "created": 0}


def c_max_completion_tokens(e):
    assert e.ok(max_completion_tokens=3)["usage"]["completion_tokens"] == 3
    assert e.ok(max_completion_tokens=3, max_tokens=5)["usage"]["completion_tokens"] == 3


def c_chat_max_tokens(e):
    assert e.ok(max_tokens=5)["usage"]["completion_tokens"] == 5


def c_chat_logprobs(e):
    lp = e.ok(logprobs=True)["choices"][0]["logprobs"]["content"]
    assert len(lp) == 8 and all(t["top_logprobs"] == [] for t in lp)
    assert e.ok()["choices"][0]["logprobs"] is None
    _streamed_logprobs_are_complete(e, logprobs=True)
    # `bytes` are the bytes each token stands for (a piece of a character included, not
    # the U+FFFD of its decoded text): joined, they are the content.
    special = set(e.tok.all_special_tokens)
    for seed in range(3):
        body = e.ok(logprobs=True, temperature=1.5, seed=seed, max_tokens=16)
        entries = body["choices"][0]["logprobs"]["content"]
        joined = bytes(b for t in entries if t["token"] not in special for b in t["bytes"])
        assert joined.decode("utf-8", "replace") == body["choices"][0]["message"]["content"]


def c_top_logprobs(e):
    lp = e.ok(logprobs=True, top_logprobs=2)["choices"][0]["logprobs"]["content"]
    assert all(len(t["top_logprobs"]) == 2 for t in lp)
    e.refused("top_logprobs", top_logprobs=2)


def c_allowed_values(name, good, bad):
    def check(e):
        assert e.text(**{name: good}) == e.text()
        e.refused(name, **{name: bad})
    return check


def c_add_generation_prompt(e):
    with_prompt = e.ok()["usage"]["prompt_tokens"]
    assert e.ok(add_generation_prompt=False)["usage"]["prompt_tokens"] < with_prompt


def c_continue_final_message(e):
    msgs = e.base["messages"] + [{"role": "assistant", "content": "Once upon"}]
    closed = e.ok(messages=msgs, add_generation_prompt=False)["usage"]["prompt_tokens"]
    body = e.ok(messages=msgs, add_generation_prompt=False, continue_final_message=True)
    assert body["usage"]["prompt_tokens"] < closed  # the last turn is left open
    # /tokenize takes the same fields and counts the same prompt.
    r = httpx.post(e.url + "/tokenize", json={"messages": msgs, "add_generation_prompt": False,
                                              "continue_final_message": True})
    assert r.status_code == 200 and r.json()["count"] == body["usage"]["prompt_tokens"]


def c_chat_template_kwargs(e):
    # The tiny model's template reads no extra variables; reserved names are refused.
    assert e.text(chat_template_kwargs={"enable_thinking": False}) == e.text()
    e.refused("chat_template_kwargs", chat_template_kwargs={"tokenize": True})


def c_message_role(e):
    user = e.ok()["usage"]["prompt_tokens"]
    system = e.ok(messages=[{"role": "system", "content": "Speak of the king."}])
    assert system["usage"]["prompt_tokens"] != user


def c_message_name(e):
    # Passed to the chat template; the tiny model's template does not render it.
    msgs = [{"role": "user", "content": "Speak of the king.", "name": "Hal"}]
    assert e.text(messages=msgs) == e.text()


def c_response_format(e):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    text = e.text(temperature=1.5, seed=1, max_tokens=30, response_format={
        "type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    assert json.loads(text) in ({"ok": True}, {"ok": False})
    assert e.text(response_format={"type": "text"}) == e.text()
    e.refused("response_format", response_format={"type": "bogus"})


def c_guided(name, spec, check):
    def run(e):
        for seed in range(3):
            assert check(e.text(temperature=1.5, seed=seed, max_tokens=30, **{name: spec}))
    return run


def c_guided_decoding_backend(e):
    assert e.text(guided_choice=["a b"], guided_decoding_backend="xgrammar") == "a b"
    e.refused("guided_decoding_backend", guided_decoding_backend="outlines")


# The tool fields on this server: its ChatML template renders no tools, so they are refused
# (test_tool_calling.py checks what they do on a model whose template renders them).
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def c_tools(e):
    r = e.post(tools=[TOOL])
    assert r.status_code == 400 and "does not render tools" in r.json()["error"]["message"]


def c_tool_choice(e):
    assert e.text(tool_choice="none") == e.text()
    e.refused("tool_choice", tool_choice="required")


def c_parallel_tool_calls(e):
    e.refused("parallel_tool_calls", parallel_tool_calls=False)


def c_message_tool_calls(e):
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    msgs = e.base["messages"] + [{"role": "assistant", "tool_calls": [call]},
                                 {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    r = e.post(messages=msgs)
    assert r.status_code == 400 and "tool_calls" in r.json()["error"]["message"]


def c_message_tool_call_id(e):
    # Passed to the chat template; the tiny model's template does not render it.
    msgs = e.base["messages"] + [{"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    plain = e.base["messages"] + [{"role": "tool", "content": "ok"}]
    assert e.text(messages=msgs) == e.text(messages=plain)


def c_unsupported(name):
    def check(e):
        e.refused(name, **{name: "unsupported-value"})
    return check


SHARED = {
    "model": c_model, "temperature": c_temperature, "top_p": c_top_p, "n": c_n,
    "best_of": c_best_of, "seed": c_seed, "stop": c_stop, "stream": c_stream,
    "stream_options": c_stream_options,
    "presence_penalty": c_penalty("presence_penalty"),
    "frequency_penalty": c_penalty("frequency_penalty"),
    "repetition_penalty": c_penalty("repetition_penalty", bad=0.0), "logit_bias": c_logit_bias,
    "top_k": c_top_k, "min_p": c_min_p, "stop_token_ids": c_stop_token_ids,
    "include_stop_str_in_output": c_include_stop_str_in_output, "ignore_eos": c_ignore_eos,
    "min_tokens": c_min_tokens, "skip_special_tokens": c_skip_special_tokens,
    "allowed_token_ids": c_allowed_token_ids, "truncate_prompt_tokens": c_truncate_prompt_tokens,
    "request_id": c_request_id, "response_format": c_response_format,
    "speculative": c_speculative,
    "guided_json": c_guided("guided_json", {"enum": ["x", 2]},
                            lambda t: json.loads(t) in ("x", 2)),
    "guided_regex": c_guided("guided_regex", "[0-9]{4}", lambda t: re.fullmatch("[0-9]{4}", t)),
    "guided_choice": c_guided("guided_choice", ["north", "south"],
                              lambda t: t in ("north", "south")),
    "guided_grammar": c_guided("guided_grammar", 'root ::= "ab"+',
                               lambda t: re.fullmatch("(ab)+", t)),
    "guided_decoding_backend": c_guided_decoding_backend,
    "prompt_logprobs": c_prompt_logprobs,
}
COMPLETION = dict(SHARED, prompt=c_prompt, max_tokens=c_max_tokens, echo=c_echo,
                  logprobs=c_logprobs_completion, add_special_tokens=c_add_special_tokens)
CHAT = dict(SHARED, messages=c_messages, max_completion_tokens=c_max_completion_tokens,
            max_tokens=c_chat_max_tokens, logprobs=c_chat_logprobs, top_logprobs=c_top_logprobs,
            store=c_allowed_values("store", False, True),
            service_tier=c_allowed_values("service_tier", "auto", "flex"),
            modalities=c_allowed_values("modalities", ["text"], ["audio"]),
            add_generation_prompt=c_add_generation_prompt,
            continue_final_message=c_continue_final_message,
            chat_template_kwargs=c_chat_template_kwargs, add_special_tokens=c_add_special_tokens,
            tools=c_tools, tool_choice=c_tool_choice, parallel_tool_calls=c_parallel_tool_calls)
INFO_VALUES = {"user": "u-1", "metadata": {"k": "v"}, "prompt_cache_key": "k",
               "safety_identifier": "s"}
MESSAGE = {"role": c_message_role, "content": c_messages, "name": c_message_name,
           "tool_calls": c_message_tool_calls, "tool_call_id": c_message_tool_call_id}


def _check_for(model, name):
    if model is Message:
        return MESSAGE.get(name)
    if name in unsupported_fields(model):
        return c_unsupported(name)
    if name in INFORMATIONAL:
        return c_informational(name, INFO_VALUES[name])
    return (CHAT if model is ChatCompletionRequest else COMPLETION).get(name)


FIELDS = [(m, name) for m in (CompletionRequest, ChatCompletionRequest, Message)
          for name in m.model_fields]


def test_every_field_has_a_check():
    missing = [f"{m.__name__}.{name}" for m, name in FIELDS if _check_for(m, name) is None]
    assert not missing, f"fields with no behavioural check or rejection: {missing}"


@pytest.mark.parametrize("model,name", FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_field_is_honoured_or_rejected(served, model, name):
    check = _check_for(model, name)
    assert check is not None, f"{model.__name__}.{name} has no check"
    check(Endpoint(served.url, model is not CompletionRequest, served.app.tokenizer))
