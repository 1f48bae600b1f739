"""scaled_dot_product_attention on tpu, forward and backward, vs the CPU.

No fused kernel is registered for PrivateUse1, so PyTorch picks its math path, which
decomposes into matmul, softmax, masking ops (and repeat_interleave for GQA). These tests
pin that the whole decomposition runs on tpu (no fallback) with CPU numerics, in the
forms Hugging Face models call it: causal, boolean and additive masks, fully masked rows,
grouped-query attention (enable_gqa) and an explicit scale.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _compare import assert_same, make

TOLS = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}


def sdpa_with_grads(q, k, v, mask=None, **kwargs):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)
    out.backward(torch.linspace(-1, 1, out.numel()).reshape(out.shape).to(out))
    return out.detach(), q.grad, k.grad, v.grad


def qkv(batch=2, heads=4, kv_heads=4, q_len=6, kv_len=6, dim=8, dtype=torch.float32):
    return (make((batch, heads, q_len, dim), dtype), make((batch, kv_heads, kv_len, dim), dtype),
            make((batch, kv_heads, kv_len, dim), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_causal_forward_backward(dtype) -> None:
    assert_same(sdpa_with_grads, *qkv(dtype=dtype), dtype_tols=TOLS, is_causal=True)


def test_causal_with_fewer_queries_than_keys() -> None:
    # A decoding step with a KV cache: one query against the whole cached sequence.
    q, k, v = qkv(q_len=1, kv_len=9)
    assert_same(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v, dtype_tols=TOLS)


def test_boolean_mask_forward_backward() -> None:
    q, k, v = qkv()
    mask = torch.rand(2, 1, 6, 6) > 0.3
    mask[..., 0] = True  # every row keeps a key
    assert_same(sdpa_with_grads, q, k, v, mask, dtype_tols=TOLS)


def test_additive_float_mask_forward_backward() -> None:
    q, k, v = qkv()
    mask = torch.zeros(2, 1, 6, 6)
    mask[1, :, :, 4:] = torch.finfo(torch.float32).min  # padding, as HF builds it
    assert_same(sdpa_with_grads, q, k, v, mask, dtype_tols=TOLS)


def test_fully_masked_row_gives_zeros_like_cpu() -> None:
    q, k, v = qkv()
    mask = torch.ones(2, 1, 6, 6, dtype=torch.bool)
    mask[0, 0, 2] = False  # query 2 of batch 0 sees no key
    assert_same(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
                q, k, v, mask, dtype_tols=TOLS)


def test_grouped_query_attention_forward_backward() -> None:
    q, k, v = qkv(heads=8, kv_heads=2)
    assert_same(sdpa_with_grads, q, k, v, dtype_tols=TOLS, is_causal=True, enable_gqa=True)


def test_explicit_scale_and_three_dim_inputs() -> None:
    q, k, v = (make((4, 5, 8), torch.float32) for _ in range(3))
    assert_same(sdpa_with_grads, q, k, v, dtype_tols=TOLS, scale=0.3)
