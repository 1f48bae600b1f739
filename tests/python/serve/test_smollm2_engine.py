"""The engine on the real SmolLM2-135M-Instruct: greedy tokens equal Hugging Face generate()
on the CPU, with speculative decoding and without it (each prompt both ways in one batch),
for a chat prompt and other prompts arriving together (one that repeats its input, so
drafts are accepted), then for a chat that shares the first one's system prompt and so
starts from the prefix cache."""

from dataclasses import replace

from conftest import ENGINE_ARGS, SPEC

from torchtpu.serve import LLM, SamplingParams


def test_smollm2_chat_and_concurrent_prompts_match_hf(hf_reference):
    from torchtpu.models import smollm2_path

    path = str(smollm2_path())
    # Three layers per compiled call: the default's ten would triple this test's warm-up.
    llm = LLM(path, speculative=SPEC, layers_per_call=3, **dict(ENGINE_ARGS, max_model_len=512))
    tok = llm.tokenizer
    system = ("You are a helpful assistant. Answer briefly and clearly, in plain English, "
              "and never invent facts you are not sure about.")
    chat = [{"role": "system", "content": system},
            {"role": "user", "content": "What is the capital of France?"}]
    chat_ids = tok.encode(tok.apply_chat_template(chat, add_generation_prompt=True,
                                                  tokenize=False), add_special_tokens=False)
    other = [{"role": "system", "content": system},
             {"role": "user", "content": "What is 2 + 2?"}]
    other_ids = tok.encode(tok.apply_chat_template(other, add_generation_prompt=True,
                                                   tokenize=False), add_special_tokens=False)
    plain_ids = tok.encode("The quick brown fox")
    quote_ids = tok.encode("Passage:\nTo be, or not to be, that is the question: whether 'tis "
                           "nobler in the mind to suffer the slings and arrows of outrageous "
                           "fortune.\n\nThe passage again, word for word:\n")
    greedy = SamplingParams(max_tokens=32, temperature=0.0)
    prompts = [chat_ids, plain_ids, quote_ids]
    results = llm.generate(prompts * 2, [greedy] * 3 + [replace(greedy, speculative=False)] * 3)
    for i, ids in enumerate(prompts):
        assert results[i].outputs[0].token_ids == results[i + 3].outputs[0].token_ids
        assert results[i].outputs[0].token_ids == hf_reference(path, ids, 32)
    stats = llm.engine.stats()
    assert stats["spec_decode_num_accepted_tokens"] > 0
    assert stats["prefix_cache_hits"] > 0  # the second copy of each prompt
    # The second chat's system prompt is in the cache now.
    second = llm.generate([other_ids], greedy)[0]
    assert second.outputs[0].token_ids == hf_reference(path, other_ids, 32)
    assert llm.engine.stats()["prefix_cache_hits"] >= stats["prefix_cache_hits"] + 16
    stats = llm.engine.stats()
    assert stats["num_recompiles_after_warmup"] == 0
    assert "paris" in results[0].outputs[0].text.lower()
