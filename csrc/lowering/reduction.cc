// Reduction lowerings: sum/mean/prod, max/min (with indices), arg-reductions, any/all,
// var/std, logsumexp, vector norms, hash_tensor and cumulative scans.
//
// Conventions shared by every lowering here:
// - Reduced dims come from a dim argument (int or int list); None or an empty list means
//   every dim, as in PyTorch. The result is reshaped to the caller's out type, which
//   already encodes keepdim.
// - 16-bit floats accumulate in f32 and are rounded once at the end (PyTorch's CPU
//   acc_type); everything else accumulates in the output's dtype, which PyTorch's meta
//   kernel has already promoted (e.g. sum of bool/int8 is int64).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/scan.h"

namespace torchtpu::lowering {

namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

// The input of sum / nansum / mean / cumsum / cumprod in the accumulation type of a result
// of dtype `out`: first cast to `out` itself, as PyTorch casts the input to the `dtype`
// argument before reducing (sum(float32, dtype=bfloat16) adds bfloat16-rounded values in
// float32; converting straight to float32 would skip that rounding).
Value input_as_result(LoweringContext& c, DType out) {
  Builder& b = c.b();
  return b.convert(b.convert(c.tensor(0), out), opmath(out));
}

// Sorted, wrapped, de-duplicated dims named by argument `i` (int or int list); all dims when
// the argument is None, an empty list or not a dim at all (e.g. prod's dtype).
Dims reduction_dims(const LoweringContext& c, size_t i, int64_t rank) {
  Dims named;
  if (!c.is_none(i) && c.arg(i).kind == ArgKind::kInt) named = {c.int_arg(i)};
  if (!c.is_none(i) && c.arg(i).kind == ArgKind::kIntList) named = c.int_list(i);
  Dims dims;
  if (named.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
    return dims;
  }
  // A 0-d tensor accepts dim 0/-1 but has nothing to reduce.
  if (rank == 0) return dims;
  for (int64_t d : named) dims.push_back(wrap_dim(d, rank));
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

// The number of elements of `v` along `dims`.
int64_t count_along(Value v, const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= v.dims()[d];
  return n;
}

// That count as a tensor of type `like`.
Value count_splat(Builder& b, Value v, const Dims& dims, const TensorType& like) {
  return b.splat(static_cast<double>(count_along(v, dims)), like);
}

// Reshapes to output k's dims (keepdim or not) and converts to its dtype.
Value finish(LoweringContext& c, Value v, size_t k = 0) {
  return c.b().convert(c.b().reshape(v, c.out_type(k).dims), c.out_type(k).dtype);
}

// XLA's CPU maximum/minimum may drop NaN (a > b ? a : b); PyTorch propagates it.
Value nan_extreme(Builder& b, Value x, Value y, bool is_max) {
  Value r = is_max ? b.max(x, y) : b.min(x, y);
  if (!base::is_floating(x.dtype())) return r;
  return b.select(is_nan(b, x), x, b.select(is_nan(b, y), y, r));
}

Value reduce_extreme(Builder& b, Value x, const Dims& dims, bool is_max) {
  Dims out;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) == dims.end()) out.push_back(x.dims()[i]);
  }
  TensorType s{x.dtype(), {}};
  Value init = is_max ? b.min_value(x.dtype()) : b.max_value(x.dtype());
  return b.op_with_region(
      "stablehlo.reduce", {x, init}, {TensorType{x.dtype(), out}}, {s, s},
      [&](Builder& r, const std::vector<Value>& a) {
        return std::vector<Value>{nan_extreme(r, a[0], a[1], is_max)};
      },
      "dimensions = " + i64_array(dims))[0];
}

// A reduced value broadcast back over the reduced dims of `like`.
Value expand_back(Builder& b, Value reduced, const Value& like, const Dims& dims) {
  Dims kept;
  for (int64_t i = 0, j = 0; i < like.rank(); ++i) {
    if (j < static_cast<int64_t>(dims.size()) && dims[j] == i) {
      ++j;
    } else {
      kept.push_back(i);
    }
  }
  return b.broadcast_in_dim(reduced, like.dims(), kept);
}

// sum / nansum / prod: the input in the accumulation type of the output, then one reduce.
LoweringFn accumulate(const char* body_op, double identity, bool ignore_nan) {
  return [=](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    DType t = opmath(c.out_type().dtype);
    // prod keeps the unrounded input: PyTorch's prod with a 16-bit dtype does not round
    // its input first.
    Value x = std::string(body_op) == "multiply" ? b.convert(c.tensor(0), t)
                                                 : input_as_result(c, c.out_type().dtype);
    if (ignore_nan && base::is_floating(t)) x = b.select(is_nan(b, x), b.zeros(x.type), x);
    Dims dims = reduction_dims(c, 1, x.rank());
    // Logical or/and are the bool forms of add/multiply (sum/prod with dtype=bool).
    std::string op = t != DType::kBool ? body_op : std::string(body_op) == "add" ? "or" : "and";
    Value r = b.reduce(x, b.constant(identity, t), dims, op);
    return std::vector<Value>{finish(c, r)};
  };
}

Lowered lower_mean(LoweringContext& c) {
  Builder& b = c.b();
  DType t = opmath(c.out_type().dtype);
  Value x = input_as_result(c, c.out_type().dtype);
  Dims dims = reduction_dims(c, 1, x.rank());
  Value s = b.reduce_sum(x, dims);
  // 0/0 = NaN for an empty reduction, as in PyTorch.
  Value n = count_splat(b, x, dims, s.type);
  return std::vector<Value>{finish(c, b.div(s, n))};
}

// max() / min() have no identity: over no elements the CPU raises where a reduce would
// return its init value (+-inf). Eager mode checks before lowering (op_special_cases.cc);
// a compiled graph is refused here with the CPU's words.
base::Status require_elements(LoweringContext& c, const Value& x, std::optional<int64_t> dim) {
  bool empty = dim ? x.dims()[*dim] == 0 : x.type.num_elements() == 0;
  if (!empty) return base::Status::ok_status();
  std::string fn = c.op_name().compare(6, 3, "max") == 0 ? "max()" : "min()";
  if (dim) {
    return base::invalid_argument(fn + ": Expected reduction dim " + std::to_string(*dim) +
                                  " to have non-zero size (" + x.type.str() + ")");
  }
  return base::invalid_argument(fn + ": Expected reduction dim to be specified for "
                                "input.numel() == 0. Specify the reduction dim with the 'dim' "
                                "argument.");
}

LoweringFn extreme(bool is_max) {
  return [is_max](LoweringContext& c) -> Lowered {
    Value x = c.tensor(0);
    bool full = c.op_name() == "aten::max" || c.op_name() == "aten::min" ||
                c.op_name() == "aten::max.unary_out" || c.op_name() == "aten::min.unary_out";
    if (full) {
      if (auto s = require_elements(c, x, std::nullopt); !s.ok()) return s;
    }
    Dims dims = reduction_dims(c, 1, x.rank());
    Value r = reduce_extreme(c.b(), x, dims, is_max);
    return std::vector<Value>{finish(c, r)};
  };
}

// (values, int64 indices) of the max or min of `x` along `dim`. NaN counts as larger than
// every number (so it wins for max and min alike, as PyTorch propagates it) and ties pick
// the first index: the comparator is a lexicographic order, hence associative.
std::pair<Value, Value> arg_extreme(Builder& b, Value x, int64_t dim, bool is_max) {
  DType t = x.dtype();
  Value idx = b.iota(TensorType{DType::kI64, x.dims()}, dim);
  TensorType vt{t, {}}, it{DType::kI64, {}};
  Dims out_dims;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) out_dims.push_back(x.dims()[i]);
  }
  Value init_v = is_max ? b.min_value(t) : b.max_value(t);
  Value init_i = b.constant_i64(INT64_MAX, DType::kI64);
  auto body = [&](Builder& r, const std::vector<Value>& a) {
    Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
    Value a_wins = r.compare(av, bv, is_max ? "GT" : "LT");
    Value tie = r.compare(av, bv, "EQ");
    if (base::is_floating(t)) {
      Value a_nan = is_nan(r, av), b_nan = is_nan(r, bv);
      a_wins = r.binary("or", a_wins, r.binary("and", a_nan, r.unary("not", b_nan)));
      tie = r.binary("or", tie, r.binary("and", a_nan, b_nan));
    }
    Value i = r.select(a_wins, ai, r.select(tie, r.min(ai, bi), bi));
    return std::vector<Value>{r.select(a_wins, av, bv), i};
  };
  auto outs = b.op_with_region("stablehlo.reduce", {x, idx, init_v, init_i},
                               {TensorType{t, out_dims}, TensorType{DType::kI64, out_dims}},
                               {vt, it, vt, it}, body, "dimensions = " + i64_array({dim}));
  return {outs[0], outs[1]};
}

// max.dim / min.dim: (self, dim, keepdim) -> (values, indices).
LoweringFn extreme_with_index(bool is_max) {
  return [is_max](LoweringContext& c) -> Lowered {
    Value x = c.tensor(0);
    if (x.rank() == 0) x = c.b().reshape(x, {1});
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    if (auto s = require_elements(c, x, dim); !s.ok()) return s;
    auto [v, i] = arg_extreme(c.b(), x, dim, is_max);
    return std::vector<Value>{finish(c, v, 0), finish(c, i, 1)};
  };
}

// argmax / argmin: (self, dim?, keepdim); no dim means the flattened tensor.
LoweringFn arg_index(bool is_max) {
  return [is_max](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value x = c.tensor(0);
    int64_t dim = 0;
    if (c.is_none(1) || x.rank() == 0) {
      x = b.reshape(x, {x.type.num_elements()});
    } else {
      dim = wrap_dim(c.int_arg(1), x.rank());
    }
    return std::vector<Value>{finish(c, arg_extreme(b, x, dim, is_max).second)};
  };
}

// aminmax(self, *, dim?, keepdim) -> (min, max).
Lowered lower_aminmax(LoweringContext& c) {
  Value x = c.tensor(0);
  Dims dims = reduction_dims(c, 1, x.rank());
  return std::vector<Value>{finish(c, reduce_extreme(c.b(), x, dims, false), 0),
                            finish(c, reduce_extreme(c.b(), x, dims, true), 1)};
}

// any / all over bools; a uint8 input yields uint8 (the out type says so).
LoweringFn logical_reduce(bool is_any) {
  return [is_any](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value x = b.convert(c.tensor(0), DType::kBool);
    // any/all(dim=()) reduce nothing on the CPU (an elementwise test), unlike sum.
    bool no_dims = c.num_args() > 1 && c.arg(1).kind == ArgKind::kIntList && c.int_list(1).empty();
    Dims dims = no_dims ? Dims{} : reduction_dims(c, 1, x.rank());
    Value r = is_any ? b.reduce_any(x, dims) : b.reduce_all(x, dims);
    return std::vector<Value>{finish(c, r)};
  };
}

Lowered lower_count_nonzero(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  Value nz = b.convert(b.compare(x, b.zeros(x.type), "NE"), DType::kI64);
  return std::vector<Value>{finish(c, b.reduce_sum(nz, reduction_dims(c, 1, x.rank())))};
}

// hash_tensor(self, dim, *, keepdim, mode): mode 0 (PyTorch's only one) xors the
// elements' bits as uint64 over the dims: floats by their float64 bits, integers and bools
// by their int64 value's.
Lowered lower_hash_tensor(LoweringContext& c) {
  Builder& b = c.b();
  if (c.int_arg(3) != 0) {
    return base::unimplemented("lowering: hash_tensor mode " + std::to_string(c.int_arg(3)) +
                               " is not lowered");
  }
  Value x = c.tensor(0);
  DType wide = base::is_floating(x.dtype()) ? DType::kF64 : DType::kI64;
  Value v = b.op("stablehlo.bitcast_convert", {b.convert(x, wide)},
                 TensorType{DType::kU64, x.dims()});
  Value r = b.reduce(v, b.zeros(TensorType{DType::kU64, {}}), reduction_dims(c, 1, x.rank()),
                     "xor");
  return std::vector<Value>{finish(c, r)};
}

// The power of two at or below |m| for a float m: m with its mantissa and sign cleared; 1
// where m is 0, subnormal, inf or NaN (nothing to scale by).
Value power_of_two_at_or_below(Builder& b, Value m) {
  bool wide = m.dtype() == DType::kF64;
  TensorType bits{wide ? DType::kI64 : DType::kI32, m.dims()};
  Value mask = b.splat(wide ? 9218868437227405312.0 : 2139095040.0, bits);  // exponent bits
  Value e = b.binary("and", b.op("stablehlo.bitcast_convert", {m}, bits), mask);
  Value normal = b.binary("and", b.compare(e, b.zeros(bits), "NE"), b.compare(e, mask, "NE"));
  Value p = b.op("stablehlo.bitcast_convert", {e}, m.type);
  return b.select(normal, p, b.splat(1, m.type));
}

// var/std/var_mean/std_mean.correction(self, dim?, *, correction?, keepdim). Two passes
// (mean, then squared deviations) in the accumulation type; the divisor is
// max(N - correction, 0) as in PyTorch, so too few samples give inf or NaN. The CPU
// accumulates a float32 variance in double, so its std of values near 1e20 or 1e-30 is
// finite and non-zero where float32 squares overflow or flush to zero: the values are
// divided by the power of two at or below their largest magnitude first and the results
// scaled back. Scaling by a power of two is exact, so in-range results are unchanged.
LoweringFn variance(bool take_sqrt, bool with_mean) {
  return [=](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    DType t = opmath(c.out_type().dtype);
    // A complex input's variance is its parts' variances summed (|x - mean|^2), and its
    // mean complex: each part is scaled, centred and squared as a real input is.
    std::vector<Value> parts;
    if (base::is_complex(c.tensor_type(0).dtype)) {
      Value z = b.convert(c.tensor(0), base::complex_of(t));
      parts = {real_part(b, z), imag_part(b, z)};
    } else {
      parts = {b.convert(c.tensor(0), t)};
    }
    Dims dims = reduction_dims(c, 1, parts[0].rank());
    Value largest = b.unary("abs", parts[0]);
    if (parts.size() == 2) largest = b.max(largest, b.unary("abs", parts[1]));
    Value p = power_of_two_at_or_below(b, b.reduce_max(largest, dims));
    Value n = b.constant(static_cast<double>(count_along(parts[0], dims)), t);
    Value ss;
    std::vector<Value> means;
    for (Value x : parts) {
      x = b.div(x, expand_back(b, p, x, dims));
      Value sum = b.reduce_sum(x, dims);
      Value mean = b.div(sum, b.broadcast_to(n, sum.dims()));
      Value d = b.sub(x, expand_back(b, mean, x, dims));
      Value part_ss = b.reduce_sum(b.mul(d, d), dims);
      ss = means.empty() ? part_ss : b.add(ss, part_ss);
      means.push_back(b.mul(mean, p));
    }
    Value corr = c.is_none(2) ? b.constant(1, t) : c.scalar(2, t);
    Value denom = b.max(b.sub(n, corr), b.zeros(n.type));
    Value var = b.div(ss, b.broadcast_to(denom, ss.dims()));
    // var * p * p, not var * p^2: p^2 can overflow or flush where the product does not.
    var = take_sqrt ? b.mul(b.unary("sqrt", var), p) : b.mul(b.mul(var, p), p);
    std::vector<Value> out{finish(c, var, 0)};
    if (with_mean) {
      Value mean = means[0];
      if (means.size() == 2) {
        mean = b.op("stablehlo.complex", {means[0], means[1]},
                    TensorType{base::complex_of(t), mean.dims()});
      }
      out.push_back(finish(c, mean, 1));
    }
    return out;
  };
}

// logsumexp.out(self, dim, keepdim): shifted by the max so large inputs do not overflow;
// an infinite max shifts by 0, as PyTorch does, so -inf rows stay -inf. A complex input is
// shifted by the max of its real parts (PyTorch's rule too).
Lowered lower_logsumexp(LoweringContext& c) {
  Builder& b = c.b();
  DType t = opmath(float_compute_type(c));
  Value x = b.convert(c.tensor(0), t);
  Dims dims = reduction_dims(c, 1, x.rank());
  DType real = base::is_complex(t) ? base::complex_component(t) : t;
  Value m = reduce_extreme(b, b.convert(x, real), dims, true);
  Value m_inf = b.compare(b.unary("abs", m), b.splat(INFINITY, m.type), "EQ");
  m = b.convert(b.select(m_inf, b.zeros(m.type), m), t);
  Value s = b.reduce_sum(b.unary("exponential", b.sub(x, expand_back(b, m, x, dims))), dims);
  return std::vector<Value>{finish(c, b.add(b.unary("log", s), m))};
}

// sum(|x|^p)^(1/p) along `dims` for `a` = |x| and a 0-d p of a's dtype.
Value general_norm(Builder& b, Value a, const Dims& dims, Value p) {
  Value sum_pow = b.reduce_sum(b.binary("power", a, b.broadcast_to(p, a.dims())), dims);
  Value inv_p = b.div(b.splat(1, sum_pow.type), b.broadcast_to(p, sum_pow.dims()));
  return b.binary("power", sum_pow, inv_p);
}

// The norms whose order has a reduction of its own, by order; for any other order, none.
std::optional<Value> special_norm(Builder& b, Value a, const Dims& dims, double p) {
  if (p == 0) return b.reduce_sum(b.convert(b.convert(a, DType::kBool), a.dtype()), dims);
  if (p == 1) return b.reduce_sum(a, dims);
  if (p == 2) return b.unary("sqrt", b.reduce_sum(b.mul(a, a), dims));
  if (p == INFINITY) return reduce_extreme(b, a, dims, true);
  if (p == -INFINITY) return reduce_extreme(b, a, dims, false);
  return std::nullopt;
}

// The p-norm (argument `p_arg`; none: 2) of |x| `a` over `dims`. Eager calls and compiled
// graphs pass p as structure (is_structural_scalar_arg), so only that order's reduction is
// emitted: p = 2 is one sum of squares, not five reductions and a power per element. A
// runtime p (a Scalar from a caller that describes it as data) computes every special
// case and selects the right one at run time, with the same arithmetic per case.
Value p_norm(LoweringContext& c, size_t p_arg, Value a, const Dims& dims) {
  Builder& b = c.b();
  if (c.is_none(p_arg) || c.arg(p_arg).kind == ArgKind::kDouble) {
    double p = c.is_none(p_arg) ? 2 : c.double_arg(p_arg);
    std::optional<Value> r = special_norm(b, a, dims, p);
    return r ? *r : general_norm(b, a, dims, b.constant(p, a.dtype()));
  }
  Value p = c.scalar(p_arg, a.dtype());
  Value r = general_norm(b, a, dims, p);
  for (double special : {1.0, 2.0, 0.0, double{INFINITY}, -double{INFINITY}}) {
    Value v = *special_norm(b, a, dims, special);
    r = b.select(b.compare(p, b.constant(special, a.dtype()), "EQ"), v, r);
  }
  return r;
}

// norm.* / linalg_vector_norm(self, p, dim, keepdim, ...).
Lowered lower_vector_norm(LoweringContext& c) {
  Builder& b = c.b();
  DType t = opmath(c.out_type().dtype);
  Value x = c.tensor(0);
  Value a = base::is_complex(x.dtype())
                ? b.convert(complex_abs(b, b.convert(x, base::complex_of(t))), t)
                : b.unary("abs", b.convert(x, t));
  return std::vector<Value>{finish(c, p_norm(c, 1, a, reduction_dims(c, 2, a.rank())))};
}

// renorm(self, p, dim, maxnorm): each slice along `dim` whose p-norm exceeds maxnorm is
// scaled by maxnorm / (norm + 1e-7), as PyTorch's kernel: the norm and the factor in the
// accumulation type, the factor rounded to self's dtype, then the product.
Lowered lower_renorm(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.out_type().dtype;
  DType acc = opmath(t);
  bool cplx = base::is_complex(t);
  DType real = cplx ? base::complex_component(acc) : acc;  // the norm's type
  Value x = b.convert(c.tensor(0), acc);
  int64_t dim = wrap_dim(c.int_arg(2), x.rank());
  Dims dims;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != dim) dims.push_back(i);
  }
  Value mag = cplx ? complex_abs(b, x) : b.unary("abs", x);
  Value norm = expand_back(b, p_norm(c, 1, mag, dims), x, dims);
  Value maxnorm = b.broadcast_to(c.scalar(3, real), norm.dims());
  Value scaled = b.div(maxnorm, b.add(norm, b.splat(1e-7, norm.type)));
  Value factor = b.select(b.compare(norm, maxnorm, "GT"), scaled, b.splat(1, norm.type));
  factor = b.convert(b.convert(factor, t), acc);  // complex: k + 0i, as the CPU multiplies
  return std::vector<Value>{finish(c, b.mul(x, factor))};
}

// cumsum / cumprod(self, dim, *, dtype?) and _logcumsumexp(self, dim).
LoweringFn cumulative(const char* kind) {
  std::string k = kind;
  return [k](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    DType t = opmath(c.out_type().dtype);
    Value x = input_as_result(c, c.out_type().dtype);
    if (x.rank() == 0 || x.type.num_elements() == 0) return std::vector<Value>{finish(c, x)};
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    bool is_sum = k == "sum";
    Value identity = b.constant(k == "logsumexp" ? -INFINITY : is_sum ? 0 : 1, t);
    Value r;
    if (k == "logsumexp") {
      r = scan(b, x, dim, identity, [](Builder& s, Value p, Value q) {
        Value hi = nan_extreme(s, p, q, true), lo = nan_extreme(s, p, q, false);
        Value sum = s.add(hi, s.unary("log_plus_one", s.unary("exponential", s.sub(lo, hi))));
        // -inf with -inf and inf with anything would give inf - inf = NaN.
        Value skip = s.binary("or", s.compare(lo, s.constant(-INFINITY, lo.dtype()), "EQ"),
                              s.compare(hi, s.constant(INFINITY, hi.dtype()), "EQ"));
        return s.select(skip, hi, sum);
      });
    } else {
      std::string op = t == DType::kBool ? (is_sum ? "or" : "and") : (is_sum ? "add" : "multiply");
      r = scan(b, x, dim, identity,
               [op](Builder& s, Value p, Value q) { return s.binary(op, p, q); });
    }
    return std::vector<Value>{finish(c, r)};
  };
}

// cummax / cummin(self, dim) -> (values, indices). The CPU kernel walks forward replacing
// the running extreme when `x >= out` (cummax) or `x <= out` (cummin), and at every NaN,
// which then sticks. As two single-operand scans (a scan of (value, index) pairs as one
// variadic reduce_window fails in XLA's CPU compiler beyond 256 elements: a shape mismatch
// in its rewrite, reported as bad_alloc): the running extreme v (NaN-propagating); then,
// as positions j where x[j] reached it (x[j] == v[j], or x[j] is NaN) were exactly the
// kernel's updates, the index is the running max of those positions. The position is
// tagged with x[j]'s sign bit (2j + sign), so that the value comes back with the sign of
// the element the kernel kept: of -0.0 and 0.0, which compare equal, the later.
LoweringFn cumulative_extreme(bool is_max) {
  return [is_max](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value x = c.tensor(0);
    if (x.rank() == 0 || x.type.num_elements() == 0) {
      return std::vector<Value>{finish(c, x, 0), finish(c, b.zeros(c.out_type(1)), 1)};
    }
    int64_t dim = wrap_dim(c.int_arg(1), x.rank());
    bool floating = base::is_floating(x.dtype());
    Value init = is_max ? b.min_value(x.dtype()) : b.max_value(x.dtype());
    Value v = scan(b, x, dim, init, [is_max](Builder& s, Value p, Value q) {
      return nan_extreme(s, p, q, is_max);
    });
    Value reached = b.compare(x, v, "EQ");
    if (floating) reached = b.binary("or", reached, is_nan(b, x));
    TensorType i64{DType::kI64, x.dims()};
    Value tagged = b.mul(b.iota(i64, dim), b.splat(2, i64));
    if (floating) tagged = b.add(tagged, b.convert(sign_bit(b, x), DType::kI64));
    Value last = scan(b, b.select(reached, tagged, b.splat(-1, i64)), dim,
                      b.constant(-1, DType::kI64),
                      [](Builder& s, Value p, Value q) { return s.max(p, q); });
    Value idx = b.binary("shift_right_arithmetic", last, b.splat(1, i64));
    if (floating) {
      Value negative = b.compare(b.binary("and", last, b.splat(1, i64)), b.splat(1, i64), "EQ");
      Value zero = b.compare(v, b.zeros(v.type), "EQ");
      v = b.select(zero, b.select(negative, b.unary("negate", b.zeros(v.type)), b.zeros(v.type)),
                   v);
    }
    return std::vector<Value>{finish(c, v, 0), finish(c, idx, 1)};
  };
}

}  // namespace

void register_reduction_lowerings() {
  register_lowering({"aten::hash_tensor", "aten::hash_tensor.out"}, lower_hash_tensor);
  register_lowering({"aten::sum.dim_IntList", "aten::sum.IntList_out"},
                    accumulate("add", 0, false));
  register_lowering({"aten::nansum", "aten::nansum.out"}, accumulate("add", 0, true));
  register_lowering({"aten::prod", "aten::prod.dim_int", "aten::prod.int_out"},
                    accumulate("multiply", 1, false));
  register_lowering({"aten::mean", "aten::mean.dtype_out", "aten::mean.dim", "aten::mean.out"},
                    lower_mean);
  register_lowering({"aten::amax", "aten::amax.out", "aten::max", "aten::max.unary_out"},
                    extreme(true));
  register_lowering({"aten::amin", "aten::amin.out", "aten::min", "aten::min.unary_out"},
                    extreme(false));
  register_lowering({"aten::aminmax", "aten::aminmax.out"}, lower_aminmax);
  register_lowering({"aten::max.dim", "aten::max.dim_max"}, extreme_with_index(true));
  register_lowering({"aten::min.dim", "aten::min.dim_min"}, extreme_with_index(false));
  register_lowering({"aten::argmax", "aten::argmax.out"}, arg_index(true));
  register_lowering({"aten::argmin", "aten::argmin.out"}, arg_index(false));
  register_lowering({"aten::any", "aten::any.dim", "aten::any.dims", "aten::any.out",
                     "aten::any.dims_out", "aten::any.all_out"},
                    logical_reduce(true));
  register_lowering({"aten::all", "aten::all.dim", "aten::all.dims", "aten::all.out",
                     "aten::all.dims_out", "aten::all.all_out"},
                    logical_reduce(false));
  register_lowering({"aten::count_nonzero.dim_IntList"}, lower_count_nonzero);
  register_lowering({"aten::var.correction", "aten::var.correction_out"}, variance(false, false));
  register_lowering({"aten::std.correction", "aten::std.correction_out"}, variance(true, false));
  register_lowering({"aten::var_mean.correction"}, variance(false, true));
  register_lowering({"aten::std_mean.correction"}, variance(true, true));
  register_lowering({"aten::logsumexp.out"}, lower_logsumexp);
  register_lowering({"aten::norm.ScalarOpt_dim", "aten::norm.ScalarOpt_dim_dtype", "aten::norm.out",
                     "aten::norm.dtype_out", "aten::linalg_vector_norm",
                     "aten::linalg_vector_norm.out"},
                    lower_vector_norm);
  register_lowering({"aten::renorm", "aten::renorm_", "aten::renorm.out"}, lower_renorm);
  register_lowering({"aten::cumsum", "aten::cumsum_", "aten::cumsum.out"}, cumulative("sum"));
  register_lowering({"aten::cumprod", "aten::cumprod_", "aten::cumprod.out"}, cumulative("prod"));
  register_lowering({"aten::_logcumsumexp", "aten::_logcumsumexp.out"}, cumulative("logsumexp"));
  register_lowering({"aten::cummax", "aten::cummax.out"}, cumulative_extreme(true));
  register_lowering({"aten::cummin", "aten::cummin.out"}, cumulative_extreme(false));
}

}  // namespace torchtpu::lowering
