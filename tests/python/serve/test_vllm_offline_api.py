"""The offline API and text prompts as vLLM users write them: the keyword and prompt forms
vLLM's LLM takes, and text prompts encoded with the tokenizer's BOS (vLLM's and Hugging
Face's default), compared against Hugging Face on the CPU."""

import httpx
import pytest
import tiny_models
from conftest import ENGINE_ARGS, RunningServer

from torchtpu.serve import LLM, SamplingParams

PROMPT = "First Citizen:"


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    return LLM(tiny_llama_dir, **ENGINE_ARGS)


@pytest.fixture(scope="module")
def bos_llama_dir(tmp_path_factory):
    """The tiny Llama with a tokenizer that puts BOS before every text, as Llama's and
    Mistral's do."""
    from tokenizers import processors
    from transformers import AutoTokenizer

    path = tiny_models.build_model_dir(str(tmp_path_factory.mktemp("bos-llama")), "llama")
    tok = AutoTokenizer.from_pretrained(path)
    bos = tok.convert_ids_to_tokens(0)
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, 0)])
    tok.save_pretrained(path)
    return path


def test_a_text_prompt_gets_the_tokenizers_bos(bos_llama_dir, hf_reference):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(bos_llama_dir)
    ids = tok(PROMPT).input_ids
    assert ids[0] == 0 and len(ids) > 1
    ref = hf_reference(bos_llama_dir, ids, 8)
    llm = LLM(bos_llama_dir, served_model_name="tiny", **ENGINE_ARGS)
    out = llm.generate(PROMPT, SamplingParams(max_tokens=8, temperature=0), use_tqdm=False)[0]
    assert out.prompt_token_ids == ids
    assert out.outputs[0].token_ids == ref
    srv = RunningServer(llm.engine)
    try:
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 0}
        got = httpx.post(srv.url + "/v1/completions", json=body, timeout=60).json()
        assert got["usage"]["prompt_tokens"] == len(ids)
        assert got["choices"][0]["text"] == tok.decode(ref)
        bare = httpx.post(srv.url + "/v1/completions", json={**body, "add_special_tokens": False},
                          timeout=60).json()
        assert bare["usage"]["prompt_tokens"] == len(ids) - 1
        counted = httpx.post(srv.url + "/tokenize", json={"model": "tiny", "prompt": PROMPT},
                             timeout=60).json()
        assert counted["tokens"] == ids
    finally:
        srv.stop()


def test_vllm_call_forms(llm):
    greedy = SamplingParams(max_tokens=6, temperature=0)
    ref = llm.generate(PROMPT, greedy, use_tqdm=False)[0]
    ids = ref.prompt_token_ids
    forms = [llm.generate([PROMPT], sampling_params=greedy, use_tqdm=False),
             llm.generate({"prompt": PROMPT}, greedy, use_tqdm=False),
             llm.generate([{"prompt_token_ids": ids}], sampling_params=[greedy], use_tqdm=False)]
    for got in forms:
        assert got[0].outputs[0].token_ids == ref.outputs[0].token_ids
        assert got[0].prompt_token_ids == ids and got[0].finished
    assert forms[1][0].prompt == PROMPT
    assert llm.get_tokenizer() is llm.tokenizer
    chat = llm.chat([{"role": "user", "content": "hi"}], sampling_params=greedy, use_tqdm=False)
    assert chat[0].finished and len(chat[0].outputs[0].token_ids) == 6


def test_chat_takes_vllms_template_arguments(llm):
    # Each renders the conversation as the tokenizer's apply_chat_template does with the
    # same arguments; the prompt ids are what the engine ran.
    tok = llm.tokenizer
    greedy = SamplingParams(max_tokens=2, temperature=0)
    conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]

    def ids(**kw):
        return tok.encode(tok.apply_chat_template(conv, tokenize=False, **kw),
                          add_special_tokens=False)

    custom = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    cases = [({}, ids(add_generation_prompt=True)),
             ({"add_generation_prompt": False}, ids(add_generation_prompt=False)),
             ({"add_generation_prompt": False, "continue_final_message": True},
              ids(add_generation_prompt=False, continue_final_message=True)),
             ({"chat_template": custom}, ids(chat_template=custom))]
    for kwargs, expected in cases:
        out = llm.chat(conv, greedy, use_tqdm=False, **kwargs)[0]
        assert out.prompt_token_ids == expected, kwargs
    assert len({tuple(e) for _, e in cases}) == len(cases)  # the arguments changed something
    with pytest.raises(ValueError, match="chat_template_kwargs"):
        llm.chat(conv, greedy, use_tqdm=False, chat_template_kwargs={"tools": []})
    with pytest.raises(ValueError, match="chat template failed"):
        llm.chat(conv, greedy, use_tqdm=False, chat_template="{{ raise_exception('no') }}")
    assert not llm.engine.has_unfinished()


@pytest.mark.parametrize("prompt", [{"prompt": PROMPT, "multi_modal_data": {}},
                                    {"prompt_token_ids": "12"}, {}])
def test_a_prompt_dict_it_cannot_take_is_refused_and_loses_nothing(llm, prompt):
    with pytest.raises(ValueError, match="prompt dict"):
        llm.generate([PROMPT, prompt], SamplingParams(max_tokens=2), use_tqdm=False)
    assert not llm.engine.has_unfinished()
    assert llm.generate(PROMPT, SamplingParams(max_tokens=2), use_tqdm=False)[0].finished


def test_max_tokens_none_runs_to_the_context_length(llm):
    out = llm.generate(PROMPT, SamplingParams(max_tokens=None, temperature=0, ignore_eos=True),
                       use_tqdm=False)[0]
    assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == ENGINE_ARGS["max_model_len"]
    assert out.outputs[0].finish_reason == "length"
    with pytest.raises(ValueError, match="min_tokens"):
        llm.generate(PROMPT, SamplingParams(max_tokens=None, min_tokens=10**6), use_tqdm=False)


def test_the_progress_bar_counts_finished_prompts(llm):
    bars = []

    class Bar:
        def __init__(self, total, desc):
            self.total, self.desc, self.n, self.closed = total, desc, 0, False
            bars.append(self)

        def update(self, k):
            self.n += k

        def close(self):
            self.closed = True

    params = SamplingParams(max_tokens=3, n=2, best_of=3, temperature=1.0, seed=1)
    llm.generate([PROMPT, "a", "bc"], params, use_tqdm=Bar)
    assert [(b.total, b.n, b.closed) for b in bars] == [(3, 3, True)]
    llm.generate([PROMPT], params, use_tqdm=False)
    assert len(bars) == 1


def test_generate_beside_requests_added_to_the_engine_directly(llm):
    greedy = SamplingParams(max_tokens=4, temperature=0)
    ref = llm.generate(PROMPT, greedy, use_tqdm=False)[0].outputs[0].token_ids
    ids = llm.tokenizer(PROMPT).input_ids
    llm.engine.add_request("mine", ids, SamplingParams(max_tokens=40, temperature=0,
                                                       ignore_eos=True))
    got = llm.generate(PROMPT, greedy, use_tqdm=False)[0]
    assert got.outputs[0].token_ids == ref
    # The direct request was stepped along, not taken: its owner still collects it.
    collected = []
    while llm.engine.has_unfinished():
        collected += [o for o in llm.engine.step() if o.request_id == "mine"]
    assert collected and collected[-1].finish_reason == "length"
    assert len(collected[-1].output_token_ids) == 40
