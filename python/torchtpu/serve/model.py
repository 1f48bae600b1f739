"""Llama-architecture decoders (Llama, Mistral, Qwen2, Qwen3, SmolLM2) over a paged KV pool.

The weights come from a Hugging Face checkpoint loaded with ``transformers`` on the CPU and
are repacked per layer (q/k/v fused, gate/up fused) onto ``tpu``, stored [in, out]: XLA's
CPU backend runs a matmul whose right operand is transposed several times slower for more
than one row (it transposes the weight on every call), so projections are ``x @ w``. One decoder layer is a
pure function of tensors, so every layer shares one compiled executable per shape bucket.

Shapes of one forward call (see ``runner.py`` for how a schedule becomes a batch):
  tokens    [S*Q]     the new tokens of S sequences, Q per sequence (padded)
  positions [S, Q]    their positions; padding positions are 0
  slots     [S*Q]     KV slot each new token is written to (padding -> the scratch page)
  pages     [S, P]    each sequence's page table (padding -> the scratch page); C = P*page
The KV pool of one layer is [num_slots, kv_heads, head_dim]; attention reads a sequence's
context by gathering its pages in position order (whole pages: a gather of page-sized
rows is much cheaper than one of single slots), so pages never need to be contiguous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                           "Qwen3ForCausalLM")


@dataclass(frozen=True)
class ModelShape:
    num_layers: int
    hidden: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    rms_eps: float
    max_position: int
    sliding_window: int | None


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def decoder_layer(h: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                  pages: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  inv_freq: torch.Tensor, rope_scale: torch.Tensor,
                  w_in_norm: torch.Tensor, w_qkv: torch.Tensor, b_qkv: torch.Tensor | None,
                  w_q_norm: torch.Tensor | None, w_k_norm: torch.Tensor | None,
                  w_o: torch.Tensor, w_post_norm: torch.Tensor, w_gate_up: torch.Tensor,
                  w_down: torch.Tensor, num_heads: int, num_kv_heads: int, page_size: int,
                  eps: float, window: int, attention_kernel: bool = False) -> torch.Tensor:
    """One pre-norm decoder layer; writes this step's keys and values into the caches at
    `slots` (in place: compiled, the caches' buffers are donated, so a step costs the rows
    it writes). `window` > 0 limits attention to the last `window` keys.
    `attention_kernel` computes attention with the host kernel ``torchtpu::paged_attention``
    (see ``attention_kernel_available``) instead of gathering pages in StableHLO."""
    s, q_len = positions.shape
    head_dim = k_cache.shape[-1]
    x = _rms_norm(h, w_in_norm, eps)
    qkv = x @ w_qkv if b_qkv is None else torch.addmm(b_qkv, x, w_qkv)
    q, k, v = qkv.split([num_heads * head_dim, num_kv_heads * head_dim,
                         num_kv_heads * head_dim], dim=-1)
    q = q.view(s * q_len, num_heads, head_dim)
    k = k.view(s * q_len, num_kv_heads, head_dim)
    v = v.view(s * q_len, num_kv_heads, head_dim)
    if w_q_norm is not None:  # Qwen3 normalizes each head before the rotation
        q = _rms_norm(q, w_q_norm, eps)
        k = _rms_norm(k, w_k_norm, eps)

    freqs = positions.reshape(-1, 1).to(torch.float32) * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = (emb.cos() * rope_scale).unsqueeze(1)
    sin = (emb.sin() * rope_scale).unsqueeze(1)
    q = _rotate(q, cos, sin)
    k = _rotate(k, cos, sin)

    k_cache.index_copy_(0, slots, k)
    v_cache.index_copy_(0, slots, v)
    if attention_kernel:
        attn = torch.ops.torchtpu.paged_attention(
            q.view(s, q_len, num_heads, head_dim), k_cache, v_cache, pages, positions,
            page_size, 1.0 / math.sqrt(head_dim), window).view(s * q_len, num_heads * head_dim)
    else:
        attn = _gathered_attention(q, k_cache, v_cache, pages, positions, page_size, window)
    h = h + attn @ w_o

    x = _rms_norm(h, w_post_norm, eps)
    gate, up = (x @ w_gate_up).chunk(2, dim=-1)
    return h + (F.silu(gate) * up) @ w_down


def _gathered_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        pages: torch.Tensor, positions: torch.Tensor, page_size: int,
                        window: int) -> torch.Tensor:
    """Attention in plain ops: gathers each sequence's pages, then two batched matmuls.
    q [S*Q, H, D] -> [S*Q, H*D]."""
    s, q_len = positions.shape
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[1]
    ctx = pages.shape[1] * page_size
    by_page = (-1, page_size, num_kv_heads, head_dim)
    keys = k_cache.view(by_page).index_select(0, pages.reshape(-1)).view(
        s, ctx, num_kv_heads, head_dim)
    values = v_cache.view(by_page).index_select(0, pages.reshape(-1)).view(
        s, ctx, num_kv_heads, head_dim)

    group = num_heads // num_kv_heads
    q = q.view(s, q_len, num_kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    keys = keys.permute(0, 2, 3, 1)            # [s, kv, d, ctx]
    values = values.permute(0, 2, 1, 3)        # [s, kv, ctx, d]
    scores = torch.matmul(q.reshape(s, num_kv_heads, group * q_len, head_dim), keys)
    scores = scores.view(s, num_kv_heads, group, q_len, ctx) * (1.0 / math.sqrt(head_dim))
    key_pos = torch.arange(ctx, device=q.device)
    query_pos = positions.view(s, 1, 1, q_len, 1)
    visible = key_pos <= query_pos
    if window > 0:
        visible = visible & (key_pos > query_pos - window)
    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1).view(s, num_kv_heads, group * q_len, ctx)
    # Slots past a sequence's last position hold whatever the page's previous owner (or the
    # scratch page's padding) wrote; a zero weight times a NaN there is NaN, so one request
    # whose values overflowed would poison every later one that reuses its pages.
    stale = (key_pos > positions.amax(dim=1).view(s, 1, 1, 1)).view(s, 1, ctx, 1)
    values = values.masked_fill(stale, 0.0)
    attn = torch.matmul(probs, values).view(s, num_kv_heads, group, q_len, head_dim)
    return attn.permute(0, 3, 1, 2, 4).reshape(s * q_len, num_heads * head_dim)


def attention_kernel_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `decoder_layer(attention_kernel=True)` can run: the host kernel is f32-only
    and exists where the plugin registered it (the XLA CPU plugin)."""
    if torch.device(device).type != "tpu" or dtype != torch.float32:
        return False
    from torchtpu import ops

    return ops.has_host_kernel("torchtpu_paged_attention")


def embed(tokens: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.embedding(tokens, weight)


def lm_head(h: torch.Tensor, rows: torch.Tensor, w_norm: torch.Tensor, w_head: torch.Tensor,
            eps: float) -> torch.Tensor:
    """Logits (f32) of the rows of `h` that a token is sampled from."""
    x = _rms_norm(h.index_select(0, rows), w_norm, eps)
    return (x @ w_head).to(torch.float32)


class PagedDecoder:
    """The weights of one decoder model on a device, repacked for `decoder_layer`."""

    def __init__(self, hf_model: torch.nn.Module, device: torch.device | str) -> None:
        config = hf_model.config
        arch = (getattr(config, "architectures", None) or [type(hf_model).__name__])[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"serve: architecture {arch} is not supported; supported: "
                             f"{', '.join(SUPPORTED_ARCHITECTURES)}")
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        window = getattr(config, "sliding_window", None)
        if window is not None and not getattr(config, "use_sliding_window", True):
            window = None
        self.shape = ModelShape(
            num_layers=config.num_hidden_layers, hidden=config.hidden_size, num_heads=heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=head_dim, vocab_size=config.vocab_size, rms_eps=config.rms_norm_eps,
            max_position=config.max_position_embeddings, sliding_window=window)
        self.device = torch.device(device)
        self.dtype = torch.float32
        base = hf_model.model

        def put(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.detach().to(self.dtype).contiguous().to(self.device)

        def put_t(w: torch.Tensor) -> torch.Tensor:  # [out, in] -> [in, out]
            return put(w.detach().t())

        rotary = base.rotary_emb
        self.inv_freq = put(rotary.inv_freq.to(torch.float32))
        self.rope_scale = put(torch.tensor(float(getattr(rotary, "attention_scaling", 1.0))))
        self.embed_weight = put(base.embed_tokens.weight)
        self.norm_weight = put(base.norm.weight)
        self.head_weight = put_t(hf_model.lm_head.weight)
        self.layers = []
        for layer in base.layers:
            attn, mlp = layer.self_attn, layer.mlp
            biases = [p.bias for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
            self.layers.append(dict(
                w_in_norm=put(layer.input_layernorm.weight),
                w_qkv=put_t(torch.cat([attn.q_proj.weight, attn.k_proj.weight,
                                       attn.v_proj.weight])),
                b_qkv=put(torch.cat(biases)) if biases[0] is not None else None,
                w_q_norm=put(attn.q_norm.weight) if hasattr(attn, "q_norm") else None,
                w_k_norm=put(attn.k_norm.weight) if hasattr(attn, "k_norm") else None,
                w_o=put_t(attn.o_proj.weight),
                w_post_norm=put(layer.post_attention_layernorm.weight),
                w_gate_up=put_t(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
                w_down=put_t(mlp.down_proj.weight),
            ))

    def kv_bytes_per_slot(self) -> int:
        s = self.shape
        return 2 * s.num_layers * s.num_kv_heads * s.head_dim * torch.finfo(self.dtype).bits // 8
