// Helpers shared by the elementwise-style lowering families.
#pragma once

#include "lowering/lowering.h"

namespace torchtpu::lowering {

// Tensor or scalar argument `i` converted to `t` and broadcast to the output's dims.
inline Value out_operand(LoweringContext& c, size_t i, DType t) {
  return c.operand(i, t, c.out_type().dims);
}

// The type arithmetic runs in for a result of type `t`: float16/bfloat16 compute in
// float32 and round once at the end, like PyTorch's CPU kernels (opmath), so a Python
// scalar is not rounded to 16 bits before use.
inline DType opmath(DType t) {
  return base::is_half_float(t) ? DType::kF32 : t;
}

// Operand i of an op whose inputs promote to `rt`, in opmath(rt), broadcast to the output. A
// tensor of another dtype is first converted to `rt`, as TensorIterator casts inputs to the
// common dtype (float16 + a float32 tensor 0.1 adds float16(0.1); an int32 70000 is inf in
// float16). A number keeps its value (PyTorch's kernels read it in opmath), unless
// `number_too` (comparisons: CPU compares float16(0.1) with a float16 tensor); with
// `one_element_as_number`, so does a one-element tensor (the CPU's mul and div read such a
// second operand's original value for float16/bfloat16 results).
inline Value promoted_operand(LoweringContext& c, size_t i, DType rt,
                              ScalarCast cast = ScalarCast::kChecked, bool number_too = false,
                              bool one_element_as_number = false) {
  DType t = opmath(rt);
  const OpArg& a = c.arg(i);
  bool tensor = a.kind == ArgKind::kTensor && a.type.dtype != rt &&
                !(one_element_as_number && a.type.num_elements() == 1);
  if (t != rt && (tensor || (number_too && a.kind == ArgKind::kScalar))) {
    Value v = tensor ? c.tensor(i) : c.scalar(i, rt, cast);
    return c.b().broadcast_to(c.b().convert(c.b().convert(v, rt), t), c.out_type().dims);
  }
  return c.operand(i, t, c.out_type().dims, cast);
}

// The same for an operand of a binary op whose Scalar overload PyTorch runs as its Tensor
// overload on a wrapped number: a number is cast without an overflow check.
inline Value binary_operand(LoweringContext& c, size_t i, DType rt,
                            bool one_element_as_number = false) {
  return promoted_operand(c, i, rt, ScalarCast::kWrapped, false, one_element_as_number);
}

// Converts `v` to the dtype of output `k` (the caller's out= or in-place target may have
// a different dtype than the computation).
inline Value to_out(LoweringContext& c, Value v, size_t k = 0) {
  return c.b().convert(v, c.out_type(k).dtype);
}

// Converts `v`, the op's result computed in opmath(natural), to output `k`, rounding it to
// `natural` first: PyTorch computes an out= call in the op's own result dtype and then
// casts into out, so float16 33000 + 33000 is inf even with a float64 out.
inline Value to_out_via(LoweringContext& c, DType natural, Value v, size_t k = 0) {
  if (base::is_half_float(natural) && v.dtype() == DType::kF32) v = c.b().convert(v, natural);
  return to_out(c, v, k);
}

// Dtype a floating-only computation runs in: the output's dtype when it is floating or
// complex, else float32 (e.g. sqrt of an int tensor).
inline DType float_compute_type(LoweringContext& c) {
  DType t = c.out_type().dtype;
  return base::is_floating(t) || base::is_complex(t) ? opmath(t) : DType::kF32;
}

// `v` (float32) rounded to the 16-bit float type `t`, as c10's BFloat16 and Half operators
// round every result; unchanged for other types. XLA computes chains of 16-bit operations
// in float32 without the rounding in between, so it is explicit.
inline Value round_to(Builder& b, Value v, DType t) {
  if (t == DType::kBF16) {
    return b.op("stablehlo.reduce_precision", {v}, v.type,
                "exponent_bits = 8 : i32, mantissa_bits = 7 : i32");
  }
  if (t == DType::kF16) {
    return b.op("stablehlo.reduce_precision", {v}, v.type,
                "exponent_bits = 5 : i32, mantissa_bits = 10 : i32");
  }
  return v;
}

// The p-norm of `v` along its last dim, term by term as the CPU kernels (p = 0 counts the
// non-zero entries), in v's dtype (distance.cc).
Value norm_of_last_dim(Builder& b, Value v, double p);

// Registers one lowering under the functional, in-place and out= names of an op with the
// given overloads: e.g. ("add", {"Tensor", "Scalar"}) registers aten::add.Tensor,
// aten::add_.Tensor, aten::add.Scalar, aten::add_.Scalar, aten::add.out and the
// "<overload>_out" names (aten::add.Scalar_out) that some ops use instead.
// Division rounding toward -inf with PyTorch's CPU semantics (elementwise.cc /
// elementwise_math.cc): integers, and floats (via fmod, so an infinite dividend gives NaN).
Value floor_divide_int(Builder& b, Value a, Value d);
// Records the data check PyTorch's CPU integer division kernels make (div with a rounding
// mode, floor_divide, remainder, fmod): a zero divisor raises RuntimeError
// "ZeroDivisionError" rather than giving whatever the hardware's division returns.
// `d`, the divisor in the computation's dtype, is checked only when that is an integer.
void require_nonzero_divisor(LoweringContext& c, Value d);
Value floor_divide_float(Builder& b, Value x, Value y);

// Real helpers (elementwise_math.cc): whether x is NaN, elementwise; the sign bit of a float
// (true for -0.0 and negative NaNs); |x| with y's sign bit; C's hypot (no overflow of the
// squares; infinite when either is, even with a NaN other).
Value is_nan(Builder& b, Value x);
Value sign_bit(Builder& b, Value x);
Value copysign(Builder& b, Value x, Value y);
Value hypot(Builder& b, Value x, Value y);
Value log_hypot(Builder& b, Value x, Value y);
// x * 2^n for a float32/float64 x and an integer n of x's dims, exact wherever the product
// is a normal number (C's ldexp); 2^x for a real float x, exact at integers (C's exp2).
Value times_power_of_two(Builder& b, Value x, Value n);
Value exp2_real(Builder& b, Value x);
// The real and imaginary parts of z (of a real z: z itself and zeros) (complex.cc).
Value real_part(Builder& b, Value z);
Value imag_part(Builder& b, Value z);
// Complex functions with C's (and PyTorch's CPU) special values (complex.cc).
Value complex_abs(Builder& b, Value z);
Value complex_log(Builder& b, Value z);
Value complex_sgn(Builder& b, Value z);
Value complex_sqrt(Builder& b, Value z);
Value complex_pow(Builder& b, Value z, Value w);
Value complex_exp(Builder& b, Value z);
Value complex_sin(Builder& b, Value z);
Value complex_cos(Builder& b, Value z);
Value complex_tanh(Builder& b, Value z);
Value complex_sinh(Builder& b, Value z);
Value complex_cosh(Builder& b, Value z);
Value complex_tan(Builder& b, Value z);
Value complex_asin(Builder& b, Value z);
Value complex_acos(Builder& b, Value z);
Value complex_atan(Builder& b, Value z);
Value complex_asinh(Builder& b, Value z);
Value complex_acosh(Builder& b, Value z);
Value complex_atanh(Builder& b, Value z);
Value complex_sigmoid(Builder& b, Value z);
Value complex_divide(Builder& b, Value num, Value den);
// A real value whose last dim (of size 2) holds (real, imag) pairs, as complex values.
Value pairs_as_complex(Builder& b, Value x);
// z * k for a real k (a value of z's part dtype broadcastable to z, or a number).
Value complex_scale(Builder& b, Value z, Value k);
Value complex_scale(Builder& b, Value z, double k);
Value complex_reciprocal(Builder& b, Value z);
Value complex_rsqrt(Builder& b, Value z);

void register_with_variants(const std::string& base_name, const std::vector<std::string>& overloads,
                            LoweringFn fn);

}  // namespace torchtpu::lowering
