import functools
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import tiny_models  # noqa: E402

# Small shapes keep warm-up to a handful of compiles: S in {1,2,4}, Q in {16,32,64}, C=256.
ENGINE_ARGS = dict(page_size=16, max_num_seqs=4, max_num_batched_tokens=64, max_model_len=256,
                   progress=False)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    return tiny_models.build_model_dir(str(tmp_path_factory.mktemp("tiny-llama")), "llama")


@pytest.fixture(scope="session")
def hf_reference():
    """Greedy generate() of a model folder on the CPU, the reference the engine must match."""
    from transformers import AutoModelForCausalLM

    @functools.lru_cache(maxsize=None)
    def model(path):
        return AutoModelForCausalLM.from_pretrained(path).eval()

    def greedy(path, prompt_ids, max_new_tokens):
        import torch

        m = model(path)
        with torch.no_grad():
            out = m.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens,
                             do_sample=False, attention_mask=torch.ones(1, len(prompt_ids),
                                                                        dtype=torch.long))
        return out[0, len(prompt_ids):].tolist()

    return greedy
