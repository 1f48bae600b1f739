"""Speculative decoding (n-gram drafts) end to end on a tiny random Llama: greedy tokens with
speculation equal those without (and Hugging Face's), for concurrent requests of mixed
lengths, with the prefix cache on and off, across preemption; sampled tokens follow the
model's own distribution (a chi-square test over thousands of seeded samples)."""

import math
import random
from dataclasses import replace

import pytest
import torch

from conftest import ENGINE_ARGS
from torchtpu.serve import LLM, SamplingParams

SPEC = {"num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


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
    # 14 pages of 16 slots hold about two of these requests at once: four running preempt.
    llm = LLM(tiny_llama_dir, enable_prefix_cache=prefix_cache, num_pages=14, speculative=SPEC,
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


def _chi_square_quantile(df: int, z: float) -> float:
    """Wilson-Hilferty: the chi-square quantile whose normal score is z."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def test_sampled_tokens_with_speculation_follow_the_model(tiny_llama_dir):
    """Three tokens at temperature 1 (top-k 4) from 4096 seeded sequences: the counts of
    each 3-token continuation against the model's exact probabilities (from Hugging Face
    on the CPU). The second and third tokens go through draft verification (accept with
    p(draft), else resample without it), so a wrong rule shows as a skew toward drafts."""
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
    drafted, accepted = stats["spec_decode_num_draft_tokens"], stats["spec_decode_num_accepted_tokens"]
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
