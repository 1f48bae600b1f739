#include "lowering/storage_programs.h"

#include <algorithm>
#include <numeric>

namespace torchtpu::lowering {
namespace {

int64_t numel_of(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

bool is_contiguous(const Dims& sizes, const Dims& strides) {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// A view whose elements are one contiguous block of `numel` elements read in another dim
// order: a transpose or permute of a contiguous window (w.t(), q.transpose(1, 2)), with
// stride-0 dims broadcast (expand) and size-1 dims free. `block` holds the block's sizes in
// memory order (outermost first), `order` the view dim each comes from. Such a view reads
// and writes as slice + reshape + transpose (+ broadcast), never as an element gather or
// scatter, which XLA runs far slower. Nullopt for any other view (overlapping or gapped).
struct DenseBlock {
  Dims block;
  Dims order;
  int64_t numel = 1;
  bool broadcast = false;  // some dim of size > 1 has stride 0
};
// Flat indices (i64) of every element of the view from its first element at the runtime
// `offset` (0-d i64), shaped `sizes` + [1] for gather/scatter.
Value flat_indices(Builder& b, const Dims& sizes, const Dims& strides, Value offset) {
  TensorType t{DType::kI64, sizes};
  Value idx = b.broadcast_to(offset, sizes);
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 1 || strides[k] == 0) continue;
    Value term = b.mul(b.iota(t, static_cast<int64_t>(k)),
                       b.broadcast_to(b.constant_i64(strides[k], DType::kI64), sizes));
    idx = b.add(idx, term);
  }
  Dims with_vec = sizes;
  with_vec.push_back(1);
  return b.reshape(idx, with_vec);
}

std::string gather_attrs(int64_t rank) {
  return "dimension_numbers = #stablehlo.gather<collapsed_slice_dims = [0], start_index_map = "
         "[0], index_vector_dim = " +
         std::to_string(rank) + ">, indices_are_sorted = false, slice_sizes = array<i64: 1>";
}

std::string scatter_attrs(int64_t rank) {
  return "indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<"
         "inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = " +
         std::to_string(rank) + ">, unique_indices = false";
}

std::optional<DenseBlock> dense_block(const Dims& sizes, const Dims& strides) {
  DenseBlock d;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 1) continue;
    if (strides[k] == 0) {
      d.broadcast = true;
      continue;
    }
    if (strides[k] < 0) return std::nullopt;
    d.order.push_back(static_cast<int64_t>(k));
  }
  // Memory order: outermost (largest stride) first; equal strides of sizes > 1 overlap.
  std::stable_sort(d.order.begin(), d.order.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (auto it = d.order.rbegin(); it != d.order.rend(); ++it) {
    if (strides[*it] != expected) return std::nullopt;
    expected *= sizes[*it];
  }
  d.numel = expected;
  for (int64_t k : d.order) d.block.push_back(sizes[k]);
  return d;
}

// The block's dims sorted by view dim, and the transpose from memory order to it.
void view_order(const DenseBlock& d, Dims* sorted, Dims* perm) {
  *sorted = d.order;
  std::sort(sorted->begin(), sorted->end());
  perm->clear();
  for (int64_t k : *sorted) {
    perm->push_back(std::find(d.order.begin(), d.order.end(), k) - d.order.begin());
  }
}

bool is_identity(const Dims& perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// The view (shape `sizes`) of `window`, the block's elements as a 1-D value.
Value read_dense_block(Builder& b, Value window, const DenseBlock& d, const Dims& sizes) {
  Dims sorted, perm;
  view_order(d, &sorted, &perm);
  if (is_identity(perm) && !d.broadcast) return b.reshape(window, sizes);  // contiguous
  Value v = b.reshape(window, d.block);
  if (!is_identity(perm)) v = b.transpose(v, perm);
  if (!d.broadcast) return b.reshape(v, sizes);  // only size-1 dims to add
  return b.broadcast_in_dim(v, sizes, sorted);
}

// The block's elements (1-D, memory order) holding `value` (shape `sizes`); d has no
// broadcast dim.
Value write_dense_block(Builder& b, Value value, const DenseBlock& d) {
  Dims sorted, perm;
  view_order(d, &sorted, &perm);
  Dims in_view_order;
  for (int64_t k : sorted) in_view_order.push_back(value.dims()[k]);
  Value v = b.reshape(value, in_view_order);  // drops size-1 dims only
  // The inverse transpose: from view order back to memory order.
  Dims inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  if (!is_identity(inverse)) v = b.transpose(v, inverse);
  return b.reshape(v, {d.numel});
}

}  // namespace

bool is_whole_buffer_view(int64_t buffer_numel, const Dims& sizes, const Dims& strides,
                          int64_t offset) {
  return offset == 0 && numel_of(sizes) == buffer_numel && is_contiguous(sizes, strides);
}

Value read_view(Builder& b, Value flat, const Dims& sizes, const Dims& strides, Value offset) {
  TensorType out{flat.type.dtype, sizes};
  if (numel_of(sizes) == 0) return b.zeros(out);
  // A dense block (a contiguous window, or a permuted or broadcast one): one slice at the
  // runtime offset, no index arithmetic.
  if (std::optional<DenseBlock> d = dense_block(sizes, strides)) {
    Value window = b.op("stablehlo.dynamic_slice", {flat, offset},
                        TensorType{flat.type.dtype, {d->numel}},
                        "slice_sizes = " + i64_array({d->numel}));
    return read_dense_block(b, window, *d, sizes);
  }
  Value idx = flat_indices(b, sizes, strides, offset);
  return b.op("stablehlo.gather", {flat, idx}, out, gather_attrs(static_cast<int64_t>(sizes.size())));
}

Value write_view(Builder& b, Value flat, Value value, const Dims& sizes, const Dims& strides,
                 Value offset) {
  if (numel_of(sizes) == 0) return flat;
  std::optional<DenseBlock> d = dense_block(sizes, strides);
  if (d && !d->broadcast) {
    // One block (contiguous, or permuted): one update at the runtime offset.
    return b.op("stablehlo.dynamic_update_slice", {flat, write_dense_block(b, value, *d), offset},
                flat.type);
  }
  Value idx = flat_indices(b, sizes, strides, offset);
  TensorType scalar{flat.type.dtype, {}};
  return b.op_with_region(
      "stablehlo.scatter", {flat, idx, value}, {flat.type}, {scalar, scalar},
      [](Builder&, const std::vector<Value>& args) { return std::vector<Value>{args[1]}; },
      scatter_attrs(static_cast<int64_t>(sizes.size())))[0];
}

namespace {

// Item i of a 1-D i64 vector of offsets, as a 0-d value.
Value offset_item(Builder& b, Value offsets, int64_t i) {
  return b.reshape(b.slice(offsets, {i}, {i + 1}, {1}), {});
}

}  // namespace

std::string strided_read_module(const TensorType& base, const Dims& sizes, const Dims& strides) {
  Builder b("torchtpu_view_read");
  Value src = b.param(base);
  Value offset = b.param(TensorType{DType::kI64, {}});
  if (numel_of(sizes) == 0) return b.finish({b.zeros(TensorType{base.dtype, sizes})});
  return b.finish({read_view(b, b.reshape(src, {base.num_elements()}), sizes, strides, offset)});
}

std::string strided_multi_read_module(const std::vector<TensorType>& bases,
                                      const std::vector<ViewShape>& views) {
  Builder b("torchtpu_views_read");
  std::vector<Value> flats;
  for (const TensorType& t : bases) flats.push_back(b.reshape(b.param(t), {t.num_elements()}));
  Value offsets = b.param(TensorType{DType::kI64, {static_cast<int64_t>(views.size())}});
  std::vector<Value> out;
  for (size_t i = 0; i < views.size(); ++i) {
    out.push_back(read_view(b, flats.at(views[i].base), views[i].sizes, views[i].strides,
                            offset_item(b, offsets, static_cast<int64_t>(i))));
  }
  return b.finish(out);
}

std::string strided_multi_read_module(const TensorType& base, const std::vector<ViewShape>& views) {
  return strided_multi_read_module(std::vector<TensorType>{base}, views);
}

std::string padded_read_module(const TensorType& base, const Dims& padded, const Dims& out) {
  Builder b("torchtpu_padded_read");
  Value src = b.param(base);
  Value offset = b.param(TensorType{DType::kI64, {}});
  int64_t rank = static_cast<int64_t>(padded.size());
  Value sizes = b.param(TensorType{DType::kI64, {rank}});
  Value strides = b.param(TensorType{DType::kI64, {rank}});
  TensorType result{base.dtype, out};
  int64_t n = base.num_elements();
  if (n == 0 || numel_of(padded) == 0) return b.finish({b.zeros(result)});
  TensorType it{DType::kI64, padded};
  auto item = [&](Value v, int64_t k) {
    return b.broadcast_to(b.reshape(b.slice(v, {k}, {k + 1}, {1}), {}), padded);
  };
  Value idx = b.broadcast_to(offset, padded);
  Value valid = b.splat(1, TensorType{DType::kBool, padded});
  for (int64_t k = 0; k < rank; ++k) {
    Value pos = b.iota(it, k);
    idx = b.add(idx, b.mul(pos, item(strides, k)));
    valid = b.binary("and", valid, b.compare(pos, item(sizes, k), "LT"));
  }
  // Padding reads element 0 (in range whatever the view), then becomes zeros.
  idx = b.select(valid, idx, b.zeros(it));
  Dims with_vec = padded;
  with_vec.push_back(1);
  Value flat = b.reshape(src, {n});
  Value r = b.op("stablehlo.gather", {flat, b.reshape(idx, with_vec)},
                 TensorType{base.dtype, padded}, gather_attrs(rank));
  r = b.select(valid, r, b.zeros(r.type));
  return b.finish({b.reshape(r, out)});
}

std::string strided_write_module(const TensorType& base, const Dims& sizes, const Dims& strides) {
  Builder b("torchtpu_view_write");
  Value dst = b.param(base);
  Value value = b.param(TensorType{base.dtype, sizes});
  Value offset = b.param(TensorType{DType::kI64, {}});
  if (numel_of(sizes) == 0) return b.finish({dst});
  b.alias_param(0, 0);  // a donated base is written in place (view_write)
  Value flat = write_view(b, b.reshape(dst, {base.num_elements()}), value, sizes, strides, offset);
  return b.finish({b.reshape(flat, base.dims)});
}

std::string strided_multi_write_module(const TensorType& base,
                                       const std::vector<ViewShape>& views) {
  Builder b("torchtpu_views_write");
  Value dst = b.param(base);
  std::vector<Value> values;
  for (const ViewShape& v : views) values.push_back(b.param(TensorType{base.dtype, v.sizes}));
  Value offsets = b.param(TensorType{DType::kI64, {static_cast<int64_t>(views.size())}});
  b.alias_param(0, 0);  // a donated base is written in place (views_write)
  Value flat = b.reshape(dst, {base.num_elements()});
  for (size_t i = 0; i < views.size(); ++i) {
    flat = write_view(b, flat, values[i], views[i].sizes, views[i].strides,
                      offset_item(b, offsets, static_cast<int64_t>(i)));
  }
  return b.finish({b.reshape(flat, base.dims)});
}

std::string convert_module(const TensorType& src, DType dtype, const Dims& dims) {
  Builder b("torchtpu_convert");
  Value v = b.param(src);
  return b.finish({b.broadcast_to(b.convert(v, dtype), dims)});
}

std::string math_bits_module(const TensorType& src, bool conj, bool neg) {
  Builder b("torchtpu_math_bits");
  Value v = b.param(src);
  if (conj) v = b.conj(v);
  if (neg) v = b.unary("negate", v);
  return b.finish({v});
}

std::string zeros_module(const TensorType& t) {
  Builder b("torchtpu_zeros");
  return b.finish({b.zeros(t)});
}

}  // namespace torchtpu::lowering
