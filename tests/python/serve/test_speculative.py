"""Speculative decoding (n-gram drafts) end to end on a tiny random Llama: greedy tokens with
speculation equal those without (and Hugging Face's), for concurrent requests of mixed
lengths, with the prefix cache on and off, across preemption, and through the OpenAI server
(streaming, logprobs, stop strings, structured output); sampled tokens follow the model's
own distribution (a chi-square test over thousands of seeded samples)."""

import json
import math
import random
from dataclasses import replace

import httpx
import pytest
import torch
from conftest import ENGINE_ARGS, SPEC, RunningServer

from torchtpu.serve import LLM, LLMEngine, SamplingParams
from torchtpu.serve.speculative import SpeculativeConfig


def _prompts(tok, n, seed=0):
    """Mixed lengths; half of them repeat a line, so their drafts are often right."""
    rng = random.Random(seed)
    lines = __import__("tiny_models").corpus()[:400]
    prompts = []
    for i in range(n):
        if i % 2:
            line = tok.encode(rng.choice(lines))[:12]
            prompts.append((line * 8)[: rng.randint(12, 90)])
        else:
            prompts.append(tok.encode(" ".join(rng.sample(lines, 6)))[: rng.randint(3, 90)])
    return prompts


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_greedy_with_speculation_equals_without(tiny_llama_dir, hf_reference, prefix_cache):
    # 16 pages of 16 slots hold about two of these requests at once: four running preempt.
    llm = LLM(tiny_llama_dir, enable_prefix_cache=prefix_cache, num_pages=16, speculative=SPEC,
              **ENGINE_ARGS)
    prompts = _prompts(llm.tokenizer, 8)
    on = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
    off = replace(on, speculative=False)
    results = llm.generate(prompts + prompts, [on] * len(prompts) + [off] * len(prompts))
    for i, ids in enumerate(prompts):
        with_spec = results[i].outputs[0].token_ids
        assert with_spec == results[len(prompts) + i].outputs[0].token_ids, i
        assert with_spec == hf_reference(tiny_llama_dir, ids, 32), i
    stats = llm.engine.stats()
    assert stats["num_preemptions"] > 0
    assert stats["spec_decode_num_accepted_tokens"] > 0
    assert stats["spec_decode_num_draft_tokens"] > stats["spec_decode_num_accepted_tokens"]
    assert stats["num_recompiles_after_warmup"] == 0
    llm.engine.scheduler.reset_prefix_cache()
    assert llm.engine.scheduler.num_free_pages == llm.engine.scheduler.num_total_pages
    metrics = llm.engine.metrics.render().decode()
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=' in metrics
    assert "vllm:spec_decode_num_drafts_total" in metrics


def test_stop_strings_and_seeds_give_the_same_output_with_and_without_speculation(
        tiny_llama_dir):
    """A stop string completed inside a run of accepted drafts ends the output at the token
    that completes it (tokens, logprobs, cumulative logprob), min_tokens counts tokens, not
    steps, and a seeded sampled request draws the tokens it draws without speculation,
    alone or beside requests that leave it fewer drafts."""
    llm = LLM(tiny_llama_dir, speculative=SPEC, **ENGINE_ARGS)
    prompts = _prompts(llm.tokenizer, 8, seed=1)
    greedy = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True, logprobs=0,
                            speculative=False)
    texts = [r.outputs[0].text for r in llm.generate(prompts, greedy)]
    rng = random.Random(0)
    cases = []  # stop strings cut from each greedy text: they end some step's drafts
    for ids, text in zip(prompts, texts):
        for _ in range(4):
            at = rng.randrange(1, max(2, len(text) - 3))
            cases.append((ids, replace(greedy, stop=[text[at:at + rng.randint(1, 3)]],
                                       min_tokens=rng.choice([0, 0, 2, 5, 9]))))
    on = llm.generate([c[0] for c in cases], [replace(c[1], speculative=True) for c in cases])
    off = llm.generate([c[0] for c in cases], [c[1] for c in cases])
    for a, b in zip(on, off):
        x, y = a.outputs[0], b.outputs[0]
        assert (x.token_ids, x.text, x.finish_reason, x.stop_reason) == \
            (y.token_ids, y.text, y.finish_reason, y.stop_reason)
        assert len(x.logprobs) == len(x.token_ids)
        assert x.cumulative_logprob == pytest.approx(y.cumulative_logprob, abs=1e-3)
    assert sum(r.outputs[0].finish_reason == "stop" for r in on) > len(cases) // 2
    assert llm.engine.stats()["spec_decode_num_accepted_tokens"] > 0

    seeded = SamplingParams(max_tokens=32, temperature=1.0, top_k=4, seed=1234, ignore_eos=True)
    target = prompts[1]
    alone = llm.generate([target], seeded)[0].outputs[0].token_ids
    assert alone == llm.generate([target], replace(seeded, speculative=False))[0] \
        .outputs[0].token_ids
    busy = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    mixed = llm.generate(prompts[2:5] + [target], [busy] * 3 + [seeded])
    assert mixed[3].outputs[0].token_ids == alone


def _chi_square_quantile(df: int, z: float) -> float:
    """Wilson-Hilferty: the chi-square quantile whose normal score is z."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_sampled_tokens_with_speculation_follow_the_model(tiny_llama_dir):
    """Three tokens at temperature 1 (top-k 4) from 4096 seeded sequences: the counts of
    each 3-token continuation against the model's exact probabilities (from Hugging Face
    on the CPU). The second and third tokens go through draft verification (a draw accepts
    the draft it equals), so a wrong rule shows as a skew toward drafts."""
    from transformers import AutoModelForCausalLM

    llm = LLM(tiny_llama_dir, speculative=SPEC, **dict(ENGINE_ARGS, max_num_seqs=16))
    lines = __import__("tiny_models").corpus()
    prompt = llm.tokenizer.encode(" ".join(lines[:8]))[:48]
    params = [SamplingParams(max_tokens=3, temperature=1.0, top_k=4, n=128, seed=1000 * i,
                             ignore_eos=True) for i in range(32)]
    results = llm.generate([prompt] * 32, params)
    counts: dict[tuple[int, ...], int] = {}
    for r in results:
        for o in r.outputs:
            key = tuple(o.token_ids)
            counts[key] = counts.get(key, 0) + 1
    samples = sum(counts.values())
    assert samples == 4096
    stats = llm.engine.stats()
    drafted = stats["spec_decode_num_draft_tokens"]
    accepted = stats["spec_decode_num_accepted_tokens"]
    assert drafted > samples // 4 and 0 < accepted < drafted

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()

    @torch.no_grad()
    def top4(context: list[int]) -> dict[int, float]:
        logits = model(torch.tensor([context])).logits[0, -1]
        values, ids = torch.topk(logits, 4)
        probs = torch.softmax(values.double(), dim=0)
        return {int(i): float(p) for i, p in zip(ids, probs)}

    expected: dict[tuple[int, ...], float] = {}
    for a, pa in top4(prompt).items():
        for b, pb in top4(prompt + [a]).items():
            for c, pc in top4(prompt + [a, b]).items():
                expected[(a, b, c)] = pa * pb * pc * samples
    assert set(counts) <= set(expected)
    # Cells expected fewer than 5 times are pooled, as the test requires.
    stat, pooled_obs, pooled_exp, cells = 0.0, 0, 0.0, 0
    for key, e in expected.items():
        if e < 5:
            pooled_obs += counts.get(key, 0)
            pooled_exp += e
            continue
        stat += (counts.get(key, 0) - e) ** 2 / e
        cells += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        cells += 1
    # p = 0.001 (z = 3.09); with fixed seeds the outcome is the same on every run.
    assert stat < _chi_square_quantile(cells - 1, 3.09), (stat, cells)


def test_speculative_config_parses_vllms_shapes_and_says_what_is_wrong():
    assert SpeculativeConfig.parse(None) is None and SpeculativeConfig.parse(False) is None
    assert SpeculativeConfig.parse(True) == SpeculativeConfig()
    assert SpeculativeConfig.parse(6).num_speculative_tokens == 6
    cfg = SpeculativeConfig.parse({"method": "ngram", "num_speculative_tokens": 5,
                                   "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    assert (cfg.num_speculative_tokens, cfg.prompt_lookup_min, cfg.prompt_lookup_max) == (5, 1, 3)
    with pytest.raises(ValueError, match="method 'eagle' is not supported"):
        SpeculativeConfig.parse({"method": "eagle"})
    with pytest.raises(ValueError, match="unknown key.s. model; known:"):
        SpeculativeConfig.parse({"model": "x"})
    # One bound given: the other takes its value (vLLM's rule); both unset: 2..4.
    cfg = SpeculativeConfig.parse({"prompt_lookup_min": 5})
    assert (cfg.prompt_lookup_min, cfg.prompt_lookup_max) == (5, 5)
    cfg = SpeculativeConfig.parse({"prompt_lookup_max": 1})
    assert (cfg.prompt_lookup_min, cfg.prompt_lookup_max) == (1, 1)
    assert (SpeculativeConfig().prompt_lookup_min, SpeculativeConfig().prompt_lookup_max) == (2, 4)
    with pytest.raises(ValueError, match="prompt_lookup_min .5. must not exceed"):
        SpeculativeConfig.parse({"prompt_lookup_min": 5, "prompt_lookup_max": 3})
    with pytest.raises(ValueError, match="num_speculative_tokens must be a positive integer"):
        SpeculativeConfig.parse(0)
    # Past int32 (the scheduler's): a ValueError, not the binding's TypeError.
    with pytest.raises(ValueError, match="below 2..31"):
        SpeculativeConfig.parse(2**31)
    with pytest.raises(ValueError, match="speculative must be None, a bool"):
        SpeculativeConfig.parse("ngram")
    with pytest.raises(ValueError, match="speculative must be a bool"):
        SamplingParams(speculative="yes")


def test_server_answers_are_the_same_with_and_without_speculation(tiny_llama_dir):
    srv = RunningServer(LLMEngine(tiny_llama_dir, served_model_name="tiny", speculative=SPEC,
                                  **ENGINE_ARGS))
    try:
        def post(route, body):
            r = httpx.post(srv.url + route, json=dict({"model": "tiny"}, **body), timeout=120)
            assert r.status_code == 200, r.text
            return r.json()

        def stream(body):
            with httpx.stream("POST", srv.url + "/v1/completions", timeout=120,
                              json=dict({"model": "tiny", "stream": True}, **body)) as r:
                return "".join(json.loads(line[6:])["choices"][0]["text"]
                               for line in r.iter_lines()
                               if line.startswith("data: ") and line != "data: [DONE]")

        repeat = "to be or not to be, to be or not to be, to be or not"
        greedy = {"temperature": 0, "ignore_eos": True, "max_tokens": 24}
        cases = [
            ("/v1/completions", dict(greedy, prompt=repeat, logprobs=2)),
            ("/v1/completions", dict(greedy, prompt=repeat, stop=[" not"], ignore_eos=False)),
            ("/v1/completions", dict(greedy, prompt=repeat, n=2)),
            ("/v1/chat/completions", dict(greedy, messages=[{"role": "user",
                                                             "content": repeat}])),
            ("/v1/completions", dict(greedy, prompt=repeat, guided_json={
                "type": "object", "properties": {"a": {"type": "string", "maxLength": 8}},
                "required": ["a"], "additionalProperties": False})),
        ]
        for route, body in cases:
            on = post(route, dict(body, speculative=True))
            off = post(route, dict(body, speculative=False))
            for a, b in zip(on["choices"], off["choices"]):
                assert a.get("text", a.get("message")) == b.get("text", b.get("message"))
                assert a["finish_reason"] == b["finish_reason"]
                if a.get("logprobs"):
                    assert a["logprobs"]["tokens"] == b["logprobs"]["tokens"]
                    for x, y in zip(a["logprobs"]["token_logprobs"],
                                    b["logprobs"]["token_logprobs"]):
                        assert abs(x - y) < 1e-3
            assert on["usage"] == off["usage"]
        body = dict(greedy, prompt=repeat)
        assert stream(dict(body, speculative=True)) == stream(dict(body, speculative=False))
        metrics = httpx.get(srv.url + "/metrics").text
        drafts = [ln for ln in metrics.splitlines()
                  if ln.startswith("vllm:spec_decode_num_accepted_tokens_total")]
        assert drafts and float(drafts[0].rsplit(" ", 1)[1]) > 0
    finally:
        srv.stop()
