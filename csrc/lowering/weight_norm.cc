// Weight normalization (torch.nn.utils weight_norm / parametrizations.weight_norm, the
// positional convolution of Wav2Vec2 and HuBERT): ATen's _weight_norm calls
// _weight_norm_interface on every device when `dim` is the first or the last.
//
// _weight_norm_interface(v, g, dim) -> (w, norms): norms is the 2-norm of v over every dim
// but `dim` (kept as size 1), w = v * (g / norms). Its backward (grad_w, saved_v,
// saved_g, saved_norms, dim) -> (grad_v, grad_g): grad_g = sum(grad_w * v) / norms over
// the same dims, grad_v = (g / norms) * (grad_w - v * (grad_g / norms)). As the CPU
// kernels: computed in float32 for 16-bit inputs, norms kept in float32 for them.
#include "lowering/elementwise_util.h"
#include "lowering/families.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// v (argument `v_arg`) in the computation's dtype, and the dims its norm runs over: every
// dim but argument `dim_arg`.
struct Operand {
  Value v;
  DType a;
  Dims others;
};

Operand operand(LoweringContext& c, size_t v_arg, size_t dim_arg) {
  Value v = c.tensor(v_arg);
  DType a = opmath(v.dtype());
  int64_t dim = wrap_dim(c.int_arg(dim_arg), v.rank());
  Dims others;
  for (int64_t d = 0; d < v.rank(); ++d) {
    if (d != dim) others.push_back(d);
  }
  return {c.b().convert(v, a), a, others};
}

Result lower_weight_norm(LoweringContext& c) {
  Builder& b = c.b();
  auto [vf, a, others] = operand(c, 0, 2);
  Value sum_sq = b.keep_dims(b.reduce_sum(b.mul(vf, vf), others), vf.dims(), others);
  Value norms = b.unary("sqrt", sum_sq);
  Value scale = b.div(b.convert(c.tensor(1), a), norms);
  Value w = b.mul(vf, b.broadcast_to(scale, vf.dims()));
  return std::vector<Value>{b.convert(w, c.out_type(0).dtype),
                            b.convert(b.reshape(norms, c.out_type(1).dims), c.out_type(1).dtype)};
}

Result lower_weight_norm_backward(LoweringContext& c) {
  Builder& b = c.b();
  auto [vf, a, others] = operand(c, 1, 4);
  const Dims& dims = vf.dims();
  Value gw = b.convert(c.tensor(0), a);
  Value g = b.convert(c.tensor(2), a);
  Value norms = b.reshape(b.convert(c.tensor(3), a), g.dims());
  Value grad_g = b.div(b.keep_dims(b.reduce_sum(b.mul(gw, vf), others), dims, others), norms);
  Value along = b.mul(vf, b.broadcast_to(b.div(grad_g, norms), dims));
  Value grad_v = b.mul(b.broadcast_to(b.div(g, norms), dims), b.sub(gw, along));
  return std::vector<Value>{b.convert(grad_v, c.out_type(0).dtype),
                            b.convert(b.reshape(grad_g, c.out_type(1).dims), c.out_type(1).dtype)};
}

}  // namespace

void register_weight_norm_lowerings() {
  register_lowering({"aten::_weight_norm_interface", "aten::_weight_norm_interface.out"},
                    lower_weight_norm);
  register_lowering({"aten::_weight_norm_interface_backward",
                     "aten::_weight_norm_interface_backward.out"},
                    lower_weight_norm_backward);
}

}  // namespace torchtpu::lowering
