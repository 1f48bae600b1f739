// More elementwise math: inverse and hyperbolic trig, gamma-family functions, float
// classification (signbit, isposinf, ...), NaN-aware binaries (fmax, xlogy, logaddexp),
// floor division, rounding to decimals, shifts and trace.
//
// Each follows the formula of PyTorch's CPU kernel, including its special values (digamma
// at +-0, floor division of infinities, out-of-range shifts), so results match the CPU
// and not just the mathematical function.
#include <cmath>
#include <cstdint>
#include <limits>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"

namespace torchtpu::lowering {

Value is_nan(Builder& b, Value x) { return b.compare(x, x, "NE"); }

// The sign bit of a float (true for -0.0 and negative NaNs), through its bit pattern.
Value sign_bit(Builder& b, Value x) {
  if (!base::is_floating(x.dtype())) return b.compare(x, b.zeros(x.type), "LT");
  DType bits = x.dtype() == DType::kF64 ? DType::kI64
               : x.dtype() == DType::kF32 ? DType::kI32 : DType::kI16;
  Value raw = b.op("stablehlo.bitcast_convert", {x}, TensorType{bits, x.dims()});
  return b.compare(raw, b.zeros(raw.type), "LT");
}

namespace {
// The exponent past which every finite float32 (float64) times 2^n overflows or underflows.
double power_of_two_limit(DType t) { return t == DType::kF64 ? 2200 : 300; }
}  // namespace

// 2^n as its bit pattern, 2^k for |k| at most 100 (float32) / 734 (float64) being normal;
// n (clamped to the limit above) is split into three such factors, so that neither 2^n
// nor the partial products overflow before the whole product does (0.5 * 2^128 is 2^127
// in float32).
Value times_power_of_two(Builder& b, Value x, Value n) {
  const bool f64 = x.dtype() == DType::kF64;
  const TensorType it{f64 ? DType::kI64 : DType::kI32, x.dims()};
  const double limit = power_of_two_limit(x.dtype()), bias = f64 ? 1023 : 127,
               mantissa = f64 ? 52 : 23;
  const TensorType wide{DType::kI64, x.dims()};
  Value k = b.convert(b.clamp(b.splat(-limit, wide), b.convert(n, DType::kI64),
                              b.splat(limit, wide)), it.dtype);
  Value k1 = b.div(k, b.splat(3, it));
  Value rest = b.sub(k, k1);
  Value k2 = b.div(rest, b.splat(2, it));
  auto power = [&](Value e) {
    Value bits = b.binary("shift_left", b.add(e, b.splat(bias, it)), b.splat(mantissa, it));
    return b.op("stablehlo.bitcast_convert", {bits}, x.type);
  };
  return b.mul(b.mul(b.mul(x, power(k1)), power(k2)), power(b.sub(rest, k2)));
}

// 2^x as 2^round(x) * exp(f ln 2) with |f| <= 1/2: exp(x ln 2) at once is off by several
// ulps at integers (2^30 by 960 in float32), where C's exp2 is exact.
Value exp2_real(Builder& b, Value x) {
  const DType t = x.dtype();
  Value w = b.convert(x, t == DType::kF64 ? DType::kF64 : DType::kF32);
  const double limit = power_of_two_limit(w.dtype());
  Value n = b.clamp(b.splat(-limit, w.type), b.unary("round_nearest_even", w),
                    b.splat(limit, w.type));
  Value m = b.unary("exponential", b.mul(b.sub(w, n), b.splat(M_LN2, w.type)));
  Value r = times_power_of_two(b, m, b.convert(n, t == DType::kF64 ? DType::kI64 : DType::kI32));
  Value inf = b.splat(INFINITY, w.type);  // inf - round(inf) is NaN
  r = b.select(b.compare(w, inf, "EQ"), inf, r);
  r = b.select(b.compare(w, b.unary("negate", inf), "EQ"), b.zeros(w.type), r);
  return b.convert(r, t);
}

Value copysign(Builder& b, Value x, Value y) {
  Value mag = b.unary("abs", x);
  return b.select(sign_bit(b, y), b.unary("negate", mag), mag);
}

namespace {

// |x| and |y| as the larger magnitude m and the ratio q = smaller / m (0 when both are 0),
// and whether either is infinite: the reduction hypot and log_hypot share.
struct ScaledPair {
  Value m, q, any_inf;
};
ScaledPair scaled_pair(Builder& b, Value x, Value y) {
  Value ax = b.unary("abs", x), ay = b.unary("abs", y);
  Value m = b.max(ax, ay), n = b.min(ax, ay);
  Value zero = b.zeros(m.type), inf = b.splat(INFINITY, m.type);
  Value q = b.select(b.compare(m, zero, "EQ"), zero, b.div(n, m));
  Value any_inf = b.binary("or", b.compare(ax, inf, "EQ"), b.compare(ay, inf, "EQ"));
  return {m, q, any_inf};
}

}  // namespace

// hypot as C's: sqrt(x^2 + y^2) without the squares' overflow or underflow (hypot(1e30,
// 1e30) is finite in float32, hypot(1e-30, 0) is not 0): m * sqrt(1 + q^2). Infinite when
// either is, even with a NaN other; 0 when both are 0.
Value hypot(Builder& b, Value x, Value y) {
  auto [m, q, any_inf] = scaled_pair(b, x, y);
  Value r = b.mul(m, b.unary("sqrt", b.add(b.splat(1, m.type), b.mul(q, q))));
  return b.select(any_inf, b.splat(INFINITY, m.type), r);
}

// log(hypot(x, y)) as log m + log1p(q^2) / 2, finite where hypot itself overflows
// (log|3e38 + 3e38 i| in float32); inf when either is infinite, -inf when both are 0.
Value log_hypot(Builder& b, Value x, Value y) {
  auto [m, q, any_inf] = scaled_pair(b, x, y);
  Value r = b.add(b.unary("log", m),
                  b.mul(b.splat(0.5, m.type), b.unary("log_plus_one", b.mul(q, q))));
  return b.select(any_inf, b.splat(INFINITY, m.type), r);
}

namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

// A unary float function (ints promote to float32, 16-bit floats compute in float32).
LoweringFn float_fn(std::function<Value(Builder&, Value)> f) {
  return [f](LoweringContext& c) -> Lowered {
    DType t = float_compute_type(c);
    return std::vector<Value>{to_out(c, f(c.b(), out_operand(c, 0, t)))};
  };
}

// `op` on real inputs, `complex_fn` (when given) on complex ones.
LoweringFn hlo_unary(const char* op, Value (*complex_fn)(Builder&, Value) = nullptr) {
  std::string name = op;
  return float_fn([name, complex_fn](Builder& b, Value x) {
    return complex_fn != nullptr && base::is_complex(x.dtype()) ? complex_fn(b, x)
                                                                : b.unary(name, x);
  });
}

// A binary function of the promoted operands, computed in opmath.
LoweringFn binary_fn(std::function<Value(Builder&, Value, Value)> f, bool to_float = false) {
  return [f, to_float](LoweringContext& c) -> Lowered {
    DType rt = c.result_type({0, 1});
    DType t = opmath(rt);
    if (to_float && !base::is_floating(t)) t = DType::kF32;
    Value r = f(c.b(), out_operand(c, 0, t), out_operand(c, 1, t));
    return std::vector<Value>{to_out_via(c, rt, r)};
  };
}

// digamma with PyTorch's value at zero: -inf at +0, +inf at -0 (XLA gives NaN there).
Value digamma(Builder& b, Value x) {
  Value r = b.unary("chlo.digamma", x);
  Value zero = b.zeros(x.type), inf = b.splat(INFINITY, x.type);
  Value at_zero = b.select(sign_bit(b, x), inf, b.unary("negate", inf));
  return b.select(b.compare(x, zero, "EQ"), at_zero, r);
}

// sin(pi x) / (pi x), 1 at 0.
Value sinc(Builder& b, Value x) {
  bool cplx = base::is_complex(x.dtype());
  Value px = cplx ? complex_scale(b, x, M_PI) : b.mul(x, b.splat(M_PI, x.type));
  Value r = cplx ? complex_divide(b, complex_sin(b, px), px) : b.div(b.unary("sine", px), px);
  return b.select(b.compare(x, b.zeros(x.type), "EQ"), b.splat(1, x.type), r);
}

// The largest finite value of a float dtype (nan_to_num's default for +inf).
double finite_max(DType t) {
  switch (t) {
    case DType::kF16: return 65504.0;
    case DType::kBF16: return 3.3895313892515355e38;
    case DType::kF64: return std::numeric_limits<double>::max();
    default: return std::numeric_limits<float>::max();
  }
}

Lowered lower_nan_to_num(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType t = x.dtype();
  if (!base::is_floating(t)) return std::vector<Value>{x};
  auto value_or = [&](size_t i, double dflt) {
    return b.splat(c.is_none(i) ? dflt : c.double_arg(i), x.type);
  };
  Value r = b.select(is_nan(b, x), value_or(1, 0.0), x);
  r = b.select(b.compare(x, b.splat(INFINITY, x.type), "EQ"), value_or(2, finite_max(t)), r);
  r = b.select(b.compare(x, b.splat(-INFINITY, x.type), "EQ"), value_or(3, -finite_max(t)), r);
  return std::vector<Value>{r};
}

LoweringFn is_inf_of_sign(double inf) {
  return [inf](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value x = c.tensor(0);
    if (!base::is_floating(x.dtype())) return std::vector<Value>{b.zeros(c.out_type())};
    return std::vector<Value>{b.compare(x, b.splat(inf, x.type), "EQ")};
  };
}

Lowered lower_signbit(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  if (x.dtype() == DType::kBool) return std::vector<Value>{b.zeros(c.out_type())};
  return std::vector<Value>{sign_bit(b, x)};
}

// fmax/fmin: the non-NaN operand when exactly one is NaN.
LoweringFn nan_ignoring(bool is_max) {
  return binary_fn([is_max](Builder& b, Value x, Value y) {
    Value r = b.binary(is_max ? "maximum" : "minimum", x, y);
    if (!base::is_floating(x.dtype())) return r;
    return b.select(is_nan(b, x), y, b.select(is_nan(b, y), x, r));
  });
}

// PyTorch's logaddexp: equal infinities return themselves (inf - inf would be NaN).
Value logaddexp(Builder& b, Value x, Value y, bool base2) {
  Value m = b.max(x, y);
  Value d = b.unary("negate", b.unary("abs", b.sub(x, y)));
  Value tail = base2 ? b.mul(b.unary("log_plus_one",
                                     b.unary("exponential", b.mul(d, b.splat(M_LN2, d.type)))),
                             b.splat(1.0 / M_LN2, d.type))
                     : b.unary("log_plus_one", b.unary("exponential", d));
  Value same_inf = b.binary("and", b.compare(b.unary("abs", x), b.splat(INFINITY, x.type), "EQ"),
                            b.compare(x, y, "EQ"));
  return b.select(same_inf, x, b.add(m, tail));
}

// xlogy: 0 where x == 0 (unless y is NaN), x * log(y) elsewhere.
Value xlogy(Builder& b, Value x, Value y) {
  Value r = b.mul(x, b.unary("log", y));
  Value zero = b.zeros(x.type);
  Value r0 = b.select(b.compare(x, zero, "EQ"), zero, r);
  return b.select(is_nan(b, y), y, r0);
}

// heaviside(x, values): values where x == 0, else (x > 0) (so NaN gives 0, as on the CPU).
Value heaviside(Builder& b, Value x, Value v) {
  Value pos = b.convert(b.compare(x, b.zeros(x.type), "GT"), x.dtype());
  return b.select(b.compare(x, b.zeros(x.type), "EQ"), v, pos);
}

Lowered lower_rsub(LoweringContext& c) {
  Builder& b = c.b();
  DType rt = c.result_type({0, 1});
  DType t = opmath(rt);
  // sub(other, self, alpha): a number `other` is a wrapped number there, cast (unchecked: 1e39
  // - x is -inf) to the result dtype as sub reads it.
  Value self = promoted_operand(c, 0, rt);
  Value other = promoted_operand(c, 1, rt, ScalarCast::kWrapped, /*number_too=*/true);
  if (c.num_args() > 2 && c.arg(2).kind == ArgKind::kScalar) {
    self = b.mul(self, b.broadcast_to(c.scalar(2, t), c.out_type().dims));
  }
  return std::vector<Value>{to_out_via(c, rt, b.sub(other, self))};
}

// ldexp(self, other): self * 2^other in the promoted float type, as the CPU kernel: an
// integer exponent through C's ldexp (cast to int first, so int64 exponents wrap to int32),
// exact where the product is normal (0.5 * 2^128 is 2^127 in float32); a float exponent
// times pow(2, other), of other's dtype (0.5 * 2^128.0 is inf when other is float32).
Lowered lower_ldexp(LoweringContext& c) {
  Builder& b = c.b();
  DType rt = c.result_type({0, 1});
  if (!base::is_floating(rt)) {  // integer operands: the default dtype, as the result's
    rt = base::is_floating(c.out_type().dtype) ? c.out_type().dtype : DType::kF32;
  }
  DType t = opmath(rt);
  Value x = out_operand(c, 0, t);
  DType et = c.tensor_type(1).dtype;
  if (base::is_integral(et) || et == DType::kBool) {
    Value n = b.convert(out_operand(c, 1, et), DType::kI32);
    return std::vector<Value>{to_out_via(c, rt, times_power_of_two(b, x, n))};
  }
  // pow(2, other) is of other's dtype (float32 2^128.0 is inf even for a float64 self).
  Value p = round_to(b, exp2_real(b, out_operand(c, 1, opmath(et))), et);
  return std::vector<Value>{to_out_via(c, rt, b.mul(x, b.convert(p, t)))};
}

// round(x, decimals): nearbyint on x scaled by 10^decimals, as the CPU kernel does it.
Lowered lower_round_decimals(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  int64_t decimals = c.int_arg(1);
  if (!base::is_floating(x.dtype())) return std::vector<Value>{x};
  DType t = opmath(x.dtype());
  Value xf = b.convert(x, t);
  Value r;
  if (decimals == 0) {
    r = b.unary("round_nearest_even", xf);
  } else {
    // The power is opaque to XLA, which would divide by it as a product with its rounded
    // reciprocal (round(1.5, 3) was 1.5000001).
    Value p = b.opaque(b.splat(std::pow(10.0, static_cast<double>(std::llabs(decimals))), xf.type));
    r = decimals > 0 ? b.div(b.unary("round_nearest_even", b.mul(xf, p)), p)
                     : b.mul(b.unary("round_nearest_even", b.div(xf, p)), p);
  }
  return std::vector<Value>{b.convert(r, c.out_type().dtype)};
}

// Shifts with PyTorch's out-of-range rules: a left shift by < 0 or >= the bit width is 0;
// a right shift by those saturates to the sign fill (x >> (bits - 1)).
LoweringFn shift(bool left) {
  return [left](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    DType t = c.result_type({0, 1});
    Value x = out_operand(c, 0, t), s = out_operand(c, 1, t);
    int64_t bits = static_cast<int64_t>(base::dtype_size_bytes(t)) * 8;
    Value zero = b.zeros(x.type), width = b.splat(static_cast<double>(bits), x.type);
    Value out_of_range = b.binary("or", b.compare(s, zero, "LT"), b.compare(s, width, "GE"));
    if (left) {
      Value r = b.select(out_of_range, zero, b.binary("shift_left", x, s));
      return std::vector<Value>{to_out(c, r)};
    }
    bool is_signed = base::is_signed_integral(t);
    const char* op = is_signed ? "shift_right_arithmetic" : "shift_right_logical";
    Value fill = is_signed ? b.binary(op, x, b.splat(static_cast<double>(bits - 1), x.type)) : zero;
    return std::vector<Value>{to_out(c, b.select(out_of_range, fill, b.binary(op, x, s)))};
  };
}

// polygamma(n, x) for n >= 1. XLA's is accurate for x > 0 only; below 1 the recurrence
// psi_n(x) = psi_n(x + K) - (-1)^n n! sum_{k<K} (x + k)^-(n+1) moves the evaluation to
// x + K >= kTarget, K taken per element (PyTorch's zeta sums those terms directly, for the
// same reason, however far below 0 x is). Elements further below 0 than kMaxTerms terms
// reach are NaN, not a sum cut short.
Value polygamma(Builder& b, int64_t n, Value x) {
  constexpr double kTarget = 25, kMaxTerms = 1 << 24;
  Value order = b.splat(static_cast<double>(n), x.type);
  Value target = b.splat(kTarget, x.type);
  Value low = b.compare(x, b.splat(1, x.type), "LT");
  Value reachable = b.compare(x, b.splat(kTarget - kMaxTerms, x.type), "GE");
  // State: x + k, sum_{j<k} (x + j)^-(n+1), for the elements of `low` still below target.
  Value shifting = b.binary("and", low, reachable);
  auto active = [&](Builder& lb, Value xk) {
    return lb.binary("and", shifting, lb.compare(xk, target, "LT"));
  };
  std::vector<Value> out = b.while_loop(
      {x, b.zeros(x.type)},
      [&](Builder& lb, const std::vector<Value>& st) {
        return std::vector<Value>{lb.any_of(active(lb, st[0]))};
      },
      [&](Builder& lb, const std::vector<Value>& st) {
        Value on = active(lb, st[0]);
        Value inv = lb.div(lb.splat(1, x.type), st[0]);
        Value term = inv;
        for (int64_t i = 0; i < n; ++i) term = lb.mul(term, inv);
        return std::vector<Value>{lb.select(on, lb.add(st[0], lb.splat(1, x.type)), st[0]),
                                  lb.select(on, lb.add(st[1], term), st[1])};
      });
  double factorial = 1;
  for (int64_t i = 2; i <= n; ++i) factorial *= static_cast<double>(i);
  Value correction = b.mul(out[1], b.splat((n % 2 == 0 ? 1.0 : -1.0) * factorial, x.type));
  Value shifted = b.sub(b.binary("chlo.polygamma", order, out[0]), correction);
  Value r = b.select(low, shifted, b.binary("chlo.polygamma", order, x));
  r = b.select(reachable, r, b.splat(NAN, x.type));
  // The CPU's values at the infinities (trigamma has its own kernel): n = 1 gives 0 at
  // +inf and NaN at -inf; n >= 2 gives NaN at +inf and (-1)^(n+1) inf at -inf.
  Value inf = b.splat(INFINITY, x.type), nan = b.splat(NAN, x.type);
  Value at_pos = n == 1 ? b.zeros(x.type) : nan;
  Value at_neg = n == 1 ? nan : (n % 2 == 1 ? inf : b.unary("negate", inf));
  r = b.select(b.compare(x, inf, "EQ"), at_pos, r);
  return b.select(b.compare(x, b.unary("negate", inf), "EQ"), at_neg, r);
}

// polygamma(n, self) and polygamma_(self, n): n is an int argument; n = 0 is digamma.
Lowered lower_polygamma(LoweringContext& c) {
  Builder& b = c.b();
  DType t = float_compute_type(c);
  bool in_place = c.op_name() == "aten::polygamma_";
  Value x = out_operand(c, in_place ? 0 : 1, t);
  int64_t n = c.int_arg(in_place ? 1 : 0);
  Value r = n == 0 ? digamma(b, x) : polygamma(b, n, x);
  return std::vector<Value>{to_out(c, r)};
}

// angle of a real number: pi for negatives, 0 otherwise, NaN stays NaN.
Value angle(Builder& b, Value x) {
  Value r = b.select(b.compare(x, b.zeros(x.type), "LT"), b.splat(M_PI, x.type), b.zeros(x.type));
  return b.select(is_nan(b, x), x, r);
}

// trace of a 2-D matrix: the diagonal summed in the output's accumulation type.
Lowered lower_trace(LoweringContext& c) {
  Builder& b = c.b();
  DType out = c.out_type().dtype;
  DType acc = opmath(out);
  Value x = b.convert(c.tensor(0), acc);
  Value rows = b.iota(TensorType{DType::kI64, x.dims()}, 0);
  Value cols = b.iota(TensorType{DType::kI64, x.dims()}, 1);
  Value diag = b.select(b.compare(rows, cols, "EQ"), x, b.zeros(x.type));
  return std::vector<Value>{b.convert(b.reduce_sum(diag, {0, 1}), out)};
}

// atan of a real number as atan2(2x, 2), the value of the atan2(x, 1) chlo.atan expands to:
// 2x / 2 is x exactly, and 2x overflows only where atan(x) rounds to +-pi/2, as
// atan2(+-inf, 2) does. Subnormal x (whose atan is x; XLA's atan2 flushes them to 0) is
// returned as is. Not atan2(x, 1): XLA's CPU compiler rewrites that to its own atan
// function, whose vector form is called with the wrong argument passing once LLVM vectorizes
// the loop around it (a gather reading atan(x) gave 0 or x for some elements).
Value atan_real(Builder& b, Value x) {
  if (base::is_complex(x.dtype())) return complex_atan(b, x);
  Value two = b.splat(2, x.type);
  double min_normal = x.dtype() == DType::kF64 ? std::numeric_limits<double>::min()
                                                : std::numeric_limits<float>::min();
  Value tiny = b.compare(b.unary("abs", x), b.splat(min_normal, x.type), "LT");
  return b.select(tiny, x, b.binary("atan2", b.mul(x, two), two));
}

// linalg_cross(self, other, dim): the two operands broadcast to the result, then the
// three components of each 3-vector along `dim` (whose size the meta kernel checks is 3).
Lowered lower_linalg_cross(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  int64_t dim = wrap_dim(c.int_arg(2), static_cast<int64_t>(out.dims.size()));
  Value x = c.operand(0, out.dtype, out.dims), y = c.operand(1, out.dtype, out.dims);
  auto part = [&](Value v, int64_t k) {
    Dims start(out.dims.size(), 0), limit = out.dims, strides(out.dims.size(), 1);
    start[dim] = k;
    limit[dim] = k + 1;
    return b.slice(v, start, limit, strides);
  };
  auto component = [&](int64_t i, int64_t j) {  // x_i * y_j - x_j * y_i
    return b.sub(b.mul(part(x, i), part(y, j)), b.mul(part(x, j), part(y, i)));
  };
  return std::vector<Value>{
      b.concatenate({component(1, 2), component(2, 0), component(0, 1)}, dim)};
}

}  // namespace

// PyTorch's div_floor for floats: (a - fmod(a, b)) / b, corrected toward -inf, then rounded;
// b == 0 gives a / b. Infinite a makes fmod NaN, so the result is NaN, as on the CPU.
Value floor_divide_float(Builder& b, Value x, Value y) {
  Value zero = b.zeros(x.type);
  Value mod = b.binary("remainder", x, y);
  Value div = b.div(b.sub(x, mod), y);
  Value fix = b.binary("and", b.compare(mod, zero, "NE"),
                       b.compare(b.compare(y, zero, "LT"), b.compare(mod, zero, "LT"), "NE"));
  div = b.select(fix, b.sub(div, b.splat(1, div.type)), div);
  Value fl = b.unary("floor", div);
  Value round_up = b.compare(b.sub(div, fl), b.splat(0.5, div.type), "GT");
  fl = b.select(round_up, b.add(fl, b.splat(1, div.type)), fl);
  Value signed_zero = copysign(b, zero, b.div(x, y));
  Value r = b.select(b.compare(div, zero, "NE"), fl, signed_zero);
  return b.select(b.compare(y, zero, "EQ"), b.div(x, y), r);
}

// The modified Bessel functions of the first kind of order 0 and 1 (i0, special.i1) and
// their scaled forms e^-|x| I(x) (special.i0e, special.i1e), in float64 whatever the dtype:
// for |x| < 20 the power series (|x|/2)^order sum (x^2/4)^k / (k! (k + order)!) (positive
// terms: 48 of them reach double precision at 20), above it the asymptotic series
// e^|x| / sqrt(2 pi |x|) * sum_k prod_{j<=k} ((2j-1)^2 - 4 order^2) / (j 8|x|) (25 terms).
// I1 is odd (i1(-0) is +0, as there). PyTorch's float32 kernels compute e^|x| in float32,
// so their unscaled values are inf from |x| > 88.7228 on, short of where I itself leaves
// float32's range; the same here. At +-inf the unscaled ones are NaN (inf / inf) and the
// scaled ones +-0, as there.
Value bessel_i(Builder& b, Value x, int order, bool scaled) {
  DType t = x.dtype();
  Value a = b.unary("abs", b.convert(x, DType::kF64));
  const TensorType& ft = a.type;
  Value y = b.mul(b.mul(a, a), b.splat(0.25, ft));
  Value term = b.splat(1, ft), small = b.splat(1, ft);
  for (int k = 1; k <= 48; ++k) {
    term = b.mul(term, b.mul(y, b.splat(1.0 / (static_cast<double>(k) * (k + order)), ft)));
    small = b.add(small, term);
  }
  if (order == 1) small = b.mul(small, b.mul(a, b.splat(0.5, ft)));
  Value inv8x = b.div(b.splat(1, ft), b.mul(a, b.splat(8, ft)));
  Value t_k = b.splat(1, ft), series = b.splat(1, ft);
  for (int k = 1; k <= 25; ++k) {
    double odd = 2.0 * k - 1;
    t_k = b.mul(t_k, b.mul(inv8x, b.splat((odd * odd - 4.0 * order * order) / k, ft)));
    series = b.add(series, t_k);
  }
  Value large = b.div(series, b.unary("sqrt", b.mul(a, b.splat(2 * M_PI, ft))));
  Value below = b.compare(a, b.splat(20, ft), "LT");
  Value r;
  if (scaled) {
    r = b.select(below, b.mul(small, b.unary("exponential", b.unary("negate", a))), large);
  } else {
    r = b.select(below, small, b.mul(b.unary("exponential", a), large));
    if (t != DType::kF64) {  // finite x only: at +-inf both give NaN (inf / inf)
      Value overflows = b.binary("and", b.compare(a, b.splat(88.72283935546875, ft), "GT"),
                                 b.compare(a, b.splat(INFINITY, ft), "LT"));
      r = b.select(overflows, b.splat(INFINITY, ft), r);
    }
  }
  if (order == 1) {
    r = b.select(b.compare(b.convert(x, DType::kF64), b.zeros(ft), "LT"), b.unary("negate", r), r);
  }
  return b.convert(r, t);
}

// frexp.Tensor(self) -> (mantissa, exponent): self = mantissa * 2^exponent with |mantissa|
// in [0.5, 1), as C's frexp, which PyTorch's kernel calls; 0, inf and NaN give (self, 0).
// Integer operations on the bit fields of float32 or float64 (16-bit floats go through
// float32, exactly), selected as integers too: the XLA CPU plugin treats subnormal
// operands of float operations as zero, so a subnormal is normalized by its leading zeros,
// not by a multiplication.
Lowered lower_frexp(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.tensor_type(0).dtype;
  if (!base::is_floating(t)) {
    return base::unimplemented("lowering: " + c.op_name() + " takes floating inputs only");
  }
  bool wide = t == DType::kF64;
  Value v = b.convert(c.tensor(0), wide ? DType::kF64 : DType::kF32);
  const int64_t width = wide ? 64 : 32, mant = wide ? 52 : 23, bias = wide ? 1023 : 127;
  TensorType bits{wide ? DType::kI64 : DType::kI32, v.dims()};
  auto k = [&](int64_t x) {
    return b.broadcast_in_dim(b.constant_i64(x, bits.dtype), v.dims(), {});
  };
  const int64_t frac_mask = (int64_t{1} << mant) - 1;
  const int64_t exp_mask = ((int64_t{1} << (width - 1 - mant)) - 1) << mant;
  const int64_t sign_mask = wide ? INT64_MIN : INT32_MIN;  // the sign bit, as the int type
  Value u = b.op("stablehlo.bitcast_convert", {v}, bits);
  Value field = b.binary("shift_right_logical", b.binary("and", u, k(exp_mask)), k(mant));
  Value frac = b.binary("and", u, k(frac_mask));
  Value subnormal = b.compare(field, k(0), "EQ");
  // A subnormal's top fraction bit p becomes the implicit bit: frac << (mant - p).
  Value p = b.sub(k(width - 1), b.unary("count_leading_zeros", frac));
  Value e = b.select(subnormal, b.add(p, k(2 - bias - mant)), b.sub(field, k(bias - 1)));
  Value shifted = b.binary("and", b.binary("shift_left", frac, b.sub(k(mant), p)), k(frac_mask));
  Value m_bits = b.binary(
      "or", b.binary("or", b.binary("and", u, k(sign_mask)), k((bias - 1) << mant)),
      b.select(subnormal, shifted, frac));
  Value zero = b.compare(b.binary("and", u, k(~sign_mask)), k(0), "EQ");
  Value special = b.binary("or", zero, b.compare(field, k(exp_mask >> mant), "EQ"));
  Value m = b.op("stablehlo.bitcast_convert", {b.select(special, u, m_bits)}, v.type);
  e = b.select(special, k(0), e);
  return std::vector<Value>{b.convert(m, c.out_type(0).dtype), b.convert(e, c.out_type(1).dtype)};
}

// gcd / lcm of integers as PyTorch's kernels compute them: Euclid's algorithm on the
// absolute values (abs wraps at the type's minimum, as in C++), in one while loop that runs
// until every element's remainder is zero.
Value gcd(Builder& b, Value x, Value y) {
  bool is_signed = base::is_signed_integral(x.dtype());
  Value a0 = is_signed ? b.unary("abs", x) : x, b0 = is_signed ? b.unary("abs", y) : y;
  Value zero = b.zeros(x.type), one = b.splat(1, x.type);
  std::vector<Value> out = b.while_loop(
      {a0, b0},
      [&](Builder& lb, const std::vector<Value>& s) {
        return std::vector<Value>{lb.any_of(lb.compare(s[0], lb.zeros(s[0].type), "NE"))};
      },
      [&](Builder& lb, const std::vector<Value>& s) {
        Value a = s[0], r = s[1];
        Value pending = lb.compare(a, zero, "NE");
        Value next = lb.binary("remainder", r, lb.select(pending, a, one));
        return std::vector<Value>{lb.select(pending, next, zero), lb.select(pending, a, r)};
      });
  return out[1];
}

// lcm: |a / gcd * b|, 0 where the gcd is 0. Types narrower than int (C++ promotes them)
// compute in int32 and keep the low bits of the result.
Value lcm(Builder& b, Value x, Value y) {
  DType t = x.dtype();
  if (t == DType::kI8 || t == DType::kU8 || t == DType::kI16 || t == DType::kU16) {
    return b.convert(lcm(b, b.convert(x, DType::kI32), b.convert(y, DType::kI32)), t);
  }
  Value g = gcd(b, x, y);
  Value zero = b.zeros(x.type);
  Value g_zero = b.compare(g, zero, "EQ");
  Value r = b.mul(b.div(x, b.select(g_zero, b.splat(1, x.type), g)), y);
  if (base::is_signed_integral(x.dtype())) r = b.unary("abs", r);
  return b.select(g_zero, zero, r);
}

// A binary function of integers only (other dtypes run PyTorch's kernel, which refuses).
LoweringFn integer_fn(Value (*f)(Builder&, Value, Value)) {
  return [f](LoweringContext& c) -> Lowered {
    DType rt = c.result_type({0, 1});
    if (!base::is_integral(rt)) {
      return base::unimplemented("lowering: " + c.op_name() + " takes integers only");
    }
    return std::vector<Value>{to_out(c, f(c.b(), out_operand(c, 0, rt), out_operand(c, 1, rt)))};
  };
}

void register_elementwise_math_lowerings() {
  struct WithComplex {
    const char* name;
    const char* op;
    Value (*complex_fn)(Builder&, Value);
  };
  for (const WithComplex& f :
       {WithComplex{"acos", "chlo.acos", complex_acos}, {"asin", "chlo.asin", complex_asin},
        {"sinh", "chlo.sinh", complex_sinh}, {"cosh", "chlo.cosh", complex_cosh},
        {"asinh", "chlo.asinh", complex_asinh}, {"acosh", "chlo.acosh", complex_acosh},
        {"atanh", "chlo.atanh", complex_atanh}}) {
    register_with_variants(f.name, {""}, hlo_unary(f.op, f.complex_fn));
  }
  for (auto [name, op] : {std::pair{"erfc", "chlo.erfc"}, {"erfinv", "chlo.erf_inv"},
                          {"lgamma", "chlo.lgamma"}}) {
    register_with_variants(name, {""}, hlo_unary(op));
  }
  register_with_variants("atan", {""}, float_fn(atan_real));
  register_with_variants("digamma", {""}, float_fn(digamma));
  register_with_variants("sinc", {""}, float_fn(sinc));
  register_with_variants("angle", {""}, float_fn(angle));
  register_with_variants("frac", {""}, [](LoweringContext& c) -> Lowered {
    Value x = c.tensor(0);
    return std::vector<Value>{c.b().sub(x, c.b().trunc(x))};
  });
  register_lowering({"aten::polygamma", "aten::polygamma.out", "aten::polygamma_"},
                    lower_polygamma);
  register_with_variants("nan_to_num", {""}, lower_nan_to_num);
  register_lowering({"aten::isposinf", "aten::isposinf.out"}, is_inf_of_sign(INFINITY));
  register_lowering({"aten::isneginf", "aten::isneginf.out"}, is_inf_of_sign(-INFINITY));
  register_lowering({"aten::isinf"}, [](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value x = c.tensor(0);
    auto inf = [&b](Value v) { return b.compare(b.unary("abs", v), b.splat(INFINITY, v.type), "EQ"); };
    if (base::is_complex(x.dtype())) {  // either part infinite
      return std::vector<Value>{b.binary("or", inf(real_part(b, x)), inf(imag_part(b, x)))};
    }
    if (!base::is_floating(x.dtype())) return std::vector<Value>{b.zeros(c.out_type())};
    return std::vector<Value>{inf(x)};
  });
  register_lowering({"aten::signbit", "aten::signbit.out"}, lower_signbit);
  register_with_variants("fmax", {""}, nan_ignoring(true));
  register_with_variants("fmin", {""}, nan_ignoring(false));
  register_with_variants("copysign", {"Tensor", "Scalar"}, binary_fn(copysign, true));
  register_with_variants("hypot", {""}, binary_fn(hypot));
  register_with_variants("heaviside", {""}, binary_fn(heaviside));
  // nextafter steps to the neighbouring value of the result dtype itself: computed in a
  // wider opmath type (float32 for float16 / bfloat16), the step would round away.
  register_with_variants("nextafter", {""}, [](LoweringContext& c) -> Lowered {
    DType rt = c.result_type({0, 1});
    Value r = c.b().binary("chlo.next_after", out_operand(c, 0, rt), out_operand(c, 1, rt));
    return std::vector<Value>{to_out_via(c, rt, r)};
  });
  register_with_variants("logaddexp", {""}, binary_fn([](Builder& b, Value x, Value y) {
    return logaddexp(b, x, y, false);
  }, true));
  register_with_variants("logaddexp2", {""}, binary_fn([](Builder& b, Value x, Value y) {
    return logaddexp(b, x, y, true);
  }, true));
  register_with_variants("xlogy", {"Tensor", "Scalar_Other", "Scalar_Self"},
                         binary_fn(xlogy, true));
  register_lowering({"aten::xlogy.OutTensor", "aten::xlogy.OutScalar_Self",
                     "aten::xlogy.OutScalar_Other"},
                    binary_fn(xlogy, true));
  LoweringFn floor_div = [](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    DType rt = c.result_type({0, 1});
    DType t = opmath(rt);
    Value x = out_operand(c, 0, t), y = out_operand(c, 1, t);
    require_nonzero_divisor(c, y);
    Value r = base::is_floating(t) ? floor_divide_float(b, x, y) : floor_divide_int(b, x, y);
    return std::vector<Value>{to_out_via(c, rt, r)};
  };
  register_with_variants("floor_divide", {"", "Scalar"}, floor_div);
  register_lowering({"aten::floor_divide_.Tensor"}, floor_div);  // in-place of the "" form
  register_lowering({"aten::rsub.Tensor", "aten::rsub.Scalar", "aten::rsub.Tensor_out",
                     "aten::rsub.Scalar_out"},
                    lower_rsub);
  register_lowering({"aten::round.decimals", "aten::round_.decimals", "aten::round.decimals_out"},
                    lower_round_decimals);
  register_lowering({"aten::ldexp.Tensor", "aten::ldexp_", "aten::ldexp.out"}, lower_ldexp);
  for (auto [name, left] :
       {std::pair{"bitwise_left_shift", true}, {"bitwise_right_shift", false}}) {
    register_with_variants(name, {"Tensor", "Tensor_Scalar"}, shift(left));
    register_lowering({("aten::" + std::string(name) + ".Scalar_Tensor").c_str(),
                       ("aten::" + std::string(name) + ".Scalar_Tensor_out").c_str()},
                      shift(left));
  }
  register_lowering({"aten::__lshift__.Tensor", "aten::__lshift__.Scalar",
                     "aten::__ilshift__.Tensor", "aten::__ilshift__.Scalar"},
                    shift(true));
  register_lowering({"aten::__rshift__.Tensor", "aten::__rshift__.Scalar",
                     "aten::__irshift__.Tensor", "aten::__irshift__.Scalar"},
                    shift(false));
  register_lowering({"aten::trace", "aten::trace.out"}, lower_trace);
  register_with_variants("gcd", {""}, integer_fn(gcd));
  register_with_variants("i0", {""},
                         float_fn([](Builder& b, Value x) { return bessel_i(b, x, 0, false); }));
  register_with_variants("special_i0e", {""},
                         float_fn([](Builder& b, Value x) { return bessel_i(b, x, 0, true); }));
  register_with_variants("special_i1", {""},
                         float_fn([](Builder& b, Value x) { return bessel_i(b, x, 1, false); }));
  register_with_variants("special_i1e", {""},
                         float_fn([](Builder& b, Value x) { return bessel_i(b, x, 1, true); }));
  register_lowering({"aten::frexp.Tensor", "aten::frexp.Tensor_out"}, lower_frexp);
  register_with_variants("lcm", {""}, integer_fn(lcm));
  register_lowering({"aten::linalg_cross", "aten::linalg_cross.out"}, lower_linalg_cross);
}

}  // namespace torchtpu::lowering
