// Random lowerings: uniform/normal/bernoulli/random_ and friends, dropout, randperm
// (multinomial is in multinomial.cc).
//
// Every op draws its bits from stablehlo.rng_bit_generator (THREE_FRY) keyed by a hash of
// the call's generator state (seed, offset). Hashing the pair, instead of using the offset
// as ThreeFry's counter, keeps streams of nearby offsets independent whatever step the
// caller advances the offset by. Distributions follow PyTorch's CPU transformations
// (ATen/core/TransformationHelper.h); the bits differ from PyTorch's generator, so values
// do too, but ranges and distributions match.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/lowering.h"
#include "lowering/random_bits.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

constexpr double kPi = 3.14159265358979323846;

// Standard normal samples by Box–Muller; each pair of uniforms yields two samples.
Value standard_normal(Builder& b, RandomBits& bits, const Dims& dims, DType t) {
  int64_t n = TensorType{t, dims}.num_elements();
  int64_t half = (n + 1) / 2;
  Value u = unit_uniform(b, bits, {2, half}, t);
  TensorType row{t, {half}};
  // 1 - u lies in (0, 1], so the log is finite.
  Value u1 = b.sub(b.splat(1, row), b.reshape(b.slice(u, {0, 0}, {1, half}, {1, 1}), {half}));
  Value u2 = b.reshape(b.slice(u, {1, 0}, {2, half}, {1, 1}), {half});
  Value radius = b.unary("sqrt", b.mul(b.splat(-2, row), b.unary("log", u1)));
  Value theta = b.mul(b.splat(2 * kPi, row), u2);
  Value z = b.concatenate({b.mul(radius, b.unary("cosine", theta)),
                           b.mul(radius, b.unary("sine", theta))}, 0);
  return b.reshape(b.slice(z, {0}, {n}, {1}), dims);
}

// P(true) == p for a compile-time p, compared on raw 32-bit integers so no float rounding
// shifts the probability: bits < floor(p * 2^32).
Value bernoulli_mask(Builder& b, RandomBits& bits, const Dims& dims, double p) {
  TensorType mask{DType::kBool, dims};
  if (p >= 1) return b.splat(1, mask);
  if (!(p > 0)) return b.splat(0, mask);
  auto threshold = static_cast<uint64_t>(std::floor(std::ldexp(p, 32)));
  Value raw = bits.draw(dims, DType::kU32);
  return b.compare(raw, b.convert(u64_constant(b, threshold, dims), DType::kU32), "LT");
}

// A floating out type, or (uniform_, normal_: PyTorch fills view_as_real(self)) complex.
base::Status require_floating(LoweringContext& c, bool complex_too = false) {
  DType t = c.out_type().dtype;
  if (base::is_floating(t) || (complex_too && base::is_complex(t))) {
    return base::Status::ok_status();
  }
  return base::invalid_argument("lowering: " + c.op_name() +
                                " expects a floating point tensor (got " +
                                base::dtype_name(c.out_type().dtype) + ")");
}

// A float structural argument or a tensor argument as a value of `t` broadcast to `dims`.
Value double_or_tensor(LoweringContext& c, size_t i, DType t, const Dims& dims) {
  if (c.arg(i).kind == ArgKind::kDouble) return c.b().splat(c.double_arg(i), TensorType{t, dims});
  return c.operand(i, t, dims);
}

bool is_empty(LoweringContext& c) { return c.out_type().num_elements() == 0; }

// The real tensor a distribution fills for `out`: `out` itself, or for a complex `out` its
// parts as a trailing dim of 2 (PyTorch fills view_as_real(self)).
TensorType real_view(const TensorType& out) {
  if (!base::is_complex(out.dtype)) return out;
  Dims dims = out.dims;
  dims.push_back(2);
  return TensorType{base::complex_component(out.dtype), dims};
}

// `r`, filled for real_view(out), as a value of `out`.
Value as_out(Builder& b, Value r, const TensorType& out) {
  return base::is_complex(out.dtype) ? pairs_as_complex(b, r) : r;
}

// uniform_(self, from, to): x * (to - from) + from with from/to rounded to the dtype first,
// like PyTorch. The product can round up to `to`; those draws become the float below `to`
// so the range stays half-open.
Result lower_uniform(LoweringContext& c) {
  Builder& b = c.b();
  if (auto s = require_floating(c, /*complex_too=*/true); !s.ok()) return s;
  if (is_empty(c)) return std::vector<Value>{b.zeros(c.out_type())};
  const TensorType out = real_view(c.out_type());
  RandomBits bits(c);
  DType ct = compute_type(out.dtype);
  Value from = b.convert(b.splat(c.double_arg(1), out), ct);
  Value to = b.convert(b.splat(c.double_arg(2), out), ct);
  Value x = unit_uniform(b, bits, out.dims, ct, mantissa_digits(out.dtype));
  Value r = b.convert(b.add(b.mul(x, b.sub(to, from)), from), out.dtype);
  Value to_out = b.splat(c.double_arg(2), out);
  Value below = b.op("chlo.next_after", {to_out, b.splat(c.double_arg(1), out)}, out);
  Value keep = b.binary("and", b.compare(r, to_out, "GE"), b.compare(to_out, below, "GT"));
  return std::vector<Value>{as_out(b, b.select(keep, below, r), c.out_type())};
}

// normal_(self, mean, std) and normal.{Tensor,float}_{Tensor,float}(mean, std): mean + std * z.
Result lower_normal(LoweringContext& c) {
  Builder& b = c.b();
  if (auto s = require_floating(c, /*complex_too=*/true); !s.ok()) return s;
  if (is_empty(c)) return std::vector<Value>{b.zeros(c.out_type())};
  // normal_ and its functional form (compiled graphs) take self first.
  bool in_place = c.op_name() == "aten::normal_" || c.op_name() == "aten::normal_functional";
  size_t mean_i = in_place ? 1 : 0;
  bool cplx = base::is_complex(c.out_type().dtype);
  if (cplx && (c.arg(mean_i).kind != ArgKind::kDouble || c.arg(mean_i + 1).kind != ArgKind::kDouble)) {
    return base::unimplemented("lowering: " + c.op_name() + " of a complex tensor with tensor "
                               "mean or std is not lowered");
  }
  const TensorType out = real_view(c.out_type());
  DType ct = compute_type(out.dtype);
  Value mean = double_or_tensor(c, mean_i, ct, out.dims);
  Value std_dev = double_or_tensor(c, mean_i + 1, ct, out.dims);
  // Each part of a complex normal has half the variance (PyTorch's normal_ on complex).
  if (cplx) std_dev = b.div(std_dev, b.splat(std::sqrt(2.0), std_dev.type));
  if (c.arg(mean_i + 1).kind == ArgKind::kTensor) {
    Dims all;
    for (int64_t d = 0; d < out.rank(); ++d) all.push_back(d);
    Value ok = b.compare(b.reduce_min(std_dev, all), b.constant(0, ct), "GE");
    c.require(ok, "normal expects all elements of std >= 0.0", CheckKind::kRuntimeError);
  }
  RandomBits bits(c);
  Value z = standard_normal(b, bits, out.dims, ct);
  return std::vector<Value>{
      as_out(b, b.convert(b.add(b.mul(z, std_dev), mean), out.dtype), c.out_type())};
}

// rrelu_with_noise(self, noise, lower, upper, training, generator) in its functional, .out,
// in-place and _functional forms: (output, noise's new value). In training each element
// <= 0 is scaled by r ~ U(lower, upper) and noise holds r there and 1 elsewhere (the CPU
// kernel, whose uniform draw refuses lower > upper once it meets such an element); in
// evaluation it is leaky_relu with slope (lower + upper) / 2 and noise is left as it was.
Result lower_rrelu_with_noise(LoweringContext& c) {
  Builder& b = c.b();
  if (auto s = require_floating(c); !s.ok()) return s;
  const TensorType& out = c.out_type();
  DType ct = compute_type(out.dtype);
  Value x = b.convert(c.tensor(0), ct);
  Value lower = b.broadcast_to(c.scalar(2, ct), out.dims);
  Value upper = b.broadcast_to(c.scalar(3, ct), out.dims);
  Value zero = b.zeros(x.type);
  if (!c.bool_arg(4)) {
    Value slope = b.div(b.add(lower, upper), b.splat(2, x.type));
    Value y = b.select(b.compare(x, zero, "GT"), x, b.mul(x, slope));
    return std::vector<Value>{b.convert(y, out.dtype), c.tensor(1)};
  }
  Value scaled = b.compare(x, zero, "LE");
  if (out.num_elements() > 0) {
    Value ordered = b.compare(lower, upper, "LE");
    Value ok = b.all_of(b.binary("or", ordered, b.unary("not", scaled)));
    c.require(ok, "Expected from <= to to be true, but got false.  (Could this error message "
                  "be improved?  If so, please report an enhancement request to PyTorch.)",
              CheckKind::kRuntimeError);
  }
  RandomBits bits(c);
  Value r = b.add(lower, b.mul(unit_uniform(b, bits, out.dims, ct), b.sub(upper, lower)));
  Value y = b.select(scaled, b.mul(x, r), x);
  Value noise = b.select(scaled, r, b.splat(1, x.type));
  return std::vector<Value>{b.convert(y, out.dtype), b.convert(noise, c.out_type(1).dtype)};
}

// bernoulli_.float(self, p) and bernoulli.p(self, p): a compile-time probability.
Result lower_bernoulli_scalar(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  double p = c.double_arg(1);
  if (!(p >= 0 && p <= 1)) {  // eager mode raised the CPU's error before (cpu_argument_check)
    return base::invalid_argument("bernoulli_ expects p to be in [0, 1], but got p=" +
                                  std::to_string(p));
  }
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  Value mask = bernoulli_mask(b, bits, out.dims, p);
  return std::vector<Value>{b.convert(mask, out.dtype)};
}

// bernoulli_.Tensor(self, p) takes p from argument 1; bernoulli(self) and bernoulli.out
// take it from self.
Result lower_bernoulli_tensor(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  size_t p_i = c.op_name() == "aten::bernoulli_.Tensor" ? 1 : 0;
  // A 0-dim CPU tensor p arrives as a runtime scalar; f32 resolves it like a float tensor.
  DType p_type = c.arg(p_i).kind == ArgKind::kTensor ? c.tensor_type(p_i).dtype : DType::kF32;
  DType ct = compute_type(p_type);
  Value p = c.operand(p_i, ct, out.dims);
  // The CPU kernel's check (NaN fails it too).
  c.require(b.all_of(b.binary("and", b.compare(p, b.zeros(p.type), "GE"),
                              b.compare(p, b.splat(1, p.type), "LE"))),
            "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error "
            "message be improved?  If so, please report an enhancement request to PyTorch.)",
            CheckKind::kRuntimeError);
  RandomBits bits(c);
  Value u = unit_uniform(b, bits, out.dims, ct);
  return std::vector<Value>{b.convert(b.compare(u, p, "LT"), out.dtype)};
}

// static_cast<int64_t>(static_cast<scalar_t>(v)) for a float type with `digits` mantissa
// bits: round to nearest even at that precision.
int64_t round_to_digits(int64_t v, int digits) {
  uint64_t mag = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  int len = 0;
  for (uint64_t m = mag; m != 0; m >>= 1) ++len;
  if (len <= digits) return v;
  int shift = len - digits;
  uint64_t q = mag >> shift, rem = mag & ((uint64_t{1} << shift) - 1);
  uint64_t half = uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  uint64_t r = q << shift;
  if (r > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return v < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  }
  return v < 0 ? -static_cast<int64_t>(r) : static_cast<int64_t>(r);
}

int bit_length(uint64_t v) {
  int n = 0;
  while (v >>= 1) ++n;
  return n;
}

// PyTorch's update_from / update_to: move from up and to down until both are exact in
// the float type, so a drawn integer never rounds outside [from, to).
int64_t update_from(int64_t from, int digits) {
  int64_t from_plus_1 = round_to_digits(from + 1, digits);
  if (from_plus_1 < from) {
    int n = bit_length(static_cast<uint64_t>(std::abs(from + 1)));
    from = from_plus_1 + (int64_t{1} << (n - digits + 1));
  }
  return from;
}

int64_t update_to(int64_t to, int digits) {
  int64_t to_minus_1 = round_to_digits(to - 1, digits);
  if (to_minus_1 >= to) {
    int n = bit_length(static_cast<uint64_t>(std::abs(to - 1)));
    to = to_minus_1 - (int64_t{1} << (n - digits + 1));
  }
  return to;
}

// [lowest, highest] representable in `t` as doubles.
std::pair<double, double> dtype_bounds(DType t) {
  switch (t) {
    case DType::kBool: return {0, 1};
    case DType::kU8: return {0, 255};
    case DType::kI8: return {-128, 127};
    case DType::kI16: return {-32768, 32767};
    case DType::kU16: return {0, 65535};
    case DType::kI32: return {-2147483648.0, 2147483647.0};
    case DType::kI64: return {-9223372036854775808.0, 9223372036854775807.0};
    case DType::kF16: return {-65504.0, 65504.0};
    case DType::kBF16: return {-3.3895313892515355e38, 3.3895313892515355e38};
    case DType::kF32: {
      double max = std::numeric_limits<float>::max();
      return {-max, max};
    }
    default: return {-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
  }
}

// The largest value random_ draws without `to`: the dtype's max for integers, 2^digits
// for floats (where consecutive integers stop being exact), 1 for bool.
int64_t default_to_inclusive(DType t) {
  if (t == DType::kBool) return 1;
  if (base::is_floating(t)) return int64_t{1} << mantissa_digits(t);
  // int64's max is not a double (the bound rounds up to 2^63, which no int64 holds).
  if (t == DType::kI64) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(dtype_bounds(t).second);
}

// from + (bits mod range) with 64-bit bits (range == 0 means all 2^64 values).
Value uniform_int(Builder& b, RandomBits& bits, const TensorType& out, int64_t from,
                  uint64_t range) {
  Value raw = bits.draw(out.dims, DType::kU64);
  if (range != 0) raw = b.binary("remainder", raw, u64_constant(b, range, out.dims));
  // Bit-level reinterpretation plus wrapping add gives from + k mod 2^64 for every k < range.
  Value k = b.op("stablehlo.bitcast_convert", {raw}, TensorType{DType::kI64, out.dims});
  Value v = b.add(k, b.broadcast_to(b.constant_i64(from, DType::kI64), out.dims));
  return b.convert(v, out.dtype);
}

// random_.from(self, from, to?), random_.to(self, to) and random_(self).
Result lower_random(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  const std::string& name = c.op_name();
  DType t = out.dtype;
  bool floating = base::is_floating(t);
  int64_t from = 0;
  std::optional<int64_t> to;
  if (name == "aten::random_.from") {
    from = c.int_arg(1);
    if (!c.is_none(2)) to = c.int_arg(2);
  } else if (name == "aten::random_.to") {
    to = c.int_arg(1);
  }
  auto fail = [&](const std::string& facts) {
    return base::invalid_argument("lowering: " + name + ": " + facts);
  };
  uint64_t range = 0;
  if (to) {
    if (from >= *to) {
      return fail("expected 'from' to be less than 'to' (got from=" + std::to_string(from) +
                  " >= to=" + std::to_string(*to) + ")");
    }
    if (floating) {
      from = update_from(from, mantissa_digits(t));
      *to = update_to(*to, mantissa_digits(t));
      if (from >= *to) return fail("'from' and 'to' collapse after rounding to " +
                                   std::string(base::dtype_name(t)));
    }
    range = static_cast<uint64_t>(*to) - static_cast<uint64_t>(from);
  } else if (from == std::numeric_limits<int64_t>::min()) {
    // The full 64-bit range: PyTorch draws it only for these dtypes.
    if (t != DType::kI64 && t != DType::kF64 && t != DType::kF32 && t != DType::kBF16) {
      return fail("the full 64-bit range needs int64, float64, float32 or bfloat16 (got " +
                  std::string(base::dtype_name(t)) + ")");
    }
  } else {
    int64_t to_inc = default_to_inclusive(t);
    if (floating) from = update_from(from, mantissa_digits(t));
    if (floating ? from >= to_inc : from > to_inc) {
      return fail("expected 'from' <= " + std::to_string(to_inc) + " for " + base::dtype_name(t) +
                  " (got " + std::to_string(from) + ")");
    }
    range = static_cast<uint64_t>(to_inc) - static_cast<uint64_t>(from) + 1;
  }
  auto [lo, hi] = dtype_bounds(t);
  double last = to ? static_cast<double>(*to - 1)
                   : range == 0 ? lo : static_cast<double>(default_to_inclusive(t));
  if (static_cast<double>(from) < lo || static_cast<double>(from) > hi || last < lo || last > hi) {
    return fail("[from, to) must lie within " + std::string(base::dtype_name(t)) + "'s range");
  }
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  return std::vector<Value>{uniform_int(b, bits, out, from, range)};
}

// exponential_(self, lambd): -log1p(-u) / lambd, finite since u < 1 and never 0: the
// distribution excludes 0 and PyTorch's samplers never return it (a Gumbel draw
// -log(exponential) would be inf), so the draw u == 0 gives half the compute type's
// epsilon, as CUDA's transformation pins its log near 1.
Result lower_exponential(LoweringContext& c) {
  Builder& b = c.b();
  if (auto s = require_floating(c); !s.ok()) return s;
  const TensorType& out = c.out_type();
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  DType ct = compute_type(out.dtype);
  Value u = unit_uniform(b, bits, out.dims, ct);
  Value e = b.unary("negate", b.unary("log_plus_one", b.unary("negate", u)));
  double half_eps = std::ldexp(1.0, -mantissa_digits(ct));
  e = b.max(e, b.splat(half_eps, u.type));
  Value r = b.mul(e, b.splat(1.0 / c.double_arg(1), u.type));
  return std::vector<Value>{b.convert(r, out.dtype)};
}

// geometric_(self, p): ceil(log(u) / log1p(-p)) with u in (0, 1]; at least 1 (one trial).
Result lower_geometric(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  DType ct = compute_type(out.dtype);
  Value u = unit_uniform(b, bits, out.dims, ct);
  Value u1 = b.sub(b.splat(1, u.type), u);
  Value log_q = b.splat(std::log1p(-c.double_arg(1)), u.type);
  Value k = b.unary("ceil", b.div(b.unary("log", u1), log_q));
  return std::vector<Value>{b.convert(b.max(k, b.splat(1, u.type)), out.dtype)};
}

// log_normal_(self, mean, std): exp(mean + std * z).
Result lower_log_normal(LoweringContext& c) {
  Builder& b = c.b();
  if (auto s = require_floating(c); !s.ok()) return s;
  const TensorType& out = c.out_type();
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  DType ct = compute_type(out.dtype);
  Value z = standard_normal(b, bits, out.dims, ct);
  Value x = b.add(b.mul(z, b.splat(c.double_arg(2), z.type)), b.splat(c.double_arg(1), z.type));
  return std::vector<Value>{b.convert(b.unary("exponential", x), out.dtype)};
}

// cauchy_(self, median, sigma): median + sigma * tan(pi * (u - 1/2)).
Result lower_cauchy(LoweringContext& c) {
  Builder& b = c.b();
  if (auto s = require_floating(c); !s.ok()) return s;
  const TensorType& out = c.out_type();
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  DType ct = compute_type(out.dtype);
  Value u = unit_uniform(b, bits, out.dims, ct);
  Value angle = b.mul(b.sub(u, b.splat(0.5, u.type)), b.splat(kPi, u.type));
  Value x = b.add(b.mul(b.unary("chlo.tan", angle), b.splat(c.double_arg(2), u.type)),
                  b.splat(c.double_arg(1), u.type));
  return std::vector<Value>{b.convert(x, out.dtype)};
}

// input * mask * scale computed like PyTorch's mul chain (half types in f32, rounded once;
// the mask factor is exact).
Value masked_scale(Builder& b, Value x, Value mask, double scale, DType out) {
  DType ct = compute_type(out);
  x = b.convert(x, ct);
  Value kept = b.mul(x, b.convert(mask, ct));
  return b.convert(b.mul(kept, b.splat(scale, kept.type)), out);
}

// native_dropout(input, p, train?) -> (input * mask / (1 - p), mask); eval is identity.
Result lower_native_dropout(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  const TensorType& mask_type = c.out_type(1);
  bool train = c.is_none(2) || c.bool_arg(2);
  if (!train || is_empty(c)) {
    Value x = is_empty(c) ? b.zeros(out) : c.tensor(0);
    return std::vector<Value>{x, b.splat(1, mask_type)};
  }
  double keep = 1 - c.double_arg(1);
  double scale = keep == 0 ? 0 : 1 / keep;
  RandomBits bits(c);
  Value mask = bernoulli_mask(b, bits, out.dims, keep);
  Value y = masked_scale(b, c.tensor(0), mask, scale, out.dtype);
  return std::vector<Value>{y, b.convert(mask, mask_type.dtype)};
}

// native_dropout_backward(grad, mask, scale) = grad * mask * scale.
Result lower_native_dropout_backward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  Value grad = c.operand(0, out.dtype, out.dims);
  Value mask = c.operand(1, DType::kBool, out.dims);
  return std::vector<Value>{masked_scale(b, grad, mask, c.double_arg(2), out.dtype)};
}

// randperm.generator_out(n, generator, out): iota sorted by random 64-bit keys.
Result lower_randperm(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.num_elements() <= 1) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  Value keys = bits.draw(out.dims, DType::kU64);
  Value idx = b.iota(out, 0);
  TensorType key_s{DType::kU64, {}}, idx_s{out.dtype, {}};
  std::vector<Value> sorted = b.op_with_region(
      "stablehlo.sort", {keys, idx}, {keys.type, idx.type}, {key_s, key_s, idx_s, idx_s},
      [](Builder& rb, const std::vector<Value>& a) {
        return std::vector<Value>{rb.compare(a[0], a[1], "LT")};
      },
      "dimension = 0 : i64, is_stable = true");
  return std::vector<Value>{sorted[1]};
}

// Value forms of the random factories that compiled graphs contain: rand/randn/randint and
// their _like forms (eager mode runs their composite kernels: empty + uniform_/normal_/
// random_). Each draws from the graph's generator state like the in-place ops.
Result lower_random_factory(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  const std::string& name = c.op_name();
  if (is_empty(c)) return std::vector<Value>{b.zeros(out)};
  RandomBits bits(c);
  bool randint = name.rfind("aten::randint", 0) == 0;
  if (randint && base::is_complex(out.dtype)) {
    return base::invalid_argument("lowering: " + name + " does not make complex values");
  }
  if (name.rfind("aten::randn", 0) == 0) {
    const TensorType gen = real_view(out);
    DType ct = compute_type(gen.dtype);
    Value z = standard_normal(b, bits, gen.dims, ct);
    if (base::is_complex(out.dtype)) z = b.div(z, b.splat(std::sqrt(2.0), z.type));
    return std::vector<Value>{as_out(b, b.convert(z, gen.dtype), out)};
  }
  DType ct = compute_type(real_view(out).dtype);
  if (randint) {
    bool like = name.rfind("aten::randint_like", 0) == 0;
    bool has_low = name == "aten::randint.low" || name == "aten::randint_like.low_dtype";
    size_t first = like ? 1 : 0;
    int64_t low = has_low ? c.int_arg(first) : 0;
    int64_t high = c.int_arg(has_low ? first + 1 : first);
    if (low >= high) {
      return base::invalid_argument("lowering: " + name + ": random_ expects 'from' to be less "
                                    "than 'to', but got from=" + std::to_string(low) +
                                    " >= to=" + std::to_string(high));
    }
    return std::vector<Value>{uniform_int(b, bits, out, low, static_cast<uint64_t>(high - low))};
  }
  const TensorType gen = real_view(out);
  Value u = unit_uniform(b, bits, gen.dims, ct, mantissa_digits(gen.dtype));
  return std::vector<Value>{as_out(b, b.convert(u, gen.dtype), out)};
}

// torchtpu::rng_state(device): the generator state a graph node draws from, as int64[2]
// (seed, offset), for a random op the backward recomputes (graph_spec's rng_ref).
Result lower_rng_state(LoweringContext& c) {
  Builder& b = c.b();
  return std::vector<Value>{
      b.op("stablehlo.bitcast_convert", {c.rng_state()}, TensorType{DType::kI64, {2}})};
}

}  // namespace

void register_random_lowerings() {
  register_lowering({"torchtpu::rng_state"}, lower_rng_state);
  register_lowering({"aten::uniform_", "aten::uniform", "aten::uniform.out"}, lower_uniform);
  register_lowering({"aten::normal_", "aten::normal_functional", "aten::normal.float_float",
                     "aten::normal.Tensor_float", "aten::normal.Tensor_float_out",
                     "aten::normal.float_Tensor", "aten::normal.float_Tensor_out",
                     "aten::normal.Tensor_Tensor", "aten::normal.Tensor_Tensor_out"},
                    lower_normal);
  register_lowering({"aten::bernoulli_.float", "aten::bernoulli.p"}, lower_bernoulli_scalar);
  register_lowering({"aten::bernoulli_.Tensor", "aten::bernoulli", "aten::bernoulli.out"},
                    lower_bernoulli_tensor);
  register_lowering({"aten::random_.from", "aten::random_.to", "aten::random_"}, lower_random);
  register_lowering({"aten::exponential_", "aten::exponential", "aten::exponential.out"},
                    lower_exponential);
  register_lowering({"aten::geometric_", "aten::geometric", "aten::geometric.out"},
                    lower_geometric);
  register_lowering({"aten::log_normal_", "aten::log_normal", "aten::log_normal.out"},
                    lower_log_normal);
  register_lowering({"aten::cauchy_", "aten::cauchy", "aten::cauchy.out"}, lower_cauchy);
  register_lowering({"aten::rrelu_with_noise", "aten::rrelu_with_noise.out",
                     "aten::rrelu_with_noise_", "aten::rrelu_with_noise_functional"},
                    lower_rrelu_with_noise);
  register_lowering({"aten::native_dropout"}, lower_native_dropout);
  register_lowering({"aten::native_dropout_backward"}, lower_native_dropout_backward);
  register_lowering({"aten::randperm.generator_out"}, lower_randperm);
  register_lowering({"aten::rand", "aten::rand_like", "aten::randn", "aten::randn_like",
                     "aten::randint", "aten::randint.low", "aten::randint_like",
                     "aten::randint_like.low_dtype"},
                    lower_random_factory);
}

}  // namespace torchtpu::lowering
