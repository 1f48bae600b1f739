"""Config fields of a checkpoint that change what the model computes are computed, or the
model is refused with the field named: greedy tokens equal Hugging Face's on the CPU (the
engine dropped o_proj's and the MLP's biases, ran every activation as silu, and slid
attention in every layer where transformers slides none)."""

from __future__ import annotations

import pytest
import torch
from tiny_models import build_model_dir
from transformers import AutoModelForCausalLM

from torchtpu.serve import LLM, SamplingParams

PROMPT = [5, 17, 42, 99, 23, 7, 64, 31, 88, 12, 3, 250, 71, 19, 45, 60] * 3


@pytest.mark.parametrize("arch, config", [
    ("llama", {"attention_bias": True}),
    ("llama", {"mlp_bias": True}),
    ("llama", {"hidden_act": "relu"}),
    # layer_types from max_window_layers (28 > 2 layers): transformers slides no layer.
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 0}),
], ids=["attention_bias", "mlp_bias", "relu", "qwen2_no_layer_slides",
        "qwen2_every_layer_slides"])
def test_greedy_tokens_equal_hugging_faces(tmp_path, arch: str, config: dict) -> None:
    path = build_model_dir(str(tmp_path / "m"), arch, random_biases=True, **config)
    hf = AutoModelForCausalLM.from_pretrained(path).eval()
    want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=12, do_sample=False,
                       eos_token_id=None, pad_token_id=0)[0, len(PROMPT):].tolist()
    llm = LLM(path, max_model_len=128, max_num_seqs=2, max_num_batched_tokens=64,
              progress=False)
    got = llm.generate([PROMPT], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True),
                       use_tqdm=False)[0].outputs[0].token_ids
    assert got == want


@pytest.mark.parametrize("arch, config, match", [
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1},
     "some layers only"),
    ("llama", {"hidden_act": "mish"}, "hidden_act 'mish'"),
    ("llama", {"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0] * 8,
                                "long_factor": [2.0] * 8,
                                "original_max_position_embeddings": 256}}, "longrope"),
], ids=["qwen2_some_layers_slide", "mish", "longrope"])
def test_configs_the_layers_do_not_compute_are_refused(tmp_path, arch: str, config: dict,
                                                        match: str) -> None:
    path = build_model_dir(str(tmp_path / "m"), arch, **config)
    with pytest.raises(ValueError, match=match):
        LLM(path, max_model_len=128, max_num_seqs=2, max_num_batched_tokens=64, progress=False)

