// Indexing lowerings: gathers and scatters driven by index tensors (index_select, gather,
// scatter*, index_add/copy/fill, masked_fill/scatter, take, advanced indexing, index_put).
//
// XLA clamps out-of-range gather/scatter indices where PyTorch raises, so every index is
// bounds-checked on the device and the result recorded with LoweringContext::require.
// Negative indices wrap only where PyTorch wraps them (advanced indexing, index_put,
// take, index_fill); gather, scatter, index_select, index_add and index_copy reject them.
//
// Tensor?[] arguments (index.Tensor, index_put, _index_put_impl_) arrive as a kTensorList
// holding only the present tensors; OpArg::ints gives each one's position in the original
// list (empty ints: positions 0..n-1, i.e. no None entries).
#include <algorithm>
#include <optional>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

Value filled(Builder& b, double v, const TensorType& type) {
  return b.broadcast_in_dim(b.constant(v, type.dtype), type.dims, {});
}

Value fill_i64(Builder& b, int64_t v, const Dims& dims) {
  return b.broadcast_in_dim(b.constant_i64(v, DType::kI64), dims, {});
}

Dims without(int64_t n, const Dims& skip) {
  Dims d;
  for (int64_t i = 0; i < n; ++i) {
    if (std::find(skip.begin(), skip.end(), i) == skip.end()) d.push_back(i);
  }
  return d;
}

// `idx` as i64, negative entries wrapped when `wrap`; records the bounds check [0, size),
// where size is the number of elements of `self` along `size_dims`. When any entry is out
// of range, every entry becomes `size`, which a scatter drops (XLA skips out-of-bounds
// windows): an update whose check fails writes nothing, so its check is guarded.
Value checked_index(LoweringContext& c, Value idx, Value self, const Dims& size_dims, bool wrap,
                    const std::string& message, CheckKind kind = CheckKind::kIndexError) {
  Builder& b = c.b();
  Value i = b.convert(idx, DType::kI64);
  if (i.type.num_elements() == 0) return i;
  int64_t size = 1;
  for (int64_t d : size_dims) size *= self.dims()[d];
  Value zero = fill_i64(b, 0, i.dims());
  Value n = fill_i64(b, size, i.dims());
  if (wrap) i = b.select(b.compare(i, zero, "LT"), b.add(i, n), i);
  Value ok = b.all_of(b.binary("and", b.compare(i, zero, "GE"), b.compare(i, n, "LT")));
  c.require(ok, message, kind, /*guarded=*/true);
  return b.select(b.broadcast_in_dim(ok, i.dims(), {}), i, n);
}

std::string bounds_message(const std::string& op, int64_t dim, int64_t size) {
  return "index out of range: " + op + ": index out of bounds for dimension " +
         std::to_string(dim) + " with size " + std::to_string(size);
}

void append_field(std::string* s, const char* name, const Dims& d) {
  if (d.empty()) return;
  *s += std::string(s->back() == '<' ? "" : ", ") + name + " = " + i64_list(d);
}

}  // namespace

Value gather(Builder& b, Value operand, Value indices, const Dims& offset_dims,
             const Dims& collapsed, const Dims& start_index_map, int64_t index_vector_dim,
             const Dims& slice_sizes, const Dims& out_dims) {
  std::string nums = "#stablehlo.gather<";
  append_field(&nums, "offset_dims", offset_dims);
  append_field(&nums, "collapsed_slice_dims", collapsed);
  append_field(&nums, "start_index_map", start_index_map);
  nums += ", index_vector_dim = " + std::to_string(index_vector_dim) + ">";
  return b.op("stablehlo.gather", {operand, indices}, TensorType{operand.dtype(), out_dims},
              "dimension_numbers = " + nums + ", slice_sizes = " + i64_array(slice_sizes) +
                  ", indices_are_sorted = false");
}

namespace {

// How scatter combines an update with the current value: "" replaces, else a binary
// stablehlo op name. Bool tensors use the logical equivalents.
std::string combiner_for(const std::string& reduce, DType t) {
  bool is_bool = t == DType::kBool;
  if (reduce == "add" || reduce == "sum" || reduce == "mean") return is_bool ? "or" : "add";
  if (reduce == "multiply" || reduce == "prod") return is_bool ? "and" : "multiply";
  if (reduce == "amax") return is_bool ? "or" : "maximum";
  if (reduce == "amin") return is_bool ? "and" : "minimum";
  return "";
}

}  // namespace

Value scatter(Builder& b, Value operand, Value indices, Value updates,
              const Dims& update_window_dims, const Dims& inserted_window_dims,
              const Dims& scatter_dims_to_operand_dims, int64_t index_vector_dim,
              const std::string& combiner) {
  std::string nums = "#stablehlo.scatter<";
  append_field(&nums, "update_window_dims", update_window_dims);
  append_field(&nums, "inserted_window_dims", inserted_window_dims);
  append_field(&nums, "scatter_dims_to_operand_dims", scatter_dims_to_operand_dims);
  nums += ", index_vector_dim = " + std::to_string(index_vector_dim) + ">";
  TensorType scalar{operand.dtype(), {}};
  return b.op_with_region(
      "stablehlo.scatter", {operand, indices, updates}, {operand.type}, {scalar, scalar},
      [&](Builder& rb, const std::vector<Value>& args) {
        // maximum/minimum as torch computes them: a NaN on either side wins (XLA's CPU
        // maximum returns the other operand when only the second is NaN).
        if (combiner.empty()) return std::vector<Value>{args[1]};
        if (combiner == "maximum") return std::vector<Value>{rb.max(args[0], args[1])};
        if (combiner == "minimum") return std::vector<Value>{rb.min(args[0], args[1])};
        return std::vector<Value>{rb.binary(combiner, args[0], args[1])};
      },
      "scatter_dimension_numbers = " + nums +
          ", indices_are_sorted = false, unique_indices = false")[0];
}

namespace {

// Full coordinates for gather/scatter along `dim`: [*idx.dims, rank] where the `dim`
// column is `idx` and every other column is the element's own position.
Value coordinates(Builder& b, Value idx, int64_t dim) {
  const Dims& s = idx.dims();
  Dims column = s;
  column.push_back(1);
  std::vector<Value> cols;
  for (int64_t d = 0; d < idx.rank(); ++d) {
    Value col = d == dim ? idx : b.iota(TensorType{DType::kI64, s}, d);
    cols.push_back(b.reshape(col, column));
  }
  return b.concatenate(cols, idx.rank());
}

// Rank-0 self and index behave as rank 1 with one element.
Value at_least_1d(Builder& b, Value v) { return v.rank() == 0 ? b.reshape(v, {1}) : v; }

// ---- gather / scatter along a dim (torch.gather, torch.scatter*) ----

Result lower_gather(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.num_elements() == 0) return std::vector<Value>{filled(b, 0, out)};
  if (c.tensor_type(0).rank() == 0 && c.tensor_type(2).num_elements() != 1) {
    // PyTorch's CPU kernel raises here; its meta kernel does not.
    return base::invalid_argument("lowering: index_select of a 0-d tensor takes one index");
  }
  Value self = at_least_1d(b, c.tensor(0));
  int64_t dim = wrap_dim(c.int_arg(1), self.rank());
  int64_t size = self.dims()[dim];
  Value idx = at_least_1d(b, c.tensor(2));
  // PyTorch raises RuntimeError (not IndexError) for gather/scatter bounds.
  idx = checked_index(c, idx, self, {dim}, false, bounds_message("gather", dim, size),
                      CheckKind::kRuntimeError);
  Dims all = iota_dims(self.rank());
  Value r = gather(b, self, coordinates(b, idx, dim), {}, all, all, self.rank(),
                   Dims(self.rank(), 1), idx.dims());
  return std::vector<Value>{b.reshape(to_out(c, r), out.dims)};
}

// Integer division rounding toward -inf (PyTorch's mean of integer scatter_reduce).
Value floor_div_int(Builder& b, Value a, Value d) {
  Value q = b.div(a, d);
  Value zero = b.zeros(a.type);
  Value inexact = b.compare(b.binary("remainder", a, d), zero, "NE");
  Value signs_differ = b.compare(b.compare(a, zero, "LT"), b.compare(d, zero, "LT"), "NE");
  return b.select(b.binary("and", inexact, signs_differ), b.sub(q, b.splat(1, q.type)), q);
}

// scatter.src/.value/.reduce/.value_reduce, scatter_add, scatter_reduce.two:
// (self, dim, index, src|value, [reduce], [include_self]).
Result lower_scatter(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  std::string reduce;
  if (c.op_name().find("scatter_add") != std::string::npos) reduce = "add";
  if (c.num_args() > 4 && c.arg(4).kind == ArgKind::kString) reduce = c.string_arg(4);
  // Reductions of bfloat16/half values accumulate in float32 and round once, as the CPU's
  // kernel does: 3000 additions of 0.1 into one bfloat16 element stop growing at 32, and a
  // half product 300 * 300 * 0.001 is 90, not inf.
  DType t = reduce.empty() ? out.dtype : opmath(out.dtype);
  Value self = at_least_1d(b, b.convert(c.tensor(0), t));
  int64_t dim = wrap_dim(c.int_arg(1), self.rank());
  int64_t size = self.dims()[dim];
  Value idx = at_least_1d(b, c.tensor(2));
  if (idx.type.num_elements() == 0) {
    return std::vector<Value>{b.reshape(b.convert(self, out.dtype), out.dims)};
  }
  idx = checked_index(c, idx, self, {dim}, false, bounds_message("scatter", dim, size),
                      CheckKind::kRuntimeError);
  Value updates;
  if (c.arg(3).kind == ArgKind::kScalar) {
    updates = b.broadcast_in_dim(c.scalar(3, t), idx.dims(), {});
  } else {
    Value src = at_least_1d(b, b.convert(c.tensor(3), t));
    updates = b.slice(src, Dims(src.rank(), 0), idx.dims(), Dims(src.rank(), 1));
  }
  bool is_two = c.op_name().find("scatter_reduce") != std::string::npos;
  bool include_self = !is_two || c.is_none(5) || c.bool_arg(5);
  if (!reduce.empty() && combiner_for(reduce, t).empty()) {
    return base::invalid_argument("lowering: " + c.op_name() + ": unknown reduce '" + reduce +
                                  "' (expected sum, prod, mean, amax, amin, add or multiply)");
  }
  Value coords = coordinates(b, idx, dim);
  Dims all = iota_dims(self.rank());
  auto scatter_all = [&](Value operand, Value upd, const std::string& comb) {
    return scatter(b, operand, coords, upd, {}, all, all, self.rank(), comb);
  };
  Value base = self;
  if (!include_self) {
    // Scattered positions start from the reduction's identity instead of self.
    Value touched = scatter_all(filled(b, 0, TensorType{DType::kBool, self.dims()}),
                                filled(b, 1, TensorType{DType::kBool, idx.dims()}), "");
    Value identity = reduce == "prod"   ? filled(b, 1, self.type)
                     : reduce == "amax" ? b.broadcast_in_dim(b.min_value(t), self.dims(), {})
                     : reduce == "amin" ? b.broadcast_in_dim(b.max_value(t), self.dims(), {})
                                        : filled(b, 0, self.type);
    base = b.select(touched, identity, self);
  }
  Value r = scatter_all(base, updates, combiner_for(reduce, t));
  if (reduce == "mean" && t != DType::kBool) {
    Value counts = scatter_all(filled(b, include_self ? 1 : 0, self.type),
                               filled(b, 1, updates.type), "add");
    counts = b.max(counts, filled(b, 1, self.type));
    if (t != out.dtype) {  // the CPU divides the sum and the count, each rounded to dtype
      r = b.convert(r, out.dtype);
      counts = b.convert(counts, out.dtype);
    }
    r = base::is_floating(t) ? b.div(r, counts) : floor_div_int(b, r, counts);
  }
  return std::vector<Value>{b.reshape(b.convert(r, out.dtype), out.dims)};
}

// ---- selections and updates of whole slices along a dim ----

// The 1-D index of index_select/index_add/index_copy/index_fill as checked i64 [N].
Value slice_index(LoweringContext& c, size_t arg, Value self, int64_t dim, bool wrap,
                  const std::string& message) {
  Value idx = c.tensor(arg);
  idx = c.b().reshape(idx, {idx.type.num_elements()});
  return checked_index(c, idx, self, {dim}, wrap, message);
}

Result lower_index_select(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.num_elements() == 0) return std::vector<Value>{filled(b, 0, out)};
  if (c.tensor_type(0).rank() == 0 && c.tensor_type(2).num_elements() != 1) {
    // PyTorch's CPU kernel raises here; its meta kernel does not.
    return base::invalid_argument("lowering: index_select of a 0-d tensor takes one index");
  }
  Value self = at_least_1d(b, c.tensor(0));
  int64_t dim = wrap_dim(c.int_arg(1), self.rank());
  Value idx = slice_index(c, 2, self, dim, false, "index out of range in self");
  int64_t n = idx.dims()[0];
  Dims slice_sizes = self.dims(), out_dims = self.dims();
  slice_sizes[dim] = 1;
  out_dims[dim] = n;
  Value r = gather(b, self, b.reshape(idx, {n, 1}), without(self.rank(), {dim}), {dim}, {dim}, 1,
                   slice_sizes, out_dims);
  return std::vector<Value>{b.reshape(to_out(c, r), out.dims)};
}

// embedding(weight, indices, ...) -> weight rows at indices [..., D]: one gather that keeps
// the indices' shape. The padding_idx/scale_grad_by_freq/sparse arguments only change the
// backward.
Result lower_embedding(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& w = c.tensor_type(0);
  const TensorType& out = c.out_type();
  if (w.rank() != 2) {
    return base::invalid_argument("lowering: " + c.op_name() + ": weight must be 2-d (got " +
                                  w.str() + ")");
  }
  if (out.num_elements() == 0) return std::vector<Value>{filled(b, 0, out)};
  Value idx = checked_index(c, c.tensor(1), c.tensor(0), {0}, false, "index out of range in self");
  int64_t r = idx.rank();
  Dims with_vec = idx.dims();
  with_vec.push_back(1);
  Dims out_dims = idx.dims();
  out_dims.push_back(w.dims[1]);
  Value rows = gather(b, c.tensor(0), b.reshape(idx, with_vec), {r}, {0}, {0}, r,
                      {1, w.dims[1]}, out_dims);
  return std::vector<Value>{to_out(c, rows)};
}

// embedding_renorm_(self [V, D], indices, max_norm, norm_type), what F.embedding runs first
// with max_norm: every row an index names whose norm exceeds max_norm is scaled by
// max_norm / (norm + 1e-7), as the CPU kernel does: the norm in self's dtype (rounded for
// 16-bit weights), compared and turned into a scale in double, the row multiplied in its
// opmath type. Only the named rows are read and written back (a row named twice gets the
// same value twice).
Result lower_embedding_renorm(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& w = c.tensor_type(0);
  if (w.rank() != 2) {
    return base::invalid_argument("lowering: " + c.op_name() + ": self must be 2-d (got " +
                                  w.str() + ")");
  }
  const int64_t n = c.tensor_type(1).num_elements();
  if (n == 0 || w.num_elements() == 0) return std::vector<Value>{c.tensor(0)};
  Value idx = checked_index(c, b.reshape(c.tensor(1), {n}), c.tensor(0), {0}, false,
                            "index out of range in self");
  Value at = b.reshape(idx, {n, 1});
  Value rows = gather(b, c.tensor(0), at, {1}, {0}, {0}, 1, {1, w.dims[1]}, {n, w.dims[1]});
  DType t = opmath(w.dtype);
  rows = b.convert(rows, t);
  Value norm = b.convert(round_to(b, norm_of_last_dim(b, rows, c.double_arg(3)), w.dtype),
                         DType::kF64);
  const double max_norm = c.double_arg(2);
  TensorType d{DType::kF64, {n}};
  Value over = b.compare(norm, b.splat(max_norm, d), "GT");
  Value scale = b.select(over, b.div(b.splat(max_norm, d), b.add(norm, b.splat(1e-7, d))),
                         b.splat(1, d));
  Value scaled = b.mul(rows, b.broadcast_in_dim(b.convert(scale, t), {n, w.dims[1]}, {0}));
  Value out = scatter(b, c.tensor(0), at, b.convert(scaled, w.dtype), {1}, {0}, {0}, 1, "");
  return std::vector<Value>{to_out(c, out)};
}

// index_add (alpha), index_copy and index_fill: (self, dim, index, source|value, [alpha]).
Result lower_index_update(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  DType t = out.dtype;
  const std::string& name = c.op_name();
  bool is_add = name.find("index_add") != std::string::npos;
  bool is_fill = name.find("index_fill") != std::string::npos;
  Value self = at_least_1d(b, b.convert(c.tensor(0), t));
  int64_t dim = wrap_dim(c.int_arg(1), self.rank());
  int64_t size = self.dims()[dim];
  std::string op = is_add ? "index_add" : is_fill ? "index_fill" : "index_copy";
  Value idx = slice_index(c, 2, self, dim, is_fill, bounds_message(op, dim, size));
  int64_t n = idx.dims()[0];
  if (n == 0) return std::vector<Value>{b.reshape(self, out.dims)};
  Dims update_dims = self.dims();
  update_dims[dim] = n;
  Value updates;
  if (is_fill) {
    updates = c.operand(3, t, update_dims);
  } else {
    updates = b.reshape(b.convert(c.tensor(3), t), update_dims);
  }
  if (is_add && c.num_args() > 4 && c.arg(4).kind == ArgKind::kScalar) {
    Value alpha = b.broadcast_in_dim(c.scalar(4, t), update_dims, {});
    updates = b.binary(t == DType::kBool ? "and" : "multiply", updates, alpha);
  }
  Value r = scatter(b, self, b.reshape(idx, {n, 1}), updates, without(self.rank(), {dim}), {dim},
                    {dim}, 1, is_add ? combiner_for("add", t) : "");
  return std::vector<Value>{b.reshape(r, out.dims)};
}

// ---- masks ----

Result lower_masked_fill(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  Value self = c.operand(0, out.dtype, out.dims);
  Value mask = c.operand(1, DType::kBool, out.dims);
  Value value = c.operand(2, out.dtype, out.dims);
  return std::vector<Value>{b.select(mask, value, self)};
}

// masked_scatter_(self, mask, source): the k-th true position (row-major) takes source's
// k-th element; k comes from an inclusive prefix count of the mask.
Result lower_masked_scatter(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  int64_t n = out.num_elements();
  if (n == 0) return std::vector<Value>{filled(b, 0, out)};
  Value self = b.reshape(c.operand(0, out.dtype, out.dims), {n});
  Value mask = b.reshape(c.operand(1, DType::kBool, out.dims), {n});
  Value source = c.tensor(2);
  int64_t m = source.type.num_elements();
  Value ones = b.convert(mask, DType::kI64);
  TensorType scalar{DType::kI64, {}};
  Value prefix = b.op_with_region(
      "stablehlo.reduce_window", {ones, b.constant_i64(0, DType::kI64)}, {ones.type},
      {scalar, scalar},
      [](Builder& rb, const std::vector<Value>& args) {
        return std::vector<Value>{rb.add(args[0], args[1])};
      },
      "window_dimensions = " + i64_array({n}) + ", window_strides = " + i64_array({1}) +
          ", padding = dense<[[" + std::to_string(n - 1) + ", 0]]> : tensor<1x2xi64>")[0];
  Value count = b.reduce_sum(ones, {0});
  c.require(b.compare(count, b.constant_i64(m, DType::kI64), "LE"),
            "Number of elements of source < number of ones in mask",  // the CPU's error
            CheckKind::kRuntimeError);
  if (m == 0) return std::vector<Value>{b.reshape(self, out.dims)};
  Value pos = b.clamp(fill_i64(b, 0, {n}), b.sub(prefix, fill_i64(b, 1, {n})), fill_i64(b, m - 1, {n}));
  Value flat_source = b.convert(b.reshape(source, {m}), out.dtype);
  Value picked = gather(b, flat_source, b.reshape(pos, {n, 1}), {}, {0}, {0}, 1, {1}, {n});
  return std::vector<Value>{b.reshape(b.select(mask, picked, self), out.dims)};
}

// take(self, index): indexes self as if flattened; negative indices wrap.
Result lower_take(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.num_elements() == 0) return std::vector<Value>{filled(b, 0, out)};
  Value self = c.tensor(0);
  int64_t n = self.type.num_elements();
  Value idx = checked_index(c, c.tensor(1), self, iota_dims(self.rank()), true,
                            bounds_message("take", 0, n));
  Dims vec = idx.dims();
  vec.push_back(1);
  Value r = gather(b, b.reshape(self, {n}), b.reshape(idx, vec), {}, {0}, {0}, idx.rank(), {1},
                   idx.dims());
  return std::vector<Value>{b.reshape(to_out(c, r), out.dims)};
}

// put(self, index, source, accumulate) and put_: source's elements written (or added) at
// the flat positions `index` of self (negative ones wrapped, bounds checked as take).
Result lower_put(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  Value self = c.tensor(0);
  int64_t n = self.type.num_elements();
  int64_t k = c.tensor_type(1).num_elements();
  if (n == 0 || k == 0) return std::vector<Value>{b.reshape(self, out.dims)};
  Value idx = checked_index(c, c.tensor(1), self, iota_dims(self.rank()), true,
                            bounds_message("put", 0, n));
  Value src = b.reshape(b.convert(c.tensor(2), self.dtype()), {k});
  Value flat = scatter(b, b.reshape(self, {n}), b.reshape(idx, {k, 1}), src, {}, {0}, {0}, 1,
                       c.bool_arg(3) ? "add" : "");
  return std::vector<Value>{b.reshape(flat, out.dims)};
}

// ---- advanced indexing ----

// The shared plan of index.Tensor and index_put: indexed dims, the broadcast index
// stacked as [*B, k], and the layout of the result.
struct AdvancedIndex {
  Dims positions;     // indexed dims of self, increasing
  Value stacked;      // i64 [*B, k]
  Dims batch;         // B
  Dims result_dims;   // shape of self[indices]
  Dims offset_dims;   // positions of self's other dims in result_dims
};

base::StatusOr<AdvancedIndex> plan_advanced_index(LoweringContext& c, Value self) {
  Builder& b = c.b();
  const OpArg& list = c.arg(1);
  std::vector<Value> indices = c.tensor_list(1);
  AdvancedIndex plan;
  plan.positions = list.ints.empty() ? iota_dims(indices.size()) : list.ints;
  if (plan.positions.size() != indices.size() || indices.empty()) {
    return base::invalid_argument("lowering: " + c.op_name() + ": " +
                                  std::to_string(indices.size()) + " index tensors for " +
                                  std::to_string(plan.positions.size()) + " positions");
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    if (!base::is_integral(indices[i].dtype())) {
      return base::invalid_argument("lowering: " + c.op_name() + ": index tensors must be "
                                    "integer (got " + base::dtype_name(indices[i].dtype()) +
                                    "); bool masks are converted before lowering");
    }
    if (plan.positions[i] >= self.rank() || (i > 0 && plan.positions[i] <= plan.positions[i - 1])) {
      return base::invalid_argument("lowering: " + c.op_name() + ": index positions must "
                                    "increase and stay below the rank " + std::to_string(self.rank()));
    }
    const Dims& d = indices[i].dims();
    // NumPy broadcast of all index shapes.
    if (d.size() > plan.batch.size()) plan.batch.insert(plan.batch.begin(), d.size() - plan.batch.size(), 1);
    for (size_t j = 0; j < d.size(); ++j) {
      int64_t& slot = plan.batch[plan.batch.size() - d.size() + j];
      if (slot == 1) slot = d[j];
    }
  }
  int64_t k = static_cast<int64_t>(indices.size());
  Dims column = plan.batch;
  column.push_back(1);
  std::vector<Value> cols;
  for (int64_t i = 0; i < k; ++i) {
    int64_t p = plan.positions[i];
    Value idx = b.broadcast_to(indices[i], plan.batch);
    idx = checked_index(c, idx, self, {p}, true, bounds_message("index", p, self.dims()[p]));
    cols.push_back(b.reshape(idx, column));
  }
  plan.stacked = b.concatenate(cols, static_cast<int64_t>(plan.batch.size()));
  Dims rest = without(self.rank(), plan.positions);
  bool consecutive = plan.positions.back() - plan.positions.front() == k - 1;
  // Consecutive indexed dims are replaced in place by B; separated ones put B first.
  int64_t before = consecutive ? plan.positions.front() : 0;
  int64_t nb = static_cast<int64_t>(plan.batch.size());
  for (int64_t i = 0; i < static_cast<int64_t>(rest.size()); ++i) {
    if (i == before) plan.result_dims.insert(plan.result_dims.end(), plan.batch.begin(), plan.batch.end());
    plan.offset_dims.push_back(i < before ? i : i + nb);
    plan.result_dims.push_back(self.dims()[rest[i]]);
  }
  if (before == static_cast<int64_t>(rest.size())) {
    plan.result_dims.insert(plan.result_dims.end(), plan.batch.begin(), plan.batch.end());
  }
  return plan;
}

Result lower_index(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  Value self = c.tensor(0);
  TORCHTPU_ASSIGN_OR_RETURN(AdvancedIndex plan, plan_advanced_index(c, self));
  if (out.num_elements() == 0) return std::vector<Value>{filled(b, 0, out)};
  Dims slice_sizes = self.dims();
  for (int64_t p : plan.positions) slice_sizes[p] = 1;
  Value r = gather(b, self, plan.stacked, plan.offset_dims, plan.positions, plan.positions,
                   static_cast<int64_t>(plan.batch.size()), slice_sizes, plan.result_dims);
  return std::vector<Value>{b.reshape(to_out(c, r), out.dims)};
}

// x[mask] = v with one bool mask over consecutive dims of self and one value: a select,
// with no data-dependent shape (`y[y < 0] = 0`, compiled or eager: eager keeps such masks,
// others become indices on the host first). Nothing when the call is not of that form.
std::optional<Value> masked_index_put(LoweringContext& c, Value self, bool accumulate) {
  Builder& b = c.b();
  std::vector<Value> indices = c.tensor_list(1);
  const Dims& positions = c.arg(1).ints;
  if (indices.size() != 1 || indices[0].dtype() != DType::kBool ||
      c.tensor_type(2).num_elements() != 1) {
    return std::nullopt;
  }
  Value mask = indices[0];
  int64_t first = positions.empty() ? 0 : positions[0];
  Dims covered;
  for (int64_t d = 0; d < mask.rank(); ++d) {
    if (first + d >= self.rank() || self.dims()[first + d] != mask.dims()[d]) return std::nullopt;
    covered.push_back(first + d);
  }
  Value where = b.broadcast_in_dim(mask, self.dims(), covered);
  Value v = b.broadcast_to(b.reshape(b.convert(c.tensor(2), self.dtype()), {}), self.dims());
  if (accumulate) return b.add(self, b.select(where, v, b.zeros(self.type)));
  return b.select(where, v, self);
}

// index_put / _index_put_impl_: (self, indices, values, accumulate, [unsafe]).
Result lower_index_put(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  Value self = b.convert(c.tensor(0), out.dtype);
  if (std::optional<Value> r = masked_index_put(c, self, !c.is_none(3) && c.bool_arg(3))) {
    return std::vector<Value>{*r};
  }
  TORCHTPU_ASSIGN_OR_RETURN(AdvancedIndex plan, plan_advanced_index(c, self));
  TensorType result{out.dtype, plan.result_dims};
  if (result.num_elements() == 0) return std::vector<Value>{self};
  Value values = b.broadcast_to(b.convert(c.tensor(2), out.dtype), plan.result_dims);
  bool accumulate = !c.is_none(3) && c.bool_arg(3);
  Value r = scatter(b, self, plan.stacked, values, plan.offset_dims, plan.positions,
                    plan.positions, static_cast<int64_t>(plan.batch.size()),
                    accumulate ? combiner_for("add", out.dtype) : "");
  return std::vector<Value>{r};
}

}  // namespace

void register_indexing_lowerings() {
  register_lowering({"aten::gather", "aten::gather.out"}, lower_gather);
  register_lowering({"aten::scatter.src", "aten::scatter_.src", "aten::scatter.src_out",
                     "aten::scatter.value", "aten::scatter_.value", "aten::scatter.value_out",
                     "aten::scatter.reduce", "aten::scatter_.reduce", "aten::scatter.reduce_out",
                     "aten::scatter.value_reduce", "aten::scatter_.value_reduce",
                     "aten::scatter.value_reduce_out", "aten::scatter_add", "aten::scatter_add_",
                     "aten::scatter_add.out", "aten::scatter_reduce.two",
                     "aten::scatter_reduce_.two", "aten::scatter_reduce.two_out"},
                    lower_scatter);
  register_lowering({"aten::index_select", "aten::index_select.out"}, lower_index_select);
  register_lowering({"aten::embedding"}, lower_embedding);
  register_lowering({"aten::embedding_renorm_", "aten::embedding_renorm",
                     "aten::embedding_renorm.out"}, lower_embedding_renorm);
  register_lowering({"aten::index_add", "aten::index_add_", "aten::index_add.out",
                     "aten::index_copy", "aten::index_copy_", "aten::index_copy.out",
                     "aten::index_fill.int_Scalar", "aten::index_fill_.int_Scalar",
                     "aten::index_fill.int_Tensor", "aten::index_fill_.int_Tensor"},
                    lower_index_update);
  register_lowering({"aten::masked_fill.Scalar", "aten::masked_fill_.Scalar",
                     "aten::masked_fill.Scalar_out", "aten::masked_fill.Tensor",
                     "aten::masked_fill_.Tensor", "aten::masked_fill.Tensor_out"},
                    lower_masked_fill);
  register_lowering({"aten::masked_scatter", "aten::masked_scatter_", "aten::masked_scatter.out"},
                    lower_masked_scatter);
  register_lowering({"aten::take", "aten::take.out"}, lower_take);
  register_lowering({"aten::put", "aten::put_", "aten::put.out"}, lower_put);
  register_lowering({"aten::index.Tensor", "aten::index.Tensor_out"}, lower_index);
  register_lowering({"aten::index_put", "aten::index_put_", "aten::index_put.out",
                     "aten::_index_put_impl_", "aten::_index_put_impl",
                     "aten::_index_put_impl.out"},
                    lower_index_put);
}

}  // namespace torchtpu::lowering
