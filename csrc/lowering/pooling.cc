// Pooling over the last n spatial dims (n = 2 or 3: the *_pool2d and *_pool3d ops, whose
// inputs are batched or not): max pooling with indices, average pooling, adaptive max and
// average pooling, and their gradients. Windows are stablehlo.reduce_window; a max gradient is a
// scatter-add at the saved indices; an average gradient a stride-1 window sum over the
// stride-dilated gradient.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <utility>

#include "lowering/elementwise_util.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// Window geometry over the last `kernel.size()` dims.
struct Pool {
  Dims kernel, stride, padding, dilation;
  int64_t n() const { return static_cast<int64_t>(kernel.size()); }
};

// kernel_size, stride (empty: the kernel) and padding, from argument `kernel_i` on.
Pool pool_params(LoweringContext& c, size_t kernel_i, int64_t n) {
  Pool p;
  p.kernel = per_dim(c.int_list(kernel_i), n, 1);
  p.stride = c.int_list(kernel_i + 1).empty() ? p.kernel : per_dim(c.int_list(kernel_i + 1), n, 1);
  p.padding = per_dim(c.int_list(kernel_i + 2), n, 0);
  p.dilation = Dims(n, 1);
  return p;
}

// reduce_window over the last n dims of `operands` with low padding p.padding and enough
// high padding to produce `out_dims` windows (ceil_mode may need more than p.padding), then
// sliced to `out_dims`.
std::vector<Value> pool_windows(Builder& b, const std::vector<Value>& operands,
                                const std::vector<Value>& inits, const Pool& p,
                                const Dims& out_dims, const Builder::RegionBody& body) {
  const Dims& dims = operands[0].dims();
  int64_t r = static_cast<int64_t>(dims.size());
  Dims window(r, 1), strides(r, 1), dilations(r, 1), full = dims;
  std::string padding = "dense<[";
  for (int64_t i = 0; i < r; ++i) {
    int64_t lo = 0, hi = 0;
    if (i >= r - p.n()) {
      int64_t j = i - (r - p.n());
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

// The number of elements of the last n dims of `dims` (a plane, or a volume).
int64_t plane_size(const Dims& dims, int64_t n) {
  int64_t size = 1;
  for (size_t i = dims.size() - n; i < dims.size(); ++i) size *= dims[i];
  return size;
}

// Row-major flat index of every element within its plane of the last n dims
// (h * W + w; d * H * W + h * W + w).
Value plane_indices(Builder& b, const Dims& dims, int64_t n) {
  int64_t r = static_cast<int64_t>(dims.size());
  TensorType t{DType::kI64, dims};
  Value flat = b.iota(t, r - 1);
  int64_t stride = dims[r - 1];
  for (int64_t i = r - 2; i >= r - n; --i) {
    flat = b.add(flat, b.mul(b.iota(t, i), b.splat(static_cast<double>(stride), t)));
    stride *= dims[i];
  }
  return flat;
}

// max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)
// -> (out, indices). Ties keep the first index and NaN wins, as on CPU.
Result lower_max_pool(LoweringContext& c, int64_t n) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  Pool p = pool_params(c, 1, n);
  p.dilation = per_dim(c.int_list(4), n, 1);
  Value idx = plane_indices(b, x.dims(), n);
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

// Gradient of a max pooling over the last n dims: grad_output (argument 0) scatter-added
// into the shape of self (argument 1) at the saved plane indices (argument `indices_i`).
Result max_pool_gradient(LoweringContext& c, int64_t n, size_t indices_i) {
  Builder& b = c.b();
  const Dims& dims = c.tensor_type(1).dims;
  DType a = opmath(c.out_type().dtype);
  int64_t plane = plane_size(dims, n), out_plane = plane_size(c.tensor_type(0).dims, n);
  int64_t planes = c.out_type().num_elements() / std::max<int64_t>(plane, 1);
  int64_t m = planes * out_plane;
  Value idx = b.reshape(b.convert(c.tensor(indices_i), DType::kI64), {planes, out_plane});
  TensorType it{DType::kI64, {planes, out_plane}};
  Value base = b.mul(b.iota(it, 0), b.splat(static_cast<double>(plane), it));
  Value flat = b.reshape(b.add(idx, base), {m, 1});
  Value upd = b.reshape(b.convert(c.tensor(0), a), {m});
  Value grad = scatter(b, b.zeros(TensorType{a, {planes * plane}}), flat, upd, {}, {0}, {0}, 1,
                       "add");
  return std::vector<Value>{b.convert(b.reshape(grad, dims), c.out_type().dtype)};
}

// max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
// dilation, ceil_mode, indices).
Result lower_max_pool_backward(LoweringContext& c, int64_t n) {
  return max_pool_gradient(c, n, 7);
}

// A constant of dtype `t` from host values (structural: derived from shapes only);
// integer types take integral values (avg_pool's divisors of an integer input).
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
  Value k = b.op("stablehlo.constant", {}, flat, "value = dense<" + lit + "> : " + flat.str());
  return b.reshape(k, dims);
}

// avg_pool's divisor along one spatial dim for each output position: the window size
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

// The divisor of each avg_pool output position, as a tensor of `out_dims`: the product of
// the per-dim divisors, or divisor_override (argument `override_i`) when given.
Value avg_divisor(LoweringContext& c, const Pool& p, const Dims& in_dims, const Dims& out_dims,
                  bool count_include_pad, size_t override_i, DType t) {
  Builder& b = c.b();
  int64_t r = static_cast<int64_t>(out_dims.size());
  if (!c.is_none(override_i)) {
    return b.splat(static_cast<double>(c.int_arg(override_i)), TensorType{t, out_dims});
  }
  Value div = b.splat(1.0, TensorType{t, out_dims});
  for (int64_t j = 0; j < p.n(); ++j) {
    int64_t i = r - p.n() + j;
    Value d = dense_constant(b, avg_divisors(in_dims[i], out_dims[i], p.kernel[j], p.stride[j],
                                             p.padding[j], count_include_pad),
                             {out_dims[i]}, t);
    div = b.mul(div, b.broadcast_in_dim(d, out_dims, {i}));
  }
  return div;
}

Builder::RegionBody sum_body() {
  return [](Builder& rb, const std::vector<Value>& a) {
    return std::vector<Value>{rb.add(a[0], a[1])};
  };
}

// avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
// divisor_override?).
Result lower_avg_pool(LoweringContext& c, int64_t n) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = opmath(x.dtype());
  Pool p = pool_params(c, 1, n);
  const Dims& out_dims = c.out_type().dims;
  Value sum = pool_windows(b, {b.convert(x, a)}, {b.zeros(TensorType{a, {}})}, p, out_dims,
                           sum_body())[0];
  Value div = avg_divisor(c, p, x.dims(), out_dims, c.bool_arg(5), 6, a);
  return std::vector<Value>{b.convert(b.div(sum, div), c.out_type().dtype)};
}

// avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
// count_include_pad, divisor_override?): each input position sums grad/divisor over the
// windows covering it, i.e. a stride-1 window sum over the stride-dilated gradient.
Result lower_avg_pool_backward(LoweringContext& c, int64_t n) {
  Builder& b = c.b();
  const Dims& dims = c.tensor_type(1).dims;
  DType a = opmath(c.out_type().dtype);
  Pool p = pool_params(c, 2, n);
  Value go = b.convert(c.tensor(0), a);
  const Dims& gdims = go.dims();
  int64_t r = static_cast<int64_t>(dims.size());
  Value g = b.div(go, avg_divisor(c, p, dims, gdims, c.bool_arg(6), 7, a));
  Dims lo(r, 0), hi(r, 0), interior(r, 0), padded = gdims;
  Pool unit{p.kernel, Dims(n, 1), Dims(n, 0), Dims(n, 1)};
  Dims window_out = padded, start(r, 0), limit = dims;
  for (int64_t j = 0; j < n; ++j) {
    int64_t i = r - n + j;
    lo[i] = p.kernel[j] - 1;
    interior[i] = p.stride[j] - 1;
    hi[i] = std::max<int64_t>(0, p.padding[j] + dims[i] - (gdims[i] - 1) * p.stride[j] - 1);
    padded[i] = lo[i] + (gdims[i] - 1) * p.stride[j] + 1 + hi[i];
    window_out[i] = padded[i] - p.kernel[j] + 1;
    start[i] = p.padding[j];
    limit[i] = p.padding[j] + dims[i];
  }
  Value gp = b.pad(g, b.zeros(TensorType{a, {}}), lo, hi, interior);
  Value sums = pool_windows(b, {gp}, {b.zeros(TensorType{a, {}})}, unit, window_out,
                            sum_body())[0];
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

// Adaptive max pooling of (`x`, `flat`) along `dim` to `out` outputs, where `flat` is each
// element's plane index so far (0 before the first dim) and `stride` the plane stride of
// `dim`: returns each window's maximum and its plane index. PyTorch's kernel scans a window
// in row-major order keeping the first maximum, and any NaN replaces the value kept (so
// the last NaN wins); the same choice made per dim, last dim first, picks the same element
// (ties across rows go to the earliest row, whose own earliest maximum was kept).
std::pair<Value, Value> adaptive_max(Builder& b, Value x, Value flat, int64_t dim, int64_t out,
                                     int64_t stride) {
  const int64_t in = x.dims()[dim];
  AdaptiveWindows w = adaptive_windows(b, in, out, x.dtype());
  Dims wide = x.dims();  // [..., out, in, ...]
  wide.insert(wide.begin() + dim, out);
  Dims map = skip_dim(x.rank(), dim);
  Value member = b.broadcast_in_dim(w.member, wide, {dim, dim + 1});
  Value values = b.select(member, b.broadcast_in_dim(x, wide, map),
                          b.broadcast_in_dim(b.min_value(x.dtype()), wide, {}));
  // An element outside the window is -inf at the largest index: it never wins a tie.
  TensorType it{DType::kI64, wide};
  Value index = b.select(
      member,
      b.add(b.mul(b.iota(it, dim + 1), b.splat(static_cast<double>(stride), it)),
            b.broadcast_in_dim(flat, wide, map)),
      b.broadcast_in_dim(b.constant_i64(INT64_MAX, DType::kI64), wide, {}));
  DType t = x.dtype();
  auto body = [](Builder& r, const std::vector<Value>& a) {
    Value av = a[0], ai = a[1], bv = a[2], bi = a[3];
    Value a_nan = r.compare(av, av, "NE"), b_nan = r.compare(bv, bv, "NE");
    Value both_nan = r.binary("and", a_nan, b_nan);
    Value tie = r.compare(av, bv, "EQ");
    Value a_wins = r.binary(
        "or",
        r.binary("or", r.binary("and", a_nan, r.unary("not", b_nan)),
                 r.binary("and", both_nan, r.compare(ai, bi, "GT"))),
        r.binary("or", r.compare(av, bv, "GT"), r.binary("and", tie, r.compare(ai, bi, "LT"))));
    return std::vector<Value>{r.select(a_wins, av, bv), r.select(a_wins, ai, bi)};
  };
  Dims out_dims = wide;
  out_dims.erase(out_dims.begin() + dim + 1);
  TensorType vs{t, {}}, is{DType::kI64, {}};
  std::vector<Value> r = b.op_with_region(
      "stablehlo.reduce",
      {values, index, b.min_value(t), b.constant_i64(INT64_MAX, DType::kI64)},
      {TensorType{t, out_dims}, TensorType{DType::kI64, out_dims}}, {vs, is, vs, is}, body,
      "dimensions = " + i64_array({dim + 1}));
  return {r[0], r[1]};
}

// adaptive_max_pool{2,3}d(self, output_size) -> (out, indices): along the last dim, then
// each one before it, carrying the plane index of the maximum kept.
Result lower_adaptive_max_pool(LoweringContext& c, int64_t n) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  if (!base::is_floating(x.dtype())) {
    return base::unimplemented("lowering: " + c.op_name() + " takes floating inputs only");
  }
  int64_t r = x.rank();
  const Dims& out_dims = c.out_type(0).dims;
  Value y = x, flat = b.zeros(TensorType{DType::kI64, x.dims()});
  int64_t stride = 1;
  for (int64_t i = r - 1; i >= r - n; --i) {
    std::tie(y, flat) = adaptive_max(b, y, flat, i, out_dims[i], stride);
    stride *= x.dims()[i];
  }
  return std::vector<Value>{y, b.convert(flat, c.out_type(1).dtype)};
}

// adaptive_max_pool{2,3}d_backward(grad_output, self, indices).
Result lower_adaptive_max_pool_backward(LoweringContext& c, int64_t n) {
  return max_pool_gradient(c, n, 2);
}

// _adaptive_avg_pool{2,3}d(self, output_size): the average along the last dim, then each
// one before it.
Result lower_adaptive_avg_pool(LoweringContext& c, int64_t n) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  DType a = opmath(x.dtype());
  if (!base::is_floating(a)) {
    return base::unimplemented("lowering: " + c.op_name() + " takes floating inputs only");
  }
  int64_t r = x.rank();
  const Dims& out_dims = c.out_type().dims;
  Value y = b.convert(x, a);
  for (int64_t i = r - 1; i >= r - n; --i) y = adaptive_average(b, y, i, out_dims[i]);
  return std::vector<Value>{b.convert(y, c.out_type().dtype)};
}

// _adaptive_avg_pool{2,3}d_backward(grad_output, self): spread along the last dim, then
// each one before it.
Result lower_adaptive_avg_pool_backward(LoweringContext& c, int64_t n) {
  Builder& b = c.b();
  Value g = c.tensor(0);
  DType a = opmath(g.dtype());
  int64_t r = g.rank();
  const Dims& dims = c.out_type().dims;
  Value y = b.convert(g, a);
  for (int64_t i = r - 1; i >= r - n; --i) y = adaptive_spread(b, y, i, dims[i]);
  return std::vector<Value>{b.convert(y, c.out_type().dtype)};
}

// The lowering `fn` for n spatial dims.
LoweringFn with_spatial_dims(Result (*fn)(LoweringContext&, int64_t), int64_t n) {
  return [fn, n](LoweringContext& c) { return fn(c, n); };
}

}  // namespace

void register_pooling_lowerings() {
  for (int64_t n : {2, 3}) {
    auto name = [n](const char* pattern) {
      std::string s = pattern;
      s.replace(s.find('#'), 1, std::to_string(n));
      return s;
    };
    std::vector<std::pair<std::vector<std::string>, LoweringFn>> table = {
        {{name("aten::max_pool#d_with_indices"), name("aten::max_pool#d_with_indices.out")},
         with_spatial_dims(lower_max_pool, n)},
        {{name("aten::max_pool#d_with_indices_backward"),
          name("aten::max_pool#d_with_indices_backward.grad_input")},
         with_spatial_dims(lower_max_pool_backward, n)},
        {{name("aten::avg_pool#d"), name("aten::avg_pool#d.out")},
         with_spatial_dims(lower_avg_pool, n)},
        {{name("aten::avg_pool#d_backward"), name("aten::avg_pool#d_backward.grad_input")},
         with_spatial_dims(lower_avg_pool_backward, n)},
        {{name("aten::adaptive_max_pool#d"), name("aten::adaptive_max_pool#d.out")},
         with_spatial_dims(lower_adaptive_max_pool, n)},
        {{name("aten::adaptive_max_pool#d_backward"),
          name("aten::adaptive_max_pool#d_backward.grad_input")},
         with_spatial_dims(lower_adaptive_max_pool_backward, n)},
        {{name("aten::_adaptive_avg_pool#d"), name("aten::_adaptive_avg_pool#d.out"),
          name("aten::adaptive_avg_pool#d.out")},
         with_spatial_dims(lower_adaptive_avg_pool, n)},
        {{name("aten::_adaptive_avg_pool#d_backward"),
          name("aten::_adaptive_avg_pool#d_backward.out")},
         with_spatial_dims(lower_adaptive_avg_pool_backward, n)},
    };
    for (const auto& [names, fn] : table) {
      for (const std::string& op : names) register_lowering({op.c_str()}, fn);
    }
  }
}

}  // namespace torchtpu::lowering
