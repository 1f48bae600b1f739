// Searching lowerings: searchsorted, bucketize (binary search in sorted boundaries), isin
// (membership), histc (binning by division) and histogram / histogramdd (division
// corrected against the edges, or a binary search of them).
//
// The binary search runs PyTorch's own loop (cus_lower_bound / cus_upper_bound in
// Bucketization.cpp) for a fixed ceil(log2(n + 1)) steps, each one gather of the midpoints,
// so even unsorted or NaN-holding boundaries give the CPU's answer.
#include <algorithm>
#include <optional>
#include <string>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {

Value binary_search(Builder& b, Value seq, Value values, bool right) {
  int64_t rows = seq.dims()[0], n = seq.dims()[1], k = values.dims()[1];
  TensorType it{DType::kI64, {rows, k}};
  Value start = b.zeros(it), end = b.splat(static_cast<double>(n), it);
  if (n == 0) return start;
  Value row = b.iota(it, 0);
  Value one = b.splat(1, it), last = b.splat(static_cast<double>(n - 1), it);
  int steps = 0;
  while ((int64_t{1} << steps) <= n) ++steps;
  for (int s = 0; s < steps; ++s) {
    Value active = b.compare(start, end, "LT");
    Value mid = b.add(start, b.binary("shift_right_logical", b.sub(end, start), one));
    Value safe_mid = b.min(mid, last);  // inactive lanes may point one past the end
    Value coords =
        b.concatenate({b.reshape(row, {rows, k, 1}), b.reshape(safe_mid, {rows, k, 1})}, 2);
    Value mid_val = b.op("stablehlo.gather", {seq, coords}, values.type,
                         "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1], "
                         "start_index_map = [0, 1], index_vector_dim = 2>, "
                         "slice_sizes = array<i64: 1, 1>, indices_are_sorted = false");
    // lower bound: go right when !(mid_val >= v); upper bound: when !(mid_val > v).
    Value go_right = b.unary("not", b.compare(mid_val, values, right ? "GT" : "GE"));
    start = b.select(b.binary("and", active, go_right), b.add(mid, one), start);
    end = b.select(b.binary("and", active, b.unary("not", go_right)), mid, end);
    // Each step's bounds materialize: fused across steps, with the values' producers and
    // the result's consumers, XLA's CPU compiler generated code for minutes (multinomial
    // of 50,000 categories, a min of the result and a running sum in the fusion).
    start = b.opaque(start);
    end = b.opaque(end);
  }
  return start;
}

namespace {

using Lowered = base::StatusOr<std::vector<Value>>;


// seq[row, sorter[row, j]] for [rows, n] operands: the sequence in sorted order.
Value apply_sorter(Builder& b, Value seq, Value sorter) {
  int64_t rows = seq.dims()[0], n = seq.dims()[1];
  TensorType it{DType::kI64, {rows, n}};
  Value coords = b.concatenate({b.reshape(b.iota(it, 0), {rows, n, 1}),
                                b.reshape(b.convert(sorter, DType::kI64), {rows, n, 1})}, 2);
  return b.op("stablehlo.gather", {seq, coords}, seq.type,
              "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1], "
              "start_index_map = [0, 1], index_vector_dim = 2>, "
              "slice_sizes = array<i64: 1, 1>, indices_are_sorted = false");
}

// `right` from searchsorted's (right, side) or bucketize's right argument; `sorter`
// (optional, seq's shape) orders seq.
Value search(LoweringContext& c, Value seq, Value values, bool right,
             std::optional<Value> sorter = std::nullopt) {
  Builder& b = c.b();
  DType t = promote_types(seq.dtype(), values.dtype());
  Dims vdims = values.dims();
  int64_t n = seq.rank() == 0 ? 1 : seq.dims().back();
  Value s, v;
  if (seq.rank() <= 1) {
    // One boundary list for every value.
    int64_t count = 1;
    for (int64_t d : vdims) count *= d;
    s = b.reshape(b.convert(seq, t), {1, n});
    v = b.reshape(b.convert(values, t), {1, count});
  } else {
    int64_t rows = 1;
    for (int64_t i = 0; i + 1 < seq.rank(); ++i) rows *= seq.dims()[i];
    s = b.reshape(b.convert(seq, t), {rows, n});
    v = b.reshape(b.convert(values, t), {rows, vdims.empty() ? 1 : vdims.back()});
  }
  if (sorter && n > 0) s = apply_sorter(b, s, b.reshape(*sorter, s.dims()));
  Value pos = binary_search(b, s, v, right);
  return b.convert(b.reshape(pos, c.out_type().dims), c.out_type().dtype);
}

// searchsorted.Tensor(sorted_sequence, self, *, out_int32, right, side, sorter) and the
// .Scalar form (self is then a scalar argument).
Lowered lower_searchsorted(LoweringContext& c) {
  Builder& b = c.b();
  bool right = c.bool_arg(3) || (!c.is_none(4) && c.string_arg(4) == "right");
  Value seq = c.tensor(0);
  Value values = c.arg(1).kind == ArgKind::kTensor ? c.tensor(1)
                                                   : c.scalar(1, seq.dtype(), ScalarCast::kWrapped);
  if (values.rank() == 0) values = b.reshape(values, {1});
  std::optional<Value> sorter;
  if (!c.is_none(5)) {
    sorter = c.tensor(5);
    int64_t n = seq.rank() == 0 ? 1 : seq.dims().back();
    if (c.tensor_type(5).num_elements() > 0) {
      Value k = b.convert(*sorter, DType::kI64);
      Value in_range = b.binary("and", b.compare(k, b.zeros(k.type), "GE"),
                                b.compare(k, b.splat(n, k.type), "LT"));
      c.require(b.all_of(in_range), "torch.searchsorted(): sorter index out of range",
                CheckKind::kRuntimeError);
    }
  }
  return std::vector<Value>{search(c, seq, values, right, sorter)};
}

// bucketize.Tensor(self, boundaries, *, out_int32, right); .Scalar has a scalar self.
Lowered lower_bucketize(LoweringContext& c) {
  Builder& b = c.b();
  Value boundaries = c.tensor(1);
  if (boundaries.rank() != 1) {  // eager mode raised the CPU's error before (cpu_argument_check)
    return base::invalid_argument("boundaries tensor must be 1 dimension, but got dim(" +
                                  std::to_string(boundaries.rank()) + ")");
  }
  // A scalar self becomes a wrapped-number tensor cast to the boundaries' dtype unchecked,
  // as on the CPU: bucketize(1e30, half boundaries) is past every boundary.
  Value values = c.arg(0).kind == ArgKind::kTensor
                     ? c.tensor(0)
                     : c.scalar(0, boundaries.dtype(), ScalarCast::kWrapped);
  if (values.rank() == 0) values = b.reshape(values, {1});
  return std::vector<Value>{search(c, boundaries, values, c.bool_arg(3))};
}

// isin(elements, test_elements, *, assume_unique, invert): equality against every test
// element (NaN is in nothing), for tensor or scalar elements / test_elements.
Lowered lower_isin(LoweringContext& c) {
  Builder& b = c.b();
  bool e_tensor = c.arg(0).kind == ArgKind::kTensor, t_tensor = c.arg(1).kind == ArgKind::kTensor;
  DType t = c.result_type({0, 1});
  Value e = e_tensor ? b.convert(c.tensor(0), t) : c.scalar(0, t);
  Value tests = t_tensor ? b.convert(c.tensor(1), t) : c.scalar(1, t);
  int64_t ne = 1, nt = 1;
  for (int64_t d : e.dims()) ne *= d;
  for (int64_t d : tests.dims()) nt *= d;
  Value found;
  if (nt == 0 || ne == 0) {
    found = b.zeros(TensorType{DType::kBool, {ne}});
  } else {
    Value ee = b.broadcast_in_dim(b.reshape(e, {ne}), {ne, nt}, {0});
    Value tt = b.broadcast_in_dim(b.reshape(tests, {nt}), {ne, nt}, {1});
    found = b.reduce_any(b.compare(ee, tt, "EQ"), {1});
  }
  bool invert = c.bool_arg(3);
  if (invert) found = b.unary("not", found);
  return std::vector<Value>{b.reshape(found, c.out_type().dims)};
}

// histogram's and histogramdd's dtypes: the CPU kernels' (bfloat16 and half need a range,
// which they do not take here).
base::Status require_f32_f64(LoweringContext& c, DType t) {
  if (t == DType::kF32 || t == DType::kF64) return base::Status::ok_status();
  return base::unimplemented("lowering: " + c.op_name() + " takes float32 and float64 only");
}

// Whether the 0-d `v` is finite.
Value is_finite_scalar(Builder& b, Value v) {
  return b.op("stablehlo.is_finite", {v}, TensorType{DType::kBool, {}});
}

// histc(self, bins, min, max): the CPU kernel's bins. The range is min..max, or the data's
// own when they are equal (one less and one more when that is a single value), and must
// be finite; its ends are rounded to self's dtype. An element in range goes to bin
// trunc((x - min) * bins / (max - min)) computed in self's dtype, each step rounded to it
// for bfloat16 and half as the CPU's 16-bit arithmetic does (the CPU's linear
// interpolation, which histc uses without checking the bin edges), the last bin keeping
// its right edge. Elements out of range and NaN are not counted.
// Integer inputs (CUDA's histc takes them, the CPU's does not; transformers' MoE layers
// count tokens per expert with one on every device but the CPU) are binned as CUDA does:
// the range's ends truncated to integers, (x - min) * bins / (max - min) divided as
// integers (exact here in float64), counts in the input's dtype.
Lowered lower_histc(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.out_type().dtype;
  bool integral = base::is_integral(t) && t != DType::kBool;
  if (!integral && !base::is_floating(t)) {
    return base::unimplemented("lowering: " + c.op_name() + " takes floating and integer "
                               "tensors only");
  }
  const int64_t bins = c.out_type().dims[0];
  Value x = b.reshape(c.tensor(0), {c.tensor_type(0).num_elements()});
  DType ct = integral ? DType::kF64 : opmath(t);  // the dtype bins are computed in
  x = b.convert(x, ct);
  const int64_t n = x.dims()[0];
  TensorType d{DType::kF64, {}};
  Value lo = c.is_none(2) ? b.zeros(d) : c.scalar(2, DType::kF64);
  Value hi = c.is_none(3) ? b.zeros(d) : c.scalar(3, DType::kF64);
  if (integral) {
    lo = b.convert(b.convert(lo, DType::kI64), DType::kF64);
    hi = b.convert(b.convert(hi, DType::kI64), DType::kF64);
  }
  if (n > 0) {
    Value same = b.compare(lo, hi, "EQ");
    lo = b.select(same, b.convert(b.reduce_min(x, {0}), DType::kF64), lo);
    hi = b.select(same, b.convert(b.reduce_max(x, {0}), DType::kF64), hi);
  }
  Value single = b.compare(lo, hi, "EQ");
  lo = b.select(single, b.sub(lo, b.constant(1, DType::kF64)), lo);
  hi = b.select(single, b.add(hi, b.constant(1, DType::kF64)), hi);
  c.require(b.binary("and", is_finite_scalar(b, lo), is_finite_scalar(b, hi)),
            "torch.histc: range of [min, max] is not finite (the min and max given, or the "
            "data's when they are equal, hold inf or NaN)",
            CheckKind::kRuntimeError);
  c.require(b.compare(lo, hi, "LT"), "torch.histc: max must be larger than min",
            CheckKind::kRuntimeError);
  if (n == 0) return std::vector<Value>{b.zeros(c.out_type())};
  TensorType v{ct, {n}}, iv{DType::kI64, {n}};
  // Each step rounded to self's dtype (16-bit types: c10's operators round every result;
  // the edges as c10 converts a double, through float).
  auto r = [&](Value v) { return integral ? v : round_to(b, v, t); };
  Value start = b.broadcast_in_dim(r(b.convert(lo, ct)), {n}, {});
  Value end = b.broadcast_in_dim(r(b.convert(hi, ct)), {n}, {});
  Value in_range = b.binary("and", b.compare(x, start, "GE"), b.compare(x, end, "LE"));
  Value scaled = r(b.mul(r(b.sub(x, start)), r(b.splat(static_cast<double>(bins), v))));
  // The width opaque to XLA, which would divide by it as a product with its rounded
  // reciprocal and so put an element on a bin's edge into the bin below.
  Value bin = b.convert(r(b.div(scaled, b.opaque(r(b.sub(end, start))))), DType::kI64);
  bin = b.clamp(b.zeros(iv), bin, b.splat(static_cast<double>(bins - 1), iv));
  bin = b.select(in_range, bin, b.splat(static_cast<double>(bins), iv));
  // Counted exactly (in float32 for the 16-bit types) and rounded once: the CPU's 16-bit
  // counts stop growing where adding 1 no longer changes them (256 in bfloat16).
  DType count = integral ? t : ct;
  Value hist = scatter(b, b.zeros(TensorType{count, {bins + 1}}), b.reshape(bin, {n, 1}),
                       b.splat(1, TensorType{count, {n}}), {}, {0}, {0}, 1, "add");
  return std::vector<Value>{b.convert(b.slice(hist, {0}, {bins}, {1}), t)};
}

// v[idx] for a [e] v and [n] in-range indices.
Value take(Builder& b, Value v, Value idx) {
  int64_t n = idx.dims()[0];
  return b.op("stablehlo.gather", {v, b.reshape(idx, {n, 1})}, TensorType{v.dtype(), {n}},
              "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], "
              "start_index_map = [0], index_vector_dim = 1>, "
              "slice_sizes = array<i64: 1>, indices_are_sorted = false");
}

// edges[k] ([e]) broadcast to [n].
Value edge_at(Builder& b, Value edges, int64_t k, int64_t n) {
  return b.broadcast_in_dim(b.reshape(b.slice(edges, {k}, {k + 1}, {1}), {}), {n}, {});
}

// The bin of each element x ([n]) among the sorted `edges` ([e], e > 1): the last edge
// <= x, the last bin keeping its right edge; bin e - 1 (one past the bins) for elements
// outside [edges[0], edges[e - 1]] and NaN. `interpolated` is histogram's guess for a
// linear progression: the CPU kernel then searches only the edges around it.
Value histogram_bins(Builder& b, Value x, Value edges, std::optional<Value> interpolated) {
  const int64_t n = x.dims()[0], e = edges.dims()[0];
  TensorType iv{DType::kI64, {n}};
  Value in_range = b.binary("and", b.compare(x, edge_at(b, edges, 0, n), "GE"),
                            b.compare(x, edge_at(b, edges, e - 1, n), "LE"));
  Value pos;
  if (interpolated) {
    // upper_bound over edges[max(0, p - 1) : min(p + 2, e)], minus one.
    Value p = b.clamp(b.zeros(iv), *interpolated, b.splat(static_cast<double>(e - 1), iv));
    Value lo = b.max(b.sub(p, b.splat(1, iv)), b.zeros(iv));
    Value hi = b.min(b.add(p, b.splat(2, iv)), b.splat(static_cast<double>(e), iv));
    pos = b.sub(lo, b.splat(1, iv));
    for (int64_t k = -1; k <= 1; ++k) {
      Value at = b.add(p, b.splat(static_cast<double>(k), iv));
      Value inside = b.binary("and", b.compare(at, lo, "GE"), b.compare(at, hi, "LT"));
      Value safe = b.clamp(b.zeros(iv), at, b.splat(static_cast<double>(e - 1), iv));
      Value edge = take(b, edges, safe);
      Value counted = b.binary("and", inside, b.compare(edge, x, "LE"));
      pos = b.add(pos, b.convert(counted, DType::kI64));
    }
  } else {
    pos = b.sub(b.reshape(binary_search(b, b.reshape(edges, {1, e}), b.reshape(x, {1, n}), true),
                          {n}),
                b.splat(1, iv));
  }
  Value top = b.splat(static_cast<double>(e - 1), iv);
  pos = b.select(b.compare(pos, top, "EQ"), b.sub(top, b.splat(1, iv)), pos);
  return b.select(in_range, pos, top);
}

// Column d of x2 ([M, D]) as [M].
Value column(Builder& b, Value x2, int64_t d) {
  int64_t m = x2.dims()[0];
  return b.reshape(b.slice(x2, {0, d}, {m, d + 1}, {1, 1}), {m});
}

// The CPU's edges for counted bins of x2 ([M, D]): per dim d, a linspace of bins[d] + 1
// values (x2's dtype) over range[2d]..range[2d + 1] (argument `range_i`, a float[]) or
// column d's min and max (0 and 1 when there are no rows), widened by 0.5 on each side
// when its ends are equal. The ends must be finite and ordered.
std::vector<Value> counted_edges(LoweringContext& c, Value x2, const Dims& bins, size_t range_i) {
  Builder& b = c.b();
  DType t = x2.dtype();
  const int64_t m = x2.dims()[0];
  std::vector<Value> edges;
  for (size_t d = 0; d < bins.size(); ++d) {
    Value lo = b.zeros(TensorType{DType::kF64, {}});
    Value hi = b.splat(1, lo.type);
    if (!c.is_none(range_i)) {
      lo = c.scalar_list_item(range_i, 2 * d, DType::kF64);
      hi = c.scalar_list_item(range_i, 2 * d + 1, DType::kF64);
    } else if (m > 0) {
      Value col = column(b, x2, static_cast<int64_t>(d));
      lo = b.convert(b.reduce_min(col, {0}), DType::kF64);
      hi = b.convert(b.reduce_max(col, {0}), DType::kF64);
    }
    std::string dim = "dimension " + std::to_string(d);
    c.require(b.binary("and", is_finite_scalar(b, lo), is_finite_scalar(b, hi)),
              "torch.histogramdd: " + dim + "'s range (the range given, or the input's min "
              "and max) is not finite", CheckKind::kRuntimeError);
    c.require(b.compare(lo, hi, "LE"),
              "torch.histogramdd: min should not exceed max for " + dim, CheckKind::kRuntimeError);
    Value same = b.compare(lo, hi, "EQ");
    Value half = b.constant(0.5, DType::kF64);
    lo = b.select(same, b.sub(lo, half), lo);
    hi = b.select(same, b.add(hi, half), hi);
    edges.push_back(linspace_values(b, b.convert(lo, t), b.convert(hi, t), bins[d] + 1, t));
  }
  return edges;
}

// The histogram of the rows of x2 ([M, D]) over per-dim `edges`, as [prod(bins)] row-major:
// each row's bin along every dim (linear edges: interpolated, then corrected against the
// edges around it; given edges: binary-searched), rows outside any dim's edges and NaN
// dropped. Weights (argument `weight_i`, 1 without) are summed per bin in x2's dtype;
// density (argument `density_i`) divides by their total and by each bin's volume.
Value histogram_of(LoweringContext& c, Value x2, const std::vector<Value>& edges, bool linear,
                   size_t weight_i, size_t density_i) {
  Builder& b = c.b();
  DType t = x2.dtype();
  const int64_t m = x2.dims()[0];
  int64_t total = 1;
  for (const Value& e : edges) total *= e.dims()[0] - 1;
  Value hist = b.zeros(TensorType{t, {total}});
  if (m > 0) {
    TensorType iv{DType::kI64, {m}};
    Value flat = b.zeros(iv), dropped = b.zeros(TensorType{DType::kBool, {m}});
    TensorType v{t, {m}};
    for (size_t d = 0; d < edges.size(); ++d) {
      Value x = column(b, x2, static_cast<int64_t>(d));
      const int64_t e = edges[d].dims()[0], bins = e - 1;
      std::optional<Value> guess;
      if (linear) {
        Value left = edge_at(b, edges[d], 0, m), right = edge_at(b, edges[d], e - 1, m);
        guess = b.convert(b.div(b.mul(b.sub(x, left), b.splat(static_cast<double>(bins), v)),
                                b.sub(right, left)),
                          DType::kI64);
      }
      Value bin = histogram_bins(b, x, edges[d], guess);
      dropped = b.binary("or", dropped, b.compare(bin, b.splat(static_cast<double>(bins), iv),
                                                  "EQ"));
      flat = b.add(b.mul(flat, b.splat(static_cast<double>(bins), iv)), bin);
    }
    flat = b.select(dropped, b.splat(static_cast<double>(total), iv), flat);
    Value w = c.is_none(weight_i) ? b.splat(1, v) : b.reshape(c.tensor(weight_i), {m});
    hist = b.slice(scatter(b, b.zeros(TensorType{t, {total + 1}}), b.reshape(flat, {m, 1}), w,
                           {}, {0}, {0}, 1, "add"),
                   {0}, {total}, {1});
  }
  if (!c.bool_arg(density_i)) return hist;
  Dims shape;
  for (const Value& e : edges) shape.push_back(e.dims()[0] - 1);
  Value h = b.reshape(hist, shape);
  h = b.div(h, b.broadcast_in_dim(b.reduce_sum(hist, {0}), shape, {}));
  for (size_t d = 0; d < edges.size(); ++d) {
    int64_t bins = shape[d];
    Value widths = b.sub(b.slice(edges[d], {1}, {bins + 1}, {1}),
                         b.slice(edges[d], {0}, {bins}, {1}));
    h = b.div(h, b.broadcast_in_dim(widths, shape, {static_cast<int64_t>(d)}));
  }
  return b.reshape(h, {total});
}

// histogram.bin_ct(self, bins, *, range, weight, density) and histogram.bins_tensor(self,
// bins, *, weight, density) -> (hist, bin_edges), with their .out forms: the CPU kernel's,
// over self's elements as one column.
Lowered lower_histogram(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.out_type().dtype;
  if (auto st = require_f32_f64(c, t); !st.ok()) return st;
  const bool counted = c.op_name().find("bin_ct") != std::string::npos;
  const int64_t bins = c.out_type(0).dims[0];
  Value x2 = b.reshape(c.tensor(0), {c.tensor_type(0).num_elements(), 1});
  std::vector<Value> edges = counted ? counted_edges(c, x2, {bins}, 2)
                                     : std::vector<Value>{b.reshape(c.tensor(1), {bins + 1})};
  Value hist = histogram_of(c, x2, edges, counted, counted ? 3 : 2, counted ? 4 : 3);
  return std::vector<Value>{hist, b.convert(edges[0], c.out_type(1).dtype)};
}

// histogramdd's parts, over self's rows ([..., D] as [M, D]):
// _histogramdd_bin_edges(self, bins, *, range, weight, density) -> Tensor[] (the edges),
// _histogramdd_from_bin_cts(self, bins, *, range, weight, density) and
// _histogramdd_from_bin_tensors(self, bins, *, weight, density) -> hist.
Lowered lower_histogramdd(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.tensor_type(0).dtype;
  if (auto st = require_f32_f64(c, t); !st.ok()) return st;
  const Dims& dims = c.tensor_type(0).dims;
  const int64_t d = dims.back();
  Value x2 = b.reshape(c.tensor(0), {c.tensor_type(0).num_elements() / std::max<int64_t>(d, 1), d});
  const std::string& name = c.op_name();
  if (name.find("bin_tensors") != std::string::npos) {
    std::vector<Value> edges = c.tensor_list(1);
    Value hist = histogram_of(c, x2, edges, false, 2, 3);
    return std::vector<Value>{b.reshape(hist, c.out_type().dims)};
  }
  std::vector<Value> edges = counted_edges(c, x2, c.int_list(1), 2);
  if (name.find("bin_edges") != std::string::npos) return edges;
  Value hist = histogram_of(c, x2, edges, true, 3, 4);
  return std::vector<Value>{b.reshape(hist, c.out_type().dims)};
}

}  // namespace

void register_search_lowerings() {
  register_lowering({"aten::searchsorted.Tensor", "aten::searchsorted.Tensor_out",
                     "aten::searchsorted.Scalar", "aten::searchsorted.Scalar_out"},
                    lower_searchsorted);
  register_lowering({"aten::bucketize.Tensor", "aten::bucketize.Tensor_out",
                     "aten::bucketize.Scalar", "aten::bucketize.Scalar_out"},
                    lower_bucketize);
  register_lowering({"aten::histc", "aten::histc.out"}, lower_histc);
  register_lowering({"aten::histogram.bin_ct", "aten::histogram.bin_ct_out",
                     "aten::histogram.bins_tensor", "aten::histogram.bins_tensor_out"},
                    lower_histogram);
  register_lowering({"aten::_histogramdd_bin_edges", "aten::_histogramdd_from_bin_cts",
                     "aten::_histogramdd_from_bin_tensors"},
                    lower_histogramdd);
  register_lowering({"aten::isin.Tensor_Tensor", "aten::isin.Tensor_Tensor_out",
                     "aten::isin.Tensor_Scalar", "aten::isin.Tensor_Scalar_out",
                     "aten::isin.Scalar_Tensor", "aten::isin.Scalar_Tensor_out"},
                    lower_isin);
}

}  // namespace torchtpu::lowering
