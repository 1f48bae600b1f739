"""TorchTitan's Trainer on tpu, through the hooks TorchTitan documents for subclasses.

``TpuTrainer`` is TorchTitan's ``Trainer`` (its training loop, parallelisms, checkpoints and
logging unchanged) with:

- ``post_dataloading_process`` (documented as the hook to override): adds the
  block-causal document mask ``DenseAttention`` reads, from the batch's positions;
- the MFU denominator from ``torchtpu.flops.peak_flops`` in the dtype the matmuls run in
  (the FSDP mixed-precision parameter dtype, or the training dtype);
- a progress bar advanced every step and, at the end, a loss-curve PNG (rank 0).

``TpuValidator`` adds the same masks to TorchTitan's validator.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from torchtitan.components.validate import Validator
from torchtitan.config import TORCH_DTYPE_MAP
from torchtitan.tools import utils as tt_utils
from torchtitan.tools.logging import logger
from torchtitan.trainer import Trainer

from torchtpu.train.attention import DenseAttention, document_causal_mask
from torchtpu.train.metrics import TpuMetricsProcessor


def _uses_dense_attention(model_parts: list[torch.nn.Module]) -> bool:
    return any(isinstance(m, DenseAttention) for part in model_parts for m in part.modules())


def _uses_dense_attention_cached(owner, model_parts: list[torch.nn.Module]) -> bool:
    if getattr(owner, "_torchtpu_dense_attention", None) is None:
        owner._torchtpu_dense_attention = _uses_dense_attention(model_parts)
    return owner._torchtpu_dense_attention


def _with_document_masks(owner, inputs_kwargs: dict[str, Any],
                         model_parts: list[torch.nn.Module]) -> dict[str, Any]:
    positions = inputs_kwargs.get("positions")
    if (positions is not None and "attention_masks" not in inputs_kwargs
            and _uses_dense_attention_cached(owner, model_parts)):
        inputs_kwargs["attention_masks"] = document_causal_mask(positions)
    return inputs_kwargs


def matmul_dtype(config: Trainer.Config) -> torch.dtype:
    """The dtype TorchTitan's decoders run their matmuls in under ``config``."""
    if config.training.dtype == "bfloat16":
        return torch.bfloat16
    # llama3/qwen3's parallelize functions always apply fully_shard with this param dtype.
    return TORCH_DTYPE_MAP[config.training.mixed_precision_param]


def peak_flops_for(dtype: torch.dtype) -> float:
    if tt_utils.device_type == "tpu":
        from torchtpu.flops import peak_flops

        return peak_flops(dtype)
    from torchtpu.train.cpu_reference import cpu_peak_flops

    return cpu_peak_flops(dtype)


class TpuValidator(Validator):
    @dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        pass

    def post_dataloading_process(self, input_dict, labels, model_parts):
        inputs, labels, extra = super().post_dataloading_process(input_dict, labels, model_parts)
        return inputs, labels, _with_document_masks(self, extra, model_parts)


class TpuTrainer(Trainer):
    @dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        loss_curve: str = "loss_curve.png"
        """Loss-curve PNG written under the dump folder at the end (rank 0); empty: none."""

    def __init__(self, config: Config) -> None:
        # TorchTitan takes these unchecked: 0 steps "trained" nothing and wrote an empty
        # loss curve, -1 failed an assertion of its LR schedule, a batch or sequence of 0
        # divided by zero.
        for name in ("steps", "local_batch_size", "seq_len"):
            value = getattr(config.training, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"torchtpu.train: --training.{name} must be a positive "
                                 f"integer, got {value!r}")
        super().__init__(config)
        dtype = matmul_dtype(config)
        peak = peak_flops_for(dtype)
        self.metrics_processor.gpu_peak_flops = peak
        logger.info(f"torchtpu: MFU is computed against {peak:.3e} FLOP/s, the peak of a "
                    f"{dtype} matmul on {tt_utils.device_type} (torchtpu.flops; this replaces "
                    "the table value TorchTitan logged above)")

    def post_dataloading_process(self, input_dict, labels):
        inputs, labels, extra = super().post_dataloading_process(input_dict, labels)
        return inputs, labels, _with_document_masks(self, extra, self.model_parts)

    def train_step(self, data_iterator) -> None:
        super().train_step(data_iterator)
        if isinstance(self.metrics_processor, TpuMetricsProcessor):
            self.metrics_processor.advance(self.step)

    def train(self) -> None:
        if isinstance(self.metrics_processor, TpuMetricsProcessor):
            # After a resume, the first advance() jumps to the loaded step.
            self.metrics_processor.start_progress(self.config.training.steps, 0)
        super().train()
        metrics = self.metrics_processor
        if (isinstance(metrics, TpuMetricsProcessor) and metrics.metrics_path
                and self.config.loss_curve):
            from torchtpu.train.plot import write_loss_curve

            path = os.path.join(self.config.dump_folder, self.config.loss_curve)
            write_loss_curve(metrics.metrics_path, path,
                             title=f"{self.config.model_spec.name} {self.config.model_spec.flavor}"
                                   f" on {tt_utils.device_type}")
            logger.info(f"torchtpu: loss curve written to {path}")
