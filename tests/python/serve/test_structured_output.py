"""Structured output through xgrammar on the tiny random Llama: whatever the model would
say, the text matches the grammar. 100 seeded random JSON schemas (nested objects, arrays,
enums, bounded numbers, required fields) all give JSON that validates; regex, choice and
EBNF outputs match; grammar and plain requests share a batch; compiled grammars are cached
per schema."""

import concurrent.futures as cf
import json
import re

import httpx
import pytest

from torchtpu.testing.json_schemas import object_schema

pytest.importorskip("xgrammar", reason="xgrammar is not installed (scripts/setup.sh does)")
jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed")


def _post(url, body, route="/v1/completions"):
    r = httpx.post(url + route, json=dict({"model": "tiny"}, **body), timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_100_random_json_schemas_validate(served):
    def run(seed):
        schema = object_schema(seed)
        body = {"prompt": "Answer in JSON:", "max_tokens": 200, "temperature": 1.0,
                "seed": seed}
        if seed % 2:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "s", "schema": schema}}
        else:
            body["guided_json"] = schema
        choice = _post(served.url, body)["choices"][0]
        return schema, choice

    with cf.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(100)))
    for schema, choice in results:
        assert choice["finish_reason"] == "stop", (schema, choice)
        jsonschema.validate(json.loads(choice["text"]), schema)


def test_json_object_chat_streamed_and_not(served):
    # Any JSON object: the random model's strings would run to max_tokens, so quotes and
    # closing braces get a bias (the grammar still decides where they may go).
    tok = served.app.tokenizer
    bias = {str(tok.convert_tokens_to_ids(t)): 6 for t in ('"', "}")}
    body = {"messages": [{"role": "user", "content": "Give me JSON"}], "max_tokens": 200,
            "temperature": 1.0, "seed": 4, "response_format": {"type": "json_object"},
            "logit_bias": bias}
    plain = _post(served.url, body, "/v1/chat/completions")["choices"][0]
    assert plain["finish_reason"] == "stop"
    assert isinstance(json.loads(plain["message"]["content"]), dict)
    with httpx.stream("POST", served.url + "/v1/chat/completions", timeout=120,
                      json=dict(body, model="tiny", stream=True)) as r:
        text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                       for line in r.iter_lines()
                       if line.startswith("data: ") and line != "data: [DONE]")
    assert text == plain["message"]["content"]


@pytest.mark.parametrize("field,spec,check", [
    ("guided_regex", r"[a-c]{2,4}-[0-9]{3}", lambda t: re.fullmatch(r"[a-c]{2,4}-[0-9]{3}", t)),
    ("guided_regex", r"(yes|no), because \w{1,5}\.",
     lambda t: re.fullmatch(r"(yes|no), because \w{1,5}\.", t)),
    ("guided_choice", ["to be", "not to be", "\u00e9"],
     lambda t: t in ("to be", "not to be", "\u00e9")),
    # Characters past U+FFFF, quotes, backslashes and newlines come out as given.
    ("guided_choice", ["a\U0001F600", 'say "hi"\\\n', "\u65e5\U0001F600"],
     lambda t: t in ("a\U0001F600", 'say "hi"\\\n', "\u65e5\U0001F600")),
    ("guided_grammar", 'root ::= "king" | "queen" (" " [0-9])?',
     lambda t: re.fullmatch(r"king|queen( [0-9])?", t)),
])
def test_regex_choice_and_grammar_outputs_match(served, field, spec, check):
    for seed in range(6):
        choice = _post(served.url, {"prompt": "Say:", "max_tokens": 40, "temperature": 1.5,
                                    "seed": seed, field: spec})["choices"][0]
        assert choice["finish_reason"] == "stop" and check(choice["text"]), choice


def test_grammar_and_plain_requests_share_a_batch(served):
    plain = {"prompt": "To be, or not to be", "max_tokens": 24, "temperature": 0,
             "ignore_eos": True}
    alone = _post(served.url, plain)["choices"][0]["text"]
    guided = {"prompt": "To be", "max_tokens": 24, "temperature": 1.0, "seed": 1,
              "guided_regex": "[a-z ]{20}"}
    with cf.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda b: _post(served.url, b)["choices"][0]["text"],
                             [plain, guided, plain, guided]))
    assert outs[0] == outs[2] == alone
    assert all(re.fullmatch("[a-z ]{20}", t) for t in outs[1::2])


def test_compiled_grammars_are_cached_per_schema(served):
    schema = {"type": "object", "properties": {"q": {"type": "boolean"}}, "required": ["q"]}
    _post(served.url, {"prompt": "x", "max_tokens": 20, "guided_json": schema})
    cache = served.app.engine.grammars()
    compiles = cache.num_compiles
    for seed in range(3):
        _post(served.url, {"prompt": "x", "max_tokens": 20, "seed": seed,
                           "guided_json": schema})
    assert cache.num_compiles == compiles


def test_the_grammar_cache_keeps_to_its_byte_budget(served):
    # Each distinct schema a client sends was kept for the server's life: the least recently
    # used grammars are dropped past the budget, and one in use stays cached.
    cache = served.app.engine.grammars()
    budget, cache.cache_bytes = cache.cache_bytes, 0
    try:
        used = {"prompt": "x", "max_tokens": 4, "guided_choice": ["yes", "no"]}
        _post(served.url, used)
        cache.cache_bytes = cache.cached_bytes + 3 * 50_000
        for i in range(12):
            _post(served.url, {"prompt": "x", "max_tokens": 4,
                               "guided_choice": [f"{i}-{k}-" + "x" * 50 for k in range(40)]})
            _post(served.url, used)
        assert cache.cached_bytes <= cache.cache_bytes, (cache.cached_bytes, cache.cache_bytes)
        compiles = cache.num_compiles
        _post(served.url, used)
        assert cache.num_compiles == compiles  # the one in use was kept
        _post(served.url, {"prompt": "x", "max_tokens": 4,
                           "guided_choice": [f"0-{k}-" + "x" * 50 for k in range(40)]})
        assert cache.num_compiles == compiles + 1  # an old one was dropped, compiled again
    finally:
        cache.cache_bytes = budget


@pytest.mark.parametrize("schema,named", [
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "allOf with 2 subschemas at #"),
    ({"type": "integer", "if": {"minimum": 0}, "then": {"maximum": 3}}, "if at #"),
    ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}},
     "uniqueItems at #/properties/tags"),
    ({"anyOf": [{"not": {"type": "string"}}]}, "not at #/anyOf/0"),
    # xgrammar ignores multipleOf on numbers ({"multipleOf": 0.5} gave "481e-4") and enforces
    # oneOf as anyOf ("-4" matched both of integer and number).
    ({"type": "number", "multipleOf": 0.5}, "multipleOf on a non-integer at #"),
    ({"type": "object", "properties": {"n": {"oneOf": [{"type": "integer"},
                                                       {"type": "number"}]}}},
     "oneOf at #/properties/n with 2 subschemas not exclusive"),
])
def test_schema_keywords_the_grammar_would_ignore_are_refused(served, schema, named):
    # xgrammar accepted these and constrained nothing ({"allOf": [string, integer]} gave
    # "[1]"): a 400 naming where, for guided_json and response_format alike.
    for body in ({"guided_json": schema},
                 {"response_format": {"type": "json_schema",
                                      "json_schema": {"name": "s", "schema": schema}}}):
        r = httpx.post(served.url + "/v1/completions", timeout=60,
                       json=dict({"model": "tiny", "prompt": "x", "max_tokens": 4}, **body))
        assert r.status_code == 400 and named in r.json()["error"]["message"], r.text
    # A property merely named like a keyword is a property, and one subschema in allOf is
    # enforced.
    ok = {"type": "object", "properties": {"not": {"allOf": [{"type": "boolean"}]}},
          "required": ["not"]}
    text = _post(served.url, {"prompt": "x", "max_tokens": 20, "guided_json": ok})
    assert isinstance(json.loads(text["choices"][0]["text"])["not"], bool)
    # multipleOf on integers is enforced, and so is a oneOf whose subschemas' types are
    # disjoint (anyOf is then the same).
    ok = {"type": "object", "required": ["m", "o"], "properties": {
        "m": {"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 99},
        "o": {"oneOf": [{"type": "boolean"}, {"type": "null"}]}}}
    text = _post(served.url, {"prompt": "x", "max_tokens": 40, "guided_json": ok})
    value = json.loads(text["choices"][0]["text"])
    assert value["m"] % 3 == 0 and (value["o"] is None or isinstance(value["o"], bool))


def test_grammars_beyond_the_size_bound_are_refused(served):
    # Compile time grows with the square of the size (500 KB of regex took 48 s of a core).
    r = httpx.post(served.url + "/v1/completions", timeout=60, json={
        "model": "tiny", "prompt": "x", "max_tokens": 4, "guided_regex": "a" * 70_000})
    assert r.status_code == 400 and "the limit is 65536" in r.json()["error"]["message"], r.text


def test_a_failing_stream_sends_one_error_then_done(served):
    # Every sequence of the request fails alike (no allowed token fits the grammar); the
    # stream ends with one error event and [DONE], as vLLM's does, instead of one per
    # sequence; the engine runs nothing of it afterwards.
    body = {"model": "tiny", "prompt": ["a", "b"], "n": 3, "stream": True, "max_tokens": 4,
            "allowed_token_ids": [2, 30, 28], "response_format": {"type": "json_object"}}
    with httpx.stream("POST", served.url + "/v1/completions", json=body, timeout=60) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    errors = [e for e in events if e.startswith('{"error"')]
    assert len(errors) == 1 and "no token can be drawn" in errors[0], events
    assert events[-1] == "[DONE]" and events[-2] == errors[0], events
    import time

    def busy():
        stats = served.app.engine.stats()
        return stats["num_running"] + stats["num_waiting"]

    for _ in range(100):
        if busy() == 0:
            break
        time.sleep(0.05)
    assert busy() == 0


def test_what_counts_as_enforced():
    from torchtpu.serve.structured import unenforced_keywords

    # A discriminated union as Pydantic writes it (branches behind $refs, each requiring
    # its own constant tag): no value matches two, so anyOf enforces it exactly.
    tagged = {"$defs": {
        "Cat": {"type": "object", "required": ["kind", "n"],
                "properties": {"kind": {"const": "cat"}, "n": {"type": "integer"}}},
        "Dog": {"type": "object", "required": ["kind"],
                "properties": {"kind": {"enum": ["dog"]}}}},
        "type": "object", "required": ["pet"], "properties": {"pet": {
            "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
            "discriminator": {"propertyName": "kind"}}}}
    assert unenforced_keywords(tagged) == []
    same_tag = json.loads(json.dumps(tagged).replace('["dog"]', '["cat"]'))
    assert [k for k, _ in unenforced_keywords(same_tag)] == ["oneOf"]
    # multipleOf is enforced where no number (only integers) is allowed.
    assert unenforced_keywords({"type": ["integer", "null"], "multipleOf": 3}) == []
    for schema in ({"type": ["integer", "number"], "multipleOf": 0.5}, {"multipleOf": 2}):
        assert [k for k, _ in unenforced_keywords(schema)] == ["multipleOf"], schema
