// Complex numbers: which lowerings take complex operands (accepts_complex), the ops that
// exist for them (polar, complex, angle, conj_physical, and the value forms of the complex
// views that compiled graphs see: view_as_real, view_as_complex, real, imag, the conjugate
// and negative views), and the complex functions the elementwise lowerings call, with C's
// special values where XLA's differ (abs, log, sqrt, exp, the circular, hyperbolic and
// inverse functions, division).
//
// A complex64 value is XLA's complex<f32>. Lowerings outside the list below were written
// for real dtypes (they compare, take maxima, pick float32 for non-float inputs): a call
// with a complex dtype never reaches them (check_complex_support), so eager mode runs
// PyTorch's CPU kernel instead and compiled graphs report the op.
#include <cmath>
#include <set>
#include <string>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/module_call.h"

namespace torchtpu::lowering {
namespace {

TensorType part_type(const Value& v) {
  return TensorType{base::complex_component(v.dtype()), v.dims()};
}

}  // namespace

Value real_part(Builder& b, Value z) {
  return base::is_complex(z.dtype()) ? b.op("stablehlo.real", {z}, part_type(z)) : z;
}

Value imag_part(Builder& b, Value z) {
  return base::is_complex(z.dtype()) ? b.op("stablehlo.imag", {z}, part_type(z)) : b.zeros(z.type);
}

namespace {

using Result = base::StatusOr<std::vector<Value>>;

// Base names (aten::<base>[_][.overload]) whose lowerings are written for complex dtypes:
// arithmetic whose StableHLO op is defined on complex numbers with PyTorch's principal
// branches, reductions that only add or multiply, products, and data movement.
const std::set<std::string, std::less<>>& complex_ops() {
  static const auto* ops = new std::set<std::string, std::less<>>{
      // elementwise
      "add", "sub", "mul", "div", "neg", "exp", "log", "log2", "log10", "sqrt", "rsqrt",
      "sin", "cos", "tanh", "sigmoid", "silu", "pow", "reciprocal", "abs", "sgn", "eq", "ne",
      "where", "addcmul", "addcdiv", "rsub", "lerp", "exp2", "tan", "log1p", "expm1", "sinc",
      "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh",
      "angle", "polar", "complex", "conj_physical", "_conj_physical",
      // reductions and products
      "sum", "mean", "prod", "logsumexp", "mm", "bmm", "addmm", "baddbmm", "dot", "vdot", "tanh_backward",
      "sigmoid_backward", "mv", "addmv", "addbmm", "cumsum", "cumprod", "linalg_cross",
      "var", "std", "var_mean", "std_mean", "linalg_vector_norm", "norm", "renorm",
      // factories and fills
      "linspace", "logspace",
      // random: each part drawn as PyTorch fills view_as_real(self) (random.cc)
      "uniform", "normal", "normal_functional", "rand", "randn", "rand_like", "randn_like",
      "fill", "zero", "full", "full_like", "scalar_tensor", "new_full", "zeros", "zeros_like", "eye",
      "new_zeros", "empty_like", "new_empty", "empty_permuted", "ones", "ones_like", "new_ones",
      "empty", "empty_strided",
      // data movement (value forms of views in graphs, copies, concatenation)
      "view", "view_copy", "_unsafe_view", "alias", "alias_copy", "detach", "detach_copy",
      "lift_fresh_copy", "unsqueeze", "unsqueeze_copy", "squeeze", "squeeze_copy", "permute",
      "permute_copy", "transpose", "transpose_copy", "t", "t_copy", "expand", "expand_copy",
      "slice", "slice_copy", "select", "select_copy", "split", "split_copy", "split_with_sizes",
      "split_with_sizes_copy", "unbind", "unbind_copy", "as_strided", "as_strided_copy", "as_strided_scatter", "copy",
      "_to_copy", "clone", "cat", "flip", "roll", "slice_scatter", "select_scatter",
      "constant_pad_nd", "repeat", "unfold", "unfold_copy", "unfold_backward", "gather", "index", "index_select",
      "stack", "diagonal", "diagonal_copy", "diagonal_scatter", "diag_embed",
      "tril", "triu", "narrow_copy", "channel_shuffle", "im2col", "take", "put", "trace",
      "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d",
      "replication_pad2d", "replication_pad3d",
      // indexing and masked writes: data moves; index_add, scatter_add and accumulating
      // index_put only add
      "index_put", "_index_put_impl", "index_add", "index_copy", "index_fill", "masked_fill",
      "masked_scatter", "scatter", "scatter_add", "_unsafe_masked_index",
      "_unsafe_masked_index_put_accumulate", "nonzero_static",
      // truth tests (a complex value is true when either part is nonzero: Builder::convert)
      "isnan", "isinf", "logical_and", "logical_or", "logical_xor", "logical_not", "all", "any",
      "count_nonzero",
      // complex views as values (graphs)
      "view_as_real", "view_as_complex", "view_as_real_copy", "view_as_complex_copy", "real",
      "imag", "_conj", "_conj_copy", "resolve_conj", "_neg_view", "_neg_view_copy", "resolve_neg",
      // fft (fft.cc)
      "_fft_c2c", "_fft_r2c", "_fft_c2r",
  };
  return *ops;
}

Value make_complex(Builder& b, Value re, Value im) {
  return b.op("stablehlo.complex", {re, im}, TensorType{base::complex_of(re.dtype()), re.dims()});
}

// polar(abs, angle) = abs * (cos(angle) + i sin(angle)).
Result lower_polar(LoweringContext& c) {
  Builder& b = c.b();
  DType part = base::complex_component(c.out_type().dtype);
  Value r = out_operand(c, 0, part), theta = out_operand(c, 1, part);
  Value re = b.mul(r, b.unary("cosine", theta));
  Value im = b.mul(r, b.unary("sine", theta));
  return std::vector<Value>{make_complex(b, re, im)};
}

// complex(real, imag).
Result lower_complex(LoweringContext& c) {
  DType part = base::complex_component(c.out_type().dtype);
  return std::vector<Value>{make_complex(c.b(), out_operand(c, 0, part), out_operand(c, 1, part))};
}

// angle: atan2(imag, real) of complex numbers; of reals, 0 for x >= 0, pi for x < 0 and
// NaN for NaN (PyTorch's CPU kernel).
Result lower_angle(LoweringContext& c) {
  Builder& b = c.b();
  DType in = c.tensor_type(0).dtype;
  if (base::is_complex(in)) {
    Value z = c.tensor(0);
    Value r = b.binary("atan2", imag_part(b, z), real_part(b, z));
    return std::vector<Value>{to_out(c, r)};
  }
  DType t = opmath(c.out_type().dtype);
  if (!base::is_floating(t)) {
    return base::unimplemented("lowering: angle of " + std::string(base::dtype_name(in)));
  }
  Value x = out_operand(c, 0, t);
  Value r = b.select(b.compare(x, b.zeros(x.type), "LT"), b.splat(3.14159265358979323846, x.type),
                     b.zeros(x.type));
  r = b.select(b.compare(x, x, "NE"), x, r);
  return std::vector<Value>{to_out(c, r)};
}

Result lower_conj_physical(LoweringContext& c) {
  return std::vector<Value>{to_out(c, c.b().conj(c.tensor(0)))};
}

Result lower_neg_view(LoweringContext& c) {
  return std::vector<Value>{to_out(c, c.b().unary("negate", c.tensor(0)))};
}

Result lower_identity(LoweringContext& c) { return std::vector<Value>{c.tensor(0)}; }

// view_as_real: [..., 2] of (real, imag).
Result lower_view_as_real(LoweringContext& c) {
  Builder& b = c.b();
  Value z = c.tensor(0);
  Dims with_pair = z.dims();
  with_pair.push_back(1);
  Value re = b.reshape(real_part(b, z), with_pair), im = b.reshape(imag_part(b, z), with_pair);
  return std::vector<Value>{b.concatenate({re, im}, z.rank())};
}

// view_as_complex: the last dim (of size 2) as (real, imag).
Result lower_view_as_complex(LoweringContext& c) {
  Value x = c.tensor(0);
  if (x.rank() == 0 || x.dims().back() != 2) {
    return base::invalid_argument("lowering: view_as_complex expects a last dim of size 2, got " +
                                  x.type.str());
  }
  return std::vector<Value>{pairs_as_complex(c.b(), x)};
}

}  // namespace

Value pairs_as_complex(Builder& b, Value x) {
  Dims out = x.dims();
  out.pop_back();
  Dims start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  limit.back() = 1;
  Value re = b.reshape(b.slice(x, start, limit, strides), out);
  start.back() = 1;
  limit.back() = 2;
  Value im = b.reshape(b.slice(x, start, limit, strides), out);
  return make_complex(b, re, im);
}

namespace {

Result lower_real(LoweringContext& c) { return std::vector<Value>{real_part(c.b(), c.tensor(0))}; }
Result lower_imag(LoweringContext& c) { return std::vector<Value>{imag_part(c.b(), c.tensor(0))}; }

}  // namespace

bool accepts_complex(std::string_view op_name) {
  // A module call's function was exported for its argument types, complex ones included.
  if (is_module_call(op_name)) return true;
  std::string_view name = op_name;
  if (name.rfind("aten::", 0) != 0) return false;
  name.remove_prefix(6);
  name = name.substr(0, name.find('.'));
  // A list op applies its item op's lowering (foreach.cc): _foreach_add_ is add's.
  constexpr std::string_view kForeach = "_foreach_";
  if (name.rfind(kForeach, 0) == 0) name.remove_prefix(kForeach.size());
  if (complex_ops().count(name)) return true;
  // In-place forms: add_, fill_, zero_, ... (but not _conj: a leading underscore is a name).
  if (name.size() > 1 && name.back() == '_') {
    return complex_ops().count(name.substr(0, name.size() - 1)) > 0;
  }
  return false;
}

namespace {

Value is_inf(Builder& b, Value v) {
  return b.compare(b.unary("abs", v), b.splat(INFINITY, v.type), "EQ");
}
Value non_finite(Builder& b, Value v) {
  return b.unary("not", b.op("stablehlo.is_finite", {v}, TensorType{DType::kBool, v.dims()}));
}

// The real and imaginary parts of a complex value.
struct Parts {
  Value re, im;
};
Parts parts(Builder& b, Value z) { return {real_part(b, z), imag_part(b, z)}; }

}  // namespace

// cabs: the hypot of the parts. XLA's complex abs lets a NaN part through as if it were
// the other part's size (abs(1 + NaN i) came out sqrt(2)) and gives NaN for NaN + inf i.
Value complex_abs(Builder& b, Value z) { return hypot(b, real_part(b, z), imag_part(b, z)); }

// log z = log|z| + i arg z: NaN + NaN i for a NaN part, except inf + NaN i when the other
// part is infinite (C's clog, PyTorch's CPU). log|z| is log_hypot, so |z| above the largest
// float (3e38 + 3e38 i) does not overflow to inf first.
Value complex_log(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  return make_complex(b, log_hypot(b, x, y), b.binary("atan2", y, x));
}

// z^w = exp(w log z), as C's cpow (PyTorch's CPU for complex exponents): 0^(1+i) is 0,
// 0^0i NaN. XLA's complex power gave NaN for the first and lost NaN parts of z.
Value complex_pow(Builder& b, Value z, Value w) {
  return complex_exp(b, b.mul(w, complex_log(b, z)));
}

// sgn z = z / |z|, each part divided by the real |z| (a complex division by |z| + 0i
// would make sgn(inf i) NaN + NaN i, not 0 + NaN i), and 0 at 0.
Value complex_sgn(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  Value mag = complex_abs(b, z);
  Value zero = b.compare(mag, b.zeros(mag.type), "EQ");
  Value d = b.select(zero, b.splat(1, mag.type), mag);
  return b.select(zero, b.zeros(z.type), make_complex(b, b.div(x, d), b.div(y, d)));
}

// XLA's sqrt with C's csqrt special values, which PyTorch's CPU returns: the imaginary part
// has the sign of y (sqrt(-1 - 0i) = -i); y = +-inf gives inf + y i whatever x; otherwise a
// NaN part gives NaN + NaN i, except x = +inf (inf + NaN i) and x = -inf (NaN + inf i).
Value complex_sqrt(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  auto [re, im] = parts(b, b.unary("sqrt", z));
  im = copysign(b, im, y);
  Value inf = b.splat(INFINITY, x.type), nan = b.splat(NAN, x.type);
  Value x_nan = b.compare(x, x, "NE"), y_nan = b.compare(y, y, "NE");
  Value any_nan = b.binary("or", x_nan, y_nan);
  re = b.select(b.binary("and", y_nan, b.compare(x, inf, "EQ")), inf,
                b.select(any_nan, nan, re));
  im = b.select(b.binary("and", y_nan, b.compare(x, b.unary("negate", inf), "EQ")), inf,
                b.select(any_nan, nan, im));
  Value y_inf = is_inf(b, y);
  return make_complex(b, b.select(y_inf, inf, re), b.select(y_inf, y, im));
}

// The special values below are C's (Annex G), which PyTorch's CPU kernels return. XLA's
// complex functions multiply through by factors such as cosh(inf), so an exact zero
// factor (sin(0) in sin(0 + 100i)) became 0 * inf = NaN; each guard keeps what C gives.

// exp: with x = +inf and y infinite or NaN, inf + NaN i; with x = -inf, 0 + 0i.
Value complex_exp(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  auto [re, im] = parts(b, b.unary("exponential", z));
  Value inf = b.splat(INFINITY, x.type), zero = b.zeros(x.type);
  Value y_bad = non_finite(b, y);
  Value up = b.binary("and", b.compare(x, inf, "EQ"), y_bad);
  Value down = b.binary("and", b.compare(x, b.unary("negate", inf), "EQ"), y_bad);
  re = b.select(up, inf, b.select(down, zero, re));
  im = b.select(up, b.splat(NAN, x.type), b.select(down, copysign(b, zero, y), im));
  return make_complex(b, re, im);
}

// f * cosh y (f * sinh y when `odd`). Past |y| = 20 both are e^|y| / 2 to 1e-17, applied
// as two factors e^(|y| / 2): the product stays finite where cosh y alone overflows
// (sin(1e-30 + 100i) is 1.3e13 + inf i in float32, as on the CPU).
Value times_hyperbolic(Builder& b, Value f, Value y, bool odd) {
  Value ay = b.unary("abs", y);
  Value half = b.splat(0.5, y.type);
  Value h = b.unary("exponential", b.mul(ay, half));
  Value far = b.mul(b.mul(odd ? b.mul(f, b.unary("sign", y)) : f, b.mul(h, half)), h);
  Value near = b.mul(f, b.unary(odd ? "chlo.sinh" : "chlo.cosh", y));
  return b.select(b.compare(ay, b.splat(20, y.type), "GT"), far, near);
}

// The parts of sin z and cos z from the real functions: (sin x cosh y, cos x sinh y) and
// (cos x cosh y, -sin x sinh y). XLA's complex sine and cosine build cosh y from exp(y),
// which overflows past y = 88.7 in float32 (710 in float64) while cosh y is still finite:
// cosh(89 + 0i) was inf.
std::pair<Value, Value> sin_parts(Builder& b, Value x, Value y) {
  Value sin = b.unary("sine", x), cos = b.unary("cosine", x);
  return {times_hyperbolic(b, sin, y, false), times_hyperbolic(b, cos, y, true)};
}
std::pair<Value, Value> cos_parts(Builder& b, Value x, Value y) {
  Value sin = b.unary("sine", x), cos = b.unary("cosine", x);
  return {times_hyperbolic(b, cos, y, false),
          b.unary("negate", times_hyperbolic(b, sin, y, true))};
}

// sin = (sin x cosh y, cos x sinh y): a zero x or y is its part's exact value; with y
// infinite and x not finite, NaN + inf i.
Value complex_sin(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  auto [re, im] = sin_parts(b, x, y);
  Value zero = b.zeros(x.type);
  re = b.select(b.compare(x, zero, "EQ"), x, re);
  im = b.select(b.compare(y, zero, "EQ"), y, im);
  im = b.select(b.binary("and", is_inf(b, y), non_finite(b, x)), b.splat(INFINITY, x.type), im);
  return make_complex(b, re, im);
}

// cos = (cos x cosh y, -sin x sinh y): a zero x or y makes the imaginary part a zero; with
// y infinite and x not finite, inf + NaN i.
Value complex_cos(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  auto [re, im] = cos_parts(b, x, y);
  Value zero = b.zeros(x.type);
  Value exact = b.binary("or", b.compare(x, zero, "EQ"), b.compare(y, zero, "EQ"));
  Value flip = b.compare(sign_bit(b, x), sign_bit(b, y), "EQ");  // -(x * y) is -0 then
  im = b.select(exact, b.select(flip, b.unary("negate", zero), zero), im);
  Value both = b.binary("and", is_inf(b, y), non_finite(b, x));
  re = b.select(both, b.splat(INFINITY, x.type), re);
  im = b.select(both, b.splat(NAN, x.type), im);
  return make_complex(b, re, im);
}

// tanh: a zero x is the real part (tanh(0 + inf i) = 0 + NaN i).
Value complex_tanh(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  auto [re, im] = parts(b, b.unary("tanh", z));
  return make_complex(b, b.select(b.compare(x, b.zeros(x.type), "EQ"), x, re), im);
}

// num / den as c10::complex divides (numpy's way, Smith's algorithm): scaled by the
// larger part of den, so |den|^2 never overflows; a zero den gives each part divided by 0
// (1 / 0 is inf + NaN i), and inf / inf parts give NaN (1 / (inf + inf i) is NaN + NaN i),
// as on PyTorch's CPU. XLA's complex divide scales differently and gave 0 there.
Value complex_divide(Builder& b, Value num, Value den) {
  auto [a, bi] = parts(b, num);
  auto [c, d] = parts(b, den);
  Value abs_c = b.unary("abs", c), abs_d = b.unary("abs", d);
  // |c| >= |d|: r = d / c, s = c + d r, re = (a + b r) / s, im = (b - a r) / s;
  // else r = c / d, s = d + c r, re = (b + a r) / s, im = -(a - b r) / s. c10 multiplies
  // by 1 / s, which for |s| above ~1e38 is subnormal, flushed to zero by XLA (2e38 / 1e38
  // was 0): dividing keeps every normal quotient.
  Value c_larger = b.compare(abs_c, abs_d, "GE");
  Value big = b.select(c_larger, c, d), small = b.select(c_larger, d, c);
  Value p = b.select(c_larger, a, bi), q = b.select(c_larger, bi, a);
  Value r = b.div(small, big);
  Value s = b.add(big, b.mul(small, r));
  Value re = b.div(b.add(p, b.mul(q, r)), s);
  Value im = b.div(b.sub(q, b.mul(p, r)), s);
  im = b.select(c_larger, im, b.unary("negate", im));
  Value zero = b.zeros(c.type);
  Value both_zero = b.binary("and", b.compare(abs_c, zero, "EQ"), b.compare(abs_d, zero, "EQ"));
  re = b.select(both_zero, b.div(a, abs_c), re);
  im = b.select(both_zero, b.div(bi, abs_d), im);
  return make_complex(b, re, im);
}

// i z and -i z, exactly: (-y, x) and (y, -x), no multiplication to turn 0 * inf into NaN.
Value times_i(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  return make_complex(b, b.unary("negate", y), x);
}
Value times_minus_i(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  return make_complex(b, y, b.unary("negate", x));
}

// C relates the circular and hyperbolic functions (csin(z) = -i csinh(iz), ccos(z) =
// ccosh(iz), ctan(z) = -i ctanh(iz)): built from the functions above by those identities,
// they keep C's infinities and NaNs. The sign of a zero part can differ from C's
// (sinh(0 + 2i) is +0 + 0.909i here, -0 + 0.909i on the CPU); values are equal.
// sinh: with x infinite and y not finite, inf + NaN i whatever x's sign (glibc's csinh,
// which the CPU calls; C leaves the sign of the real part open).
Value complex_sinh(Builder& b, Value z) {
  auto [x, y] = parts(b, z);
  auto [re, im] = parts(b, times_i(b, complex_sin(b, times_minus_i(b, z))));
  Value both = b.binary("and", is_inf(b, x), non_finite(b, y));
  return make_complex(b, b.select(both, b.splat(INFINITY, re.type), re),
                      b.select(both, b.splat(NAN, im.type), im));
}
Value complex_cosh(Builder& b, Value z) { return complex_cos(b, times_minus_i(b, z)); }
Value complex_tan(Builder& b, Value z) { return times_minus_i(b, complex_tanh(b, times_i(b, z))); }

// What an inverse function gives where a part of z is NaN (C's Annex G, as glibc returns
// it): for x + NaN i at x = 0 and at infinite x, for NaN + y i at infinite y and at y = 0;
// NaN + NaN i otherwise. XLA's functions let a finite value through (acos(0 + NaN i) was
// NaN + NaN i, not pi/2 + NaN i; atanh(NaN + inf i) not 0 + pi/2 i).
struct NanRules {
  double y_nan_x_zero[2], y_nan_x_inf[2], x_nan_y_inf[2], x_nan_y_zero[2];
};

constexpr double kHalfPi = 1.57079632679489661923;

// XLA's complex inverse functions (CHLO) also ignore the sign of a zero part, which on a
// branch cut picks the side in C (acos(2 - 0i) = +1.317i, acos(2 + 0i) = -1.317i). They
// are all conjugate-symmetric (f(conj z) = conj f(z)), and asinh and atanh odd as well:
// computed at (|x| if odd, |y|) and the result's parts negated back by the signs of y
// (and x). `rules` are for that folded z.
Value inverse_by_symmetry(Builder& b, Value z, const char* op, bool odd, const NanRules& rules) {
  auto [x, y] = parts(b, z);
  Value fx = odd ? b.unary("abs", x) : x, fy = b.unary("abs", y);
  auto [re, im] = parts(b, b.unary(op, make_complex(b, fx, fy)));
  Value zero = b.zeros(fx.type);
  Value x_nan = b.compare(fx, fx, "NE"), y_nan = b.compare(fy, fy, "NE");
  Value nan_re = b.splat(NAN, re.type), nan_im = nan_re;
  auto when = [&](Value cond, const double (&v)[2]) {
    nan_re = b.select(cond, b.splat(v[0], re.type), nan_re);
    nan_im = b.select(cond, b.splat(v[1], im.type), nan_im);
  };
  when(b.binary("and", y_nan, b.compare(fx, zero, "EQ")), rules.y_nan_x_zero);
  when(b.binary("and", y_nan, is_inf(b, fx)), rules.y_nan_x_inf);
  when(b.binary("and", x_nan, is_inf(b, fy)), rules.x_nan_y_inf);
  when(b.binary("and", x_nan, b.compare(fy, zero, "EQ")), rules.x_nan_y_zero);
  Value any_nan = b.binary("or", x_nan, y_nan);
  re = b.select(any_nan, nan_re, re);
  im = b.select(any_nan, nan_im, im);
  if (odd) re = b.select(sign_bit(b, x), b.unary("negate", re), re);
  im = b.select(sign_bit(b, y), b.unary("negate", im), im);
  return make_complex(b, re, im);
}

Value complex_asinh(Builder& b, Value z) {
  return inverse_by_symmetry(b, z, "chlo.asinh", true,
                             {{NAN, NAN}, {INFINITY, NAN}, {INFINITY, NAN}, {NAN, 0}});
}
Value complex_atanh(Builder& b, Value z) {
  return inverse_by_symmetry(b, z, "chlo.atanh", true,
                             {{0, NAN}, {0, NAN}, {0, kHalfPi}, {NAN, NAN}});
}
Value complex_acosh(Builder& b, Value z) {
  return inverse_by_symmetry(b, z, "chlo.acosh", false,
                             {{NAN, kHalfPi}, {INFINITY, NAN}, {INFINITY, NAN}, {NAN, NAN}});
}
Value complex_acos(Builder& b, Value z) {
  return inverse_by_symmetry(b, z, "chlo.acos", false,
                             {{kHalfPi, NAN}, {NAN, -INFINITY}, {NAN, -INFINITY}, {NAN, NAN}});
}
// casin(z) = -i casinh(iz), catan(z) = -i catanh(iz) (C).
Value complex_asin(Builder& b, Value z) { return times_minus_i(b, complex_asinh(b, times_i(b, z))); }
Value complex_atan(Builder& b, Value z) { return times_minus_i(b, complex_atanh(b, times_i(b, z))); }

// z * k for a real k, each part scaled: a complex product with k + 0i would make an
// infinite part's 0 * inf a NaN (log(0) * k is -inf + 0i, not -inf + NaN i).
Value complex_scale(Builder& b, Value z, Value k) {
  auto [x, y] = parts(b, z);
  k = b.broadcast_to(k, x.dims());
  return make_complex(b, b.mul(x, k), b.mul(y, k));
}
Value complex_scale(Builder& b, Value z, double k) {
  return complex_scale(b, z, b.splat(k, part_type(z)));
}

Value complex_reciprocal(Builder& b, Value z) { return complex_divide(b, b.splat(1, z.type), z); }

Value complex_rsqrt(Builder& b, Value z) { return complex_reciprocal(b, complex_sqrt(b, z)); }

// sigmoid = 1 / (1 + exp(-z)) with C's exp and c10's division, as PyTorch's CPU computes
// it (XLA's logistic gave NaN for sigmoid(inf + inf i), which is 1).
Value complex_sigmoid(Builder& b, Value z) {
  return complex_reciprocal(b, b.add(b.splat(1, z.type), complex_exp(b, b.unary("negate", z))));
}

void register_complex_lowerings() {
  register_lowering({"aten::polar", "aten::polar.out"}, lower_polar);
  register_lowering({"aten::complex", "aten::complex.out"}, lower_complex);
  register_lowering({"aten::angle", "aten::angle.out"}, lower_angle);
  register_lowering({"aten::conj_physical", "aten::conj_physical_", "aten::conj_physical.out",
                     "aten::_conj_physical"},
                    lower_conj_physical);
  // Value forms for graphs: in eager mode these are views (metadata over the same storage).
  register_lowering({"aten::_conj", "aten::_conj_copy"}, lower_conj_physical);
  register_lowering({"aten::_neg_view", "aten::_neg_view_copy"}, lower_neg_view);
  register_lowering({"aten::resolve_conj", "aten::resolve_neg"}, lower_identity);
  register_lowering({"aten::view_as_real", "aten::view_as_real_copy"}, lower_view_as_real);
  register_lowering({"aten::view_as_complex", "aten::view_as_complex_copy"}, lower_view_as_complex);
  register_lowering({"aten::real"}, lower_real);
  register_lowering({"aten::imag"}, lower_imag);
}

}  // namespace torchtpu::lowering
