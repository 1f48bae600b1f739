"""Tiny random-weight Hugging Face models, built locally with a fixed seed (no hub access).

Each config keeps the architecture's distinctive parts (GQA in Llama/Qwen/Mistral, QK-norm
in Qwen3, sliding-window config in Mistral, learned positions and Conv1D in GPT-2, token
types and pooler in BERT) at a size that compiles and runs in seconds on the CPU plugin.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import transformers

VOCAB = 320
SEED = 1234
# Special ids inside the vocabulary so generate() has valid eos/pad tokens.
_SPECIAL = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
_DECODER = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                **_SPECIAL)

DECODER_CONFIGS: dict[str, Callable[[], transformers.PretrainedConfig]] = {
    "llama": lambda: transformers.LlamaConfig(**_DECODER),
    "qwen2": lambda: transformers.Qwen2Config(**_DECODER),
    "qwen3": lambda: transformers.Qwen3Config(head_dim=16, **_DECODER),
    "mistral": lambda: transformers.MistralConfig(sliding_window=64, **_DECODER),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4,
                                            n_positions=128, **_SPECIAL),
}


def decoder(name: str) -> transformers.PreTrainedModel:
    torch.manual_seed(SEED)
    return transformers.AutoModelForCausalLM.from_config(DECODER_CONFIGS[name]()).eval()


def bert() -> transformers.PreTrainedModel:
    torch.manual_seed(SEED)
    cfg = transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=128,
                                  max_position_embeddings=64, pad_token_id=0)
    return transformers.BertModel(cfg).eval()


def prompt(batch: int = 1, length: int = 8) -> torch.Tensor:
    """Token ids that avoid the special ids (0, 1, 2), so no early end of sequence."""
    g = torch.Generator().manual_seed(SEED + batch * 100 + length)
    return torch.randint(3, VOCAB, (batch, length), generator=g)
