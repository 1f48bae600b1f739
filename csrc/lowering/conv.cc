// Convolution (1d/2d/3d, grouped, transposed) and 2-d pooling lowerings.
//
// PyTorch routes convolutions of out-of-tree devices to convolution_overrideable and
// convolution_backward_overrideable. Every convolution here is one stablehlo.convolution:
// a transposed convolution is a forward one over the stride-dilated input with the
// kernel flipped and its in/out channels swapped per group, and the weight gradient is
// a convolution of the input with grad_output (batch_group_count splits the groups).
#include <cmath>
#include <cstdio>
#include <optional>
#include <utility>

#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

DType acc_type(DType t) { return t == DType::kBF16 || t == DType::kF16 ? DType::kF32 : t; }

Dims range(int64_t begin, int64_t end) {
  Dims d;
  for (int64_t i = begin; i < end; ++i) d.push_back(i);
  return d;
}

// "[b, f, 0, 1]" with `first` and `second` naming dims 0 and 1.
std::string conv_spec(const char* first, const char* second, int64_t num_spatial) {
  std::string s = std::string("[") + first + ", " + second;
  for (int64_t i = 0; i < num_spatial; ++i) s += ", " + std::to_string(i);
  return s + "]";
}

struct ConvAttrs {
  std::string lhs, rhs, out;  // conv_spec strings
  Dims window_strides, lhs_dilation, rhs_dilation;
  Dims pad_lo, pad_hi;
  int64_t feature_groups = 1, batch_groups = 1;
};

Value convolution(Builder& b, Value lhs, Value rhs, const ConvAttrs& a, const TensorType& out) {
  std::string padding = "dense<[";
  for (size_t i = 0; i < a.pad_lo.size(); ++i) {
    padding += (i ? ", [" : "[") + std::to_string(a.pad_lo[i]) + ", " +
               std::to_string(a.pad_hi[i]) + "]";
  }
  padding += "]> : tensor<" + std::to_string(a.pad_lo.size()) + "x2xi64>";
  std::string attrs = "batch_group_count = " + std::to_string(a.batch_groups) +
                      " : i64, dimension_numbers = #stablehlo.conv<" + a.lhs + "x" + a.rhs +
                      "->" + a.out + ">, feature_group_count = " +
                      std::to_string(a.feature_groups) + " : i64, lhs_dilation = " +
                      i64_array(a.lhs_dilation) + ", padding = " + padding +
                      ", rhs_dilation = " + i64_array(a.rhs_dilation) +
                      ", window_strides = " + i64_array(a.window_strides);
  return b.op("stablehlo.convolution", {lhs, rhs}, out, attrs);
}

struct ConvParams {
  Dims stride, padding, dilation, output_padding;
  int64_t groups = 1;
};

// A per-spatial-dim list that PyTorch may pass with one entry for all dims.
Dims per_dim(const Dims& v, int64_t num_spatial, int64_t fallback) {
  if (v.empty()) return Dims(num_spatial, fallback);
  if (v.size() == 1) return Dims(num_spatial, v[0]);
  return v;
}

// x [N, Cin, S...] (*) w [Cout, Cin/g, K...] -> [N, Cout, O...].
Value conv_forward(Builder& b, Value x, Value w, const ConvParams& p, DType out_dtype) {
  int64_t nsp = x.rank() - 2;
  ConvAttrs a{conv_spec("b", "f", nsp), conv_spec("o", "i", nsp), conv_spec("b", "f", nsp),
              p.stride, Dims(nsp, 1), p.dilation, p.padding, p.padding, p.groups, 1};
  Dims out{x.dims()[0], w.dims()[0]};
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t span = p.dilation[i] * (w.dims()[2 + i] - 1) + 1;
    out.push_back((x.dims()[2 + i] + 2 * p.padding[i] - span) / p.stride[i] + 1);
  }
  return convolution(b, x, w, a, TensorType{out_dtype, out});
}

// Transposed convolution: x [N, Cin, S...] with w [Cin, Cout/g, K...] -> [N, Cout, O...],
// O = (S - 1) * stride - 2 * padding + dilation * (K - 1) + output_padding + 1.
Value conv_transpose(Builder& b, Value x, Value w, const ConvParams& p, DType out_dtype) {
  int64_t nsp = x.rank() - 2, g = p.groups;
  const Dims& wd = w.dims();
  int64_t cin = wd[0], cout_g = wd[1];
  Dims grouped{g, cin / g, cout_g}, swapped{g * cout_g, cin / g};
  for (int64_t i = 0; i < nsp; ++i) {
    grouped.push_back(wd[2 + i]);
    swapped.push_back(wd[2 + i]);
  }
  Dims perm{0, 2, 1};
  for (int64_t i = 0; i < nsp; ++i) perm.push_back(3 + i);
  Value k = b.reshape(b.transpose(b.reshape(w, grouped), perm), swapped);
  k = b.op("stablehlo.reverse", {k}, k.type, "dimensions = " + i64_array(range(2, 2 + nsp)));
  ConvAttrs a{conv_spec("b", "f", nsp), conv_spec("o", "i", nsp), conv_spec("b", "f", nsp),
              Dims(nsp, 1), p.stride, p.dilation, {}, {}, g, 1};
  Dims out{x.dims()[0], g * cout_g};
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t edge = p.dilation[i] * (wd[2 + i] - 1);
    a.pad_lo.push_back(edge - p.padding[i]);
    a.pad_hi.push_back(edge - p.padding[i] + p.output_padding[i]);
    out.push_back((x.dims()[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] + edge +
                  p.output_padding[i] + 1);
  }
  return convolution(b, x, k, a, TensorType{out_dtype, out});
}

// Gradient of conv_forward(x, w) with respect to w [Cout, Cin/g, K...] given gy.
Value conv_weight_grad(Builder& b, Value x, Value gy, const Dims& kernel, const ConvParams& p,
                       DType out_dtype) {
  int64_t nsp = x.rank() - 2;
  ConvAttrs a{conv_spec("f", "b", nsp), conv_spec("i", "o", nsp), conv_spec("f", "b", nsp),
              p.dilation, Dims(nsp, 1), p.stride, p.padding, {}, 1, p.groups};
  Dims out{gy.dims()[1], x.dims()[1] / p.groups};
  for (int64_t i = 0; i < nsp; ++i) {
    int64_t out_span = (gy.dims()[2 + i] - 1) * p.stride[i] + 1;
    int64_t kernel_span = p.dilation[i] * (kernel[i] - 1) + 1;
    // May be negative: input positions no window reaches are cut off.
    a.pad_hi.push_back(out_span - x.dims()[2 + i] + kernel_span - p.padding[i] - 1);
    out.push_back(kernel[i]);
  }
  return convolution(b, x, gy, a, TensorType{out_dtype, out});
}

ConvParams conv_params(LoweringContext& c, size_t first, int64_t nsp) {
  ConvParams p;
  p.stride = per_dim(c.int_list(first), nsp, 1);
  p.padding = per_dim(c.int_list(first + 1), nsp, 0);
  p.dilation = per_dim(c.int_list(first + 2), nsp, 1);
  p.output_padding = per_dim(c.int_list(first + 4), nsp, 0);
  p.groups = c.int_arg(first + 5);
  return p;
}

// convolution_overrideable(input, weight, bias?, stride, padding, dilation, transposed,
// output_padding, groups).
Result lower_convolution(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0), w = c.tensor(1);
  ConvParams p = conv_params(c, 3, x.rank() - 2);
  DType t = c.out_type().dtype;
  Value y = c.bool_arg(6) ? conv_transpose(b, x, w, p, t) : conv_forward(b, x, w, p, t);
  if (!c.is_none(2)) y = b.add(y, b.broadcast_in_dim(b.convert(c.tensor(2), t), y.dims(), {1}));
  return std::vector<Value>{y};
}

// convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation,
// transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias).
// A transposed convolution is the adjoint of a forward one, so their roles swap.
Result lower_convolution_backward(LoweringContext& c) {
  Builder& b = c.b();
  const OpArg& mask_arg = c.arg(9);
  if (mask_arg.kind != ArgKind::kIntList || mask_arg.ints.size() != 3) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  ": output_mask must be a list of 3 bools");
  }
  Value gy = c.tensor(0), x = c.tensor(1), w = c.tensor(2);
  int64_t nsp = x.rank() - 2;
  ConvParams p = conv_params(c, 3, nsp);
  bool transposed = c.bool_arg(6);
  Dims kernel(w.dims().begin() + 2, w.dims().end());
  std::vector<std::optional<Value>> grads(3);
  if (mask_arg.ints[0]) {
    if (transposed) {
      // The forward's output_padding added trailing positions no input reaches: a forward
      // convolution of the gradient yields a window past the input there; cut it off.
      Value g = conv_forward(b, gy, w, p, x.dtype());
      if (g.dims() != x.dims()) {
        g = b.slice(g, Dims(g.rank(), 0), x.dims(), Dims(g.rank(), 1));
      }
      grads[0] = g;
    } else {
      // output_padding recovers the input positions the forward strides skipped.
      ConvParams q = p;
      for (int64_t i = 0; i < nsp; ++i) {
        int64_t span = (gy.dims()[2 + i] - 1) * p.stride[i] - 2 * p.padding[i] +
                       p.dilation[i] * (kernel[i] - 1) + 1;
        q.output_padding[i] = x.dims()[2 + i] - span;
      }
      grads[0] = conv_transpose(b, gy, w, q, x.dtype());
    }
  }
  if (mask_arg.ints[1]) {
    grads[1] = transposed ? conv_weight_grad(b, gy, x, kernel, p, w.dtype())
                          : conv_weight_grad(b, x, gy, kernel, p, w.dtype());
  }
  if (mask_arg.ints[2]) {
    Dims red{0};
    for (int64_t i = 0; i < nsp; ++i) red.push_back(2 + i);
    grads[2] = b.reduce_sum(b.convert(gy, acc_type(gy.dtype())), red);
  }
  // The caller lists either all three results or only the ones the mask asks for.
  std::vector<Value> out;
  bool all = c.out_types().size() == 3;
  for (size_t k = 0; k < 3; ++k) {
    if (!grads[k] && !all) continue;
    const TensorType& t = c.out_type(out.size());
    out.push_back(grads[k] ? b.convert(*grads[k], t.dtype) : b.zeros(t));
  }
  return out;
}

// Pooling window geometry over the last two dims of an input of rank 3 or 4.
struct Pool2d {
  Dims kernel, stride, padding, dilation{1, 1};
};

Pool2d pool_params(LoweringContext& c, size_t kernel_i) {
  Pool2d p;
  p.kernel = per_dim(c.int_list(kernel_i), 2, 1);
  p.stride = c.int_list(kernel_i + 1).empty() ? p.kernel : per_dim(c.int_list(kernel_i + 1), 2, 1);
  p.padding = per_dim(c.int_list(kernel_i + 2), 2, 0);
  return p;
}

// reduce_window over the last two dims of `operands` with low padding p.padding and enough
// high padding to produce `out_dims` windows (ceil_mode may need more than p.padding), then
// sliced to `out_dims`.
std::vector<Value> pool_windows(Builder& b, const std::vector<Value>& operands,
                                const std::vector<Value>& inits, const Pool2d& p,
                                const Dims& out_dims, const Builder::RegionBody& body) {
  const Dims& dims = operands[0].dims();
  int64_t r = static_cast<int64_t>(dims.size());
  Dims window(r, 1), strides(r, 1), dilations(r, 1), full = dims;
  std::string padding = "dense<[";
  for (int64_t i = 0; i < r; ++i) {
    int64_t lo = 0, hi = 0;
    if (i >= r - 2) {
      int64_t j = i - (r - 2);
      window[i] = p.kernel[j];
      strides[i] = p.stride[j];
      dilations[i] = p.dilation[j];
      int64_t span = p.dilation[j] * (p.kernel[j] - 1) + 1;
      lo = p.padding[j];
      hi = std::max(p.padding[j], (out_dims[i] - 1) * p.stride[j] + span - dims[i] - lo);
      full[i] = (dims[i] + lo + hi - span) / p.stride[j] + 1;
    }
    padding += (i ? ", [" : "[") + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  }
  padding += "]> : tensor<" + std::to_string(r) + "x2xi64>";
  std::vector<TensorType> results, block_args;
  for (const Value& v : operands) {
    results.push_back(TensorType{v.dtype(), full});
    block_args.push_back(TensorType{v.dtype(), {}});
  }
  for (const Value& v : operands) block_args.push_back(TensorType{v.dtype(), {}});
  std::vector<Value> all = operands;
  all.insert(all.end(), inits.begin(), inits.end());
  std::vector<Value> outs = b.op_with_region(
      "stablehlo.reduce_window", all, results, block_args, body,
      "padding = " + padding + ", window_dilations = " + i64_array(dilations) +
          ", window_dimensions = " + i64_array(window) + ", window_strides = " +
          i64_array(strides));
  for (Value& v : outs) v = b.slice(v, Dims(r, 0), out_dims, Dims(r, 1));
  return outs;
}

// Flat index h * W + w of every element within its (H, W) plane.
Value plane_indices(Builder& b, const Dims& dims) {
  int64_t r = static_cast<int64_t>(dims.size());
  TensorType t{DType::kI64, dims};
  Value row = b.mul(b.iota(t, r - 2), b.splat(static_cast<double>(dims[r - 1]), t));
  return b.add(row, b.iota(t, r - 1));
}

// max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
// -> (out, indices). Ties keep the first index and NaN wins, as on CPU.
Result lower_max_pool2d(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  Pool2d p = pool_params(c, 1);
  p.dilation = per_dim(c.int_list(4), 2, 1);
  Value idx = plane_indices(b, x.dims());
  auto body = [](Builder& rb, const std::vector<Value>& a) {
    Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
    Value a_nan = rb.compare(av, av, "NE"), b_nan = rb.compare(bv, bv, "NE");
    Value tie = rb.binary("or", rb.compare(av, bv, "EQ"), rb.binary("and", a_nan, b_nan));
    Value first = rb.compare(ai, bi, "LT");
    Value pick_a = rb.binary(
        "or", rb.binary("or", rb.compare(av, bv, "GT"), rb.binary("and", tie, first)),
        rb.binary("and", a_nan, rb.unary("not", b_nan)));
    return std::vector<Value>{rb.select(pick_a, av, bv), rb.select(pick_a, ai, bi)};
  };
  std::vector<Value> outs =
      pool_windows(b, {x, idx}, {b.min_value(x.dtype()), b.max_value(DType::kI64)}, p,
                   c.out_type(0).dims, body);
  return std::vector<Value>{outs[0], b.convert(outs[1], c.out_type(1).dtype)};
}

// operand[indices[i]] += updates[i] along dim 0; `indices` is [M, 1].
Value scatter_add_rows(Builder& b, Value operand, Value indices, Value updates) {
  TensorType scalar{operand.dtype(), {}};
  std::string dnums = "indices_are_sorted = false, scatter_dimension_numbers = "
                      "#stablehlo.scatter<update_window_dims = " +
                      i64_list(range(1, updates.rank())) +
                      ", inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], "
                      "index_vector_dim = 1>, unique_indices = false";
  return b.op_with_region(
      "stablehlo.scatter", {operand, indices, updates}, {operand.type}, {scalar, scalar},
      [](Builder& rb, const std::vector<Value>& args) {
        return std::vector<Value>{rb.add(args[0], args[1])};
      },
      dnums)[0];
}

// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
// dilation, ceil_mode, indices): grad_output scatter-added at the saved indices.
Result lower_max_pool2d_backward(LoweringContext& c) {
  Builder& b = c.b();
  const Dims& dims = c.tensor_type(1).dims;
  const Dims& gdims = c.tensor_type(0).dims;
  DType a = acc_type(c.out_type().dtype);
  int64_t r = static_cast<int64_t>(dims.size());
  int64_t plane = dims[r - 2] * dims[r - 1], out_plane = gdims[r - 2] * gdims[r - 1];
  int64_t planes = c.out_type().num_elements() / std::max<int64_t>(plane, 1);
  int64_t m = planes * out_plane;
  Value idx = b.reshape(b.convert(c.tensor(7), DType::kI64), {planes, out_plane});
  TensorType it{DType::kI64, {planes, out_plane}};
  Value base = b.mul(b.iota(it, 0), b.splat(static_cast<double>(plane), it));
  Value flat = b.reshape(b.add(idx, base), {m, 1});
  Value upd = b.reshape(b.convert(c.tensor(0), a), {m});
  Value grad = scatter_add_rows(b, b.zeros(TensorType{a, {planes * plane}}), flat, upd);
  return std::vector<Value>{b.convert(b.reshape(grad, dims), c.out_type().dtype)};
}

// A constant of dtype `t` from host values (structural: derived from shapes only);
// integer types take integral values (avg_pool2d's divisors of an integer input).
Value dense_constant(Builder& b, const std::vector<double>& v, const Dims& dims, DType t) {
  std::string lit = "[";
  char buf[40];
  const char* format = t == DType::kF64 ? "%.17e" : base::is_floating(t) ? "%.9e" : "%.0f";
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, format, v[i]);
    lit += (i ? ", " : "") + std::string(buf);
  }
  lit += "]";
  TensorType flat{t, {static_cast<int64_t>(v.size())}};
  Value c = b.op("stablehlo.constant", {}, flat, "value = dense<" + lit + "> : " + flat.str());
  return b.reshape(c, dims);
}

// avg_pool2d's divisor along one spatial dim for each output position: the window size
// clipped to the padded input (count_include_pad) or to the input itself.
std::vector<double> avg_divisors(int64_t size, int64_t out, int64_t k, int64_t s, int64_t pad,
                                 bool count_include_pad) {
  std::vector<double> d;
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * s - pad, end = std::min(start + k, size + pad);
    int64_t padded = end - start;
    start = std::max<int64_t>(start, 0);
    end = std::min(end, size);
    d.push_back(static_cast<double>(count_include_pad ? padded : end - start));
  }
  return d;
}

// The divisor of each avg_pool2d output position, as a tensor of `out_dims`.
Value avg_divisor(LoweringContext& c, const Pool2d& p, const Dims& in_dims, const Dims& out_dims,
                  bool count_include_pad, size_t override_i, DType t) {
  Builder& b = c.b();
  int64_t r = static_cast<int64_t>(out_dims.size());
  if (!c.is_none(override_i)) {
    return b.splat(static_cast<double>(c.int_arg(override_i)), TensorType{t, out_dims});
  }
  Value dh = dense_constant(b, avg_divisors(in_dims[r - 2], out_dims[r - 2], p.kernel[0],
                                            p.stride[0], p.padding[0], count_include_pad),
                            {out_dims[r - 2]}, t);
  Value dw = dense_constant(b, avg_divisors(in_dims[r - 1], out_dims[r - 1], p.kernel[1],
                                            p.stride[1], p.padding[1], count_include_pad),
                            {out_dims[r - 1]}, t);
  return b.mul(b.broadcast_in_dim(dh, out_dims, {r - 2}),
               b.broadcast_in_dim(dw, out_dims, {r - 1}));
}

Builder::RegionBody sum_body() {
  return [](Builder& rb, const std::vector<Value>& a) {
    return std::vector<Value>{rb.add(a[0], a[1])};
  };
}

// avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override?).
Result lower_avg_pool2d(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = acc_type(x.dtype());
  Pool2d p = pool_params(c, 1);
  const Dims& out_dims = c.out_type().dims;
  Value sum = pool_windows(b, {b.convert(x, a)}, {b.zeros(TensorType{a, {}})}, p, out_dims,
                           sum_body())[0];
  Value div = avg_divisor(c, p, x.dims(), out_dims, c.bool_arg(5), 6, a);
  return std::vector<Value>{b.convert(b.div(sum, div), c.out_type().dtype)};
}

// avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override?): each input position sums grad/divisor over the
// windows covering it, i.e. a stride-1 window sum over the stride-dilated gradient.
Result lower_avg_pool2d_backward(LoweringContext& c) {
  Builder& b = c.b();
  const Dims& dims = c.tensor_type(1).dims;
  DType a = acc_type(c.out_type().dtype);
  Pool2d p = pool_params(c, 2);
  Value go = b.convert(c.tensor(0), a);
  const Dims& gdims = go.dims();
  int64_t r = static_cast<int64_t>(dims.size());
  Value g = b.div(go, avg_divisor(c, p, dims, gdims, c.bool_arg(6), 7, a));
  Dims lo(r, 0), hi(r, 0), interior(r, 0), padded = gdims;
  for (int64_t j = 0; j < 2; ++j) {
    int64_t i = r - 2 + j;
    lo[i] = p.kernel[j] - 1;
    interior[i] = p.stride[j] - 1;
    hi[i] = std::max<int64_t>(0, p.padding[j] + dims[i] - (gdims[i] - 1) * p.stride[j] - 1);
    padded[i] = lo[i] + (gdims[i] - 1) * p.stride[j] + 1 + hi[i];
  }
  Value gp = b.op("stablehlo.pad", {g, b.zeros(TensorType{a, {}})}, TensorType{a, padded},
                  "edge_padding_high = " + i64_array(hi) + ", edge_padding_low = " +
                      i64_array(lo) + ", interior_padding = " + i64_array(interior));
  Pool2d unit{p.kernel, {1, 1}, {0, 0}};
  Dims window_out = padded;
  for (int64_t j = 0; j < 2; ++j) window_out[r - 2 + j] = padded[r - 2 + j] - p.kernel[j] + 1;
  Value sums = pool_windows(b, {gp}, {b.zeros(TensorType{a, {}})}, unit, window_out,
                            sum_body())[0];
  Dims start(r, 0), limit = dims;
  for (int64_t j = 0; j < 2; ++j) {
    start[r - 2 + j] = p.padding[j];
    limit[r - 2 + j] = p.padding[j] + dims[r - 2 + j];
  }
  Value grad = b.slice(sums, start, limit, Dims(r, 1));
  return std::vector<Value>{b.convert(grad, c.out_type().dtype)};
}

// The window of output o of adaptive pooling along a dim of `in` to `out`:
// inputs [floor(o * in / out), ceil((o + 1) * in / out)).
std::pair<int64_t, int64_t> adaptive_window(int64_t o, int64_t in, int64_t out) {
  return {o * in / out, ((o + 1) * in + out - 1) / out};
}

// Which inputs each window of adaptive pooling along a dim of `in` to `out` covers
// (adaptive_window): `member` is the [out, in] predicate "input i lies in window o",
// `length` the [out] window lengths.
struct AdaptiveWindows {
  Value member;
  Value length;
};

AdaptiveWindows adaptive_windows(Builder& b, int64_t in, int64_t out, DType t) {
  std::vector<double> member(out * in, 0.0), length(out, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    auto [start, end] = adaptive_window(o, in, out);
    length[o] = static_cast<double>(end - start);
    for (int64_t i = start; i < end; ++i) member[o * in + i] = 1.0;
  }
  return {b.compare(dense_constant(b, member, {out, in}, t), b.zeros(TensorType{t, {out, in}}),
                    "NE"),
          dense_constant(b, length, {out}, t)};
}

// The dims of a rank-`rank` tensor in a space of rank + 1 that has an extra dim at `skip`
// (for broadcast_in_dim into adaptive pooling's [..., out, in, ...] space).
Dims skip_dim(int64_t rank, int64_t skip) {
  Dims map;
  for (int64_t i = 0; i < rank; ++i) map.push_back(i < skip ? i : i + 1);
  return map;
}

// Adaptive average pooling of `x` along `dim` to `out` outputs. Each window is summed on
// its own, through a select, then divided by its length as PyTorch's kernel does: a product
// with an averaging matrix would carry an inf or NaN of one window into every other window
// of its row as 0 * inf.
Value adaptive_average(Builder& b, Value x, int64_t dim, int64_t out) {
  const int64_t in = x.dims()[dim];
  AdaptiveWindows w = adaptive_windows(b, in, out, x.dtype());
  Dims wide = x.dims();  // [..., out, in, ...]
  wide.insert(wide.begin() + dim, out);
  Value picked = b.select(b.broadcast_in_dim(w.member, wide, {dim, dim + 1}),
                          b.broadcast_in_dim(x, wide, skip_dim(x.rank(), dim)),
                          b.zeros(TensorType{x.dtype(), wide}));
  Value sums = b.reduce_sum(picked, {dim + 1});
  return b.div(sums, b.broadcast_in_dim(w.length, sums.dims(), {dim}));
}

// The gradient of adaptive_average: input i along `dim` (of `in`) gets the sum, over the
// windows that cover it, of the window's gradient divided by its length; selected the same
// way, so an inf gradient of one window stays in the inputs it covers.
Value adaptive_spread(Builder& b, Value g, int64_t dim, int64_t in) {
  const int64_t out = g.dims()[dim];
  AdaptiveWindows w = adaptive_windows(b, in, out, g.dtype());
  Value share = b.div(g, b.broadcast_in_dim(w.length, g.dims(), {dim}));
  Dims wide = g.dims();  // [..., out, in, ...]
  wide.insert(wide.begin() + dim + 1, in);
  Value picked = b.select(b.broadcast_in_dim(w.member, wide, {dim, dim + 1}),
                          b.broadcast_in_dim(share, wide, skip_dim(g.rank(), dim + 1)),
                          b.zeros(TensorType{g.dtype(), wide}));
  return b.reduce_sum(picked, {dim});
}

// _adaptive_avg_pool2d(self, output_size): the average along the last dim, then the one
// before it.
Result lower_adaptive_avg_pool2d(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = acc_type(x.dtype());
  if (!base::is_floating(a)) {
    return base::unimplemented("lowering: _adaptive_avg_pool2d takes floating inputs only");
  }
  int64_t r = x.rank();
  const Dims& out_dims = c.out_type().dims;
  Value y = adaptive_average(b, b.convert(x, a), r - 1, out_dims[r - 1]);
  y = adaptive_average(b, y, r - 2, out_dims[r - 2]);
  return std::vector<Value>{b.convert(y, c.out_type().dtype)};
}

// _adaptive_avg_pool2d_backward(grad_output, self): spread along the last dim, then the
// one before it.
Result lower_adaptive_avg_pool2d_backward(LoweringContext& c) {
  Builder& b = c.b();
  Value g = c.tensor(0);
  DType a = acc_type(g.dtype());
  int64_t r = g.rank();
  const Dims& dims = c.out_type().dims;
  Value y = adaptive_spread(b, b.convert(g, a), r - 1, dims[r - 1]);
  y = adaptive_spread(b, y, r - 2, dims[r - 2]);
  return std::vector<Value>{b.convert(y, c.out_type().dtype)};
}

}  // namespace

void register_conv_lowerings() {
  register_lowering({"aten::convolution_overrideable", "aten::convolution_overrideable.out"},
                    lower_convolution);
  register_lowering({"aten::convolution_backward_overrideable",
                     "aten::convolution_backward_overrideable.out"},
                    lower_convolution_backward);
  register_lowering({"aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices.out"},
                    lower_max_pool2d);
  register_lowering({"aten::max_pool2d_with_indices_backward",
                     "aten::max_pool2d_with_indices_backward.grad_input"},
                    lower_max_pool2d_backward);
  register_lowering({"aten::avg_pool2d", "aten::avg_pool2d.out"}, lower_avg_pool2d);
  register_lowering({"aten::avg_pool2d_backward", "aten::avg_pool2d_backward.grad_input"},
                    lower_avg_pool2d_backward);
  register_lowering({"aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d.out",
                     "aten::adaptive_avg_pool2d.out"},
                    lower_adaptive_avg_pool2d);
  register_lowering({"aten::_adaptive_avg_pool2d_backward",
                     "aten::_adaptive_avg_pool2d_backward.out"},
                    lower_adaptive_avg_pool2d_backward);
}

}  // namespace torchtpu::lowering
