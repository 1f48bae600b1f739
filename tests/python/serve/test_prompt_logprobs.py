"""Prompt logprobs (vLLM's SamplingParams.prompt_logprobs, and echo with logprobs on
/v1/completions) against the log-softmax of a Hugging Face forward pass of the same model:
over chunked prefill, over a prefix cache hit (whose positions are recomputed without
writing the shared pages), and beside requests that do not ask for them."""

import functools
import json
import random

import httpx
import pytest
import torch
from conftest import ENGINE_ARGS

from torchtpu.serve import LLM, SamplingParams

# Chunks of 16 tokens: every prompt here spans several (and the row groups the head
# computes them in, 4 rows each with 4 sequences, several more).
CHUNKED = dict(ENGINE_ARGS, max_num_batched_tokens=16)
TOL = 1e-4


@functools.cache
def _hf(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _hf_logprobs(path, ids) -> torch.Tensor:
    """[len(ids), vocab]: row p is the log-softmax at position p (it scores token p + 1)."""
    with torch.no_grad():
        logits = _hf(path)(torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.float(), dim=-1)


def _check(path, ids, prompt_lp, k):
    ref = _hf_logprobs(path, ids)
    assert len(prompt_lp) == len(ids) and prompt_lp[0] is None
    for p in range(1, len(ids)):
        s, row = prompt_lp[p], ref[p - 1]
        assert s.token == ids[p]
        assert abs(s.logprob - float(row[ids[p]])) < TOL, (p, s.logprob, float(row[ids[p]]))
        v = row[ids[p]]
        assert int((row > v + TOL).sum()) + 1 <= s.rank <= int((row > v - TOL).sum()) + 1
        assert len(s.top_logprobs) == k
        values = torch.topk(row, k).values.tolist()
        for (t, v), want in zip(s.top_logprobs, values):
            assert abs(v - want) < TOL and abs(v - float(row[t])) < TOL


def _prompt(tok, n, seed):
    rng = random.Random(seed)
    lines = __import__("tiny_models").corpus()[:400]
    ids = []
    while len(ids) < n:
        ids += tok.encode(" ".join(rng.sample(lines, 4)))
    return ids[:n]


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    return LLM(tiny_llama_dir, **CHUNKED)


def test_prompt_logprobs_match_hf_over_chunked_prefill(llm, tiny_llama_dir, hf_reference):
    ids = _prompt(llm.tokenizer, 45, 0)  # three chunks of 16 and part of one
    res = llm.generate(ids, SamplingParams(max_tokens=4, temperature=0.0, prompt_logprobs=3))[0]
    _check(tiny_llama_dir, ids, res.prompt_logprobs, 3)
    assert res.outputs[0].token_ids == hf_reference(tiny_llama_dir, ids, 4)
    # 0: each prompt token's own logprob only; a request without them has none.
    res = llm.generate(ids, SamplingParams(max_tokens=1, prompt_logprobs=0))[0]
    _check(tiny_llama_dir, ids, res.prompt_logprobs, 0)
    assert llm.generate(ids, SamplingParams(max_tokens=1))[0].prompt_logprobs is None
    assert llm.engine.stats()["num_recompiles_after_warmup"] == 0


def test_prompt_logprobs_over_a_prefix_cache_hit(llm, tiny_llama_dir):
    shared = _prompt(llm.tokenizer, 40, 1)
    first = llm.generate(shared + [7, 8], SamplingParams(max_tokens=6, temperature=0.0))[0]
    hits = llm.engine.stats()["prefix_cache_hits"]
    ids = shared + _prompt(llm.tokenizer, 9, 2)
    res = llm.generate(ids, SamplingParams(max_tokens=2, temperature=0.0, prompt_logprobs=2))[0]
    assert llm.engine.stats()["prefix_cache_hits"] >= hits + 32  # two cached pages
    _check(tiny_llama_dir, ids, res.prompt_logprobs, 2)
    # The recomputation wrote no shared page: the first prompt still gives what it gave.
    again = llm.generate(shared + [7, 8], SamplingParams(max_tokens=6, temperature=0.0))[0]
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    # Asked again, the whole prompt is cached (but its last token): all recomputed.
    res = llm.generate(ids, SamplingParams(max_tokens=1, prompt_logprobs=1))[0]
    _check(tiny_llama_dir, ids, res.prompt_logprobs, 1)


def test_a_read_only_pass_writes_no_page(llm):
    # The pass that recomputes a cached prefix's logits (write_kv=False) sends its keys and
    # values to the scratch page: every slot of the pool is bit for bit what it was, while
    # the same pass writing its pages changes them.
    from torchtpu.serve.runner import StepItem

    runner = llm.engine.runner
    ids = _prompt(llm.tokenizer, 20, 5)
    llm.generate(ids, SamplingParams(max_tokens=1))  # the pool holds something
    pool = runner.num_pages * runner.page_size  # the scratch page is past it

    def snapshot():
        return [c[:pool].cpu().clone() for c in runner.k_caches + runner.v_caches]

    before = snapshot()
    rows = []
    item = StepItem("probe", ids[:12], 0, [0, 1], row_span=(0, 12), write_kv=False)
    runner.execute([item], lambda it, first, logits: rows.append(logits.shape[0]))
    assert sum(rows) == 12
    assert all(torch.equal(a, b) for a, b in zip(snapshot(), before))
    written = StepItem("probe", ids[:12], 0, [0, 1], row_span=(0, 12))
    try:
        runner.execute([written], lambda it, first, logits: None)
        assert not all(torch.equal(a, b) for a, b in zip(snapshot(), before))
    finally:  # pages 0 and 1 may hold a cached prefix the other tests read
        for cache, saved in zip(runner.k_caches + runner.v_caches, before):
            cache[:pool].copy_(saved)
    assert all(torch.equal(a, b) for a, b in zip(snapshot(), before))


def test_a_batch_neighbour_is_unaffected(llm, tiny_llama_dir):
    other = _prompt(llm.tokenizer, 30, 3)
    params = SamplingParams(max_tokens=8, temperature=0.0, logprobs=2)
    alone = llm.generate(other, params)[0].outputs[0]
    ids = _prompt(llm.tokenizer, 37, 4)
    both = llm.generate([ids, other], [SamplingParams(max_tokens=3, prompt_logprobs=5), params])
    _check(tiny_llama_dir, ids, both[0].prompt_logprobs, 5)
    beside = both[1].outputs[0]
    assert beside.token_ids == alone.token_ids and both[1].prompt_logprobs is None
    for a, b in zip(alone.logprobs, beside.logprobs):
        assert a.token == b.token and abs(a.logprob - b.logprob) < TOL


def test_n_sequences_compute_the_prompt_logprobs_once(llm, tiny_llama_dir):
    ids = _prompt(llm.tokenizer, 20, 5)
    p = SamplingParams(max_tokens=2, n=3, temperature=1.0, seed=1, prompt_logprobs=1)
    assert [c.prompt_logprobs for c in p.fork()][1:] == [None, None]
    res = llm.generate(ids, p)[0]
    assert len(res.outputs) == 3
    _check(tiny_llama_dir, ids, res.prompt_logprobs, 1)


@pytest.mark.parametrize("value", [-1, 21, 1.5, True])
def test_bad_prompt_logprobs_are_refused(value):
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=value)


# --- the server ----------------------------------------------------------------------
def test_echo_logprobs_with_max_tokens_0_through_openai(served, tiny_llama_dir):
    import openai

    client = openai.OpenAI(base_url=served.url + "/v1", api_key="none")
    prompt = "To be, or not to be, that is the question"
    ids = served.app.tokenizer.encode(prompt, add_special_tokens=False)
    ref = _hf_logprobs(tiny_llama_dir, ids)
    out = client.completions.create(model="tiny", prompt=prompt, echo=True, logprobs=2,
                                    max_tokens=0, temperature=0)
    c = out.choices[0]
    assert c.text == prompt and out.usage.completion_tokens == 0
    assert out.usage.prompt_tokens == len(ids)
    lp = c.logprobs
    tok = served.app.tokenizer
    assert lp.tokens == [tok.decode([t]) for t in ids]
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    for p in range(1, len(ids)):
        assert abs(lp.token_logprobs[p] - float(ref[p - 1, ids[p]])) < TOL
        top = lp.top_logprobs[p]
        assert top[lp.tokens[p]] == lp.token_logprobs[p] and 2 <= len(top) <= 3
    assert lp.text_offset[0] == 0
    assert lp.text_offset[1:] == [sum(len(t) for t in lp.tokens[:p])
                                  for p in range(1, len(ids))]
    # With generated tokens their entries follow the prompt's; with n=2 each choice has them.
    out = client.completions.create(model="tiny", prompt=prompt, echo=True, logprobs=1,
                                    max_tokens=3, temperature=0, n=2)
    for c in out.choices:
        assert len(c.logprobs.tokens) == len(ids) + 3
        assert c.logprobs.token_logprobs[1:len(ids)] == lp.token_logprobs[1:]
        assert all(x is not None for x in c.logprobs.token_logprobs[len(ids):])
        assert c.text == prompt + "".join(c.logprobs.tokens[len(ids):])
    assert out.usage.completion_tokens == 6


def _post(url, route, **body):
    return httpx.post(url + route, json=dict(model="tiny", temperature=0, **body), timeout=60)


def test_prompt_logprobs_field_and_streamed_echo(served, tiny_llama_dir):
    ids = [5, 17, 99, 23, 42, 7]
    ref = _hf_logprobs(tiny_llama_dir, ids)
    r = _post(served.url, "/v1/completions", prompt=ids, max_tokens=2, prompt_logprobs=1)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    plp = choice["prompt_logprobs"]
    assert plp[0] is None and len(plp) == len(ids) and choice["logprobs"] is None
    for p in range(1, len(ids)):
        entry = plp[p][str(ids[p])]
        assert abs(entry["logprob"] - float(ref[p - 1, ids[p]])) < TOL
        assert entry["rank"] >= 1 and entry["decoded_token"] == served.app.tokenizer.decode(
            [ids[p]])
        assert 1 <= len(plp[p]) <= 2
    # Chat: vLLM's response-level prompt_logprobs.
    r = _post(served.url, "/v1/chat/completions", max_tokens=2, prompt_logprobs=0,
              messages=[{"role": "user", "content": "Hi"}])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prompt_logprobs"][0] is None
    assert len(body["prompt_logprobs"]) == body["usage"]["prompt_tokens"]
    # Streamed echo with logprobs: the echo chunk carries the prompt's entries.
    with httpx.stream("POST", served.url + "/v1/completions", timeout=60, json=dict(
            model="tiny", prompt=ids, echo=True, logprobs=0, max_tokens=2, temperature=0,
            stream=True)) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    entries = [c["logprobs"] for ch in chunks for c in ch["choices"] if c["logprobs"]]
    lps = [x for e in entries for x in e["token_logprobs"]]
    assert len(lps) == len(ids) + 2 and lps[0] is None
    assert all(abs(lps[p] - float(ref[p - 1, ids[p]])) < TOL for p in range(1, len(ids)))
    offsets = [x for e in entries for x in e["text_offset"]]
    assert offsets == sorted(offsets)
    # Echo only (max_tokens=0), streamed, n=2: one echo chunk per choice, with the entries.
    with httpx.stream("POST", served.url + "/v1/completions", timeout=60, json=dict(
            model="tiny", prompt=ids, echo=True, logprobs=1, max_tokens=0, n=2,
            stream=True, stream_options={"include_usage": True})) as s:
        chunks = [json.loads(line[6:]) for line in s.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    choices = [c for ch in chunks for c in ch["choices"]]
    assert sorted(c["index"] for c in choices) == [0, 1]
    for c in choices:
        assert c["finish_reason"] == "length" and c["logprobs"]["token_logprobs"] == lps[:len(ids)]
    assert chunks[-1]["usage"]["completion_tokens"] == 0


@pytest.mark.parametrize("route,body,param", [
    ("/v1/completions", dict(prompt="Hi", prompt_logprobs=21), "prompt_logprobs"),
    ("/v1/completions", dict(prompt="Hi", prompt_logprobs=-1), "prompt_logprobs"),
    ("/v1/completions", dict(prompt="Hi", prompt_logprobs=1, stream=True), "prompt_logprobs"),
    ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "Hi"}],
                                  prompt_logprobs=1, stream=True), "prompt_logprobs"),
])
def test_bad_prompt_logprobs_requests_are_400(served, route, body, param):
    r = _post(served.url, route, **body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and param in err["message"], err
