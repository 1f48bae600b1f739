"""A request that fails ends alone: add_request refuses bad input without touching the
scheduler, and a request whose logits cannot be sampled (a model that gives NaN) fails with
a clear error while the rest of its batch, and every later request, runs as before.

The model is the tiny random Llama with one token's embedding row set to NaN. Its word
embeddings are tied to the head, so that token's logit is NaN for every request (the
sampler must never pick it), and a prompt that contains it makes every logit NaN."""

import httpx
import pytest
import torch
from conftest import ENGINE_ARGS, RunningServer

from torchtpu.serve import LLM, LLMEngine, SamplingParams

POISON = 7


@pytest.fixture(scope="module")
def nan_model_dir(tmp_path_factory):
    import tiny_models
    from transformers import AutoModelForCausalLM

    path = tiny_models.build_model_dir(str(tmp_path_factory.mktemp("nan-llama")), "llama")
    model = AutoModelForCausalLM.from_pretrained(path)
    with torch.no_grad():
        model.get_input_embeddings().weight[POISON] = float("nan")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=[None, False], ids=["kernel", "gathered"])
def llm(request, nan_model_dir):
    # 16 pages of 16 (one max_model_len sequence): later requests reuse the pages the poisoned
    # one wrote NaN into.
    # Both attention paths: the host kernel (CPU plugin) and the gathered StableHLO one
    # (other platforms), which once multiplied a stale NaN value by a zero weight.
    return LLM(nan_model_dir, num_pages=16, attention_kernel=request.param, **ENGINE_ARGS)


def _reference(path, prompt, n):
    """Greedy decoding on the CPU with Hugging Face, NaN logits never chosen."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.nan_to_num(logits, nan=float("-inf")).argmax()))
    return ids[len(prompt):]


def _run(engine, requests):
    for rid, ids, params in requests:
        engine.add_request(rid, ids, params)
    outs = {}
    while engine.has_unfinished():
        for out in engine.step():
            outs.setdefault(out.request_id, []).append(out)
    return outs


def test_add_request_refuses_without_touching_the_scheduler(llm):
    engine = llm.engine
    for field, value in [("seed", 2**64), ("stop_token_ids", [2**70]), ("temperature", -1.0),
                         ("logit_bias", {2**40: 1.0}), ("top_p", float("nan"))]:
        params = SamplingParams(max_tokens=4)
        setattr(params, field, value)  # as a caller that skipped validation would
        with pytest.raises(ValueError, match=field):
            engine.add_request(f"bad-{field}", [5, 6, 8], params)
        assert not engine.has_unfinished()
        assert engine.scheduler.num_waiting == 0 and engine.scheduler.num_running == 0
    with pytest.raises(ValueError, match="prompt token ids"):
        engine.add_request("bad-prompt", [5, 2**40], SamplingParams(max_tokens=4))
    assert not engine.has_unfinished()
    out = llm.generate([[5, 6, 8]], SamplingParams(max_tokens=4, temperature=0.0))
    assert len(out[0].outputs[0].token_ids) == 4


def test_nan_logit_is_never_sampled(llm, nan_model_dir):
    prompt = [5, 6, 8, 9, 10]
    ref = _reference(nan_model_dir, prompt, 12)
    greedy = llm.generate([prompt], SamplingParams(max_tokens=12, temperature=0.0,
                                                   ignore_eos=True))
    assert greedy[0].outputs[0].token_ids == ref
    sampled = llm.generate([prompt] * 4, SamplingParams(max_tokens=12, temperature=2.0,
                                                        seed=3, ignore_eos=True))
    assert all(POISON not in r.outputs[0].token_ids for r in sampled)


def test_a_request_with_nan_logits_fails_alone(llm, nan_model_dir):
    engine = llm.engine
    good = [11, 12, 13, 14, 15, 16]
    ref = _reference(nan_model_dir, good, 10)
    params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
    outs = _run(engine, [("poisoned", [5, POISON, 6] * 10, params), ("good", good, params)])
    last = outs["poisoned"][-1]
    assert last.finished and last.finish_reason == "error"
    assert "NaN" in last.error and "poisoned" not in engine.requests
    assert [t for o in outs["good"] for t in o.new_token_ids] == ref
    # The poisoned request's pages (NaN keys and values) are free again and reused.
    engine.scheduler.reset_prefix_cache()
    assert engine.scheduler.num_free_pages == engine.scheduler.num_total_pages
    prompts = [[20 + i, 21, 22, 23] * 12 for i in range(3)]
    results = llm.generate(prompts, SamplingParams(max_tokens=12, temperature=0.0,
                                                   ignore_eos=True))
    for p, r in zip(prompts, results):
        assert r.outputs[0].token_ids == _reference(nan_model_dir, p, 12)


def test_server_answers_a_failed_request_with_500_and_keeps_serving(nan_model_dir):
    import concurrent.futures as cf

    srv = RunningServer(LLMEngine(nan_model_dir, served_model_name="nan", **ENGINE_ARGS))
    try:
        def post(prompt):
            return httpx.post(srv.url + "/v1/completions", timeout=60, json={
                "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        with cf.ThreadPoolExecutor(2) as pool:
            bad, good = pool.map(post, [[5, POISON, 6], [11, 12, 13]])
        assert bad.status_code == 500
        err = bad.json()["error"]
        assert err["code"] == 500 and err["type"] == "InternalServerError"
        assert "NaN" in err["message"]
        assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 8
        again = post([11, 12, 13])
        assert again.json()["choices"][0]["text"] == good.json()["choices"][0]["text"]
        assert httpx.get(srv.url + "/health").status_code == 200
    finally:
        srv.stop()
