// Elementwise arithmetic, comparison, logical and unary math lowerings.
#include "lowering/elementwise_util.h"
#include "lowering/families.h"

#include <string_view>

namespace torchtpu::lowering {

void register_with_variants(const std::string& base_name, const std::vector<std::string>& overloads,
                            LoweringFn fn) {
  for (const std::string& o : overloads) {
    std::string suffix = o.empty() ? "" : "." + o;
    register_lowering({("aten::" + base_name + suffix).c_str()}, fn);
    register_lowering({("aten::" + base_name + "_" + suffix).c_str()}, fn);
    // Out variants are named ".out" or ".<overload>_out" depending on the op.
    if (!o.empty()) register_lowering({("aten::" + base_name + "." + o + "_out").c_str()}, fn);
  }
  register_lowering({("aten::" + base_name + ".out").c_str()}, fn);
}

// Integer division rounding toward -inf.
Value floor_divide_int(Builder& b, Value a, Value d) {
  Value q = b.div(a, d);
  Value zero = b.zeros(a.type);
  Value rem = b.binary("remainder", a, d);
  Value signs_differ = b.compare(b.compare(a, zero, "LT"), b.compare(d, zero, "LT"), "NE");
  Value adjust = b.binary("and", b.compare(rem, zero, "NE"), signs_differ);
  return b.select(adjust, b.sub(q, b.splat(1, q.type)), q);
}

void require_nonzero_divisor(LoweringContext& c, Value d) {
  if (!base::is_integral(d.dtype()) || d.type.num_elements() == 0) return;
  Builder& b = c.b();
  c.require(b.all_of(b.compare(d, b.zeros(d.type), "NE")), "ZeroDivisionError", CheckKind::kRuntimeError);
}

namespace {

// a (op) b with PyTorch promotion over args 0 and 1.
// `divides`: the second operand is a divisor (fmod), which PyTorch's integer kernels check
// for zero (require_nonzero_divisor).
LoweringFn promoted_binary(const char* hlo_op, bool divides = false) {
  return [hlo_op, divides](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    DType rt = c.result_type({0, 1});
    bool mul = std::string_view(hlo_op) == "multiply";
    // The second operand's parameter first, the order their modules (and golden files) have.
    Value y = binary_operand(c, 1, rt, /*one_element_as_number=*/mul);
    Value x = binary_operand(c, 0, rt);
    if (divides) require_nonzero_divisor(c, y);
    return std::vector<Value>{to_out_via(c, rt, c.b().binary(hlo_op, x, y))};
  };
}

// A float function of two operands (atan2): integer operands promote to float32, as
// PyTorch's int-to-float ops do.
LoweringFn float_binary(const char* hlo_op) {
  return [hlo_op](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    DType rt = c.result_type({0, 1});
    if (!base::is_floating(rt)) rt = DType::kF32;
    DType t = opmath(rt);
    Value r = c.b().binary(hlo_op, out_operand(c, 0, t), out_operand(c, 1, t));
    return std::vector<Value>{to_out_via(c, rt, r)};
  };
}

// abs: the identity on unsigned integers (stablehlo.abs takes signed types only).
base::StatusOr<std::vector<Value>> lower_abs(LoweringContext& c) {
  if (base::is_complex(c.tensor_type(0).dtype)) {
    return std::vector<Value>{to_out(c, complex_abs(c.b(), c.tensor(0)))};
  }
  Value x = out_operand(c, 0, c.out_type().dtype);
  bool is_unsigned = base::is_integral(x.dtype()) && !base::is_signed_integral(x.dtype());
  return std::vector<Value>{is_unsigned ? x : c.b().unary("abs", x)};
}

// maximum/minimum through the Builder's NaN-propagating forms.
LoweringFn lower_max_min(bool is_max) {
  return [is_max](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    DType rt = c.result_type({0, 1});
    DType t = opmath(rt);
    Value a = out_operand(c, 0, t), b = out_operand(c, 1, t);
    return std::vector<Value>{to_out_via(c, rt, is_max ? c.b().max(a, b) : c.b().min(a, b))};
  };
}

// add/sub with alpha: self (op) other * alpha.
LoweringFn add_like(const char* hlo_op) {
  return [hlo_op](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    Builder& b = c.b();
    DType rt = c.result_type({0, 1});
    DType t = opmath(rt);
    // PyTorch's CPU add/sub read a scalar `other` after casting it to the result dtype
    // (unlike mul/div, which use the original value), then compute in opmath.
    Value other = promoted_operand(c, 1, rt, ScalarCast::kWrapped, /*number_too=*/true);
    if (c.num_args() > 2 && c.arg(2).kind == ArgKind::kScalar) {
      other = b.mul(other, b.broadcast_to(c.scalar(2, t), c.out_type().dims));
    }
    Value self = promoted_operand(c, 0, rt);
    return std::vector<Value>{to_out_via(c, rt, b.binary(hlo_op, self, other))};
  };
}

// x / y in floating point. XLA divides by a broadcast value (a number, a 0-dim or a
// lower-rank divisor) as a product with its reciprocal, which for |y| >= 2^(emax - 1) is
// subnormal and flushed to zero: x / 1e38 was 0. Such divisors divide with both sides scaled
// by 1/4 (exact), keeping the reciprocal normal; what the scaling flushes, |x| below 4x the
// smallest normal, has a quotient that flushes anyway. The scale is a runtime value (1 for
// the other divisors): a constant one XLA folds into the reciprocal again.
Value true_divide(Builder& b, Value x, Value y) {
  DType t = y.dtype();
  if (t != DType::kF32 && t != DType::kF64) return b.div(x, y);
  Value huge = b.splat(t == DType::kF64 ? 0x1p1022 : 0x1p126, y.type);
  Value big = b.compare(b.unary("abs", y), huge, "GE");
  Value scale = b.select(big, b.splat(0.25, y.type), b.splat(1, y.type));
  return b.div(b.mul(x, scale), b.mul(y, scale));
}

base::StatusOr<std::vector<Value>> lower_div(LoweringContext& c) {
  Builder& b = c.b();
  std::string mode;
  for (size_t i = 2; i < c.num_args(); ++i) {
    if (c.arg(i).kind == ArgKind::kString) mode = c.string_arg(i);
  }
  DType rt = c.result_type({0, 1});
  DType t = opmath(rt);
  if (mode.empty()) {
    // True division of integers: in the result's float type (the default dtype, float64
    // under torch.set_default_dtype(torch.float64)), 16-bit ones through float32.
    if (!base::is_floating(t) && !base::is_complex(t)) {
      DType out = c.out_type().dtype;
      t = base::is_floating(out) ? opmath(out) : DType::kF32;
      rt = base::is_floating(out) ? out : DType::kF32;
    }
    Value x = binary_operand(c, 0, rt);
    Value y = binary_operand(c, 1, rt, /*one_element_as_number=*/true);
    return std::vector<Value>{
        to_out_via(c, rt, base::is_complex(t) ? complex_divide(b, x, y) : true_divide(b, x, y))};
  }
  Value x = binary_operand(c, 0, rt), y = binary_operand(c, 1, rt);
  require_nonzero_divisor(c, y);
  Value r;
  if (mode == "trunc") {
    r = base::is_floating(t) ? b.trunc(true_divide(b, x, y)) : b.div(x, y);
  } else if (mode == "floor") {
    r = base::is_floating(t) ? floor_divide_float(b, x, y) : floor_divide_int(b, x, y);
  } else {
    return base::invalid_argument("lowering: div expected rounding_mode to be one of None, "
                                  "'trunc', or 'floor' but found '" + mode + "'");
  }
  return std::vector<Value>{to_out_via(c, rt, r)};
}

base::StatusOr<std::vector<Value>> lower_remainder(LoweringContext& c) {
  Builder& b = c.b();
  DType rt = c.result_type({0, 1});
  Value x = binary_operand(c, 0, rt), y = binary_operand(c, 1, rt);
  require_nonzero_divisor(c, y);
  Value r = b.binary("remainder", x, y);  // C fmod semantics: sign of the dividend
  Value zero = b.zeros(r.type);
  Value fix = b.binary("and", b.compare(r, zero, "NE"),
                       b.compare(b.compare(r, zero, "LT"), b.compare(y, zero, "LT"), "NE"));
  return std::vector<Value>{to_out_via(c, rt, b.select(fix, b.add(r, y), r))};
}

LoweringFn comparison(const char* direction) {
  return [direction](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    DType rt = c.result_type({0, 1});
    auto operand = [&](size_t i) {
      return promoted_operand(c, i, rt, ScalarCast::kWrapped, /*number_too=*/true);
    };
    Value r = c.b().compare(operand(0), operand(1), direction);
    return std::vector<Value>{to_out_via(c, rt, r)};
  };
}

LoweringFn logical(const char* hlo_op) {
  return [hlo_op](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    Value r = c.b().binary(hlo_op, out_operand(c, 0, DType::kBool), out_operand(c, 1, DType::kBool));
    return std::vector<Value>{to_out(c, r)};
  };
}

// A float math function; integer inputs compute in float (PyTorch promotes them).
// `complex_fn`, when given, computes it for complex inputs instead of `hlo_op`.
LoweringFn float_unary(const char* hlo_op, Value (*complex_fn)(Builder&, Value) = nullptr) {
  return [hlo_op, complex_fn](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    DType t = float_compute_type(c);
    Value x = out_operand(c, 0, t);
    bool own = complex_fn != nullptr && base::is_complex(t);
    return std::vector<Value>{to_out(c, own ? complex_fn(c.b(), x) : c.b().unary(hlo_op, x))};
  };
}

// A function that keeps the input's dtype (neg, abs, sign, ...).
LoweringFn same_type_unary(const char* hlo_op) {
  return [hlo_op](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    DType t = c.out_type().dtype;
    return std::vector<Value>{to_out(c, c.b().unary(hlo_op, out_operand(c, 0, t)))};
  };
}

// Rounding functions are the identity on integers.
LoweringFn rounding_unary(const char* hlo_op) {
  return [hlo_op](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    Value x = out_operand(c, 0, c.out_type().dtype);
    if (!base::is_floating(x.dtype())) return std::vector<Value>{x};
    return std::vector<Value>{c.b().unary(hlo_op, x)};
  };
}

// A number branch becomes a tensor of the result dtype as PyTorch makes it (a one-element
// fill, factory.cc): checked for overflow, except into float16/bfloat16 (where(h > 0,
// 70000.0, h) is inf there, 65519.0 rounds to 65504; into float32, 1e39 raises).
base::StatusOr<std::vector<Value>> lower_where(LoweringContext& c) {
  DType t = c.result_type({1, 2});
  ScalarCast cast = base::is_half_float(t) ? ScalarCast::kWrapped : ScalarCast::kChecked;
  Value pred = out_operand(c, 0, DType::kBool);
  auto branch = [&](size_t i) { return c.operand(i, t, c.out_type().dims, cast); };
  return std::vector<Value>{to_out(c, c.b().select(pred, branch(1), branch(2)))};
}

// clamp(self, min?, max?) for Scalar and Tensor bounds; NaN in self propagates.
base::StatusOr<std::vector<Value>> lower_clamp(LoweringContext& c) {
  Builder& b = c.b();
  std::vector<size_t> promote{0};
  for (size_t i : {1u, 2u}) if (!c.is_none(i)) promote.push_back(i);
  DType t = c.result_type(promote);
  Value x = out_operand(c, 0, t);
  const std::string& name = c.op_name();
  bool only_min = name.find("clamp_min") != std::string::npos;
  bool only_max = name.find("clamp_max") != std::string::npos;
  if (only_min) return std::vector<Value>{to_out(c, b.max(x, out_operand(c, 1, t)))};
  if (only_max) return std::vector<Value>{to_out(c, b.min(x, out_operand(c, 1, t)))};
  if (!c.is_none(1)) x = b.max(x, out_operand(c, 1, t));
  if (!c.is_none(2)) x = b.min(x, out_operand(c, 2, t));
  return std::vector<Value>{to_out(c, x)};
}

// lerp(self, end, weight): self + weight * (end - self) for |weight| < 0.5, else
// end - (end - self) * (1 - weight), as PyTorch computes it: weight 1 gives end exactly
// (lerp(1e8, 0.1, 1) is 0.1, not 0), and the infinities come out as on the CPU.
base::StatusOr<std::vector<Value>> lower_lerp(LoweringContext& c) {
  Builder& b = c.b();
  DType t = opmath(c.out_type().dtype);
  Value s = out_operand(c, 0, t), e = out_operand(c, 1, t), w = out_operand(c, 2, t);
  Value diff = b.sub(e, s);
  Value mag = base::is_complex(t) ? complex_abs(b, w) : b.unary("abs", w);
  Value small = b.compare(mag, b.splat(0.5, mag.type), "LT");
  Value from_self = b.add(s, b.mul(w, diff));
  Value from_end = b.sub(e, b.mul(diff, b.sub(b.splat(1, w.type), w)));
  return std::vector<Value>{to_out(c, b.select(small, from_self, from_end))};
}

// prims::fma(a, b, c) = a * b + c (decompositions of lerp and of the optimizers' steps
// emit it), in opmath: exact products for the half types, whose product fits float32's
// mantissa; float32 and float64 round the product and the sum apart (XLA has no fused
// multiply-add, and float64 would be slow on accelerators without it), within an ulp.
base::StatusOr<std::vector<Value>> lower_fma(LoweringContext& c) {
  Builder& b = c.b();
  DType rt = c.result_type({0, 1, 2});
  if (!base::is_floating(rt)) {
    return base::unimplemented("lowering: prims::fma of " + std::string(base::dtype_name(rt)));
  }
  DType t = opmath(rt);
  Value r = b.add(b.mul(out_operand(c, 0, t), out_operand(c, 1, t)), out_operand(c, 2, t));
  return std::vector<Value>{to_out(c, r)};
}

// addcmul/addcdiv(self, t1, t2, value) = self + (value * t1) op t2, in the CPU kernel's
// order (it decides infinities and rounding); complex division as c10::complex divides.
LoweringFn addc(const char* hlo_op) {
  return [hlo_op](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    Builder& b = c.b();
    DType rt = c.result_type({0, 1, 2});
    DType t = opmath(rt);
    Value scaled = b.mul(out_operand(c, 3, t), out_operand(c, 1, t)), y = out_operand(c, 2, t);
    bool complex_divide_op = base::is_complex(t) && std::string_view(hlo_op) == "divide";
    Value r = complex_divide_op ? complex_divide(b, scaled, y) : b.binary(hlo_op, scaled, y);
    return std::vector<Value>{to_out_via(c, rt, b.add(out_operand(c, 0, t), r))};
  };
}

// Integer x^e as PyTorch's CPU kernel (powi): squaring over every bit of the exponent, in
// wrapping arithmetic; a negative exponent gives 1 for x = 1, +-1 for x = -1 and 0 otherwise.
// XLA's own integer power squares over the low 6 bits only (2^64 became 1).
Value integer_power(Builder& b, Value x, Value e) {
  DType t = x.type.dtype;
  Value one = b.splat(1, x.type), zero = b.zeros(x.type);
  Value result = one, square = x, rest = e;
  int bits = static_cast<int>(base::dtype_size_bytes(t)) * 8;
  for (int i = 0; i < bits; ++i) {
    Value odd = b.compare(b.binary("and", rest, one), one, "EQ");
    result = b.select(odd, b.mul(result, square), result);
    if (i + 1 == bits) break;
    square = b.mul(square, square);
    rest = b.binary("shift_right_logical", rest, one);
  }
  if (!base::is_signed_integral(t)) return result;
  Value odd_e = b.compare(b.binary("and", e, one), one, "EQ");
  Value minus_one = b.splat(-1, x.type);
  Value of_minus_one = b.select(odd_e, minus_one, one);
  Value negative = b.select(b.compare(x, one, "EQ"), one,
                            b.select(b.compare(x, minus_one, "EQ"), of_minus_one, zero));
  return b.select(b.compare(e, zero, "LT"), negative, result);
}

// Complex z^p for a real constant p as PyTorch's CPU kernel: its own forms for 0.5, 3,
// -0.5, -1 and -2 (sqrt's special values, no overflow of |z|^2 in log), else cpow.
Value complex_power_by(Builder& b, Value z, double p) {
  // PyTorch fills ones for an exponent of 0 and copies for 1, whatever the base (0, inf or
  // NaN, where exp(p * log z) is NaN).
  if (p == 0) return b.splat(1, z.type);
  if (p == 1) return z;
  if (p == 0.5) return complex_sqrt(b, z);
  if (p == 3) return b.mul(b.mul(z, z), z);
  if (p == -0.5) return complex_rsqrt(b, z);
  if (p == -1) return complex_reciprocal(b, z);
  if (p == -2) return complex_reciprocal(b, b.mul(z, z));
  return complex_pow(b, z, b.splat(p, z.type));
}

// pow.Tensor_Scalar's exponent is structure (is_structural_scalar_arg): a constant exponent
// lets XLA simplify (x^1 is x, x^-1 a division), and x^2 is x*x as in PyTorch's CPU kernel;
// a runtime exponent was a call to powf per element, ~5% of a TorchTitan step's CPU time
// (RMSNorm's x.pow(2) and its gradient). The result type is the op's (a structural number
// no longer says whether it was an int).
base::StatusOr<std::vector<Value>> lower_pow(LoweringContext& c) {
  if (c.arg(1).kind == ArgKind::kDouble) {
    DType rt = c.out_type().dtype;
    Value x = out_operand(c, 0, opmath(rt));
    double p = c.double_arg(1);
    Value e = c.b().splat(p, x.type);
    Value r = p == 2                          ? c.b().mul(x, x)
              : base::is_integral(x.type.dtype) ? integer_power(c.b(), x, e)
              : base::is_complex(x.type.dtype)  ? complex_power_by(c.b(), x, p)
                                                : c.b().binary("power", x, e);
    return std::vector<Value>{to_out_via(c, rt, r)};
  }
  DType rt = c.result_type({0, 1});
  DType t = opmath(rt);
  Value x = out_operand(c, 0, t), e = out_operand(c, 1, t);
  Value r = base::is_integral(t)  ? integer_power(c.b(), x, e)
            : base::is_complex(t) ? complex_pow(c.b(), x, e)
                                  : c.b().binary("power", x, e);
  return std::vector<Value>{to_out_via(c, rt, r)};
}

base::StatusOr<std::vector<Value>> lower_reciprocal(LoweringContext& c) {
  Builder& b = c.b();
  DType t = float_compute_type(c);
  Value x = out_operand(c, 0, t);
  return std::vector<Value>{
      to_out(c, base::is_complex(t) ? complex_reciprocal(b, x) : b.div(b.splat(1, x.type), x))};
}

base::StatusOr<std::vector<Value>> lower_logical_not(LoweringContext& c) {
  Value x = out_operand(c, 0, DType::kBool);
  return std::vector<Value>{to_out(c, c.b().unary("not", x))};
}

base::StatusOr<std::vector<Value>> lower_sign(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.out_type().dtype;
  Value x = out_operand(c, 0, t);
  if (t == DType::kBool) return std::vector<Value>{x};
  if (base::is_complex(t)) return std::vector<Value>{complex_sgn(b, x)};
  Value zero = b.zeros(x.type);
  if (base::is_floating(t)) {
    // PyTorch's sign(NaN) is 0 (XLA's is NaN) and sign(-0.0) is +0.0 (XLA's is -0.0).
    Value nan_or_zero = b.binary("or", b.compare(x, x, "NE"), b.compare(x, zero, "EQ"));
    return std::vector<Value>{b.select(nan_or_zero, zero, b.unary("sign", x))};
  }
  Value pos = b.convert(b.compare(x, zero, "GT"), t);
  Value neg = b.convert(b.compare(x, zero, "LT"), t);
  return std::vector<Value>{b.sub(pos, neg)};
}

// log2/log10 through the natural log with a constant factor.
LoweringFn scaled_log(double inv_ln_base) {
  return [inv_ln_base](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    Builder& b = c.b();
    DType t = float_compute_type(c);
    Value x = out_operand(c, 0, t);
    Value l = base::is_complex(t) ? complex_log(b, x) : b.unary("log", x);
    if (base::is_complex(t)) return std::vector<Value>{to_out(c, complex_scale(b, l, inv_ln_base))};
    return std::vector<Value>{to_out(c, b.mul(l, b.splat(inv_ln_base, x.type)))};
  };
}

base::StatusOr<std::vector<Value>> lower_exp2(LoweringContext& c) {
  Builder& b = c.b();
  DType t = float_compute_type(c);
  Value x = out_operand(c, 0, t);
  constexpr double kLn2 = 0.6931471805599453;
  if (base::is_complex(t)) return std::vector<Value>{to_out(c, complex_exp(b, complex_scale(b, x, kLn2)))};
  return std::vector<Value>{to_out(c, exp2_real(b, x))};
}

base::StatusOr<std::vector<Value>> lower_isnan(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  if (base::is_complex(x.dtype())) {  // either part NaN
    return std::vector<Value>{
        b.binary("or", is_nan(b, real_part(b, x)), is_nan(b, imag_part(b, x)))};
  }
  if (!base::is_floating(x.dtype())) return std::vector<Value>{b.zeros(c.out_type())};
  return std::vector<Value>{b.compare(x, x, "NE")};
}

}  // namespace

void register_elementwise_lowerings() {
  register_with_variants("add", {"Tensor", "Scalar"}, add_like("add"));
  register_with_variants("sub", {"Tensor", "Scalar"}, add_like("subtract"));
  register_with_variants("mul", {"Tensor", "Scalar"}, promoted_binary("multiply"));
  register_with_variants("div", {"Tensor", "Scalar", "Tensor_mode", "Scalar_mode"}, lower_div);
  register_lowering({"aten::div.out_mode"}, lower_div);
  // true_divide is div without a mode (decompositions of sizes used as data emit it).
  register_with_variants("true_divide", {"Tensor", "Scalar"}, lower_div);
  register_with_variants("remainder", {"Tensor", "Scalar"}, lower_remainder);
  register_with_variants("fmod", {"Tensor", "Scalar"},
                         promoted_binary("remainder", /*divides=*/true));
  register_with_variants("maximum", {""}, lower_max_min(/*is_max=*/true));
  register_with_variants("minimum", {""}, lower_max_min(/*is_max=*/false));
  register_with_variants("pow", {"Tensor_Tensor", "Tensor_Scalar"}, lower_pow);
  register_lowering({"aten::pow.Scalar", "aten::pow.Scalar_out", "aten::pow.Tensor_Scalar_out",
                     "aten::pow.Tensor_Tensor_out"},
                    lower_pow);
  register_with_variants("atan2", {""}, float_binary("atan2"));
  register_with_variants("bitwise_and", {"Tensor", "Scalar"}, promoted_binary("and"));
  register_with_variants("bitwise_or", {"Tensor", "Scalar"}, promoted_binary("or"));
  register_with_variants("bitwise_xor", {"Tensor", "Scalar"}, promoted_binary("xor"));
  register_with_variants("logical_and", {""}, logical("and"));
  register_with_variants("logical_or", {""}, logical("or"));
  register_with_variants("logical_xor", {""}, logical("xor"));
  register_with_variants("logical_not", {""}, lower_logical_not);
  for (auto [name, dir] : {std::pair{"eq", "EQ"}, {"ne", "NE"}, {"lt", "LT"}, {"le", "LE"},
                           {"gt", "GT"}, {"ge", "GE"}}) {
    register_with_variants(name, {"Tensor", "Scalar"}, comparison(dir));
    register_lowering({("aten::" + std::string(name) + ".Scalar_out").c_str(),
                       ("aten::" + std::string(name) + ".Tensor_out").c_str()},
                      comparison(dir));
  }
  register_lowering({"aten::where.self", "aten::where.self_out", "aten::where.ScalarOther",
                     "aten::where.ScalarSelf", "aten::where.Scalar"},
                    lower_where);
  register_with_variants("clamp", {"", "Tensor"}, lower_clamp);
  register_lowering({"aten::clamp.Tensor_out"}, lower_clamp);
  register_with_variants("clamp_min", {"", "Tensor"}, lower_clamp);
  register_with_variants("clamp_max", {"", "Tensor"}, lower_clamp);
  register_lowering({"aten::clamp_min.Tensor_out", "aten::clamp_max.Tensor_out"}, lower_clamp);
  register_with_variants("lerp", {"Scalar", "Tensor"}, lower_lerp);
  register_lowering({"aten::lerp.Scalar_out", "aten::lerp.Tensor_out"}, lower_lerp);
  register_lowering({"prims::fma"}, lower_fma);
  register_with_variants("addcmul", {""}, addc("multiply"));
  register_with_variants("addcdiv", {""}, addc("divide"));

  register_with_variants("log", {""}, float_unary("log", complex_log));
  register_with_variants("sqrt", {""}, float_unary("sqrt", complex_sqrt));
  register_with_variants("exp", {""}, float_unary("exponential", complex_exp));
  register_with_variants("sin", {""}, float_unary("sine", complex_sin));
  register_with_variants("cos", {""}, float_unary("cosine", complex_cos));
  register_with_variants("rsqrt", {""}, float_unary("rsqrt", complex_rsqrt));
  register_with_variants("tan", {""}, float_unary("chlo.tan", complex_tan));
  for (auto [name, op] : {std::pair{"log1p", "log_plus_one"}, {"expm1", "exponential_minus_one"},
                          {"erf", "chlo.erf"}}) {
    register_with_variants(name, {""}, float_unary(op));
  }
  register_with_variants("neg", {""}, same_type_unary("negate"));
  register_with_variants("abs", {""}, lower_abs);
  register_with_variants("bitwise_not", {""}, same_type_unary("not"));
  register_with_variants("floor", {""}, rounding_unary("floor"));
  register_with_variants("ceil", {""}, rounding_unary("ceil"));
  register_with_variants("round", {""}, rounding_unary("round_nearest_even"));
  register_with_variants("trunc", {""}, [](LoweringContext& c) -> base::StatusOr<std::vector<Value>> {
    Value x = out_operand(c, 0, c.out_type().dtype);
    return std::vector<Value>{base::is_floating(x.dtype()) ? c.b().trunc(x) : x};
  });
  register_with_variants("sign", {""}, lower_sign);
  register_with_variants("sgn", {""}, lower_sign);
  register_with_variants("reciprocal", {""}, lower_reciprocal);
  register_with_variants("log2", {""}, scaled_log(1.4426950408889634));
  register_with_variants("log10", {""}, scaled_log(0.4342944819032518));
  register_with_variants("exp2", {""}, lower_exp2);
  register_lowering({"aten::isnan"}, lower_isnan);
}

}  // namespace torchtpu::lowering
