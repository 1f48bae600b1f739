// Factory lowerings: fill_, zero_, arange, linspace, logspace, eye, tril/triu_indices.
//
// Sequences follow PyTorch's CPU kernels (RangeFactoriesKernel.cpp, RangeFactories.cpp)
// operation for operation, including the precision each step runs in, so results match
// PyTorch's CPU reference loops bit for bit. Start/end/step stay runtime scalars; only
// lengths (from the out type) and the logspace base are compile-time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {

ScalarCast fill_cast(const TensorType& out) {
  return base::is_half_float(out.dtype) && out.num_elements() == 1 ? ScalarCast::kWrapped
                                                                   : ScalarCast::kChecked;
}

namespace {

using Result = base::StatusOr<std::vector<Value>>;

// fill_.Scalar(self, value) and fill_.Tensor(self, value): value may be a runtime scalar
// or a 0-dim tensor, cast as fill_cast says. scalar_tensor fills so, and through it where
// with a number branch: where(h > 0, 70000.0, h) is inf where h > 0.
Result lower_fill(LoweringContext& c) {
  const TensorType& out = c.out_type();
  return std::vector<Value>{c.operand(1, out.dtype, out.dims, fill_cast(out))};
}

Result lower_zero(LoweringContext& c) { return std::vector<Value>{c.b().zeros(c.out_type())}; }

// at::acc_type<T, /*is_cuda=*/false>: the type arange accumulates in on CPU.
DType cpu_acc_type(DType t) {
  if (t == DType::kF32 || t == DType::kF64) return DType::kF64;
  if (base::is_floating(t)) return DType::kF32;
  return DType::kI64;
}

// 0, 1, ..., n-1 of `t` (floats get the same rounding as PyTorch's int64 -> float cast).
Value index_sequence(Builder& b, int64_t n, DType t) {
  return b.convert(b.iota(TensorType{DType::kI64, {n}}, 0), t);
}

// arange.start_out(start, end, step, out): start + step * i in the CPU accumulate type,
// rounded once. PyTorch's AVX2 loop builds f32 vectors from a rounded base instead, so
// some f32 elements there differ from this (and its own scalar loop) by one ulp.
Result lower_arange(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.dtype == DType::kBool) {
    return base::invalid_argument("lowering: aten::arange.start_out is not implemented for bool");
  }
  // `out` may have any shape with the sequence's element count (filled in row-major order).
  int64_t n = out.num_elements();
  Dims flat{n};
  DType acc = cpu_acc_type(out.dtype);
  Value start = b.broadcast_to(c.scalar(0, acc), flat);
  Value step = b.broadcast_to(c.scalar(2, acc), flat);
  Value r = b.add(start, b.mul(step, index_sequence(b, n, acc)));
  return std::vector<Value>{b.reshape(b.convert(r, out.dtype), out.dims)};
}

// The two halves of a linspace: start + step * i below steps / 2, end - step * (steps-1-i)
// from there on, so both endpoints are exact. Indices stay i64 (as in PyTorch's loop) and
// are cast to the type of `start`, `end` and `step` only where they are multiplied.
Value two_sided_ramp(Builder& b, Value start, Value end, Value step, int64_t steps) {
  TensorType index_type{DType::kI64, {steps}};
  Value idx = b.iota(index_type, 0);
  Value rev = b.sub(b.splat(static_cast<double>(steps - 1), index_type), idx);
  DType t = start.dtype();
  // A complex step times an index scales its parts (c10::complex times a real).
  auto times = [&](Value i) {
    return base::is_complex(t) ? complex_scale(b, step, b.convert(i, base::complex_component(t)))
                               : b.mul(step, b.convert(i, t));
  };
  Value low = b.add(start, times(idx));
  Value high = b.sub(end, times(rev));
  Value first_half = b.compare(idx, b.splat(static_cast<double>(steps / 2), index_type), "LT");
  return b.select(first_half, low, high);
}

// steps - 1, the divisor of a linspace's step, hidden from XLA's simplifier: it turns a
// division by a constant into a multiplication by the rounded reciprocal, which is off by
// an ulp (linspace(1, 127, 50, dtype=int32)[21] truncated 54.999... to 54; PyTorch: 55).
Value steps_minus_one(Builder& b, int64_t steps, DType t) {
  return b.opaque(b.constant(static_cast<double>(steps - 1), t));
}

}  // namespace

// PyTorch's linspace of `steps` > 1 values of dtype `t` between start and end (0-d, already
// of dtype t, as scalar_start.to<scalar_t>() casts them). The step is computed in t for
// floats (PyTorch's scalar_t arithmetic) and in f64 for integers, which are truncated per
// element. The ramp runs in f64 for f32: PyTorch's compiled loop contracts start + step * i
// into one fused multiply-add, whose single rounding f64 reproduces (f32 * index is exact
// in f64). Half types use c10::Half operators, which round after every operation.
Value linspace_values(Builder& b, Value start, Value end, int64_t steps, DType t) {
  if (base::is_complex(t)) {
    // complex<float> arithmetic throughout: the step divided as c10::complex divides.
    Value step = complex_divide(b, b.sub(end, start), steps_minus_one(b, steps, t));
    auto ramp_operand = [&](Value v) { return b.broadcast_to(v, Dims{steps}); };
    return two_sided_ramp(b, ramp_operand(start), ramp_operand(end), ramp_operand(step), steps);
  }
  bool half = base::is_half_float(t);
  DType step_type = base::is_floating(t) ? t : DType::kF64;
  DType ramp_type = half ? t : DType::kF64;
  start = b.convert(start, step_type);
  end = b.convert(end, step_type);
  Value step = b.div(b.sub(end, start), steps_minus_one(b, steps, step_type));
  Dims dims{steps};
  auto ramp_operand = [&](Value v) { return b.broadcast_to(b.convert(v, ramp_type), dims); };
  Value r = two_sided_ramp(b, ramp_operand(start), ramp_operand(end), ramp_operand(step), steps);
  return b.convert(r, t);
}

namespace {

// linspace.out(start, end, steps, out).
Result lower_linspace(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  int64_t steps = out.num_elements();
  if (out.dtype == DType::kBool) {
    return base::invalid_argument("lowering: aten::linspace.out is not implemented for bool");
  }
  if (steps == 0) return std::vector<Value>{b.zeros(out)};
  if (steps == 1) return std::vector<Value>{b.broadcast_to(c.scalar(0, out.dtype), out.dims)};
  Value r = linspace_values(b, c.scalar(0, out.dtype), c.scalar(1, out.dtype), steps, out.dtype);
  return std::vector<Value>{b.reshape(r, out.dims)};
}

// logspace.out(start, end, steps, base, out): base ** linspace computed in f64 (integers:
// the base is rounded to f32 first, as PyTorch does), then cast.
Result lower_logspace(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  int64_t steps = out.num_elements();
  if (out.dtype == DType::kBool) {
    return base::invalid_argument("lowering: aten::logspace.out is not implemented for bool");
  }
  if (steps == 0) return std::vector<Value>{b.zeros(out)};
  double base_value = c.double_arg(3);
  Dims dims{steps};
  if (base::is_complex(out.dtype)) {
    // base ** (the complex linspace), as C's cpow: exp(exponent * log(base)).
    Value exponent = steps == 1 ? b.broadcast_to(c.scalar(0, out.dtype), dims)
                                : linspace_values(b, c.scalar(0, out.dtype),
                                                  c.scalar(1, out.dtype), steps, out.dtype);
    Value base = b.splat(base_value, TensorType{out.dtype, dims});
    return std::vector<Value>{b.reshape(complex_pow(b, base, exponent), out.dims)};
  }
  Value exponent;
  if (steps == 1) {
    // PyTorch fills with pow(base, start.to<double>()), skipping the dtype round trip.
    exponent = b.broadcast_to(c.scalar(0, DType::kF64), dims);
  } else {
    bool floating = base::is_floating(out.dtype);
    if (!floating) base_value = static_cast<float>(base_value);
    // The span is end - start in the out dtype (C++ promotes small integers to int, so
    // integers subtract in i64), widened to f64 before the division.
    DType span_type = floating ? out.dtype : DType::kI64;
    Value start = b.convert(c.scalar(0, out.dtype), span_type);
    Value end = b.convert(c.scalar(1, out.dtype), span_type);
    Value span = b.convert(b.sub(end, start), DType::kF64);
    Value step = b.div(span, steps_minus_one(b, steps, DType::kF64));
    exponent = two_sided_ramp(b, b.broadcast_to(b.convert(start, DType::kF64), dims),
                              b.broadcast_to(b.convert(end, DType::kF64), dims),
                              b.broadcast_to(step, dims), steps);
  }
  Value base = b.splat(base_value, TensorType{DType::kF64, dims});
  Value r = b.binary("power", base, exponent);
  return std::vector<Value>{b.reshape(b.convert(r, out.dtype), out.dims)};
}

// eye.out(n, out) and eye.m_out(n, m, out): ones where row == column.
Result lower_eye(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.rank() != 2) {
    return base::invalid_argument("lowering: " + c.op_name() + " expects a 2-d out (got " +
                                  out.str() + ")");
  }
  TensorType idx{DType::kI64, out.dims};
  Value diagonal = b.compare(b.iota(idx, 0), b.iota(idx, 1), "EQ");
  return std::vector<Value>{b.convert(diagonal, out.dtype)};
}

// tril_indices / triu_indices(row, col, offset, dtype?, layout?, device?, pin_memory?):
// the [2, N] coordinates of the lower (upper) triangle of a row x col matrix, row-major.
// Each element of the row x col grid is scattered to its position in the list: the
// number of triangle elements in the rows before it (host offsets, one per row) plus its
// column's rank within its row; elements off the triangle go to a slot cut off after.
LoweringFn triangle_indices(bool lower) {
  return [lower](LoweringContext& c) -> Result {
    Builder& b = c.b();
    const TensorType& out = c.out_type();
    int64_t rows = c.int_arg(0), cols = c.int_arg(1), offset = c.int_arg(2);
    // Columns [first, end) of row i are in the triangle.
    auto first = [&](int64_t i) {
      return lower ? 0 : std::clamp<int64_t>(i + offset, 0, cols);
    };
    auto end = [&](int64_t i) {
      return lower ? std::clamp<int64_t>(i + offset + 1, 0, cols) : cols;
    };
    std::vector<int64_t> row_start, row_first;
    int64_t n = 0;
    for (int64_t i = 0; i < rows; ++i) {
      row_start.push_back(n);
      row_first.push_back(first(i));
      n += std::max<int64_t>(end(i) - first(i), 0);
    }
    if (out.rank() != 2 || out.dims[0] != 2 || out.dims[1] != n) {
      return base::invalid_argument("lowering: " + c.op_name() + ": out type " + out.str() +
                                    " is not [2, " + std::to_string(n) + "]");
    }
    if (n == 0) return std::vector<Value>{b.zeros(out)};
    TensorType grid{DType::kI64, {rows, cols}};
    Value i = b.iota(grid, 0), j = b.iota(grid, 1);
    Value diagonal = b.add(i, b.splat(static_cast<double>(offset), grid));
    Value in = b.compare(j, diagonal, lower ? "LE" : "GE");
    Value pos = b.add(b.broadcast_in_dim(b.constant_i64s(row_start, {rows}), grid.dims, {0}),
                      b.sub(j, b.broadcast_in_dim(b.constant_i64s(row_first, {rows}),
                                                  grid.dims, {0})));
    pos = b.select(in, pos, b.splat(static_cast<double>(n), grid));
    int64_t m = rows * cols;
    Value coords = b.concatenate({b.reshape(i, {m, 1}), b.reshape(j, {m, 1})}, 1);
    Value list = scatter(b, b.zeros(TensorType{DType::kI64, {n + 1, 2}}),
                         b.reshape(pos, {m, 1}), coords, {1}, {0}, {0}, 1, "");
    list = b.slice(list, {0, 0}, {n, 2}, {1, 1});
    return std::vector<Value>{b.convert(b.transpose(list, {1, 0}), out.dtype)};
  };
}

}  // namespace

void register_factory_lowerings() {
  register_lowering({"aten::fill_.Scalar", "aten::fill_.Tensor"}, lower_fill);
  register_lowering({"aten::zero_"}, lower_zero);
  register_lowering({"aten::arange.start_out"}, lower_arange);
  register_lowering({"aten::linspace.out"}, lower_linspace);
  register_lowering({"aten::logspace.out"}, lower_logspace);
  register_lowering({"aten::eye.out", "aten::eye.m_out"}, lower_eye);
  register_lowering({"aten::tril_indices", "aten::tril_indices.out"}, triangle_indices(true));
  register_lowering({"aten::triu_indices", "aten::triu_indices.out"}, triangle_indices(false));
}

}  // namespace torchtpu::lowering
