"""The engine against Hugging Face generate() on the CPU: greedy tokens must be identical,
for concurrent requests of mixed lengths, with the prefix cache on and off, and across
preemption."""

import random

import pytest
from conftest import ENGINE_ARGS

from torchtpu.serve import LLM, SamplingParams


def _prompts(tok, n, seed=0):
    rng = random.Random(seed)
    lines = [line for line in __import__("tiny_models").corpus()[:400]]
    prompts = []
    for i in range(n):
        text = " ".join(rng.sample(lines, rng.randint(1, 12)))
        ids = tok.encode(text)[: rng.randint(3, 150)]
        prompts.append(ids)
    return prompts


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_greedy_matches_hf_mixed_lengths(tiny_llama_dir, hf_reference, prefix_cache):
    llm = LLM(tiny_llama_dir, enable_prefix_cache=prefix_cache, **ENGINE_ARGS)
    prompts = _prompts(llm.tokenizer, 7)
    # Two prompts share a long prefix so the cache has something to find.
    prompts.append(prompts[0][:40] + prompts[1][:20])
    prompts.append(prompts[0][:40] + prompts[2][:10])
    params = SamplingParams(max_tokens=32, temperature=0.0)
    results = llm.generate(prompts, params)
    for ids, res in zip(prompts, results):
        assert res.outputs[0].token_ids == hf_reference(tiny_llama_dir, ids, 32)
    stats = llm.engine.stats()
    assert stats["num_recompiles_after_warmup"] == 0
    assert stats["prefix_cache_hits"] > 0 if prefix_cache else stats["prefix_cache_hits"] == 0


def test_concurrent_requests_compute_a_shared_prefix_once(tiny_llama_dir, hf_reference, caplog):
    import json
    import logging

    caplog.set_level(logging.INFO, logger="torchtpu.serve")
    llm = LLM(tiny_llama_dir, log_request_timelines=True, **ENGINE_ARGS)
    corpus = __import__("tiny_models").corpus()
    shared = llm.tokenizer.encode(" ".join(corpus[:60]))[:96]  # 6 pages of 16
    assert len(shared) == 96
    prompts = [shared + llm.tokenizer.encode(corpus[100 + i])[:8] for i in range(4)]
    results = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0))
    for ids, res in zip(prompts, results):
        assert res.outputs[0].token_ids == hf_reference(tiny_llama_dir, ids, 8)
    # Submitted together, the three later requests waited for the first one's prefill and
    # took all 96 shared tokens from the cache instead of computing them again.
    assert llm.engine.stats()["prefix_cache_hits"] == 3 * 96
    # Their timelines say so: the first computed its prompt in budget-sized chunks (64, then
    # the rest), each later one only what follows the shared 96 tokens, in a step after the
    # first one's last chunk.
    lines = [r.getMessage() for r in caplog.records if "serve: timeline " in r.getMessage()]
    timelines = [json.loads(m.split("serve: timeline ", 1)[1]) for m in lines]
    assert len(timelines) == 4
    (first,) = [t for t in timelines if t["cached_tokens"] == 0]
    assert [c[1] for c in first["prefill_chunks"]] == [64, first["prompt_tokens"] - 64]
    for t in timelines:
        assert t["first_token_step"] == t["prefill_chunks"][-1][0]
        assert 0 <= t["queue_s"] <= t["prefill_chunks"][0][2] + 1e-3 <= t["ttft_s"] + 1e-3
        if t is not first:
            assert t["cached_tokens"] == 96
            assert [c[1] for c in t["prefill_chunks"]] == [t["prompt_tokens"] - 96]
            assert t["prefill_chunks"][0][0] > first["prefill_chunks"][-1][0]


def test_greedy_matches_hf_across_preemption(tiny_llama_dir, hf_reference):
    # 16 pages of 16 slots cannot hold four 60-token prompts plus 32 new tokens each.
    llm = LLM(tiny_llama_dir, num_pages=16, **ENGINE_ARGS)
    prompts = [p[:60] + [5] * max(0, 60 - len(p)) for p in _prompts(llm.tokenizer, 4, seed=1)]
    results = llm.generate(prompts, SamplingParams(max_tokens=32, temperature=0.0,
                                                   ignore_eos=True))
    stats = llm.engine.stats()
    assert stats["num_preemptions"] > 0
    for ids, res in zip(prompts, results):
        ref = hf_reference(tiny_llama_dir, ids, 32)
        assert res.outputs[0].token_ids[: len(ref)] == ref
        assert len(res.outputs[0].token_ids) == 32
    llm.engine.scheduler.reset_prefix_cache()
    assert llm.engine.scheduler.num_free_pages == llm.engine.scheduler.num_total_pages


def test_max_model_len_past_the_models_positions_is_refused(tiny_llama_dir):
    # vLLM refuses it too: the tiny model has 1024 positions.
    with pytest.raises(ValueError, match=r"max_model_len \(1025\) is greater than the "
                                         r"model's 1024 positions"):
        LLM(tiny_llama_dir, **{**ENGINE_ARGS, "max_model_len": 1025})


def test_a_pool_smaller_than_max_model_len_is_refused_at_start(tiny_llama_dir):
    # As vLLM: a request of the advertised length (or a chat request without max_tokens)
    # could never run.
    with pytest.raises(ValueError, match=r"max_model_len \(256\) is larger than the KV cache "
                                         r"holds \(8 pages x 16 tokens = 128 tokens\); use "
                                         r"--num-pages >= 16"):
        LLM(tiny_llama_dir, num_pages=8, **ENGINE_ARGS)


def test_more_requests_than_pages_all_complete(tiny_llama_dir):
    llm = LLM(tiny_llama_dir, num_pages=16, **ENGINE_ARGS)
    prompts = _prompts(llm.tokenizer, 12, seed=2)
    prompts = [p[:50] for p in prompts]
    results = llm.generate(prompts, SamplingParams(max_tokens=24, temperature=0.8, seed=3,
                                                   ignore_eos=True))
    assert all(len(r.outputs[0].token_ids) == 24 for r in results)
    assert all(r.outputs[0].finish_reason == "length" for r in results)


def test_prompt_too_long_is_rejected_and_engine_keeps_working(tiny_llama_dir):
    llm = LLM(tiny_llama_dir, **ENGINE_ARGS)
    for prompt in ([7] * 256, [7] * 300):
        with pytest.raises(ValueError, match="maximum context length is 256"):
            llm.generate([prompt], SamplingParams(max_tokens=10))
    # A max_tokens the context cannot hold generates up to it, as vLLM's offline API does
    # (its server, and ours, refuse the request instead).
    out = llm.generate([[7] * 250], SamplingParams(max_tokens=10, min_tokens=8,
                                                   ignore_eos=True))[0].outputs[0]
    assert len(out.token_ids) == 6 and out.finish_reason == "length"
    out = llm.generate([[7] * 20], SamplingParams(max_tokens=4, temperature=0.0))
    assert len(out[0].outputs[0].token_ids) <= 4
    assert not llm.engine.has_unfinished()


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "mistral"])
def test_other_architectures_match_hf(tmp_path, hf_reference, arch):
    import tiny_models

    path = tiny_models.build_model_dir(str(tmp_path / arch), arch, seed=1)
    llm = LLM(path, **ENGINE_ARGS)
    prompts = _prompts(llm.tokenizer, 3, seed=4)
    results = llm.generate(prompts, SamplingParams(max_tokens=16, temperature=0.0))
    for ids, res in zip(prompts, results):
        assert res.outputs[0].token_ids == hf_reference(path, ids, 16)


def test_restart_loads_every_bucket_from_the_disk_cache(tiny_llama_dir, tmp_path):
    import json
    import os
    import subprocess
    import sys

    script = (
        "import json, torchtpu\n"
        "from torchtpu.serve import LLM, SamplingParams\n"
        f"llm = LLM({tiny_llama_dir!r}, page_size=16, max_num_seqs=2, max_num_batched_tokens=32,"
        " max_model_len=256, progress=False)\n"
        "llm.generate([[5, 6, 7]], SamplingParams(max_tokens=4, temperature=0.0))\n"
        "m = torchtpu.debug.metrics()\n"
        "print(json.dumps({k: m.get(k, 0) for k in ('num_compiles', "
        "'num_compile_cache_hits_disk')}))\n")
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["num_compiles"] > 0
    assert runs[1]["num_compiles"] == 0
    assert runs[1]["num_compile_cache_hits_disk"] >= runs[0]["num_compiles"]


def test_n_sequences_share_the_prompt_pages(tiny_llama_dir, hf_reference):
    llm = LLM(tiny_llama_dir, **ENGINE_ARGS)
    prompt = _prompts(llm.tokenizer, 1, seed=5)[0][:40]
    prompt += [5] * (40 - len(prompt))
    out = llm.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0, n=4))
    assert [o.index for o in out[0].outputs] == [0, 1, 2, 3]
    ref = hf_reference(tiny_llama_dir, prompt, 8)
    assert all(o.token_ids == ref for o in out[0].outputs)
    # The first sequence computes the prompt; the other three take its 2 full pages.
    assert llm.engine.stats()["prefix_cache_hits"] == 3 * 32
    sampled = llm.generate([prompt], SamplingParams(max_tokens=8, temperature=1.0, seed=1,
                                                    n=2, best_of=4))
    assert len(sampled[0].outputs) == 2
    per_token = [o.cumulative_logprob / len(o.token_ids) for o in sampled[0].outputs]
    assert per_token == sorted(per_token, reverse=True)


def test_the_engine_keeps_its_own_recompile_limit(tiny_llama_dir, hf_reference):
    # An engine compiles each step function once per bucket shape; lowering Dynamo's
    # process-wide limit afterwards (other code, another engine) must not stop it. (The
    # config's own patch: pytest's monkeypatch undo leaves torch's config entry hidden.)
    import torch

    llm = LLM(tiny_llama_dir, warmup=False, **ENGINE_ARGS)
    prompts = _prompts(llm.tokenizer, 4, seed=3)
    with torch._dynamo.config.patch(recompile_limit=1):
        results = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0))
    for ids, res in zip(prompts, results):
        assert res.outputs[0].token_ids == hf_reference(tiny_llama_dir, ids, 8)


def test_a_stop_string_completed_by_the_last_allowed_token_finishes_as_stop(tiny_llama_dir):
    """As in vLLM: the stop string wins over the length limit reached in the same step."""
    llm = LLM(tiny_llama_dir, **ENGINE_ARGS)
    prompt = _prompts(llm.tokenizer, 1, seed=5)[0]
    for seed in range(20):  # a sampled text whose 8th token's text is new in it
        kw = dict(temperature=1.0, seed=seed, ignore_eos=True)
        full = llm.generate([prompt], SamplingParams(max_tokens=8, **kw))[0].outputs[0]
        shorter = llm.generate([prompt], SamplingParams(max_tokens=7, **kw))[0].outputs[0]
        stop = full.text[max(len(shorter.text) - 1, 0):]  # ends inside the 8th token's text
        if len(stop) > 1 and stop not in shorter.text and "\ufffd" not in full.text:
            break
    else:
        pytest.fail("no seed gave a usable text")
    out = llm.generate([prompt], SamplingParams(max_tokens=8, stop=[stop], **kw))
    assert out[0].outputs[0].text == full.text[:full.text.index(stop)]
    assert out[0].outputs[0].finish_reason == "stop"


def test_two_engines_in_one_process_count_their_own_compiles(tiny_llama_dir, caplog):
    # The check for compiles after warm-up counted the process's compiles: a second engine's
    # warm-up made the first log "BUG: N graph compile(s) after warm-up" at its next step.
    import logging

    caplog.set_level(logging.ERROR, logger="torchtpu.serve")
    first = LLM(tiny_llama_dir, **ENGINE_ARGS)
    params = SamplingParams(max_tokens=4, temperature=0.0)
    want = first.generate([[5, 6, 7]], params)[0].outputs[0].token_ids
    second = LLM(tiny_llama_dir, **ENGINE_ARGS)
    assert first.generate([[5, 6, 7]], params)[0].outputs[0].token_ids == want
    assert second.generate([[5, 6, 7]], params)[0].outputs[0].token_ids == want
    for llm in (first, second):
        assert llm.engine.stats()["num_recompiles_after_warmup"] == 0
    assert not [r for r in caplog.records if "after warm-up" in r.getMessage()]


class _Interrupted(BaseException):
    """What Ctrl-C raises (a BaseException), without pytest taking it for the user's."""


def test_an_interrupted_generate_leaves_the_llm_usable(tiny_llama_dir):
    # A KeyboardInterrupt mid-generate left the scheduler with a step it never applied:
    # every later call raised "the previous step was not applied". The call now aborts its
    # requests and the next one runs as on a fresh LLM; calls from two threads run one
    # after the other.
    import signal
    import threading

    llm = LLM(tiny_llama_dir, **ENGINE_ARGS)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    prompts = [[5, 6, 7], [9, 10, 11, 12]]
    want = [r.outputs[0].token_ids for r in llm.generate(prompts, params)]

    def interrupt(signum, frame):
        raise _Interrupted()

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        for delay in (0.005, 0.02, 0.05):
            signal.setitimer(signal.ITIMER_REAL, delay)
            try:
                llm.generate(prompts * 8, SamplingParams(max_tokens=240, temperature=0.0,
                                                         ignore_eos=True))
            except _Interrupted:
                pass
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert not llm.engine.has_unfinished()
            assert [r.outputs[0].token_ids for r in llm.generate(prompts, params)] == want
    finally:
        signal.signal(signal.SIGALRM, previous)
    got = {}

    def call(k):
        got[k] = [r.outputs[0].token_ids for r in llm.generate(prompts, params)]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert got == {0: want, 1: want}
