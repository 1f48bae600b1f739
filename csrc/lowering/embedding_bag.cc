// embedding_bag: _embedding_bag and _embedding_bag_forward_only (what F.embedding_bag /
// nn.EmbeddingBag call), modes sum, mean and max, and their dense backward ops (below).
//
// (weight [V, D], indices [N], offsets [B or B + 1], scale_grad_by_freq, mode, sparse,
//  per_sample_weights? [N], include_last_offset, padding_idx)
//   -> (output [B, D], offset2bag [N], bag_size [len(offsets)], max_indices)
// Results have CUDA's shapes (PyTorch's meta kernel gives them off the CPU): max_indices is
// [B, D] in max mode, else empty. Index i belongs to bag offset2bag[i] = (number of bag
// starts <= i) - 1; rows equal to padding_idx are left out of every bag (and of its size).
// Each index's row is scattered into its bag (add for sum and mean, maximum for max): time
// and memory grow with N * D, not with the number of bags times N. Empty bags give zeros
// (max_indices -1, as CUDA's kernel). Reduced-precision weights accumulate in float32.
#include <algorithm>
#include <string>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

enum Mode : int64_t { kSum = 0, kMean = 1, kMax = 2 };

// Rows of `table` ([R, D]) at `idx` ([N] i64, in range): [N, D].
Value take_rows(Builder& b, Value table, Value idx) {
  int64_t n = idx.dims()[0], d = table.dims()[1];
  return gather(b, table, b.reshape(idx, {n, 1}), {1}, {0}, {0}, 1, {1, d}, {n, d});
}

// `idx` ([N] i64) clamped into [0, size): for gathers whose out-of-range rows are masked.
Value clamp_index(Builder& b, Value idx, int64_t size) {
  TensorType scalar{DType::kI64, {}};
  return b.clamp(b.zeros(scalar), idx, b.constant_i64(std::max<int64_t>(size - 1, 0), DType::kI64));
}

Result embedding_bag(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& w = c.tensor_type(0);
  if (w.rank() != 2 || c.tensor_type(1).rank() != 1 || c.tensor_type(2).rank() != 1) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  " expects a 2-d weight and 1-d indices and offsets");
  }
  int64_t mode = c.int_arg(4);
  bool last_offset = c.bool_arg(7);
  int64_t padding_idx = c.int_arg(8);
  int64_t n = c.tensor_type(1).dims[0], v = w.dims[0], d = w.dims[1];
  int64_t num_offsets = c.tensor_type(2).dims[0];
  int64_t bags = c.out_type(0).dims[0];
  DType t = opmath(w.dtype);
  DType index_type = c.out_type(1).dtype;

  Value idx = b.convert(c.tensor(1), DType::kI64);
  Value offsets = b.convert(c.tensor(2), DType::kI64);
  TensorType i64_scalar{DType::kI64, {}};
  // PyTorch's CPU checks (its CUDA kernel reads out of bounds instead).
  Value in_range = b.binary("and", b.compare(idx, b.zeros({DType::kI64, {n}}), "GE"),
                            b.compare(idx, b.splat(static_cast<double>(v), {DType::kI64, {n}}),
                                      "LT"));
  c.require(b.all_of(in_range),
            "embedding_bag: an index of input is not in the valid range [0, " +
                std::to_string(v) + ")",
            CheckKind::kRuntimeError);
  if (num_offsets > 0) {
    Value first = b.reshape(b.slice(offsets, {0}, {1}, {1}), {});
    c.require(b.compare(first, b.zeros(i64_scalar), "EQ"),
              "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
              "from position 0",
              CheckKind::kRuntimeError);
    Value last = b.reshape(b.slice(offsets, {num_offsets - 1}, {num_offsets}, {1}), {});
    c.require(b.compare(last, b.constant_i64(n, DType::kI64), "LE"),
              "offsets[-1] can not be greater than input's length " + std::to_string(n),
              CheckKind::kRuntimeError);
    // The CPU reads bags from offsets it never orders: a negative one is out of range
    // there, a decreasing pair fails an internal check.
    c.require(b.all_of(b.compare(offsets, b.zeros(offsets.type), "GE")),
              "embedding_bag: offsets must not be negative", CheckKind::kIndexError);
    if (num_offsets > 1) {
      Value before = b.slice(offsets, {0}, {num_offsets - 1}, {1});
      Value after = b.slice(offsets, {1}, {num_offsets}, {1});
      c.require(b.all_of(b.compare(before, after, "LE")),
                "embedding_bag: offsets must be non-decreasing (a bag starts where the one "
                "before it starts or after)",
                CheckKind::kRuntimeError);
    }
  }

  // offset2bag[i] = (number of bag starts <= i) - 1: a binary search of the starts (sorted,
  // as checked above) per position, O(N log B); every reduction below is a scatter of the
  // N rows into their bags, O(N * D) whatever the number of bags.
  Value positions = b.iota({DType::kI64, {n}}, 0);
  Value offset2bag = b.splat(-1, {DType::kI64, {n}});
  if (bags > 0) {
    Value starts = b.reshape(b.slice(offsets, {0}, {bags}, {1}), {1, bags});
    offset2bag = b.sub(b.reshape(binary_search(b, starts, b.reshape(positions, {1, n}), true),
                                 {n}),
                       b.splat(1, {DType::kI64, {n}}));
  }
  Value member = b.compare(offset2bag, b.zeros(offset2bag.type), "GE");
  if (last_offset) {  // positions past the final offset belong to no bag
    Value end = b.broadcast_in_dim(b.slice(offsets, {num_offsets - 1}, {num_offsets}, {1}),
                                   {n}, {0});
    member = b.binary("and", member, b.compare(positions, end, "LT"));
  }
  if (padding_idx >= 0) {
    member = b.binary("and", member,
                      b.compare(idx, b.splat(static_cast<double>(padding_idx), idx.type), "NE"));
  }
  Value bag_of = b.reshape(clamp_index(b, offset2bag, bags), {n, 1});  // scatter coordinates
  auto into_bags = [&](Value updates, Value init, const std::string& combiner) {
    Dims window = updates.rank() == 2 ? Dims{1} : Dims{};
    return scatter(b, init, bag_of, updates, window, {0}, {0}, 1, combiner);
  };
  // bag_size has an entry per offset (CUDA's shape); a final offset's entry is 0.
  Value sizes = into_bags(b.convert(member, DType::kI64), b.zeros({DType::kI64, {bags}}), "add");
  if (num_offsets > bags) {
    sizes = b.concatenate({sizes, b.zeros({DType::kI64, {num_offsets - bags}})}, 0);
  }

  Value rows = b.convert(take_rows(b, c.tensor(0), clamp_index(b, idx, v)), t);
  Value in_bag = b.broadcast_in_dim(member, {n, d}, {0});
  Value output;
  Value max_indices = b.zeros({index_type, c.out_type(3).dims});
  if (bags == 0 || n == 0) {  // no bag, or only empty ones: zeros (max_indices -1)
    output = b.zeros({t, {bags, d}});
    if (mode == kMax) max_indices = b.splat(-1, {index_type, c.out_type(3).dims});
  } else if (mode == kMax) {
    Value lowest = b.broadcast_to(b.min_value(t), {n, d});
    Value best = into_bags(b.select(in_bag, rows, lowest),
                           b.broadcast_to(b.min_value(t), {bags, d}), "maximum");  // [B, D]
    Value nonempty = b.broadcast_in_dim(
        b.compare(b.slice(sizes, {0}, {bags}, {1}), b.zeros({DType::kI64, {bags}}), "GT"),
        {bags, d}, {0});
    output = b.select(nonempty, best, b.zeros(best.type));
    // The index (a weight row) of each maximum: the first bag position holding it.
    Value best_of_row = take_rows(b, best, b.reshape(bag_of, {n}));  // [N, D]
    Value hit = b.binary("and", in_bag, b.compare(rows, best_of_row, "EQ"));
    Value none = b.splat(static_cast<double>(n), {DType::kI64, {n, d}});
    Value first = into_bags(b.select(hit, b.iota({DType::kI64, {n, d}}, 0), none),
                            b.splat(static_cast<double>(n), {DType::kI64, {bags, d}}),
                            "minimum");  // [B, D]
    Value found = b.compare(first, b.splat(static_cast<double>(n), first.type), "LT");
    Value row_at = b.reshape(
        gather(b, idx, b.reshape(clamp_index(b, first, n), {bags, d, 1}), {}, {0}, {0}, 2, {1},
               {bags, d}),
        {bags, d});
    Value chosen = b.select(b.binary("and", found, nonempty), row_at, b.splat(-1, row_at.type));
    max_indices = b.convert(chosen, index_type);
  } else {
    Value weighted = rows;
    if (!c.is_none(6)) {
      Value psw = b.convert(c.tensor(6), t);
      weighted = b.mul(rows, b.broadcast_in_dim(psw, {n, d}, {0}));
    }
    output = into_bags(b.select(in_bag, weighted, b.zeros(weighted.type)),
                       b.zeros({t, {bags, d}}), "add");
    if (mode == kMean) {
      Value count = b.convert(b.slice(sizes, {0}, {bags}, {1}), t);
      Value safe = b.max(count, b.splat(1, count.type));
      output = b.div(output, b.broadcast_in_dim(safe, {bags, d}, {0}));
    }
  }
  return std::vector<Value>{b.convert(output, c.out_type(0).dtype),
                            b.convert(offset2bag, index_type),
                            b.convert(sizes, c.out_type(2).dtype), max_indices};
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, max_indices,
//   num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights?, padding_idx) and
// _embedding_bag_dense_backward (the same without offsets and sparse) -> grad_weight
// [num_weights, D], from the auxiliary results of the forward above. Sum/mean: each index
// adds its bag's gradient row (times its per-sample weight; over the bag size for mean;
// over the index's frequency with scale_grad_by_freq) to its weight row, padding rows
// excepted; max: each (bag, feature) gradient goes to the row that held the maximum.
// Sparse gradients are not lowered (PyTorch's kernel runs).
Result embedding_bag_backward(LoweringContext& c) {
  Builder& b = c.b();
  bool full = c.op_name() == "aten::_embedding_bag_backward";
  size_t shift = full ? 1 : 0;  // the full form has `offsets` at 2 and `sparse` at 9
  if (full && c.bool_arg(9)) {
    return base::unimplemented("lowering: " + c.op_name() + ": sparse gradients are not lowered");
  }
  const TensorType& out = c.out_type();
  const TensorType& grad_type = c.tensor_type(0);
  int64_t n = c.tensor_type(1).rank() == 1 ? c.tensor_type(1).dims[0] : -1;
  if (out.rank() != 2 || grad_type.rank() != 2 || n < 0 ||
      c.tensor_type(2 + shift).dims != Dims{n}) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  " expects 1-d indices and an offset2bag of the same size");
  }
  int64_t v = out.dims[0], d = out.dims[1], bags = grad_type.dims[0];
  bool scale_by_freq = c.bool_arg(6 + shift);
  int64_t mode = c.int_arg(7 + shift);
  size_t psw_arg = full ? 10 : 8;
  int64_t padding_idx = c.int_arg(full ? 11 : 9);
  DType t = opmath(out.dtype);
  Value grad = b.convert(c.tensor(0), t);
  Value zeros = b.zeros({t, {v, d}});
  if (mode == kMax) {
    // Coordinates (max_indices[b, f], f) per gradient element; -1 marks an empty bag.
    Value rows = b.convert(c.tensor(4 + shift), DType::kI64);
    Value valid = b.compare(rows, b.zeros(rows.type), "GE");
    Value safe = b.select(valid, rows, b.zeros(rows.type));
    Value cols = b.iota({DType::kI64, {bags, d}}, 1);
    Value coords = b.concatenate({b.reshape(safe, {bags, d, 1}), b.reshape(cols, {bags, d, 1})}, 2);
    Value updates = b.select(valid, grad, b.zeros(grad.type));
    Value result = scatter(b, zeros, coords, updates, {}, {0, 1}, {0, 1}, 2, "add");
    return std::vector<Value>{b.convert(result, out.dtype)};
  }
  Value idx = b.convert(c.tensor(1), DType::kI64);
  Value bag_of = clamp_index(b, b.convert(c.tensor(2 + shift), DType::kI64), bags);
  Value rows = take_rows(b, grad, bag_of);  // [N, D]
  TensorType column{t, {n, 1}};
  Value factor = b.splat(1, column);
  if (mode == kMean) {
    Value sizes = b.convert(c.tensor(3 + shift), t);
    int64_t len = sizes.dims()[0];
    Value size_of = take_rows(b, b.reshape(sizes, {len, 1}), clamp_index(b, bag_of, len));
    factor = b.div(factor, b.max(size_of, b.splat(1, column)));
  }
  if (!c.is_none(psw_arg) && mode == kSum) {
    factor = b.mul(factor, b.reshape(b.convert(c.tensor(psw_arg), t), {n, 1}));
  }
  Value safe_idx = clamp_index(b, idx, v);
  if (scale_by_freq) {  // occurrences of each index among all the indices
    Value counts = scatter(b, b.zeros({t, {v}}), b.reshape(safe_idx, {n, 1}), b.splat(1, {t, {n}}),
                           {}, {0}, {0}, 1, "add");
    factor = b.div(factor, take_rows(b, b.reshape(counts, {v, 1}), safe_idx));
  }
  Value keep = b.compare(idx, b.zeros(idx.type), "GE");
  keep = b.binary("and", keep, b.compare(idx, b.splat(static_cast<double>(v), idx.type), "LT"));
  if (padding_idx >= 0) {
    keep = b.binary("and", keep,
                    b.compare(idx, b.splat(static_cast<double>(padding_idx), idx.type), "NE"));
  }
  Value updates = b.mul(rows, b.broadcast_in_dim(factor, {n, d}, {0, 1}));
  updates = b.select(b.broadcast_in_dim(keep, {n, d}, {0}), updates, b.zeros(updates.type));
  Value result = scatter(b, zeros, b.reshape(safe_idx, {n, 1}), updates, {1}, {0}, {0}, 1, "add");
  return std::vector<Value>{b.convert(result, out.dtype)};
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag,
//   mode, padding_idx) -> [N]: index i's weight gradient is its bag's gradient row dotted
// with its weight row (0 for padding rows). Only mode sum takes per-sample weights.
Result per_sample_weights_backward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& grad_type = c.tensor_type(0);
  const TensorType& w = c.tensor_type(1);
  int64_t n = c.out_type().num_elements();
  if (grad_type.rank() != 2 || w.rank() != 2 || c.tensor_type(4).dims != Dims{n} ||
      c.int_arg(5) != kSum) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  " expects mode sum, 2-d grad and weight, 1-d offset2bag");
  }
  DType t = opmath(c.out_type().dtype);
  Value idx = b.convert(c.tensor(2), DType::kI64);
  Value bag_of = clamp_index(b, b.convert(c.tensor(4), DType::kI64), grad_type.dims[0]);
  Value grad_rows = take_rows(b, b.convert(c.tensor(0), t), bag_of);
  Value weight_rows = take_rows(b, b.convert(c.tensor(1), t), clamp_index(b, idx, w.dims[0]));
  Value dot = b.reduce_sum(b.mul(grad_rows, weight_rows), {1});
  int64_t padding_idx = c.int_arg(6);
  if (padding_idx >= 0) {
    Value pad = b.compare(idx, b.splat(static_cast<double>(padding_idx), idx.type), "EQ");
    dot = b.select(pad, b.zeros(dot.type), dot);
  }
  return std::vector<Value>{b.convert(b.reshape(dot, c.out_type().dims), c.out_type().dtype)};
}

}  // namespace

void register_embedding_bag_lowerings() {
  register_lowering({"aten::_embedding_bag_per_sample_weights_backward"},
                    per_sample_weights_backward);
  register_lowering({"aten::_embedding_bag", "aten::_embedding_bag_forward_only"},
                    embedding_bag);
  register_lowering({"aten::_embedding_bag_backward", "aten::_embedding_bag_dense_backward"},
                    embedding_bag_backward);
}

}  // namespace torchtpu::lowering
