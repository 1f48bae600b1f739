// Sorting lowerings: sort (every overload), topk, kthvalue, median and nanmedian; argsort
// and msort reach sort through their composite kernels.
//
// One stablehlo.sort over (values, int64 iota indices) along the dim, always stable (the
// CPU kernel is stable too, so equal values keep their original order and indices match).
// NaN orders above every number, as in PyTorch: last when ascending, first when
// descending. topk and kthvalue sort the whole dim and slice; the sort is O(n log n)
// where the CPU uses a selection, which is the same answer at TPU-friendly cost.
#include <cmath>

#include "lowering/families.h"
#include "lowering/lowering.h"
#include "lowering/scan.h"

namespace torchtpu::lowering {
namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

// "a before b" for scalars a, b of a float or integer dtype.
Value comes_before(Builder& b, Value x, Value y, bool descending) {
  if (!base::is_floating(x.dtype())) return b.compare(x, y, descending ? "GT" : "LT");
  Value x_nan = b.compare(x, x, "NE"), y_nan = b.compare(y, y, "NE");
  if (descending) {
    // NaN first: x before y when x is NaN and y is not, or x > y.
    Value nan_first = b.binary("and", x_nan, b.unary("not", y_nan));
    return b.binary("or", nan_first, b.compare(x, y, "GT"));
  }
  Value nan_last = b.binary("and", b.unary("not", x_nan), y_nan);
  return b.binary("or", nan_last, b.compare(x, y, "LT"));
}

// (sorted values, their int64 indices) of `x` along `dim`. Bool sorts as int32.
std::pair<Value, Value> sort_with_indices(Builder& b, Value x, int64_t dim, bool descending) {
  DType t = x.dtype();
  Value keys = t == DType::kBool ? b.convert(x, DType::kI32) : x;
  Value idx = b.iota(TensorType{DType::kI64, x.dims()}, dim);
  TensorType kt{keys.dtype(), {}}, it{DType::kI64, {}};
  std::vector<Value> r = b.op_with_region(
      "stablehlo.sort", {keys, idx}, {keys.type, idx.type}, {kt, kt, it, it},
      [&](Builder& rb, const std::vector<Value>& a) {
        return std::vector<Value>{comes_before(rb, a[0], a[1], descending)};
      },
      "dimension = " + std::to_string(dim) + " : i64, is_stable = true");
  return {t == DType::kBool ? b.convert(r[0], DType::kBool) : r[0], r[1]};
}

// Views a 0-d tensor as [1] so it has a dim to sort (results reshape to the out types).
Value at_least_1d(Builder& b, Value x) { return x.rank() == 0 ? b.reshape(x, {1}) : x; }

// sort(self, dim, descending), sort.stable(self, stable, dim, descending) and their out=
// forms: with a `stable` argument at 1 (bool or None) the dim moves to 2.
Lowered lower_sort(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  size_t dim_arg = c.arg(1).kind == ArgKind::kInt ? 1 : 2;
  int64_t dim = wrap_dim(c.int_arg(dim_arg), x.rank());
  bool descending = c.bool_arg(dim_arg + 1);
  auto [values, indices] = sort_with_indices(b, at_least_1d(b, x), dim, descending);
  return std::vector<Value>{b.reshape(values, c.out_type(0).dims),
                            b.reshape(indices, c.out_type(1).dims)};
}

// The first `k` entries along `dim` of a sorted pair.
std::vector<Value> take_first(Builder& b, const std::pair<Value, Value>& sorted, int64_t dim,
                              int64_t start, int64_t k) {
  Dims lo(sorted.first.rank(), 0), hi = sorted.first.dims(), step(sorted.first.rank(), 1);
  lo[dim] = start;
  hi[dim] = start + k;
  return {b.slice(sorted.first, lo, hi, step), b.slice(sorted.second, lo, hi, step)};
}

// topk(self, k, dim, largest, sorted): the k largest (smallest) in sorted order; the
// CPU returns them sorted for sorted=False too on these sizes, and callers may not rely
// on any order then, so sorted order is always correct.
Lowered lower_topk(LoweringContext& c) {
  Builder& b = c.b();
  Value x = at_least_1d(b, c.tensor(0));
  // A 0-d self gives itself and index 0 for k = 0 too (the CPU's 0-d results).
  int64_t k = c.tensor_type(0).rank() == 0 ? 1 : c.int_arg(1);
  int64_t dim = wrap_dim(c.int_arg(2), c.tensor_type(0).rank());
  bool largest = c.bool_arg(3);
  auto sorted = sort_with_indices(b, x, dim, largest);
  std::vector<Value> r = take_first(b, sorted, dim, 0, k);
  return std::vector<Value>{b.reshape(r[0], c.out_type(0).dims),
                            b.reshape(r[1], c.out_type(1).dims)};
}

// kthvalue(self, k, dim, keepdim): the k-th smallest (1-based) and its index. PyTorch
// checks 1 <= k <= size before the kernel runs (the meta kernel), so k is in range here.
Lowered lower_kthvalue(LoweringContext& c) {
  Builder& b = c.b();
  Value x = at_least_1d(b, c.tensor(0));
  int64_t k = c.int_arg(1);
  int64_t dim = wrap_dim(c.int_arg(2), c.tensor_type(0).rank());
  auto sorted = sort_with_indices(b, x, dim, /*descending=*/false);
  std::vector<Value> r = take_first(b, sorted, dim, k - 1, 1);
  return std::vector<Value>{b.reshape(r[0], c.out_type(0).dims),
                            b.reshape(r[1], c.out_type(1).dims)};
}

// median / nanmedian, over everything or along a dim (with indices): the lower median
// of the sorted values. median with a NaN in the row returns that row's first NaN (NaN
// sorts last, stably); nanmedian skips NaNs and is NaN only for an all-NaN row.
LoweringFn median(bool ignore_nan) {
  return [ignore_nan](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value x = c.tensor(0);
    bool with_dim = c.out_types().size() == 2;
    int64_t dim = with_dim && x.rank() > 0 ? wrap_dim(c.int_arg(1), x.rank()) : 0;
    // Rows of the values to take the median of: [rows, n].
    Value rows_x;
    if (!with_dim) {
      rows_x = b.reshape(x, {1, c.tensor_type(0).num_elements()});
    } else {
      Value y = at_least_1d(b, x);
      Dims perm;
      for (int64_t d = 0; d < y.rank(); ++d) if (d != dim) perm.push_back(d);
      perm.push_back(dim);
      Value t = b.transpose(y, perm);
      int64_t n = y.dims()[dim];
      rows_x = b.reshape(t, {n == 0 ? 0 : y.type.num_elements() / n, n});
    }
    int64_t rows = rows_x.dims()[0], n = rows_x.dims()[1];
    if (rows == 0 || n == 0) {
      std::vector<Value> out{b.splat(NAN, c.out_type(0))};
      if (with_dim) out.push_back(b.zeros(c.out_type(1)));
      return out;
    }
    auto [sorted, indices] = sort_with_indices(b, rows_x, 1, /*descending=*/false);
    TensorType it{DType::kI64, {rows}};
    Value n_valid = b.splat(static_cast<double>(n), it);
    if (base::is_floating(x.dtype())) {
      Value nan = b.convert(b.compare(rows_x, rows_x, "NE"), DType::kI64);
      n_valid = b.sub(n_valid, b.reduce_sum(nan, {1}));
    }
    Value one = b.splat(1, it), zero = b.zeros(it);
    Value pos;
    if (ignore_nan) {
      // (valid - 1) / 2, or 0 (a NaN) when every value is NaN.
      pos = b.max(b.div(b.sub(n_valid, one), b.splat(2, it)), zero);
    } else {
      Value lower = b.splat(static_cast<double>((n - 1) / 2), it);
      pos = b.select(b.compare(n_valid, b.splat(static_cast<double>(n), it), "LT"), n_valid, lower);
    }
    Value row = b.iota(it, 0);
    Value coords = b.concatenate({b.reshape(row, {rows, 1}), b.reshape(pos, {rows, 1})}, 1);
    auto pick = [&](Value v) {
      return b.op("stablehlo.gather", {v, coords}, TensorType{v.dtype(), {rows}},
                  "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0, 1], "
                  "start_index_map = [0, 1], index_vector_dim = 1>, "
                  "slice_sizes = array<i64: 1, 1>, indices_are_sorted = false");
    };
    std::vector<Value> out{b.reshape(pick(sorted), c.out_type(0).dims)};
    if (with_dim) out.push_back(b.reshape(pick(indices), c.out_type(1).dims));
    return out;
  };
}

// Elements [from, to) of `v` along `dim`.
Value slice_dim(Builder& b, Value v, int64_t dim, int64_t from, int64_t to) {
  Dims lo(v.rank(), 0), hi = v.dims(), one(v.rank(), 1);
  lo[dim] = from;
  hi[dim] = to;
  return b.slice(v, lo, hi, one);
}

// mode(self, dim, keepdim) -> (values, indices): the most frequent value along `dim` and
// an index of it, as the CPU kernel picks them: the values sorted, runs of equal values
// counted (NaN never equals, so each NaN is a run of one), the first longest run (the
// smallest value) wins, and its index is the run's last element's. The CPU sorts with
// std::sort, stable on the short rows it sorts by insertion, where the last of a run is
// the value's last occurrence; this sort is stable on every row.
Lowered lower_mode(LoweringContext& c) {
  Builder& b = c.b();
  Value x = at_least_1d(b, c.tensor(0));
  int64_t dim = wrap_dim(c.int_arg(1), c.tensor_type(0).rank());
  const int64_t n = x.dims()[dim];
  if (x.type.num_elements() == 0) {
    return std::vector<Value>{b.zeros(c.out_type(0)), b.zeros(c.out_type(1))};
  }
  auto [sv, si] = sort_with_indices(b, x, dim, /*descending=*/false);
  TensorType it{DType::kI64, sv.dims()};
  Value k = b.iota(it, dim);
  // prev[k] = sv[k - 1] and next[k] = sv[k + 1]; the ends see themselves.
  Value prev = b.concatenate({slice_dim(b, sv, dim, 0, 1), slice_dim(b, sv, dim, 0, n - 1)}, dim);
  Value next = b.concatenate({slice_dim(b, sv, dim, 1, n), slice_dim(b, sv, dim, n - 1, n)}, dim);
  Value is_start = b.binary("or", b.compare(k, b.zeros(it), "EQ"), b.compare(sv, prev, "NE"));
  Value is_end = b.binary("or", b.compare(k, b.splat(static_cast<double>(n - 1), it), "EQ"),
                          b.compare(sv, next, "NE"));
  Value start = scan(b, b.select(is_start, k, b.zeros(it)), dim, b.constant_i64(0, DType::kI64),
                     [](Builder& r, Value p, Value q) { return r.binary("maximum", p, q); });
  Value freq = b.select(is_end, b.add(b.sub(k, start), b.splat(1, it)), b.zeros(it));
  DType t = sv.dtype();
  TensorType is{DType::kI64, {}}, vs{t, {}};
  Dims out_dims = sv.dims();
  out_dims.erase(out_dims.begin() + dim);
  auto body = [](Builder& r, const std::vector<Value>& a) {
    // (freq, k, value, index) pairs: the larger freq, then the smaller k.
    Value a_wins = r.binary("or", r.compare(a[0], a[4], "GT"),
                            r.binary("and", r.compare(a[0], a[4], "EQ"),
                                     r.compare(a[1], a[5], "LT")));
    std::vector<Value> out;
    for (int i = 0; i < 4; ++i) out.push_back(r.select(a_wins, a[i], a[i + 4]));
    return out;
  };
  std::vector<Value> best = b.op_with_region(
      "stablehlo.reduce",
      {freq, k, sv, si, b.constant_i64(-1, DType::kI64),
       b.constant_i64(INT64_MAX, DType::kI64), b.zeros(vs), b.constant_i64(0, DType::kI64)},
      {TensorType{DType::kI64, out_dims}, TensorType{DType::kI64, out_dims},
       TensorType{t, out_dims}, TensorType{DType::kI64, out_dims}},
      {is, is, vs, is, is, is, vs, is}, body, "dimensions = " + i64_array({dim}));
  Value values = b.convert(b.reshape(best[2], c.out_type(0).dims), c.out_type(0).dtype);
  return std::vector<Value>{values, b.reshape(best[3], c.out_type(1).dims)};
}

// nonzero_static(self, size, fill_value): the first `size` indices of self's non-zero
// elements in row-major order (NaN counts), as rows of coordinates, padded with
// fill_value: a stable sort of "is zero" orders the flat positions, non-zero ones first.
Lowered lower_nonzero_static(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  Value fill = b.splat(static_cast<double>(c.int_arg(2)), out);
  if (out.num_elements() == 0) return std::vector<Value>{fill};
  Value x = c.tensor(0);
  const int64_t size = out.dims[0], rank = out.dims[1], n = x.type.num_elements();
  if (n == 0) return std::vector<Value>{fill};
  Value flat = b.reshape(x, {n});
  Value is_zero = b.compare(flat, b.zeros(flat.type), "EQ");
  Value order = sort_with_indices(b, is_zero, 0, false).second;
  Value count = b.reduce_sum(b.convert(b.unary("not", is_zero), DType::kI64), {0});
  if (size <= n) {
    order = b.slice(order, {0}, {size}, {1});
  } else {
    order = b.concatenate({order, b.zeros(TensorType{DType::kI64, {size - n}})}, 0);
  }
  TensorType rows{DType::kI64, {size, rank}};
  Value position = b.broadcast_in_dim(order, rows.dims, {0});
  Dims extent = x.dims(), stride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) stride[d] = stride[d + 1] * extent[d + 1];
  Value strides = b.broadcast_in_dim(b.constant_i64s(stride, {rank}), rows.dims, {1});
  Value extents = b.broadcast_in_dim(b.constant_i64s(extent, {rank}), rows.dims, {1});
  Value coords = b.binary("remainder", b.div(position, strides), extents);
  Value valid = b.compare(b.iota(rows, 0), b.broadcast_in_dim(count, rows.dims, {}), "LT");
  return std::vector<Value>{b.convert(b.select(valid, coords, b.convert(fill, DType::kI64)),
                                      out.dtype)};
}

}  // namespace

void register_sort_lowerings() {
  register_lowering({"aten::median", "aten::median.dim", "aten::median.dim_values"}, median(false));
  register_lowering({"aten::nanmedian", "aten::nanmedian.dim", "aten::nanmedian.dim_values"},
                    median(true));
  register_lowering({"aten::sort", "aten::sort.stable", "aten::sort.values",
                     "aten::sort.values_stable"},
                    lower_sort);
  register_lowering({"aten::topk", "aten::topk.values"}, lower_topk);
  register_lowering({"aten::kthvalue", "aten::kthvalue.values"}, lower_kthvalue);
  register_lowering({"aten::mode", "aten::mode.values"}, lower_mode);
  register_lowering({"aten::nonzero_static", "aten::nonzero_static.out"}, lower_nonzero_static);
}

}  // namespace torchtpu::lowering
