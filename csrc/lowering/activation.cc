// Activation lowerings (relu, gelu, silu, sigmoid, tanh, shrinks, glu, prelu, ... and their
// backward ops) and softmax / log_softmax with their backward ops.
//
// Formulas follow ATen's CPU kernels (Activation.cpp, SoftMax.cpp) so results match
// PyTorch's rounding behaviour: bf16/f16 compute in float32 (ATen's opmath type) and are
// converted to the output type once at the end; integer inputs of float-only functions
// compute in float32 (their output dtype is float already).
#include <cmath>
#include <utility>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// ATen's opmath type: reduced-precision floats compute in float32. Integers stay integer
// when `keep_integral` (ops such as relu and threshold are defined on ints), else float32.
DType opmath_type(DType t, bool keep_integral = false) {
  if (base::is_half_float(t)) return DType::kF32;
  if (base::is_floating(t) || base::is_complex(t)) return t;
  return keep_integral ? t : DType::kF32;
}

DType out_opmath(LoweringContext& c, bool keep_integral = false) {
  return opmath_type(c.out_type().dtype, keep_integral);
}

// Scalar argument `i` as a runtime value of `like`'s dtype broadcast to its shape.
Value scalar_as(LoweringContext& c, size_t i, const Value& like) {
  return c.b().broadcast_to(c.scalar(i, like.dtype()), like.dims());
}

// Scalar argument `i` rounded to the output dtype, then as `like`'s dtype and shape: the
// CPU kernel converts it to scalar_t although it computes in float32 (hardshrink's lambd;
// its overflow check is the eager argument check's, aten/op_special_cases.cc).
Value scalar_rounded_as(LoweringContext& c, size_t i, const Value& like) {
  Builder& b = c.b();
  Value v = c.scalar(i, c.out_type().dtype, ScalarCast::kWrapped);
  return b.broadcast_to(b.convert(v, like.dtype()), like.dims());
}

Value splat_as(Builder& b, double v, const Value& like) { return b.splat(v, like.type); }

// Formulas over the converted operands: x is arg 0 for forward ops; for backward ops grad
// is arg 0 and the saved tensor (the op's input or output) is arg 1.
using ForwardBody = Value (*)(LoweringContext&, Value x);
using BackwardBody = Value (*)(LoweringContext&, Value grad, Value saved);

LoweringFn forward(ForwardBody body, bool keep_integral = false) {
  return [body, keep_integral](LoweringContext& c) -> Result {
    Value x = out_operand(c, 0, out_opmath(c, keep_integral));
    return std::vector<Value>{to_out(c, body(c, x))};
  };
}

LoweringFn backward(BackwardBody body, bool keep_integral = false) {
  return [body, keep_integral](LoweringContext& c) -> Result {
    DType t = out_opmath(c, keep_integral);
    Value grad = out_operand(c, 0, t);
    return std::vector<Value>{to_out(c, body(c, grad, out_operand(c, 1, t)))};
  };
}

// ---- relu family -------------------------------------------------------------------

Value relu(LoweringContext& c, Value x) { return c.b().max(x, c.b().zeros(x.type)); }

// threshold(x, th, value) = x <= th ? value : x; NaN compares false and passes through.
Value threshold(LoweringContext& c, Value x) {
  Builder& b = c.b();
  return b.select(b.compare(x, scalar_as(c, 1, x), "LE"), scalar_as(c, 2, x), x);
}

// threshold_backward(grad, self, th): relu's backward with th = 0.
Value threshold_backward(LoweringContext& c, Value grad, Value self) {
  Builder& b = c.b();
  return b.select(b.compare(self, scalar_as(c, 2, self), "LE"), b.zeros(grad.type), grad);
}

Value leaky_relu(LoweringContext& c, Value x) {
  Builder& b = c.b();
  return b.select(b.compare(x, b.zeros(x.type), "GT"), x, b.mul(x, scalar_as(c, 1, x)));
}

// leaky_relu_backward(grad, self, slope, self_is_result): the sign test is the same whether
// `self` is the input or the output, because a non-negative slope keeps the sign (ATen's
// meta kernel rejects a negative slope with self_is_result).
Value leaky_relu_backward(LoweringContext& c, Value grad, Value self) {
  Builder& b = c.b();
  return b.select(b.compare(self, b.zeros(self.type), "GT"), grad,
                  b.mul(grad, scalar_as(c, 2, grad)));
}

// hardtanh is ATen's clamp(x, min, max): max first, so min > max yields max.
Value hardtanh(LoweringContext& c, Value x) {
  Builder& b = c.b();
  return b.min(b.max(x, scalar_as(c, 1, x)), scalar_as(c, 2, x));
}

Value hardtanh_backward(LoweringContext& c, Value grad, Value self) {
  Builder& b = c.b();
  Value outside = b.binary("or", b.compare(self, scalar_as(c, 2, self), "LE"),
                           b.compare(self, scalar_as(c, 3, self), "GE"));
  return b.select(outside, b.zeros(grad.type), grad);
}

// ---- exponential family ------------------------------------------------------------

// elu(x, alpha, scale, input_scale) = x <= 0 ? expm1(x * input_scale) * alpha * scale
//                                            : x * scale
Value elu(LoweringContext& c, Value x) {
  Builder& b = c.b();
  Value scale = scalar_as(c, 2, x);
  Value neg = b.mul(b.mul(b.unary("exponential_minus_one", b.mul(x, scalar_as(c, 3, x))),
                          scalar_as(c, 1, x)),
                    scale);
  return b.select(b.compare(x, b.zeros(x.type), "LE"), neg, b.mul(x, scale));
}

// elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result): with the
// output y (is_result) the negative branch is grad * input_scale * (y + alpha * scale),
// with the input x it is grad * input_scale * alpha * scale * exp(x * input_scale).
Result lower_elu_backward(LoweringContext& c) {
  Builder& b = c.b();
  DType t = out_opmath(c);
  Value grad = out_operand(c, 0, t);
  Value s = out_operand(c, 5, t);
  Value neg_coef = b.mul(scalar_as(c, 1, grad), scalar_as(c, 2, grad));
  Value input_scale = scalar_as(c, 3, grad);
  Value neg_grad = c.bool_arg(4)
                       ? b.mul(b.mul(grad, input_scale), b.add(s, neg_coef))
                       : b.mul(b.mul(b.mul(grad, input_scale), neg_coef),
                               b.unary("exponential", b.mul(s, input_scale)));
  Value pos_grad = b.mul(grad, scalar_as(c, 2, grad));
  Value r = b.select(b.compare(s, b.zeros(s.type), "LE"), neg_grad, pos_grad);
  return std::vector<Value>{to_out(c, r)};
}

// softplus(x, beta, threshold) = x * beta > threshold ? x : log1p(exp(x * beta)) / beta
Value softplus(LoweringContext& c, Value x) {
  Builder& b = c.b();
  Value beta = scalar_as(c, 1, x);
  Value xb = b.mul(x, beta);
  Value soft = b.div(b.unary("log_plus_one", b.unary("exponential", xb)), beta);
  return b.select(b.compare(xb, scalar_as(c, 2, x), "GT"), x, soft);
}

Value softplus_backward(LoweringContext& c, Value grad, Value self) {
  Builder& b = c.b();
  Value xb = b.mul(self, scalar_as(c, 2, self));
  Value z = b.unary("exponential", xb);
  Value soft = b.div(b.mul(grad, z), b.add(z, splat_as(b, 1, z)));
  return b.select(b.compare(xb, scalar_as(c, 3, self), "GT"), grad, soft);
}

// ---- sigmoid family ----------------------------------------------------------------

Value sigmoid_fwd(LoweringContext& c, Value x) {
  return base::is_complex(x.dtype()) ? complex_sigmoid(c.b(), x) : c.b().unary("logistic", x);
}

// sigmoid_backward(grad, y) = grad * conj((1 - y) * y) (conj: complex y, as PyTorch's).
Value sigmoid_backward(LoweringContext& c, Value grad, Value y) {
  Builder& b = c.b();
  return b.mul(grad, b.conj(b.mul(b.sub(splat_as(b, 1, y), y), y)));
}

Value tanh_fwd(LoweringContext& c, Value x) {
  return base::is_complex(x.dtype()) ? complex_tanh(c.b(), x) : c.b().unary("tanh", x);
}

// tanh_backward(grad, y) = grad * conj(1 - y * y)
Value tanh_backward(LoweringContext& c, Value grad, Value y) {
  Builder& b = c.b();
  return b.mul(grad, b.conj(b.sub(splat_as(b, 1, y), b.mul(y, y))));
}

// silu(x) = x / (1 + exp(-x)), ATen's form (x * logistic(x) differs at x = -inf).
Value silu(LoweringContext& c, Value x) {
  Builder& b = c.b();
  return b.div(x, b.add(splat_as(b, 1, x), b.unary("exponential", b.unary("negate", x))));
}

// silu_backward(grad, x) = grad * s * (1 + x * (1 - s)) with s = sigmoid(x)
Value silu_backward(LoweringContext& c, Value grad, Value x) {
  Builder& b = c.b();
  Value one = splat_as(b, 1, x);
  Value s = b.div(one, b.add(one, b.unary("exponential", b.unary("negate", x))));
  return b.mul(b.mul(grad, s), b.add(one, b.mul(x, b.sub(one, s))));
}

// mish(x) = x * tanh(softplus(x))
Value mish(LoweringContext& c, Value x) {
  Builder& b = c.b();
  return b.mul(x, b.unary("tanh", b.unary("log_plus_one", b.unary("exponential", x))));
}

// hardsigmoid(x) = min(max(x + 3, 0), 6) / 6
Value hard_gate(Builder& b, Value x) {
  Value clamped = b.min(b.max(b.add(x, splat_as(b, 3, x)), b.zeros(x.type)), splat_as(b, 6, x));
  return b.div(clamped, splat_as(b, 6, x));
}

Value hardsigmoid(LoweringContext& c, Value x) { return hard_gate(c.b(), x); }

Value hardsigmoid_backward(LoweringContext& c, Value grad, Value x) {
  Builder& b = c.b();
  Value inside = b.binary("and", b.compare(x, splat_as(b, -3, x), "GT"),
                          b.compare(x, splat_as(b, 3, x), "LT"));
  return b.select(inside, b.div(grad, splat_as(b, 6, grad)), b.zeros(grad.type));
}

Value hardswish(LoweringContext& c, Value x) { return c.b().mul(x, hard_gate(c.b(), x)); }

// hardswish_backward: 0 up to -3, grad * (x / 3 + 0.5) on (-3, 3), grad from 3 on (and
// for NaN, which fails both comparisons).
Value hardswish_backward(LoweringContext& c, Value grad, Value x) {
  Builder& b = c.b();
  Value mid = b.mul(grad, b.add(b.div(x, splat_as(b, 3, x)), splat_as(b, 0.5, x)));
  Value upper = b.select(b.compare(x, splat_as(b, 3, x), "LT"), mid, grad);
  return b.select(b.compare(x, splat_as(b, -3, x), "LE"), b.zeros(grad.type), upper);
}

// ---- gelu --------------------------------------------------------------------------

constexpr double kSqrt1_2 = 0.70710678118654752440;       // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1 / sqrt(2 * pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;   // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;

base::StatusOr<bool> gelu_uses_tanh(LoweringContext& c, size_t arg) {
  if (c.is_none(arg)) return false;
  const std::string& mode = c.string_arg(arg);
  if (mode == "none") return false;
  if (mode == "tanh") return true;
  return base::invalid_argument("lowering: aten::gelu approximate argument must be either "
                                "none or tanh (got '" + mode + "')");
}

// The tanh approximation's inner term sqrt(2/pi) * (x + kappa * x^3).
Value gelu_inner(Builder& b, Value x) {
  Value cube = b.mul(b.mul(x, x), x);
  return b.mul(splat_as(b, kSqrt2OverPi, x), b.add(x, b.mul(splat_as(b, kGeluKappa, x), cube)));
}

Result lower_gelu(LoweringContext& c) {
  auto use_tanh = gelu_uses_tanh(c, 1);
  if (!use_tanh.ok()) return use_tanh.status();
  Builder& b = c.b();
  Value x = out_operand(c, 0, out_opmath(c));
  Value half_x = b.mul(x, splat_as(b, 0.5, x));
  Value one = splat_as(b, 1, x);
  Value gate = *use_tanh ? b.unary("tanh", gelu_inner(b, x))
                         : b.unary("chlo.erf", b.mul(x, splat_as(b, kSqrt1_2, x)));
  return std::vector<Value>{to_out(c, b.mul(half_x, b.add(one, gate)))};
}

Result lower_gelu_backward(LoweringContext& c) {
  auto use_tanh = gelu_uses_tanh(c, 2);
  if (!use_tanh.ok()) return use_tanh.status();
  Builder& b = c.b();
  DType t = out_opmath(c);
  Value grad = out_operand(c, 0, t);
  Value x = out_operand(c, 1, t);
  Value one = splat_as(b, 1, x);
  Value half = splat_as(b, 0.5, x);
  Value d;
  if (*use_tanh) {
    // d/dx [0.5 x (1 + tanh(u))] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'
    Value th = b.unary("tanh", gelu_inner(b, x));
    Value du = b.mul(splat_as(b, kSqrt2OverPi, x),
                     b.add(one, b.mul(splat_as(b, 3 * kGeluKappa, x), b.mul(x, x))));
    Value left = b.mul(half, b.add(one, th));
    Value right = b.mul(b.mul(half, x), b.mul(b.sub(one, b.mul(th, th)), du));
    d = b.add(left, right);
  } else {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    Value cdf = b.mul(half, b.add(one, b.unary("chlo.erf", b.mul(x, splat_as(b, kSqrt1_2, x)))));
    Value pdf = b.mul(splat_as(b, kInvSqrt2Pi, x),
                      b.unary("exponential", b.mul(splat_as(b, -0.5, x), b.mul(x, x))));
    d = b.add(cdf, b.mul(x, pdf));
  }
  return std::vector<Value>{to_out(c, b.mul(grad, d))};
}

// ---- shrink, log_sigmoid, logit, glu, prelu ---------------------------------------

// |x| <= l, the band hardshrink and softshrink zero out.
Value in_band(Builder& b, Value x, Value l) {
  return b.binary("and", b.compare(x, b.unary("negate", l), "GE"), b.compare(x, l, "LE"));
}

Value hardshrink(LoweringContext& c, Value x) {
  Builder& b = c.b();
  return b.select(in_band(b, x, scalar_rounded_as(c, 1, x)), b.zeros(x.type), x);
}

// softshrink(x, l) = x > l ? x - l : x < -l ? x + l : x * 0 (ATen keeps the zero's sign)
Value softshrink(LoweringContext& c, Value x) {
  Builder& b = c.b();
  Value l = scalar_as(c, 1, x);
  Value shrunk = b.select(b.compare(x, l, "GT"), b.sub(x, l), b.add(x, l));
  return b.select(in_band(b, x, l), b.mul(x, b.zeros(x.type)), shrunk);
}

// Both shrinks have the same derivative: 0 inside the band, 1 outside.
Value shrink_backward(LoweringContext& c, Value grad, Value self) {
  Builder& b = c.b();
  return b.select(in_band(b, self, scalar_as(c, 2, self)), b.zeros(grad.type), grad);
}

// log_sigmoid_forward(x) -> (min(x, 0) - log1p(exp(-|x|)), buffer). The buffer is only a
// CPU kernel's cache; log_sigmoid_backward recomputes from x, so it is returned as zeros.
Result lower_log_sigmoid_forward(LoweringContext& c) {
  Builder& b = c.b();
  Value x = out_operand(c, 0, out_opmath(c));
  Value z = b.unary("exponential", b.unary("negate", b.unary("abs", x)));
  Value y = b.sub(b.min(x, b.zeros(x.type)), b.unary("log_plus_one", z));
  return std::vector<Value>{to_out(c, y), b.zeros(c.out_type(1))};
}

// d/dx log_sigmoid(x) = 1 - sigmoid(x), written with exp(-|x|) so it never overflows.
Value log_sigmoid_backward(LoweringContext& c, Value grad, Value x) {
  Builder& b = c.b();
  Value z = b.unary("exponential", b.unary("negate", b.unary("abs", x)));
  Value ratio = b.div(z, b.add(splat_as(b, 1, z), z));
  Value negative = b.compare(x, b.zeros(x.type), "LT");
  Value d = b.select(negative, b.sub(splat_as(b, 1, z), ratio), ratio);
  return b.mul(grad, d);
}

// logit(x, eps?) = log(z / (1 - z)) with z = x clamped to [eps, 1 - eps] when eps is given;
// the clamp is two selects, as in ATen, so NaN passes through.
Result lower_logit(LoweringContext& c) {
  Builder& b = c.b();
  Value x = out_operand(c, 0, out_opmath(c));
  if (!c.is_none(1)) {
    Value lo = splat_as(b, c.double_arg(1), x), hi = splat_as(b, 1 - c.double_arg(1), x);
    x = b.select(b.compare(x, lo, "LT"), lo, b.select(b.compare(x, hi, "GT"), hi, x));
  }
  Value r = b.unary("log", b.div(x, b.sub(splat_as(b, 1, x), x)));
  return std::vector<Value>{to_out(c, r)};
}

// logit_backward: grad / (x (1 - x)) inside [eps, 1 - eps] (else 0); without eps, NaN
// outside [0, 1].
Result lower_logit_backward(LoweringContext& c) {
  Builder& b = c.b();
  DType t = out_opmath(c);
  Value grad = out_operand(c, 0, t);
  Value x = out_operand(c, 1, t);
  double eps = c.is_none(2) ? -1 : c.double_arg(2);
  double lo = eps < 0 ? 0 : eps;
  Value outside = b.binary("or", b.compare(x, splat_as(b, lo, x), "LT"),
                           b.compare(x, splat_as(b, 1 - lo, x), "GT"));
  Value d = b.div(grad, b.mul(x, b.sub(splat_as(b, 1, x), x)));
  Value fill = splat_as(b, eps < 0 ? std::nan("") : 0.0, x);
  return std::vector<Value>{to_out(c, b.select(outside, fill, d))};
}

// The two halves of `v` along `dim`.
std::pair<Value, Value> halves(Builder& b, Value v, int64_t dim) {
  Dims start(v.rank(), 0), limit = v.dims(), strides(v.rank(), 1);
  int64_t half = v.dims()[dim] / 2;
  limit[dim] = half;
  Value first = b.slice(v, start, limit, strides);
  start[dim] = half;
  limit[dim] = v.dims()[dim];
  return {first, b.slice(v, start, limit, strides)};
}

// glu(x, dim) = a * sigmoid(b) for the halves a, b of x.
Result lower_glu(LoweringContext& c) {
  Builder& b = c.b();
  Value x = b.convert(c.tensor(0), out_opmath(c));
  auto [first, second] = halves(b, x, wrap_dim(c.int_arg(1), x.rank()));
  return std::vector<Value>{to_out(c, b.mul(first, b.unary("logistic", second)))};
}

// glu_backward(grad, x, dim) = concat(grad * s, grad * a * s * (1 - s)), s = sigmoid(b).
Result lower_glu_backward(LoweringContext& c) {
  Builder& b = c.b();
  DType t = out_opmath(c);
  Value grad = b.convert(c.tensor(0), t);
  Value x = b.convert(c.tensor(1), t);
  int64_t dim = wrap_dim(c.int_arg(2), x.rank());
  auto [first, second] = halves(b, x, dim);
  Value s = b.unary("logistic", second);
  Value grad_first = b.mul(grad, s);
  Value grad_second = b.mul(b.mul(grad_first, first), b.sub(splat_as(b, 1, s), s));
  return std::vector<Value>{to_out(c, b.concatenate({grad_first, grad_second}, dim))};
}

// _prelu_kernel(x, w) = x > 0 ? x : w * x, with w already broadcastable to x.
Result lower_prelu(LoweringContext& c) {
  Builder& b = c.b();
  DType t = out_opmath(c);
  Value x = out_operand(c, 0, t), w = out_operand(c, 1, t);
  Value r = b.select(b.compare(x, b.zeros(x.type), "GT"), x, b.mul(w, x));
  return std::vector<Value>{to_out(c, r)};
}

// _prelu_kernel_backward(grad, x, w) -> (grad_x, grad_w), both of the broadcast shape
// (autograd sums grad_w down to w's shape).
Result lower_prelu_backward(LoweringContext& c) {
  Builder& b = c.b();
  DType t = opmath_type(promote_types(c.out_type(0).dtype, c.out_type(1).dtype));
  const Dims& dims = c.out_type(0).dims;
  Value grad = c.operand(0, t, dims), x = c.operand(1, t, dims), w = c.operand(2, t, dims);
  Value positive = b.compare(x, b.zeros(x.type), "GT");
  Value grad_x = b.select(positive, grad, b.mul(w, grad));
  Value grad_w = b.select(positive, b.zeros(x.type), b.mul(x, grad));
  return std::vector<Value>{to_out(c, grad_x, 0), to_out(c, grad_w, 1)};
}

// ---- softmax -----------------------------------------------------------------------

// Runs `body` on `v` viewed with at least one dim: a 0-d tensor is a softmax over a
// single element, which the reductions need as a 1-d tensor.
template <typename Body>
Value over_dim(Builder& b, Value v, int64_t dim, Body body) {
  if (v.rank() > 0) return body(v, wrap_dim(dim, v.rank()));
  Value r = body(b.reshape(v, {1}), 0);
  return b.reshape(r, {});
}

// Reduces `v` over `dim` with `reduce` and broadcasts the result back to v's shape.
template <typename Reduce>
Value reduce_back(Builder& b, Value v, int64_t dim, Reduce reduce) {
  return b.broadcast_to(b.keep_dims(reduce(v, Dims{dim}), v.dims(), {dim}), v.dims());
}

// _softmax / _log_softmax(self, dim, half_to_float): the row max is subtracted before exp
// so large inputs do not overflow. half_to_float needs nothing special: bf16/f16 compute
// in float32 anyway and the output type says whether to round back.
Result lower_softmax(LoweringContext& c, bool log) {
  Builder& b = c.b();
  Value x = b.convert(c.tensor(0), opmath_type(c.tensor_type(0).dtype));
  Value r = over_dim(b, x, c.int_arg(1), [&](Value v, int64_t d) {
    Value max = reduce_back(b, v, d, [&](Value u, const Dims& ds) { return b.reduce_max(u, ds); });
    Value shifted = b.sub(v, max);
    Value e = b.unary("exponential", shifted);
    Value sum = reduce_back(b, e, d, [&](Value u, const Dims& ds) { return b.reduce_sum(u, ds); });
    return log ? b.sub(shifted, b.unary("log", sum)) : b.div(e, sum);
  });
  return std::vector<Value>{to_out(c, r)};
}

// _softmax_backward_data(grad, y, dim, input_dtype) = y * (grad - sum(grad * y))
// _log_softmax_backward_data(grad, y, dim, input_dtype) = grad - exp(y) * sum(grad)
// input_dtype only decides the output type, which out_types() already carries.
Result lower_softmax_backward(LoweringContext& c, bool log) {
  Builder& b = c.b();
  DType t = opmath_type(promote_types(c.tensor_type(0).dtype, c.tensor_type(1).dtype));
  Value grad = b.convert(c.tensor(0), t);
  Value y = b.convert(c.tensor(1), t);
  int64_t dim = c.int_arg(2);
  auto sum = [&](Value u, const Dims& ds) { return b.reduce_sum(u, ds); };
  Value r;
  if (grad.rank() == 0) {
    // Over one element: softmax' is y * (g - g * y), log_softmax' is g - exp(y) * g.
    r = log ? b.sub(grad, b.mul(b.unary("exponential", y), grad))
            : b.mul(y, b.sub(grad, b.mul(grad, y)));
  } else {
    int64_t d = wrap_dim(dim, grad.rank());
    r = log ? b.sub(grad, b.mul(b.unary("exponential", y), reduce_back(b, grad, d, sum)))
            : b.mul(y, b.sub(grad, reduce_back(b, b.mul(grad, y), d, sum)));
  }
  return std::vector<Value>{to_out(c, r)};
}

}  // namespace

void register_activation_lowerings() {
  register_lowering({"aten::relu", "aten::relu_"}, forward(relu, /*keep_integral=*/true));
  register_lowering({"aten::threshold", "aten::threshold_", "aten::threshold.out"},
                    forward(threshold, /*keep_integral=*/true));
  register_lowering({"aten::threshold_backward", "aten::threshold_backward.grad_input"},
                    backward(threshold_backward, /*keep_integral=*/true));
  register_lowering({"aten::leaky_relu", "aten::leaky_relu_", "aten::leaky_relu.out"},
                    forward(leaky_relu));
  register_lowering({"aten::leaky_relu_backward", "aten::leaky_relu_backward.grad_input"},
                    backward(leaky_relu_backward));
  register_lowering({"aten::hardtanh", "aten::hardtanh_", "aten::hardtanh.out"},
                    forward(hardtanh, /*keep_integral=*/true));
  register_lowering({"aten::hardtanh_backward", "aten::hardtanh_backward.grad_input"},
                    backward(hardtanh_backward));

  register_lowering({"aten::elu", "aten::elu_", "aten::elu.out"}, forward(elu));
  register_lowering({"aten::elu_backward", "aten::elu_backward.grad_input"}, lower_elu_backward);
  register_lowering({"aten::softplus", "aten::softplus.out"}, forward(softplus));
  register_lowering({"aten::softplus_backward", "aten::softplus_backward.grad_input"},
                    backward(softplus_backward));

  register_lowering({"aten::sigmoid", "aten::sigmoid_", "aten::sigmoid.out"}, forward(sigmoid_fwd));
  register_lowering({"aten::sigmoid_backward", "aten::sigmoid_backward.grad_input"},
                    backward(sigmoid_backward));
  register_lowering({"aten::tanh", "aten::tanh_", "aten::tanh.out"}, forward(tanh_fwd));
  register_lowering({"aten::tanh_backward", "aten::tanh_backward.grad_input"},
                    backward(tanh_backward));
  register_lowering({"aten::silu", "aten::silu_", "aten::silu.out"}, forward(silu));
  // The functional silu_backward is CompositeImplicitAutograd; only grad_input reaches us.
  register_lowering({"aten::silu_backward.grad_input"}, backward(silu_backward));
  register_lowering({"aten::mish", "aten::mish_", "aten::mish.out"}, forward(mish));
  register_lowering({"aten::hardsigmoid", "aten::hardsigmoid_", "aten::hardsigmoid.out"},
                    forward(hardsigmoid));
  register_lowering({"aten::hardsigmoid_backward", "aten::hardsigmoid_backward.grad_input"},
                    backward(hardsigmoid_backward));
  register_lowering({"aten::hardswish", "aten::hardswish_", "aten::hardswish.out"},
                    forward(hardswish));
  // hardswish_backward.out is CompositeExplicitAutograd over the functional op.
  register_lowering({"aten::hardswish_backward"}, backward(hardswish_backward));

  register_lowering({"aten::gelu", "aten::gelu_", "aten::gelu.out"}, lower_gelu);
  register_lowering({"aten::gelu_backward", "aten::gelu_backward.grad_input"},
                    lower_gelu_backward);

  register_lowering({"aten::hardshrink", "aten::hardshrink.out"}, forward(hardshrink));
  register_lowering({"aten::softshrink", "aten::softshrink.out"}, forward(softshrink));
  register_lowering({"aten::hardshrink_backward", "aten::hardshrink_backward.grad_input",
                     "aten::softshrink_backward", "aten::softshrink_backward.grad_input"},
                    backward(shrink_backward));
  register_lowering({"aten::log_sigmoid_forward", "aten::log_sigmoid_forward.output"},
                    lower_log_sigmoid_forward);
  register_lowering({"aten::log_sigmoid_backward", "aten::log_sigmoid_backward.grad_input"},
                    backward(log_sigmoid_backward));
  register_lowering({"aten::logit", "aten::logit_", "aten::logit.out"}, lower_logit);
  register_lowering({"aten::logit_backward", "aten::logit_backward.grad_input"},
                    lower_logit_backward);
  register_lowering({"aten::glu", "aten::glu.out"}, lower_glu);
  register_lowering({"aten::glu_backward", "aten::glu_backward.grad_input"}, lower_glu_backward);
  register_lowering({"aten::_prelu_kernel"}, lower_prelu);
  register_lowering({"aten::_prelu_kernel_backward"}, lower_prelu_backward);

  register_lowering({"aten::_softmax", "aten::_softmax.out"},
                    [](LoweringContext& c) { return lower_softmax(c, /*log=*/false); });
  register_lowering({"aten::_log_softmax", "aten::_log_softmax.out"},
                    [](LoweringContext& c) { return lower_softmax(c, /*log=*/true); });
  register_lowering({"aten::_softmax_backward_data", "aten::_softmax_backward_data.out"},
                    [](LoweringContext& c) { return lower_softmax_backward(c, /*log=*/false); });
  register_lowering({"aten::_log_softmax_backward_data", "aten::_log_softmax_backward_data.out"},
                    [](LoweringContext& c) { return lower_softmax_backward(c, /*log=*/true); });
}

}  // namespace torchtpu::lowering
