// Kernels of the fused transformer ops nn.TransformerEncoderLayer and nn.MultiheadAttention
// call in eval mode ("fast path": no autograd, batch_first): _transformer_encoder_layer_fwd
// and _native_multi_head_attention. PyTorch lists the PrivateUse1 backend among the fast
// path's devices but has no kernel for it, so without these they ran on the CPU. Each is
// the CPU kernel's composition (transformer.cpp, attention.cpp) of lowered ops: linear,
// softmax, layer_norm, relu/gelu, bmm.
//
// Masks follow the CPU kernel: a float mask is read as a bool mask (nonzero = masked, as
// its `attn_mask.to(kBool)` does), mask_type 0 is [T, T], 1 is [B, T] (key padding), 2
// is [B, H, T, T]; a row with every key masked gives zero attention, not NaN.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

namespace torchtpu::aten {
namespace {

// [B, T, E] -> [B, H, T, E / H].
at::Tensor split_heads(const at::Tensor& x, int64_t num_heads) {
  return x.view({x.size(0), x.size(1), num_heads, x.size(2) / num_heads}).transpose(1, 2);
}

// The mask as bool [B or 1, H or 1, T or 1, S], broadcastable against the scores.
at::Tensor attention_mask(const at::Tensor& mask, std::optional<int64_t> mask_type, int64_t batch,
                          int64_t num_heads) {
  at::Tensor m = mask.scalar_type() == at::kBool ? mask : mask.to(at::kBool);
  int64_t type = mask_type.value_or(m.dim() == 2 ? 0 : 2);
  if (type == 1) return m.view({batch, 1, 1, m.size(-1)});
  if (type == 0) return m.view({1, 1, m.size(-2), m.size(-1)});
  return m.dim() == 4 ? m : m.view({batch, -1, m.size(-2), m.size(-1)});
}

std::tuple<at::Tensor, at::Tensor> native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim,
    int64_t num_heads, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
    const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
              "tpu: _native_multi_head_attention expects 3-d [batch, length, embed] query, key "
              "and value (got ", query.dim(), ", ", key.dim(), ", ", value.dim(), " dims)");
  TORCH_CHECK(embed_dim % num_heads == 0, "embed_dim must be divisible by num_heads");
  auto w = qkv_weight.chunk(3, 0);
  auto b = qkv_bias.chunk(3, 0);
  int64_t head_dim = embed_dim / num_heads;
  // The CPU kernel scales q (after its bias) by 1/sqrt(head_dim) before q k^T.
  at::Tensor q = split_heads(at::linear(query, w[0], b[0]), num_heads)
                     .div(std::sqrt(static_cast<double>(head_dim)));
  at::Tensor k = split_heads(at::linear(key, w[1], b[1]), num_heads);
  at::Tensor v = split_heads(at::linear(value, w[2], b[2]), num_heads);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1));  // [B, H, T, S]
  at::Tensor probs;
  if (mask.has_value() && mask->defined()) {
    at::Tensor m = attention_mask(*mask, mask_type, query.size(0), num_heads);
    probs = at::softmax(scores.masked_fill(m, -std::numeric_limits<double>::infinity()), -1)
                .masked_fill(m, 0);
  } else {
    probs = at::softmax(scores, -1);
  }
  at::Tensor attn = at::matmul(probs, v).transpose(1, 2).reshape(
      {query.size(0), query.size(1), embed_dim});
  at::Tensor out = at::linear(attn, proj_weight, proj_bias);
  if (!need_weights) return {out, at::empty({0}, query.options())};
  return {out, average_attn_weights ? probs.mean(1) : probs};
}

at::Tensor layer_norm(const at::Tensor& x, int64_t embed_dim, double eps, const at::Tensor& weight,
                      const at::Tensor& bias) {
  return at::layer_norm(x, {embed_dim}, weight, bias, eps);
}

at::Tensor transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
    const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2,
    const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1,
    const at::Tensor& ffn_weight_2, const at::Tensor& ffn_bias_2,
    const std::optional<at::Tensor>& mask, std::optional<int64_t> mask_type) {
  TORCH_CHECK(!src.is_nested(), "tpu: _transformer_encoder_layer_fwd does not take nested "
              "tensors (tpu has no nested tensors)");
  if (src.numel() == 0) return src.clone();
  at::Tensor x = src;
  if (norm_first) x = layer_norm(x, embed_dim, eps, norm_weight_1, norm_bias_1);
  x = std::get<0>(native_multi_head_attention(x, x, x, embed_dim, num_heads, qkv_weight,
                                              qkv_bias, proj_weight, proj_bias, mask, false, true,
                                              mask_type));
  x = x.add(src);
  if (!norm_first) x = layer_norm(x, embed_dim, eps, norm_weight_1, norm_bias_1);
  at::Tensor residual = x;
  if (norm_first) x = layer_norm(x, embed_dim, eps, norm_weight_2, norm_bias_2);
  x = at::linear(x, ffn_weight_1, ffn_bias_1);
  x = use_gelu ? at::gelu(x) : at::relu(x);
  x = at::linear(x, ffn_weight_2, ffn_bias_2).add(residual);
  if (!norm_first) x = layer_norm(x, embed_dim, eps, norm_weight_2, norm_bias_2);
  return x;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_multi_head_attention", native_multi_head_attention);
  m.impl("_transformer_encoder_layer_fwd", transformer_encoder_layer_fwd);
}

}  // namespace
}  // namespace torchtpu::aten
