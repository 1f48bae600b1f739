"""Llama-architecture decoders (Llama, Mistral, Qwen2, Qwen3, SmolLM2) over a paged KV pool.

The weights come from a Hugging Face checkpoint loaded with ``transformers`` on the CPU and
are repacked per layer (q/k/v fused, gate/up fused) onto ``tpu``. Projections are stored
[in, out]: XLA's CPU backend runs a matmul whose right operand is transposed several times
slower for more than one row (it transposes the weight on every call), so they are
``x @ w``. With ``quantization="int8"`` every linear layer, the head and the embedding are
stored int8 with one f32 scale per output channel (symmetric, round to nearest; the
embedding as a head, [hidden, vocab]), in the packed layout of
``torchtpu.ops.pack_int8``: the output channels in blocks of 64, each block's rows
contiguous, so that reading a block is one sequential stream. Projections run the host
kernel ``torchtpu::int8_matmul`` on that layout where the plugin has it: it reads the int8
weight once, converting in registers (a decode step is bound by reading weights, and int8
reads a quarter of the bytes), and for many rows it measured no slower than XLA's f32
matmul, while converting the weight in the program costs a full f32 copy per call. Other
platforms unpack and convert in the program.

Layer functions are pure functions of tensors, so every layer (or group of layers) shares
one compiled executable per shape bucket. One forward call computes a ragged batch: the new
tokens of every scheduled sequence concatenated (decodes, speculative verifications and
prefill chunks together), T tokens in all (padded):
  tokens       [T]      the new tokens (padding: 0)
  positions    [T]      their positions (padding: 0)
  slots        [T]      KV slot each new token is written to (padding -> the scratch page)
  pages        [S, P]   each sequence's page table (padding -> the scratch page)
  query_start  [S + 1]  sequence s owns tokens [query_start[s], query_start[s + 1])
The KV pool of one layer is [num_slots, kv_heads, head_dim]; attention reads a sequence's
context through its page table, so pages never need to be contiguous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from torchtpu.memory import use_huge_pages
from torchtpu.ops import INT8_BLOCK, int8_columns, unpack_int8

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
    hidden_act: str = "silu"


# The MLP activations of config.hidden_act the layers compute (transformers' ACT2FN names).
ACTIVATIONS = {
    "silu": F.silu, "swish": F.silu, "relu": F.relu, "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
}


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + eps) * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def linear(x: torch.Tensor, w: torch.Tensor, scale: torch.Tensor | None = None,
           bias: torch.Tensor | None = None, int8_kernel: bool = False) -> torch.Tensor:
    """x @ W (+ bias), W stored [in, out]: f32, or int8 packed by ``pack_int8`` with a
    per-output-channel `scale` (W = unpack_int8(w) * scale): with `int8_kernel` the host
    kernel, else converted in the program."""
    if scale is None:
        return x @ w if bias is None else torch.addmm(bias, x, w)
    if int8_kernel:
        y = torch.ops.torchtpu.int8_matmul(x, w, scale)
    else:
        y = (x @ unpack_int8(w, scale.shape[0]).to(x.dtype)) * scale
    return y if bias is None else y + bias


def decoder_layer(h: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                  pages: torch.Tensor, query_start: torch.Tensor, k_cache: torch.Tensor,
                  v_cache: torch.Tensor, inv_freq: torch.Tensor, rope_scale: torch.Tensor,
                  w_in_norm: torch.Tensor, w_qkv: torch.Tensor, b_qkv: torch.Tensor | None,
                  w_q_norm: torch.Tensor | None, w_k_norm: torch.Tensor | None,
                  w_o: torch.Tensor, w_post_norm: torch.Tensor, w_gate_up: torch.Tensor,
                  w_down: torch.Tensor, s_qkv: torch.Tensor | None = None,
                  s_o: torch.Tensor | None = None, s_gate_up: torch.Tensor | None = None,
                  s_down: torch.Tensor | None = None, b_o: torch.Tensor | None = None,
                  b_gate_up: torch.Tensor | None = None, b_down: torch.Tensor | None = None,
                  *, num_heads: int, num_kv_heads: int, page_size: int, eps: float,
                  window: int, attention_kernel: bool = False, int8_kernel: bool = False,
                  hidden_act: str = "silu") -> torch.Tensor:
    """One pre-norm decoder layer over a ragged batch of T tokens (h [T, hidden]); writes
    their keys and values into the caches at `slots` (in place: compiled, the caches'
    buffers are donated, so a step costs the rows it writes). `window` > 0 limits attention
    to the last `window` keys. `attention_kernel` computes attention with the host kernel
    ``torchtpu::paged_attention`` (see ``attention_kernel_available``) instead of gathering
    pages in StableHLO; `int8_kernel` runs int8 projections with ``torchtpu::int8_matmul``.
    The s_* are the int8 weights' scales (None: f32 weights), the b_* the biases of models
    that have them (attention_bias: o_proj's; mlp_bias: the MLP's)."""
    tokens = positions.shape[0]
    head_dim = k_cache.shape[-1]
    x = _rms_norm(h, w_in_norm, eps)
    qkv = linear(x, w_qkv, s_qkv, b_qkv, int8_kernel)
    q, k, v = qkv.split([num_heads * head_dim, num_kv_heads * head_dim,
                         num_kv_heads * head_dim], dim=-1)
    q = q.view(tokens, num_heads, head_dim)
    k = k.view(tokens, num_kv_heads, head_dim)
    v = v.view(tokens, num_kv_heads, head_dim)
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
            q, k_cache, v_cache, pages, positions, query_start, page_size,
            1.0 / math.sqrt(head_dim), window).view(tokens, num_heads * head_dim)
    else:
        attn = _gathered_attention(q, k_cache, v_cache, pages, positions, query_start,
                                   page_size, window)
    h = h + linear(attn, w_o, s_o, b_o, int8_kernel=int8_kernel)

    x = _rms_norm(h, w_post_norm, eps)
    gate, up = linear(x, w_gate_up, s_gate_up, b_gate_up, int8_kernel=int8_kernel).chunk(2, dim=-1)
    return h + linear(ACTIVATIONS[hidden_act](gate) * up, w_down, s_down, b_down,
                      int8_kernel=int8_kernel)


def decoder_layers(h: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                   pages: torch.Tensor, query_start: torch.Tensor, k_caches: list[torch.Tensor],
                   v_caches: list[torch.Tensor], inv_freq: torch.Tensor,
                   rope_scale: torch.Tensor, layers: list[dict], **static) -> torch.Tensor:
    """Consecutive decoder layers in one function: compiled, one call runs them all, so a
    step pays the fixed cost of a compiled call once per group instead of once per layer."""
    for k_cache, v_cache, w in zip(k_caches, v_caches, layers):
        h = decoder_layer(h, positions, slots, pages, query_start, k_cache, v_cache, inv_freq,
                          rope_scale, **w, **static)
    return h


def _gathered_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        pages: torch.Tensor, positions: torch.Tensor, query_start: torch.Tensor,
                        page_size: int, window: int) -> torch.Tensor:
    """Attention in plain ops (platforms without the host kernel): every token gathers its
    sequence's pages, then two batched matmuls; memory and work grow with T * C, so the
    runner keeps C in buckets on this path. q [T, H, D] -> [T, H*D]; padding tokens (past
    query_start[S]) and tokens that see no key get zeros, as from the kernel."""
    tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    seqs, ctx = pages.shape[0], pages.shape[1] * page_size
    token = torch.arange(tokens, device=q.device)
    seq = (token.unsqueeze(1) >= query_start[1:].unsqueeze(0)).sum(dim=1)  # S for padding
    valid = seq < seqs
    by_page = (-1, page_size, num_kv_heads, head_dim)
    flat = pages.index_select(0, seq.clamp(max=seqs - 1)).reshape(-1)
    keys = k_cache.view(by_page).index_select(0, flat).view(tokens, ctx, num_kv_heads, head_dim)
    values = v_cache.view(by_page).index_select(0, flat).view(tokens, ctx, num_kv_heads,
                                                              head_dim)
    group = num_heads // num_kv_heads
    q = q.view(tokens, num_kv_heads, group, head_dim)
    scores = torch.matmul(q, keys.permute(0, 2, 3, 1)) * (1.0 / math.sqrt(head_dim))
    key_pos = torch.arange(ctx, device=q.device)
    query_pos = positions.view(tokens, 1)
    visible = (key_pos <= query_pos) & valid.view(tokens, 1)
    if window > 0:
        visible = visible & (key_pos > query_pos - window)
    visible = visible.view(tokens, 1, 1, ctx)
    seen = visible.any(dim=-1, keepdim=True)
    scores = scores.masked_fill(~visible, float("-inf")).masked_fill(~seen, 0.0)
    probs = torch.softmax(scores, dim=-1) * visible
    # Slots past a token's position hold whatever the page's previous owner (or the
    # scratch page's padding) wrote; a zero weight times a NaN there is NaN, so one request
    # whose values overflowed would poison every later one that reuses its pages.
    stale = (key_pos > query_pos).view(tokens, 1, ctx, 1)
    values = values.permute(0, 2, 1, 3).masked_fill(stale, 0.0)  # [T, KV, C, D]
    attn = torch.matmul(probs, values)                           # [T, KV, group, D]
    return attn.reshape(tokens, num_heads * head_dim)


def attention_kernel_available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `decoder_layer(attention_kernel=True)` can run: the host kernel is f32-only
    and exists where the plugin registered it (the XLA CPU plugin)."""
    if torch.device(device).type != "tpu" or dtype != torch.float32:
        return False
    from torchtpu import ops

    return ops.has_host_kernel("torchtpu_paged_attention")


def int8_kernel_available(device: torch.device) -> bool:
    """Whether int8 projections can run the host kernel ``torchtpu::int8_matmul`` (the XLA
    CPU plugin registers it)."""
    if torch.device(device).type != "tpu":
        return False
    from torchtpu import ops

    return ops.has_host_kernel("torchtpu_int8_matmul")


def embed(tokens: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor | None = None,
          columns: bool = False) -> torch.Tensor:
    """The tokens' embeddings: rows of an f32 [vocab, hidden] table, columns of an f32
    [hidden, vocab] one (`columns`: a tied head's table), or with `scale`, columns of an int8
    [hidden, vocab] one (packed by ``pack_int8``) times their scales."""
    if scale is not None:
        cols = int8_columns(weight, tokens).to(torch.float32)
        return cols * scale.index_select(0, tokens).unsqueeze(1)
    if columns:
        return weight.index_select(1, tokens).t()
    return F.embedding(tokens, weight)


def lm_head(h: torch.Tensor, rows: torch.Tensor, w_norm: torch.Tensor, w_head: torch.Tensor,
            s_head: torch.Tensor | None, eps: float, int8_kernel: bool = False) -> torch.Tensor:
    """Logits (f32) of the rows of `h` that tokens are sampled from."""
    x = _rms_norm(h.index_select(0, rows), w_norm, eps)
    return linear(x, w_head, s_head, int8_kernel=int8_kernel).to(torch.float32)


def _quantized_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (round(w / scale) clamped to [-127, 127], as f32 [out, in]; the f32
    scale per output channel [out]), a channel of zeros getting scale 1. Whole-tensor
    passes, the rounding and clamping in place."""
    w = w.detach()
    top = w.abs().amax(dim=1).to(torch.float32)  # exact in any float dtype
    scale = torch.where(top > 0, top / 127.0, torch.ones_like(top))
    q = torch.div(w.to(torch.float32), scale.unsqueeze(1))  # new memory: w stays untouched
    return q.round_().clamp_(-127, 127), scale


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-output-channel int8 of a weight given as [out, in] (nn.Linear's layout,
    or an embedding's [vocab, hidden]): (int8 [in, out], f32 scale [out]) with
    w.T ~ q * scale; a channel of zeros gets scale 1."""
    q, scale = _quantized_rows(w)
    return q.to(torch.int8).t().contiguous(), scale


def quantize_int8_packed(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_int8`` and ``torchtpu.ops.pack_int8`` at once: (int8 [ceil(out / 64), in,
    64], f32 scale [out]) equal to (pack_int8(q), scale) for (q, scale) = quantize_int8(w),
    written by one converting, transposing copy (quantize_int8 then pack_int8 take two
    copies more: the int8 transpose and the packing)."""
    q, scale = _quantized_rows(w)
    n, k = q.shape
    full = n // INT8_BLOCK
    blocks = -(-n // INT8_BLOCK)
    packed = (torch.empty if blocks == full else torch.zeros)(blocks, k, INT8_BLOCK,
                                                               dtype=torch.int8)
    # packed[b, k, i] = q[64 b + i, k]: each block is a [64, in] slab of rows, transposed.
    packed[:full].copy_(q[:full * INT8_BLOCK].view(full, INT8_BLOCK, k).transpose(1, 2))
    if blocks > full:
        packed[full, :, :n - full * INT8_BLOCK].copy_(q[full * INT8_BLOCK:].t())
    return packed, scale


QUANTIZATIONS = (None, "int8")


def _window(config) -> int | None:
    """The attention window every layer has (None: full attention), as transformers decides
    it: `layer_types` where the config has them (Qwen2's from max_window_layers), else
    sliding_window unless use_sliding_window is off. A model whose layers differ (some
    sliding, some full) is refused: every layer here attends alike."""
    window = getattr(config, "sliding_window", None)
    if window is not None and not getattr(config, "use_sliding_window", True):
        window = None
    kinds = set(getattr(config, "layer_types", None) or [])
    if kinds and window is not None:
        if kinds == {"full_attention"}:
            return None
        if kinds != {"sliding_attention"}:
            raise ValueError(f"serve: this model slides attention over {window} tokens in some "
                             "layers only (config.layer_types / max_window_layers); every layer "
                             "here attends alike, so it is not supported")
    return window


def _activation(config) -> str:
    """config.hidden_act, refused unless the layers compute it."""
    act = getattr(config, "hidden_act", "silu")
    if act not in ACTIVATIONS:
        raise ValueError(f"serve: hidden_act {act!r} is not supported; supported: "
                         f"{', '.join(ACTIVATIONS)}")
    return act


def _check_rope(config) -> None:
    """Refuses a rope scaling whose frequencies change with the sequence's length (the
    layers take one inv_freq, computed at load)."""
    scaling = getattr(config, "rope_scaling", None) or {}
    rope_type = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    if rope_type == "longrope":
        raise ValueError("serve: rope_scaling 'longrope' is not supported (its frequencies "
                         "switch past original_max_position_embeddings)")


class PagedDecoder:
    """The weights of one decoder model on a device, repacked for `decoder_layer`;
    `quantization` None keeps f32 weights, "int8" stores the linear layers, the embedding
    and the head int8 per output channel. A tied embedding and head share one table, the
    head's [hidden, vocab], which the embedding reads by columns."""

    def __init__(self, hf_model: torch.nn.Module, device: torch.device | str,
                 quantization: str | None = None) -> None:
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"serve: quantization {quantization!r} is not supported; "
                             f"supported: None (f32 weights), 'int8' (weight-only, per output "
                             "channel)")
        config = hf_model.config
        arch = (getattr(config, "architectures", None) or [type(hf_model).__name__])[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ValueError(f"serve: architecture {arch} is not supported; supported: "
                             f"{', '.join(SUPPORTED_ARCHITECTURES)}")
        _check_rope(config)
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        self.shape = ModelShape(
            num_layers=config.num_hidden_layers, hidden=config.hidden_size, num_heads=heads,
            num_kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=head_dim, vocab_size=config.vocab_size, rms_eps=config.rms_norm_eps,
            max_position=config.max_position_embeddings, sliding_window=_window(config),
            hidden_act=_activation(config))
        self.device = torch.device(device)
        self.dtype = torch.float32  # activations and the KV cache
        self.quantization = quantization
        base = hf_model.model

        def put(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.detach().to(self.dtype).contiguous().to(self.device)

        def linear_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            """A linear layer's [out, in] weight as stored: [in, out], f32, or int8 with its
            scales, packed."""
            if quantization is None:
                return put(w.detach().t()), None
            packed, scale = quantize_int8_packed(w)
            return packed.to(self.device), scale.to(self.device)

        rotary = base.rotary_emb
        self.inv_freq = put(rotary.inv_freq.to(torch.float32))
        self.rope_scale = put(torch.tensor(float(getattr(rotary, "attention_scaling", 1.0))))
        self.norm_weight = put(base.norm.weight)
        tied = hf_model.lm_head.weight is base.embed_tokens.weight or (
            torch.equal(hf_model.lm_head.weight, base.embed_tokens.weight))
        self.head_weight, self.head_scale = linear_weight(hf_model.lm_head.weight)
        # A tied embedding is the head's table ([hidden, vocab], int8 or f32), read by
        # columns; an untied one keeps its own (int8 stored as a head would be).
        self.embed_columns = tied or quantization is not None
        if tied:
            self.embed_weight, self.embed_scale = self.head_weight, self.head_scale
        elif quantization is None:
            self.embed_weight, self.embed_scale = put(base.embed_tokens.weight), None
        else:
            self.embed_weight, self.embed_scale = linear_weight(base.embed_tokens.weight)
        self.layers = []
        for layer in base.layers:
            attn, mlp = layer.self_attn, layer.mlp
            biases = [p.bias for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
            mlp_biases = [p.bias for p in (mlp.gate_proj, mlp.up_proj)]
            w_qkv, s_qkv = linear_weight(torch.cat([attn.q_proj.weight, attn.k_proj.weight,
                                                    attn.v_proj.weight]))
            w_o, s_o = linear_weight(attn.o_proj.weight)
            w_gate_up, s_gate_up = linear_weight(torch.cat([mlp.gate_proj.weight,
                                                            mlp.up_proj.weight]))
            w_down, s_down = linear_weight(mlp.down_proj.weight)
            self.layers.append(dict(
                w_in_norm=put(layer.input_layernorm.weight), w_qkv=w_qkv,
                b_qkv=put(torch.cat(biases)) if biases[0] is not None else None,
                w_q_norm=put(attn.q_norm.weight) if hasattr(attn, "q_norm") else None,
                w_k_norm=put(attn.k_norm.weight) if hasattr(attn, "k_norm") else None,
                w_o=w_o, w_post_norm=put(layer.post_attention_layernorm.weight),
                w_gate_up=w_gate_up, w_down=w_down,
                s_qkv=s_qkv, s_o=s_o, s_gate_up=s_gate_up, s_down=s_down,
                b_o=put(attn.o_proj.bias),
                b_gate_up=put(torch.cat(mlp_biases)) if mlp_biases[0] is not None else None,
                b_down=put(mlp.down_proj.bias),
            ))
        # Every decode step streams all the weights; where they are host memory (a CPU
        # plugin) they stream faster from huge pages, which the kernel does not give the
        # heap unasked. What it refuses is counted (self.huge_pages), never an error.
        self.huge_pages = use_huge_pages(self.weight_tensors())

    def weight_tensors(self) -> list[torch.Tensor]:
        """The weights on the device, each once (a tensor shared by two roles, too)."""
        tensors = [self.inv_freq, self.rope_scale, self.norm_weight, self.embed_weight,
                   self.embed_scale, self.head_weight, self.head_scale]
        tensors += [t for layer in self.layers for t in layer.values()]
        return list({id(t): t for t in tensors if t is not None}.values())

    def weight_bytes(self) -> int:
        """Bytes of the weights on the device (a tensor shared by two roles counts once)."""
        return sum(t.numel() * t.element_size() for t in self.weight_tensors())

    def kv_bytes_per_slot(self) -> int:
        s = self.shape
        return 2 * s.num_layers * s.num_kv_heads * s.head_dim * torch.finfo(self.dtype).bits // 8
