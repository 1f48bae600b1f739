// Normalization, loss and embedding-gradient lowerings; convolution and pooling live in
// conv.cc. bf16/f16 inputs compute in f32 (PyTorch's accumulate type) and convert back.
#include <algorithm>
#include <optional>
#include <utility>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {

void register_conv_lowerings();

namespace {

using Result = base::StatusOr<std::vector<Value>>;

enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

Dims range(int64_t begin, int64_t end) {
  Dims d;
  for (int64_t i = begin; i < end; ++i) d.push_back(i);
  return d;
}

// [0, rank) without `skip`.
Dims all_but(int64_t rank, int64_t skip) {
  Dims d;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != skip) d.push_back(i);
  }
  return d;
}

// The integer `v` in the type of `like`, broadcast to its dims.
Value int_splat(Builder& b, int64_t v, Value like) {
  return b.broadcast_to(b.constant_i64(v, like.dtype()), like.dims());
}

// The number of elements of `v` along `which` as a tensor of type `like`.
Value count_splat(Builder& b, Value v, const Dims& which, const TensorType& like) {
  double n = 1;
  for (int64_t d : which) n *= static_cast<double>(v.dims()[d]);
  return b.splat(n, like);
}

// `v` (same rank as `dims`, size-1 where broadcast) expanded to `dims`.
Value expand(Builder& b, Value v, const Dims& dims) {
  if (v.dims() == dims) return v;
  return b.broadcast_in_dim(v, dims, range(0, v.rank()));
}

// Mean over `dims`, which stay as size 1.
Value mean_keep(Builder& b, Value v, const Dims& dims) {
  Value sum = b.keep_dims(b.reduce_sum(v, dims), v.dims(), dims);
  return b.div(sum, count_splat(b, v, dims, sum.type));
}

// A backward's output_mask (bool[3], passed as an int list).
base::StatusOr<std::vector<bool>> output_mask(LoweringContext& c, size_t i) {
  if (c.arg(i).kind != ArgKind::kIntList || c.int_list(i).size() != 3) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  ": output_mask must be a list of 3 bools");
  }
  std::vector<bool> m;
  for (int64_t v : c.int_list(i)) m.push_back(v != 0);
  return m;
}

// PyTorch returns an undefined tensor for each gradient the mask leaves out (or whose
// parameter is absent). The caller lists either the defined results only, or all of them;
// in the latter case an undefined gradient is returned as zeros of its listed type.
Result masked_results(LoweringContext& c, const std::vector<std::optional<Value>>& grads) {
  Builder& b = c.b();
  size_t num_defined = 0;
  for (const auto& g : grads) num_defined += g.has_value();
  std::vector<Value> out;
  if (c.out_types().size() == grads.size()) {
    for (size_t k = 0; k < grads.size(); ++k) {
      out.push_back(grads[k] ? b.convert(*grads[k], c.out_type(k).dtype)
                             : b.zeros(c.out_type(k)));
    }
    return out;
  }
  if (c.out_types().size() != num_defined) {
    return base::invalid_argument("lowering: " + c.op_name() + ": expected " +
                                  std::to_string(num_defined) + " or " +
                                  std::to_string(grads.size()) + " result types (got " +
                                  std::to_string(c.out_types().size()) + ")");
  }
  for (const auto& g : grads) {
    if (g) out.push_back(b.convert(*g, c.out_type(out.size()).dtype));
  }
  return out;
}

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd).
Result lower_layer_norm(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = opmath(x.dtype());
  Dims red = range(x.rank() - static_cast<int64_t>(c.int_list(1).size()), x.rank());
  Value xf = b.convert(x, a);
  Value mean = mean_keep(b, xf, red);
  Value xc = b.sub(xf, expand(b, mean, x.dims()));
  Value var = mean_keep(b, b.mul(xc, xc), red);
  Value rstd = b.unary("rsqrt", b.add(var, b.splat(c.double_arg(4), var.type)));
  Value y = b.mul(xc, expand(b, rstd, x.dims()));
  if (!c.is_none(2)) y = b.mul(y, c.operand(2, a, x.dims()));
  if (!c.is_none(3)) y = b.add(y, c.operand(3, a, x.dims()));
  return std::vector<Value>{b.convert(y, c.out_type(0).dtype),
                            b.convert(b.reshape(mean, c.out_type(1).dims), c.out_type(1).dtype),
                            b.convert(b.reshape(rstd, c.out_type(2).dims), c.out_type(2).dtype)};
}

// The input gradient shared by layer and group norm over the normalized dims `red` of
// `g` (grad_out times weight), `xhat` and `rstd`: rstd * (g - mean(g) - xhat*mean(g*xhat)).
Value norm_input_grad(Builder& b, Value g, Value xhat, Value rstd, const Dims& red) {
  const Dims& dims = g.dims();
  Value centered = b.sub(g, expand(b, mean_keep(b, g, red), dims));
  Value proj = b.mul(xhat, expand(b, mean_keep(b, b.mul(g, xhat), red), dims));
  return b.mul(expand(b, rstd, dims), b.sub(centered, proj));
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
// output_mask) -> (grad_input, grad_weight, grad_bias).
Result lower_layer_norm_backward(LoweringContext& c) {
  Builder& b = c.b();
  TORCHTPU_ASSIGN_OR_RETURN(std::vector<bool> mask, output_mask(c, 7));
  Value x = c.tensor(1);
  DType a = opmath(x.dtype());
  const Dims& dims = x.dims();
  int64_t axis = x.rank() - static_cast<int64_t>(c.int_list(2).size());
  Dims red = range(axis, x.rank()), outer = range(0, axis);
  Value go = c.operand(0, a, dims);
  Value rstd = b.convert(c.tensor(4), a);
  Value xhat = b.mul(b.sub(b.convert(x, a), expand(b, b.convert(c.tensor(3), a), dims)),
                     expand(b, rstd, dims));
  std::vector<std::optional<Value>> grads(3);
  if (mask[0]) {
    Value g = c.is_none(5) ? go : b.mul(go, c.operand(5, a, dims));
    grads[0] = norm_input_grad(b, g, xhat, rstd, red);
  }
  if (mask[1] && !c.is_none(5)) grads[1] = b.reduce_sum(b.mul(go, xhat), outer);
  if (mask[2] && !c.is_none(6)) grads[2] = b.reduce_sum(go, outer);
  return masked_results(c, grads);
}

// `w` of shape [C] broadcast along dim 1 of `dims`.
Value channel_param(Builder& b, Value w, const Dims& dims) {
  return b.broadcast_in_dim(w, dims, {1});
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean, rstd).
Result lower_group_norm(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = opmath(x.dtype());
  int64_t n = c.int_arg(3), ch = c.int_arg(4), hw = c.int_arg(5), groups = c.int_arg(6);
  // Groups stay [C/G, HxW] rather than one C/G*HxW dim: XLA cannot reshape a dynamic
  // (shape-bucketed) HxW into a dim it also shares with C/G.
  Dims grouped{n, groups, ch / groups, hw}, flat{n, ch, hw};
  Value xg = b.reshape(b.convert(x, a), grouped);
  Value mean = mean_keep(b, xg, {2, 3});
  Value xc = b.sub(xg, expand(b, mean, grouped));
  Value var = mean_keep(b, b.mul(xc, xc), {2, 3});
  Value rstd = b.unary("rsqrt", b.add(var, b.splat(c.double_arg(7), var.type)));
  Value y = b.reshape(b.mul(xc, expand(b, rstd, grouped)), flat);
  if (!c.is_none(1)) y = b.mul(y, channel_param(b, b.convert(c.tensor(1), a), flat));
  if (!c.is_none(2)) y = b.add(y, channel_param(b, b.convert(c.tensor(2), a), flat));
  return std::vector<Value>{
      b.convert(b.reshape(y, x.dims()), c.out_type(0).dtype),
      b.convert(b.reshape(mean, c.out_type(1).dims), c.out_type(1).dtype),
      b.convert(b.reshape(rstd, c.out_type(2).dims), c.out_type(2).dtype)};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group,
// output_mask). Unlike layer norm, grad_weight is defined even without a weight.
Result lower_group_norm_backward(LoweringContext& c) {
  Builder& b = c.b();
  TORCHTPU_ASSIGN_OR_RETURN(std::vector<bool> mask, output_mask(c, 9));
  Value x = c.tensor(1);
  DType a = opmath(x.dtype());
  int64_t n = c.int_arg(5), ch = c.int_arg(6), hw = c.int_arg(7), groups = c.int_arg(8);
  Dims grouped{n, groups, ch / groups, hw}, flat{n, ch, hw};
  Value go = b.reshape(b.convert(c.tensor(0), a), flat);
  Value mean = b.reshape(b.convert(c.tensor(2), a), {n, groups, 1, 1});
  Value rstd = b.reshape(b.convert(c.tensor(3), a), {n, groups, 1, 1});
  Value xg = b.reshape(b.convert(x, a), grouped);
  Value xhat = b.mul(b.sub(xg, expand(b, mean, grouped)), expand(b, rstd, grouped));
  std::vector<std::optional<Value>> grads(3);
  if (mask[0]) {
    Value g = c.is_none(4) ? go : b.mul(go, channel_param(b, b.convert(c.tensor(4), a), flat));
    grads[0] = b.reshape(norm_input_grad(b, b.reshape(g, grouped), xhat, rstd, {2, 3}), x.dims());
  }
  if (mask[1]) grads[1] = b.reduce_sum(b.mul(go, b.reshape(xhat, flat)), {0, 2});
  if (mask[2]) grads[2] = b.reduce_sum(go, {0, 2});
  return masked_results(c, grads);
}

// Per-channel mean and biased variance ([C] each) of xf ([N, C, ...]) over all dims but 1.
std::pair<Value, Value> batch_moments(Builder& b, Value xf) {
  const Dims& dims = xf.dims();
  Dims red{0};
  for (int64_t i = 2; i < xf.rank(); ++i) red.push_back(i);
  Value m = mean_keep(b, xf, red);
  Value xc = b.sub(xf, expand(b, m, dims));
  return {b.reshape(m, {dims[1]}), b.reshape(mean_keep(b, b.mul(xc, xc), red), {dims[1]})};
}

// (xf - mean) * invstd, times weight and plus bias (arguments 1 and 2) when given.
Value batch_normalize(LoweringContext& c, Value xf, Value mean, Value invstd) {
  Builder& b = c.b();
  const Dims& dims = xf.dims();
  DType a = xf.dtype();
  Value y = b.mul(b.sub(xf, channel_param(b, mean, dims)), channel_param(b, invstd, dims));
  if (!c.is_none(1)) y = b.mul(y, channel_param(b, b.convert(c.tensor(1), a), dims));
  if (!c.is_none(2)) y = b.add(y, channel_param(b, b.convert(c.tensor(2), a), dims));
  return y;
}

// native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum,
// eps) -> (out, save_mean, save_invstd), and _native_batch_norm_legit (same results; its
// .no_stats overload has no running stats). The running-stat update PyTorch does in place
// in training is not a result here; the caller applies it from save_mean/save_invstd.
Result lower_batch_norm(LoweringContext& c) {
  Builder& b = c.b();
  bool no_stats = c.op_name().find("no_stats") != std::string::npos;
  size_t training_i = no_stats ? 3 : 5, eps_i = no_stats ? 5 : 7;
  Value x = c.tensor(0);
  DType a = opmath(x.dtype());
  int64_t ch = x.dims().at(1);
  Value xf = b.convert(x, a);
  Value eps = b.splat(c.double_arg(eps_i), TensorType{a, {ch}});
  Value mean, invstd;
  if (c.bool_arg(training_i) || no_stats || c.is_none(3)) {
    auto [m, var] = batch_moments(b, xf);
    mean = m;
    invstd = b.unary("rsqrt", b.add(var, eps));
  } else {
    mean = b.convert(c.tensor(3), a);
    invstd = b.unary("rsqrt", b.add(b.convert(c.tensor(4), a), eps));
  }
  Value y = batch_normalize(c, xf, mean, invstd);
  // CPU returns empty statistics in evaluation mode; the meta kernel returns [C].
  auto stat = [&](Value v, size_t k) {
    if (c.out_type(k).num_elements() == 0) return b.zeros(c.out_type(k));
    return b.convert(v, c.out_type(k).dtype);
  };
  return std::vector<Value>{b.convert(y, c.out_type(0).dtype), stat(mean, 1), stat(invstd, 2)};
}

// _batch_norm_with_update(input, weight?, bias?, running_mean, running_var, momentum, eps)
// -> (out, save_mean, save_invstd, reserve), then the running statistics' new values (in
// place for it, results of _batch_norm_with_update_functional): training-mode batch norm
// whose statistics update runs in the program, running = (1 - momentum) * running +
// momentum * batch statistic with the unbiased variance, as the CPU kernel updates them.
// reserve is empty, as on the CPU.
Result lower_batch_norm_with_update(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = opmath(x.dtype());
  Value xf = b.convert(x, a);
  const int64_t ch = x.dims().at(1);
  const double n = static_cast<double>(x.type.num_elements() / std::max<int64_t>(ch, 1));
  auto [mean, var] = batch_moments(b, xf);
  TensorType ct{a, {ch}};
  Value invstd = b.unary("rsqrt", b.add(var, b.splat(c.double_arg(6), ct)));
  Value y = batch_normalize(c, xf, mean, invstd);
  Value momentum = b.splat(c.double_arg(5), ct);
  Value keep = b.sub(b.splat(1, ct), momentum);
  auto update = [&](size_t i, Value stat) {
    Value running = b.add(b.mul(keep, b.convert(c.tensor(i), a)), b.mul(momentum, stat));
    return b.convert(running, c.out_type(i + 1).dtype);
  };
  Value unbiased = b.div(b.mul(var, b.splat(n, ct)), b.splat(n - 1, ct));
  return std::vector<Value>{b.convert(y, c.out_type(0).dtype),
                            b.convert(mean, c.out_type(1).dtype),
                            b.convert(invstd, c.out_type(2).dtype), b.zeros(c.out_type(3)),
                            update(3, mean), update(4, unbiased)};
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
// save_mean?, save_invstd?, train, eps, output_mask).
Result lower_batch_norm_backward(LoweringContext& c) {
  Builder& b = c.b();
  TORCHTPU_ASSIGN_OR_RETURN(std::vector<bool> mask, output_mask(c, 9));
  Value x = c.tensor(1);
  DType a = opmath(x.dtype());
  const Dims& dims = x.dims();
  int64_t ch = dims.at(1);
  Dims red{0};
  for (int64_t i = 2; i < x.rank(); ++i) red.push_back(i);
  bool train = c.bool_arg(7);
  Value mean, invstd;
  if (train) {
    mean = b.convert(c.tensor(5), a);
    invstd = b.convert(c.tensor(6), a);
  } else {
    mean = b.convert(c.tensor(3), a);
    Value eps = b.splat(c.double_arg(8), TensorType{a, {ch}});
    invstd = b.unary("rsqrt", b.add(b.convert(c.tensor(4), a), eps));
  }
  Value go = b.convert(c.tensor(0), a);
  Value xhat = b.mul(b.sub(b.convert(x, a), channel_param(b, mean, dims)),
                     channel_param(b, invstd, dims));
  Value w = c.is_none(2) ? b.splat(1, TensorType{a, {ch}}) : b.convert(c.tensor(2), a);
  std::vector<std::optional<Value>> grads(3);
  if (mask[0]) {
    Value g = b.mul(go, channel_param(b, w, dims));
    Dims keep_dims = dims;
    for (int64_t r : red) keep_dims[r] = 1;
    Value invstd_keep = b.reshape(invstd, keep_dims);
    grads[0] = train ? norm_input_grad(b, g, xhat, invstd_keep, red)
                     : b.mul(g, channel_param(b, invstd, dims));
  }
  if (mask[1]) grads[1] = b.reduce_sum(b.mul(go, xhat), red);
  if (mask[2]) grads[2] = b.reduce_sum(go, red);
  return masked_results(c, grads);
}

// Applies a loss reduction (none/mean/sum) to the elementwise `loss` and converts to the
// result type.
Value reduce_loss(LoweringContext& c, Value loss, int64_t reduction) {
  Builder& b = c.b();
  if (reduction == kNone) return b.convert(loss, c.out_type().dtype);
  Value sum = b.reduce_sum(loss, range(0, loss.rank()));
  if (reduction == kMean) {
    sum = b.div(sum, count_splat(b, loss, range(0, loss.rank()), sum.type));
  }
  return b.convert(sum, c.out_type().dtype);
}

Dims broadcast_dims(const Dims& x, const Dims& y) {
  Dims out = x.size() >= y.size() ? x : y;
  const Dims& shorter = x.size() >= y.size() ? y : x;
  size_t off = out.size() - shorter.size();
  for (size_t i = 0; i < shorter.size(); ++i) {
    if (out[off + i] == 1) out[off + i] = shorter[i];
  }
  return out;
}

// Elementwise losses of d = self - target, with one float parameter (beta, delta).
using LossFn = std::function<Value(Builder&, Value d, double param)>;

Value abs_lt(Builder& b, Value d, double bound) {
  return b.compare(b.unary("abs", d), b.splat(bound, d.type), "LT");
}

const LossFn kMseLoss = [](Builder& b, Value d, double) { return b.mul(d, d); };
const LossFn kMseGrad = [](Builder& b, Value d, double) { return b.mul(b.splat(2, d.type), d); };
// smooth_l1 is |d| when beta == 0 (the quadratic branch is empty).
const LossFn kSmoothL1Loss = [](Builder& b, Value d, double beta) {
  Value ad = b.unary("abs", d);
  if (beta == 0) return ad;
  Value quad = b.div(b.mul(b.splat(0.5, d.type), b.mul(d, d)), b.splat(beta, d.type));
  return b.select(abs_lt(b, d, beta), quad, b.sub(ad, b.splat(0.5 * beta, d.type)));
};
// PyTorch: d <= -beta -> -1, d >= beta -> 1, else d / beta (so d == 0 gives -1 at beta 0).
const LossFn kSmoothL1Grad = [](Builder& b, Value d, double beta) {
  Value one = b.splat(1, d.type);
  Value inner = beta == 0 ? b.zeros(d.type) : b.div(d, b.splat(beta, d.type));
  Value r = b.select(b.compare(d, b.splat(beta, d.type), "GE"), one, inner);
  return b.select(b.compare(d, b.splat(-beta, d.type), "LE"), b.unary("negate", one), r);
};
const LossFn kHuberLoss = [](Builder& b, Value d, double delta) {
  Value quad = b.mul(b.splat(0.5, d.type), b.mul(d, d));
  Value lin = b.mul(b.splat(delta, d.type), b.sub(b.unary("abs", d), b.splat(0.5 * delta, d.type)));
  return b.select(abs_lt(b, d, delta), quad, lin);
};
const LossFn kHuberGrad = [](Builder& b, Value d, double delta) {
  Value hi = b.splat(delta, d.type), lo = b.splat(-delta, d.type);
  return b.select(b.compare(d, lo, "LT"), lo, b.select(b.compare(d, hi, "GT"), hi, d));
};

// loss(self, target, reduction[, param]).
LoweringFn pointwise_loss(LossFn fn) {
  return [fn](LoweringContext& c) -> Result {
    Builder& b = c.b();
    DType a = opmath(c.out_type().dtype);
    Dims dims = broadcast_dims(c.tensor_type(0).dims, c.tensor_type(1).dims);
    Value d = b.sub(c.operand(0, a, dims), c.operand(1, a, dims));
    double param = c.num_args() > 3 && c.arg(3).kind == ArgKind::kDouble ? c.double_arg(3) : 0;
    return std::vector<Value>{reduce_loss(c, fn(b, d, param), c.int_arg(2))};
  };
}

// loss_backward(grad_output, self, target, reduction[, param]) -> grad_input.
LoweringFn pointwise_loss_backward(LossFn grad_fn) {
  return [grad_fn](LoweringContext& c) -> Result {
    Builder& b = c.b();
    DType a = opmath(c.out_type().dtype);
    const Dims& dims = c.out_type().dims;
    Value d = b.sub(c.operand(1, a, dims), c.operand(2, a, dims));
    double param = c.num_args() > 4 && c.arg(4).kind == ArgKind::kDouble ? c.double_arg(4) : 0;
    Value g = b.mul(grad_fn(b, d, param), c.operand(0, a, dims));
    if (c.int_arg(3) == kMean) {
      Value self = c.tensor(1);
      g = b.div(g, count_splat(b, self, range(0, self.rank()), g.type));
    }
    return std::vector<Value>{b.convert(g, c.out_type().dtype)};
  };
}

// binary_cross_entropy(self, target, weight?, reduction); log terms clamp at -100.
Result lower_bce(LoweringContext& c) {
  Builder& b = c.b();
  DType a = opmath(c.out_type().dtype);
  const Dims& dims = c.tensor_type(0).dims;
  Value x = c.operand(0, a, dims), t = c.operand(1, a, dims);
  Value one = b.splat(1, x.type), floor = b.splat(-100, x.type);
  Value in_range = b.binary("and", b.compare(x, b.zeros(x.type), "GE"), b.compare(x, one, "LE"));
  c.require(b.all_of(in_range),
            "binary_cross_entropy: all elements of input should be between 0 and 1",
            CheckKind::kRuntimeError);
  Value t_in_range =
      b.binary("and", b.compare(t, b.zeros(t.type), "GE"), b.compare(t, one, "LE"));
  c.require(b.all_of(t_in_range),
            "binary_cross_entropy: all elements of target should be between 0 and 1",
            CheckKind::kRuntimeError);
  Value log_x = b.max(b.unary("log", x), floor);
  Value log_1mx = b.max(b.unary("log", b.sub(one, x)), floor);
  Value loss = b.unary("negate", b.add(b.mul(t, log_x), b.mul(b.sub(one, t), log_1mx)));
  if (!c.is_none(2)) loss = b.mul(loss, c.operand(2, a, dims));
  return std::vector<Value>{reduce_loss(c, loss, c.int_arg(3))};
}

// binary_cross_entropy_backward(grad_output, self, target, weight?, reduction):
// g * w * (x - t) / max(x * (1 - x), 1e-12).
Result lower_bce_backward(LoweringContext& c) {
  Builder& b = c.b();
  DType a = opmath(c.out_type().dtype);
  const Dims& dims = c.out_type().dims;
  Value x = c.operand(1, a, dims), t = c.operand(2, a, dims);
  Value denom = b.max(b.mul(x, b.sub(b.splat(1, x.type), x)), b.splat(1e-12, x.type));
  Value g = b.mul(c.operand(0, a, dims), b.div(b.sub(x, t), denom));
  if (!c.is_none(3)) g = b.mul(g, c.operand(3, a, dims));
  if (c.int_arg(4) == kMean) {
    Value self = c.tensor(1);
    g = b.div(g, count_splat(b, self, range(0, self.rank()), g.type));
  }
  return std::vector<Value>{b.convert(g, c.out_type().dtype)};
}

// Per-element pieces of nll_loss over input (C), (N, C) or (N, C, d1, ...): the one-hot
// mask of each target's class (false for ignored targets) and each target's weight.
struct NllParts {
  Value onehot;  // i1, input dims
  Value weight;  // acc type, target dims
};

NllParts nll_parts(LoweringContext& c, size_t self_i, size_t target_i, size_t weight_i,
                   int64_t ignore_index, DType a) {
  Builder& b = c.b();
  const Dims& dims = c.tensor_type(self_i).dims;
  int64_t class_dim = dims.size() == 1 ? 0 : 1, num_classes = dims[class_dim];
  Value t = c.tensor(target_i);
  Dims target_map = all_but(static_cast<int64_t>(dims.size()), class_dim);
  auto splat_int = [&](int64_t v) { return int_splat(b, v, t); };
  Value kept = b.compare(t, splat_int(ignore_index), "NE");
  Value classes_n = splat_int(num_classes);
  Value in_range = b.binary("and", b.compare(t, b.zeros(t.type), "GE"),
                            b.compare(t, classes_n, "LT"));
  Value ok = b.binary("or", b.unary("not", kept), in_range);
  c.require(b.all_of(ok), "Target is out of bounds: nll_loss expects each target in [0, " +
                    std::to_string(num_classes) + ") or equal to ignore_index " +
                    std::to_string(ignore_index));
  Value classes = b.iota(TensorType{t.dtype(), dims}, class_dim);
  Value onehot = b.binary("and", b.compare(classes, b.broadcast_in_dim(t, dims, target_map), "EQ"),
                          b.broadcast_in_dim(kept, dims, target_map));
  Value w = b.convert(kept, a);
  if (!c.is_none(weight_i)) {
    Value wb = b.broadcast_in_dim(b.convert(c.tensor(weight_i), a), dims, {class_dim});
    w = b.reduce_sum(b.select(onehot, wb, b.zeros(wb.type)), {class_dim});
  }
  return {onehot, w};
}

// The per-class terms of multi_margin_loss over self (), (C) or (N, C) with target (N) (a 0-d
// or [1] target for one sample): z = margin - x[target] + x[j] for j != target, with the
// one-hot mask of the targets and each sample's weight[target] (1 without weight). p is
// structure (is_structural_scalar_arg); the CPU kernel checks the targets' range.
struct MarginParts {
  Value x2;       // self as [N, C], in the accumulation type
  Value z;        // [N, C]
  Value onehot;   // [N, C]
  Value weight;   // [N, C], weight[target] broadcast along C
};

MarginParts margin_parts(LoweringContext& c, size_t self_i, DType a) {
  Builder& b = c.b();
  const TensorType& st = c.tensor_type(self_i);
  // A 0-d self is one sample of one class, as the CPU kernel reads it.
  int64_t n = st.rank() == 2 ? st.dims[0] : 1, classes = st.rank() == 0 ? 1 : st.dims.back();
  Dims nc{n, classes};
  Value x = b.reshape(b.convert(c.tensor(self_i), a), nc);
  Value t = b.reshape(b.convert(c.tensor(self_i + 1), DType::kI64), {n});
  Value in_range = b.binary("and", b.compare(t, b.zeros(t.type), "GE"),
                            b.compare(t, b.splat(static_cast<double>(classes), t.type), "LT"));
  c.require(b.all_of(in_range), "target out of range",
            CheckKind::kRuntimeError);
  Value onehot = b.compare(b.iota(TensorType{DType::kI64, nc}, 1),
                           b.broadcast_in_dim(t, nc, {0}), "EQ");
  Value zero = b.zeros(TensorType{a, nc});
  Value target_x = b.broadcast_in_dim(b.reduce_sum(b.select(onehot, x, zero), {1}), nc, {0});
  Value margin = b.broadcast_to(c.scalar(self_i + 3, a), nc);
  Value z = b.add(b.sub(margin, target_x), x);
  Value w = b.splat(1, zero.type);
  if (!c.is_none(self_i + 4)) {
    Value wb = b.broadcast_in_dim(b.convert(c.tensor(self_i + 4), a), nc, {1});
    w = b.broadcast_in_dim(b.reduce_sum(b.select(onehot, wb, zero), {1}), nc, {0});
  }
  return {x, z, onehot, w};
}

double margin_p(LoweringContext& c, size_t i) {
  return c.arg(i).kind == ArgKind::kDouble ? c.double_arg(i) : static_cast<double>(c.int_arg(i));
}

// multi_margin_loss(self, target, p, margin, weight?, reduction): per sample the sum over
// j != target of max(0, z)^p * weight[target], divided by C.
Result lower_multi_margin_loss(LoweringContext& c) {
  Builder& b = c.b();
  DType a = opmath(c.out_type().dtype);
  MarginParts m = margin_parts(c, 0, a);
  Value zero = b.zeros(m.z.type);
  Value active = b.binary("and", b.compare(m.z, zero, "GT"), b.unary("not", m.onehot));
  Value h = margin_p(c, 2) == 1 ? m.z : b.mul(m.z, m.z);
  h = b.select(active, b.mul(h, m.weight), zero);
  int64_t classes = m.z.dims()[1];
  Value per_sample = b.div(b.reduce_sum(h, {1}),
                           b.splat(static_cast<double>(classes), TensorType{a, {m.z.dims()[0]}}));
  int64_t reduction = c.int_arg(5);
  if (reduction == kNone) {
    return std::vector<Value>{b.convert(b.reshape(per_sample, c.out_type().dims),
                                        c.out_type().dtype)};
  }
  return std::vector<Value>{reduce_loss(c, per_sample, reduction)};
}

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight?, reduction):
// h = (p == 1 ? 1 : 2 z) * weight[target] / C (and / N for mean) on each active j, minus
// their sum at the target, times the sample's grad_output.
Result lower_multi_margin_loss_backward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  DType a = opmath(out.dtype);
  MarginParts m = margin_parts(c, 1, a);
  const Dims& nc = m.z.dims();
  Value zero = b.zeros(m.z.type);
  int64_t reduction = c.int_arg(6);
  double scale = 1.0 / static_cast<double>(nc[1]);
  if (reduction == kMean) scale /= static_cast<double>(nc[0]);
  Value active = b.binary("and", b.compare(m.z, zero, "GT"), b.unary("not", m.onehot));
  Value h = margin_p(c, 3) == 1 ? b.splat(scale, m.z.type)
                                : b.mul(b.splat(2 * scale, m.z.type), m.z);
  h = b.select(active, b.mul(h, m.weight), zero);
  Value at_target = b.broadcast_in_dim(b.unary("negate", b.reduce_sum(h, {1})), nc, {0});
  Value grad = b.select(m.onehot, at_target, h);
  Value g = b.convert(c.tensor(0), a);
  g = reduction == kNone ? b.broadcast_in_dim(b.reshape(g, {nc[0]}), nc, {0})
                         : b.broadcast_to(b.reshape(g, {}), nc);
  return std::vector<Value>{b.convert(b.reshape(b.mul(grad, g), out.dims), out.dtype)};
}

// The pairwise terms of multilabel_margin_loss over self (), (C) or (N, C) and a target of
// self's shape, whose row lists the sample's classes up to its first negative entry: for
// target slot j and class d, z = 1 - x[target_j] + x[d], active where j lists a class, d
// is none of the row's classes and z > 0 (the CPU kernel's loops, as [N, C, C] masks).
// `is_target` is the backward's argument; the forward derives it. The CPU kernel checks
// every target entry, listed or not, is in [-1, C).
struct MultilabelParts {
  Value z;          // [N, C (slot j), C (class d)], in the accumulation type
  Value active;     // [N, C, C]
  Value listed;     // [N, C, C]: slot j lists class c
  Value is_target;  // [N, C]
};

MultilabelParts multilabel_parts(LoweringContext& c, size_t self_i, DType a,
                                 std::optional<Value> is_target) {
  Builder& b = c.b();
  const TensorType& st = c.tensor_type(self_i);
  int64_t n = st.rank() == 2 ? st.dims[0] : 1, classes = st.rank() == 0 ? 1 : st.dims.back();
  Dims nc{n, classes}, ncc{n, classes, classes};
  Value x = b.reshape(b.convert(c.tensor(self_i), a), nc);
  Value t = b.reshape(b.convert(c.tensor(self_i + 1), DType::kI64), nc);
  TensorType it{DType::kI64, nc};
  Value in_range = b.binary("and", b.compare(t, b.splat(-1, it), "GE"),
                            b.compare(t, b.splat(static_cast<double>(classes), it), "LT"));
  c.require(b.all_of(in_range),
            "argument #2 'target' is out of range", CheckKind::kRuntimeError);
  Value slot = b.iota(it, 1);
  Value end = b.reduce_min(b.select(b.compare(t, b.zeros(it), "LT"), slot,
                                    b.splat(static_cast<double>(classes), it)),
                           {1});
  Value valid = b.compare(slot, b.broadcast_in_dim(end, nc, {0}), "LT");
  Value listed = b.binary("and", b.broadcast_in_dim(valid, ncc, {0, 1}),
                          b.compare(b.broadcast_in_dim(t, ncc, {0, 1}),
                                    b.iota(TensorType{DType::kI64, ncc}, 2), "EQ"));
  Value targets = is_target ? b.compare(b.reshape(*is_target, nc),
                                        b.zeros(TensorType{is_target->dtype(), nc}), "NE")
                            : b.reduce_any(listed, {1});
  Value zero = b.zeros(TensorType{a, ncc});
  Value x_d = b.broadcast_in_dim(x, ncc, {0, 2});
  Value x_target = b.reduce_sum(b.select(listed, x_d, zero), {2});
  Value z = b.add(b.sub(b.splat(1, zero.type), b.broadcast_in_dim(x_target, ncc, {0, 1})), x_d);
  Value active = b.binary("and", b.broadcast_in_dim(valid, ncc, {0, 1}),
                          b.unary("not", b.broadcast_in_dim(targets, ncc, {0, 2})));
  active = b.binary("and", active, b.compare(z, zero, "GT"));
  return {z, active, listed, targets};
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target): per
// sample the sum of the active terms / C.
Result lower_multilabel_margin_loss(LoweringContext& c) {
  Builder& b = c.b();
  DType a = opmath(c.out_type().dtype);
  MultilabelParts m = multilabel_parts(c, 0, a, std::nullopt);
  const Dims& ncc = m.z.dims();
  Value terms = b.select(m.active, m.z, b.zeros(m.z.type));
  Value per_sample = b.div(b.reduce_sum(terms, {1, 2}),
                           b.splat(static_cast<double>(ncc[1]), TensorType{a, {ncc[0]}}));
  const TensorType& it = c.out_type(1);
  Value is_target = b.reshape(b.convert(m.is_target, it.dtype), it.dims);
  int64_t reduction = c.int_arg(2);
  Value loss = reduction == kNone
                   ? b.convert(b.reshape(per_sample, c.out_type().dims), c.out_type().dtype)
                   : reduce_loss(c, per_sample, reduction);
  return std::vector<Value>{loss, is_target};
}

// multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target): g = 1/C
// (1/(N C) for mean) on each active (j, d) at d, minus it at the class slot j lists; times
// the sample's grad_output.
Result lower_multilabel_margin_loss_backward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  DType a = opmath(out.dtype);
  MultilabelParts m = multilabel_parts(c, 1, a, c.tensor(4));
  const Dims& ncc = m.z.dims();
  Dims nc{ncc[0], ncc[1]};
  int64_t reduction = c.int_arg(3);
  double scale = 1.0 / static_cast<double>(ncc[1]);
  if (reduction == kMean) scale /= static_cast<double>(ncc[0]);
  Value zero = b.zeros(m.z.type);
  Value h = b.select(m.active, b.splat(scale, m.z.type), zero);
  Value plus = b.reduce_sum(h, {1});
  Value per_slot = b.broadcast_in_dim(b.reduce_sum(h, {2}), ncc, {0, 1});
  Value minus = b.reduce_sum(b.select(m.listed, per_slot, zero), {1});
  Value grad = b.sub(plus, minus);
  Value g = b.convert(c.tensor(0), a);
  g = reduction == kNone ? b.broadcast_in_dim(b.reshape(g, {nc[0]}), nc, {0})
                         : b.broadcast_to(b.reshape(g, {}), nc);
  return std::vector<Value>{b.convert(b.reshape(b.mul(grad, g), out.dims), out.dtype)};
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction, ignore_index)
// -> (output, total_weight). total_weight is 0 for reduction none (as on CPU).
Result lower_nll_loss(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = opmath(x.dtype());
  int64_t reduction = c.int_arg(3);
  NllParts p = nll_parts(c, 0, 1, 2, c.int_arg(4), a);
  int64_t class_dim = x.rank() == 1 ? 0 : 1;
  Value xf = b.convert(x, a);
  Value picked = b.reduce_sum(b.select(p.onehot, xf, b.zeros(xf.type)), {class_dim});
  Value loss = b.unary("negate", b.mul(picked, p.weight));
  const TensorType& tw_type = c.out_type(1);
  if (reduction == kNone) {
    return std::vector<Value>{b.convert(loss, c.out_type(0).dtype), b.zeros(tw_type)};
  }
  Dims all = range(0, loss.rank());
  Value total = b.reduce_sum(loss, all), total_weight = b.reduce_sum(p.weight, all);
  if (reduction == kMean) total = b.div(total, total_weight);
  return std::vector<Value>{b.convert(total, c.out_type(0).dtype),
                            b.convert(total_weight, tw_type.dtype)};
}

// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?, reduction,
// ignore_index, total_weight) -> grad_input.
Result lower_nll_loss_backward(LoweringContext& c) {
  Builder& b = c.b();
  const Dims& dims = c.tensor_type(1).dims;
  DType a = opmath(c.out_type().dtype);
  int64_t reduction = c.int_arg(4);
  NllParts p = nll_parts(c, 1, 2, 3, c.int_arg(5), a);
  const Dims& tdims = p.weight.dims();
  Value g = b.convert(c.tensor(0), a);
  g = reduction == kNone ? g : b.broadcast_to(b.reshape(g, {}), tdims);
  if (reduction == kMean) {
    g = b.div(g, b.broadcast_to(b.reshape(b.convert(c.tensor(6), a), {}), tdims));
  }
  Value coef = b.unary("negate", b.mul(g, p.weight));
  int64_t class_dim = dims.size() == 1 ? 0 : 1;
  Dims target_map = all_but(static_cast<int64_t>(dims.size()), class_dim);
  Value spread = b.broadcast_in_dim(coef, dims, target_map);
  Value grad = b.select(p.onehot, spread, b.zeros(spread.type));
  return std::vector<Value>{b.convert(grad, c.out_type().dtype)};
}

// operand[indices[i]] += updates[i] along dim 0 of `operand`; `indices` is [M, 1].
Value scatter_add_rows(Builder& b, Value operand, Value indices, Value updates) {
  TensorType scalar{operand.dtype(), {}};
  std::string dnums = "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " +
                      i64_list(range(1, updates.rank())) +
                      ", inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
                      "index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false";
  return b.op_with_region(
      "stablehlo.scatter", {operand, indices, updates}, {operand.type}, {scalar, scalar},
      [](Builder& rb, const std::vector<Value>& args) {
        return std::vector<Value>{rb.add(args[0], args[1])};
      },
      dnums)[0];
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
// scale_grad_by_freq): rows of grad_output scatter-added into a [num_weights, D] gradient.
Result lower_embedding_dense_backward(LoweringContext& c) {
  Builder& b = c.b();
  const Dims& gdims = c.tensor_type(0).dims;
  DType a = opmath(c.out_type().dtype);
  int64_t num_weights = c.int_arg(2), padding_idx = c.int_arg(3);
  int64_t m = c.tensor_type(1).num_elements(), d = gdims.back();
  Value idx = b.reshape(c.tensor(1), {m});
  Value upd = b.reshape(b.convert(c.tensor(0), a), {m, d});
  Value in_range = b.binary("and", b.compare(idx, b.zeros(idx.type), "GE"),
                            b.compare(idx, int_splat(b, num_weights, idx), "LT"));
  c.require(b.all_of(in_range),
            "index out of range: embedding indices must be in [0, " +
                std::to_string(num_weights) + ")");
  if (padding_idx >= 0) {
    Value keep = b.compare(idx, int_splat(b, padding_idx, idx), "NE");
    upd = b.select(b.broadcast_in_dim(keep, {m, d}, {0}), upd, b.zeros(upd.type));
  }
  Value idx2 = b.reshape(idx, {m, 1});
  Value grad = scatter_add_rows(b, b.zeros(TensorType{a, {num_weights, d}}), idx2, upd);
  if (c.bool_arg(4)) {
    Value counts = scatter_add_rows(b, b.zeros(TensorType{a, {num_weights}}), idx2,
                                    b.splat(1, TensorType{a, {m}}));
    counts = b.max(counts, b.splat(1, counts.type));
    grad = b.div(grad, b.broadcast_in_dim(counts, {num_weights, d}, {0}));
  }
  return std::vector<Value>{b.convert(grad, c.out_type().dtype)};
}

}  // namespace

void register_nn_lowerings() {
  register_lowering({"aten::native_layer_norm", "aten::native_layer_norm.out"}, lower_layer_norm);
  register_lowering({"aten::native_layer_norm_backward", "aten::native_layer_norm_backward.out"},
                    lower_layer_norm_backward);
  register_lowering({"aten::native_group_norm", "aten::native_group_norm.out"}, lower_group_norm);
  register_lowering({"aten::native_group_norm_backward", "aten::native_group_norm_backward.out"},
                    lower_group_norm_backward);
  register_lowering({"aten::native_batch_norm", "aten::native_batch_norm.out",
                     "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit.out",
                     "aten::_native_batch_norm_legit.no_stats",
                     "aten::_native_batch_norm_legit.no_stats_out"},
                    lower_batch_norm);
  register_lowering({"aten::_batch_norm_with_update", "aten::_batch_norm_with_update_functional"},
                    lower_batch_norm_with_update);
  // batch_norm_backward (the backward of _batch_norm_with_update) takes the same arguments
  // up to output_mask, `update` in train's place, then a reserve tensor it does not read.
  register_lowering({"aten::batch_norm_backward"}, lower_batch_norm_backward);
  register_lowering({"aten::native_batch_norm_backward", "aten::native_batch_norm_backward.out"},
                    lower_batch_norm_backward);
  register_lowering({"aten::nll_loss_forward", "aten::nll_loss_forward.output",
                     "aten::nll_loss2d_forward", "aten::nll_loss2d_forward.output"},
                    lower_nll_loss);
  register_lowering({"aten::nll_loss_backward", "aten::nll_loss_backward.grad_input",
                     "aten::nll_loss2d_backward", "aten::nll_loss2d_backward.grad_input"},
                    lower_nll_loss_backward);
  register_lowering({"aten::mse_loss", "aten::mse_loss.out"}, pointwise_loss(kMseLoss));
  register_lowering({"aten::mse_loss_backward", "aten::mse_loss_backward.grad_input"},
                    pointwise_loss_backward(kMseGrad));
  register_lowering({"aten::smooth_l1_loss", "aten::smooth_l1_loss.out"},
                    pointwise_loss(kSmoothL1Loss));
  register_lowering({"aten::smooth_l1_loss_backward", "aten::smooth_l1_loss_backward.grad_input"},
                    pointwise_loss_backward(kSmoothL1Grad));
  register_lowering({"aten::huber_loss", "aten::huber_loss.out"}, pointwise_loss(kHuberLoss));
  register_lowering({"aten::huber_loss_backward", "aten::huber_loss_backward.out"},
                    pointwise_loss_backward(kHuberGrad));
  register_lowering({"aten::binary_cross_entropy", "aten::binary_cross_entropy.out"}, lower_bce);
  register_lowering({"aten::multi_margin_loss", "aten::multi_margin_loss.out"},
                    lower_multi_margin_loss);
  register_lowering({"aten::multilabel_margin_loss_forward",
                     "aten::multilabel_margin_loss_forward.output"},
                    lower_multilabel_margin_loss);
  register_lowering({"aten::multilabel_margin_loss_backward",
                     "aten::multilabel_margin_loss_backward.grad_input"},
                    lower_multilabel_margin_loss_backward);
  register_lowering({"aten::multi_margin_loss_backward",
                     "aten::multi_margin_loss_backward.grad_input"},
                    lower_multi_margin_loss_backward);
  register_lowering({"aten::binary_cross_entropy_backward",
                     "aten::binary_cross_entropy_backward.grad_input"},
                    lower_bce_backward);
  register_lowering({"aten::embedding_dense_backward", "aten::embedding_dense_backward.out"},
                    lower_embedding_dense_backward);
  register_conv_lowerings();
}

}  // namespace torchtpu::lowering
