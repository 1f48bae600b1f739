"""Small random-weight decoder folders with a real tokenizer, built locally (no hub).

The tokenizer is a byte-level BPE trained on tinyshakespeare in well under a second, with a
ChatML chat template, so chat requests and stop strings behave as with a real model.
"""

from __future__ import annotations

import os

import torch

# The demo's corpus, shipped in the repository (public-domain text, 1.1 MB).
DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "data",
                    "tinyshakespeare.txt")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# ChatML with Hermes-style tools (the shape of Qwen2.5's template): tools listed in a system
# turn (by name only: the tiny tokenizer spends a token per character or two of JSON, and
# the tests' context is 256), calls as <tool_call> JSON, results as <tool_response>.
HERMES = (
    "{%- if tools %}<|im_start|>system\n<tools>"
    "{%- for t in tools %} {{ t['function']['name'] }}{% endfor %}</tools><|im_end|>\n"
    "{% endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'tool' %}<|im_start|>user\n<tool_response>{{ m['content'] }}"
    "</tool_response><|im_end|>\n"
    "{%- elif m.get('tool_calls') %}<|im_start|>assistant\n"
    "{%- for c in m['tool_calls'] %}<tool_call>{\"name\": \"{{ c['function']['name'] }}\", "
    "\"arguments\": {{ c['function']['arguments'] | tojson }}}</tool_call>{% endfor %}"
    "<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{%- endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def corpus() -> list[str]:
    with open(DATA) as f:
        text = f.read()
    return [line for line in text.splitlines() if line.strip()]


def build_tokenizer(vocab_size: int = 512, chat_template: str = CHATML):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   bos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = chat_template
    return fast


def build_model_dir(path: str, arch: str = "llama", seed: int = 0,
                    chat_template: str = CHATML, random_biases: bool = False,
                    **overrides: object) -> str:
    """Saves a 2-layer random model of `arch` (llama | qwen2 | qwen3 | mistral) and the
    tokenizer (with `chat_template`) to `path`; returns it. `overrides` are config
    fields; `random_biases` draws the biases too (they start at zero)."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    tok = build_tokenizer(chat_template=chat_template)
    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
               "qwen3": (Qwen3Config, Qwen3ForCausalLM),
               "mistral": (MistralConfig, MistralForCausalLM)}
    config_cls, model_cls = classes[arch]
    config = config_cls(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=1024, eos_token_id=tok.eos_token_id,
                        bos_token_id=tok.bos_token_id, pad_token_id=tok.pad_token_id,
                        tie_word_embeddings=arch == "llama", **overrides)
    torch.manual_seed(seed)
    model = model_cls(config)
    with torch.no_grad():  # larger logits than the default init: fewer near-ties in argmax
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
            elif random_biases and name.endswith("bias"):
                p.normal_(0.0, 0.3)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path
