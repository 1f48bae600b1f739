"""An inner attention for TorchTitan's decoders that runs on any device.

TorchTitan 0.3.0's language models take one of two inner attentions: FlexAttention, which
compiles ``flex_attention`` with Inductor (and refuses other compile backends), and varlen
attention, a CUDA kernel. ``DenseAttention`` is a TorchTitan ``Module`` with their call
signature that computes ``scaled_dot_product_attention`` with a dense boolean mask:
TorchTitan's block-causal attention (a query sees the earlier keys of its own document)
when the trainer passes document masks (``document_causal_mask``), plain causal attention
when it passes none. ``use_dense_attention`` swaps it into a model config.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchtitan.models.common.attention import FlexAttention, VarlenAttention
from torchtitan.protocols.module import Module


class DenseAttention(Module):
    @dataclass(kw_only=True, slots=True)
    class Config(Module.Config):
        pass

    def __init__(self, config: Config | None = None) -> None:
        super().__init__()

    def forward(
        self,
        q_BLNH: torch.Tensor,
        k_BLNH: torch.Tensor,
        v_BLNH: torch.Tensor,
        *,
        attention_masks: torch.Tensor | None = None,
        scale: float | None = None,
        enable_gqa: bool = False,
        **kwargs,
    ) -> torch.Tensor:
        q, k, v = (t.transpose(1, 2) for t in (q_BLNH, k_BLNH, v_BLNH))
        if attention_masks is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale,
                                                 enable_gqa=enable_gqa)
        else:
            if not isinstance(attention_masks, torch.Tensor) or attention_masks.dtype != torch.bool:
                raise TypeError("DenseAttention: attention_masks must be a bool tensor "
                                f"[batch, 1, seq, seq], got {type(attention_masks).__name__}")
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_masks, scale=scale,
                                                 enable_gqa=enable_gqa)
        return out.transpose(1, 2)


def document_causal_mask(positions: torch.Tensor) -> torch.Tensor:
    """[batch, 1, seq, seq] bool: query i sees key j <= i of the same document.

    TorchTitan's dataloaders restart ``positions`` at 0 where a document begins (its
    block-causal mask reads documents the same way).
    """
    if positions.dim() != 2:
        raise ValueError(f"document_causal_mask: positions must be [batch, seq], got "
                         f"{tuple(positions.shape)}")
    doc = torch.cumsum((positions == 0).to(torch.int32), dim=1)
    seq = positions.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=positions.device).tril()
    return ((doc[:, :, None] == doc[:, None, :]) & causal)[:, None]


def use_dense_attention(model_config: Module.Config) -> int:
    """Replaces every Flex/varlen inner attention of ``model_config``; returns how many."""
    found = list(model_config.traverse((FlexAttention.Config, VarlenAttention.Config)))
    for _, _, parent, attr in found:
        if parent is None:
            raise ValueError("use_dense_attention: the config itself is an attention config")
        if isinstance(parent, list):
            parent[attr] = DenseAttention.Config()
        else:
            setattr(parent, attr, DenseAttention.Config())
    return len(found)
