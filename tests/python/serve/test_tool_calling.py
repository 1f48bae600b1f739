"""Tool calling through the real openai client, on the tiny random Llama with a Hermes-style
chat template (tools listed in the prompt, calls as <tool_call> JSON). "required" and
named choices are grammar-constrained, so the random model's arguments always parse and
match the schema; streamed tool calls equal the non-streamed ones; the tool-result message
round-trips through the template. The "auto" parsers are checked on their own texts."""

import json

import httpx
import openai
import pytest
from conftest import ENGINE_ARGS, RunningServer

from torchtpu.serve import LLMEngine, tools

pytest.importorskip("xgrammar", reason="xgrammar is not installed (scripts/setup.sh does)")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city", "unit"],
                   "properties": {"city": {"type": "string", "maxLength": 8},
                                  "unit": {"enum": ["C", "F"]}}}}}
CLOCK = {"type": "function", "function": {
    "name": "get_time", "parameters": {
        "type": "object", "additionalProperties": False, "required": ["tz"],
        "properties": {"tz": {"type": "integer", "minimum": -12, "maximum": 12}}}}}
TOOLS = [WEATHER, CLOCK]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "What is the weather in Verona?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    import tiny_models

    path = tiny_models.build_model_dir(str(tmp_path_factory.mktemp("hermes")), "llama",
                                       chat_template=tiny_models.HERMES)
    srv = RunningServer(LLMEngine(path, served_model_name="tiny", **ENGINE_ARGS))
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def _calls(message):
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]


def _streamed_calls(client, **kw):
    calls, reason = {}, None
    for chunk in client.chat.completions.create(stream=True, **kw):
        for choice in chunk.choices:
            reason = choice.finish_reason or reason
            for d in choice.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": None, "name": None, "args": ""})
                if d.id:
                    assert entry["id"] is None, "the id comes once, first"
                    entry["id"], entry["name"] = d.id, d.function.name
                assert d.function.arguments is not None  # fragments, never None
                entry["args"] += d.function.arguments
    return [(c["name"], json.loads(c["args"])) for _, c in sorted(calls.items())], reason


@pytest.mark.parametrize("seed,parallel", [(0, False), (1, False), (2, False), (3, True)])
def test_required_calls_parse_and_stream_the_same(client, server, seed, parallel):
    kw = dict(model="tiny", messages=MESSAGES, tools=TOOLS, tool_choice="required",
              max_tokens=100, temperature=1.0, seed=seed, parallel_tool_calls=parallel)
    if parallel:  # the random model would add calls until max_tokens: nudge the array shut
        kw["logit_bias"] = {str(server.app.tokenizer.convert_tokens_to_ids("]")): 4}
    r = client.chat.completions.create(**kw)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = _calls(choice.message)
    assert calls and all(c.id.startswith("call_") for c in choice.message.tool_calls)
    for name, args in calls:
        jsonschema.validate(args, SCHEMAS[name])
    streamed, reason = _streamed_calls(client, **kw)
    assert streamed == calls and reason == "tool_calls"


def test_named_function_and_no_parallel_calls(client):
    named = {"type": "function", "function": {"name": "get_time"}}
    for seed in range(3):
        r = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS,
                                           tool_choice=named, max_tokens=60, seed=seed)
        [(name, args)] = _calls(r.choices[0].message)
        assert name == "get_time"
        # A named function's call finishes "stop" (OpenAI's and vLLM's), streamed too.
        assert r.choices[0].finish_reason == "stop"
        assert _streamed_calls(client, model="tiny", messages=MESSAGES, tools=TOOLS,
                               tool_choice=named, max_tokens=60, seed=seed)[1] == "stop"
        jsonschema.validate(args, SCHEMAS["get_time"])
        r = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=False,
                                           max_tokens=100, seed=seed)
        assert len(r.choices[0].message.tool_calls) == 1
        assert r.choices[0].finish_reason == "tool_calls"


def test_tool_result_round_trips(client, server):
    first = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS,
                                           tool_choice="required", parallel_tool_calls=False,
                                           max_tokens=100, seed=1)
    call = first.choices[0].message.tool_calls[0]
    history = MESSAGES + [first.choices[0].message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
    r = client.chat.completions.create(model="tiny", messages=history, tools=TOOLS,
                                       tool_choice="none", max_tokens=8, temperature=0)
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "length"
    # The call and its result are in the prompt: exactly what the template renders.
    tok = server.app.tokenizer
    msgs = MESSAGES + [{"role": "assistant", "tool_calls": [{"type": "function", "function": {
        "name": call.function.name, "arguments": json.loads(call.function.arguments)}}]},
        {"role": "tool", "content": "sunny, 21 C"}]
    text = tok.apply_chat_template(msgs, tools=TOOLS, add_generation_prompt=True,
                                   tokenize=False)
    assert "<tool_response>sunny, 21 C</tool_response>" in text
    assert r.usage.prompt_tokens == len(tok.encode(text, add_special_tokens=False))


def test_auto_returns_content_when_the_model_calls_nothing(client):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES, tools=TOOLS,
                                       max_tokens=10, temperature=0)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason in ("stop", "length")
    # The content is the generated text as is, streamed or not (it was trimmed, and
    # whitespace alone became null).
    body = dict(model="tiny", messages=MESSAGES, tools=TOOLS, max_tokens=10, temperature=0,
                extra_body={"guided_regex": "  hello\n\n"})
    r = client.chat.completions.create(**body)
    assert r.choices[0].message.content == "  hello\n\n" and not r.choices[0].message.tool_calls
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(stream=True, **body) if c.choices)
    assert streamed == "  hello\n\n"


def test_tool_errors(server, served):
    def post(url, **body):
        return httpx.post(url + "/v1/chat/completions", timeout=60, json=dict(
            {"model": "tiny", "messages": MESSAGES, "max_tokens": 4}, **body))

    for body, param in [
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
         "tool_choice"),
        (dict(tool_choice="required"), "tool_choice"),
        (dict(parallel_tool_calls=True), "parallel_tool_calls"),
        (dict(tools=[WEATHER, WEATHER]), "tools"),
        (dict(tools=TOOLS, tool_choice="required", guided_regex="a"), "tool_choice"),
    ]:
        r = post(server.url, **body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    # The ChatML-only tiny model's template drops tools: refused, never silently ignored.
    r = post(served.url, tools=TOOLS)
    assert r.status_code == 400 and "does not render tools" in r.json()["error"]["message"]
    # ... unless no call is wanted (tool_choice "none", as agent frameworks send it with their
    # tool list, and vLLM and OpenAI take it), or /tokenize shows what the template renders.
    r = post(served.url, tools=TOOLS, tool_choice="none", temperature=0)
    assert r.status_code == 200 and not r.json()["choices"][0]["message"].get("tool_calls")
    assert r.json()["choices"][0]["message"]["content"] == post(served.url, temperature=0).json()[
        "choices"][0]["message"]["content"]
    r = httpx.post(served.url + "/tokenize", timeout=60,
                   json={"model": "tiny", "messages": MESSAGES, "tools": TOOLS})
    assert r.status_code == 200 and r.json()["tokens"], r.text


@pytest.mark.parametrize("parser,text,content,calls", [
    ("hermes", 'Sure. <tool_call>\n{"name": "get_time", "arguments": {"tz": 1}}\n</tool_call>',
     "Sure.", [("get_time", {"tz": 1})]),
    ("hermes", '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": '
     '"get_time", "arguments": {"tz": 2}}</tool_call>', None, [("a", {}), ("get_time",
                                                                            {"tz": 2})]),
    ("hermes", "<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
    ("hermes", '<tool_call>{"name": "unknown", "arguments": {}}</tool_call>',
     '<tool_call>{"name": "unknown", "arguments": {}}</tool_call>', []),
    ("llama3", '<|python_tag|>{"name": "get_time", "parameters": {"tz": 3}}', None,
     [("get_time", {"tz": 3})]),
    ("llama3", "It is noon.", "It is noon.", []),
    ("mistral", '[TOOL_CALLS] [{"name": "get_time", "arguments": {"tz": 4}}]', None,
     [("get_time", {"tz": 4})]),
    # No call: the text as generated, whitespace included (vLLM's parsers return it as is).
    ("hermes", "  hello\n", "  hello\n", []),
    ("hermes", "\n\n\n", "\n\n\n", []),
    ("llama3", " It is noon. ", " It is noon. ", []),
    ("mistral", "", "", []),
])
def test_auto_parsers(parser, text, content, calls):
    got_content, got = tools.parse(parser, text, {"a", "get_time"})
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in got] == calls


def test_parser_is_chosen_from_the_template():
    import tiny_models

    assert tools.parser_for(tiny_models.HERMES) == "hermes"
    assert tools.parser_for("...[TOOL_CALLS]...") == "mistral"
    assert tools.parser_for("<|start_header_id|>user") == "llama3"
    assert tools.parser_for(tiny_models.CHATML) is None
