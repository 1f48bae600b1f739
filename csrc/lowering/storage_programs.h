// Programs the device layer needs that are not aten ops: reading a strided view out of a
// storage buffer, writing a value back through a view, converting and broadcasting for
// copies, and zero-filling. Each returns a module with one result.
//
// A storage buffer has the logical shape it was produced with (`base`); views address it
// by PyTorch's (sizes, strides, offset) over the flattened buffer, row-major.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lowering/hlo_builder.h"

namespace torchtpu::lowering {

// Views are read and written by one program per (base type, sizes, strides): the storage
// offset is a runtime operand (a 0-d i64), so `y[i]` for every i shares one executable.
// (base, offset) -> the view's values, shape `sizes`, dtype base.dtype.
std::string strided_read_module(const TensorType& base, const Dims& sizes, const Dims& strides);
// (base, value[sizes], offset) -> base with the view's elements replaced by value.
std::string strided_write_module(const TensorType& base, const Dims& sizes, const Dims& strides);
// Many views of one storage in one program, offsets as one runtime i64 vector: (base,
// offsets[n]) -> each view's values; (base, value_1..value_n, offsets[n]) -> base with the
// views written in order (a later view wins where views overlap, as n single writes would).
// Reading views of several storages (a compiled graph's inputs, a list op's items) is one
// program too: (base_0..base_k-1, offsets[n]) -> each view's values, view i reading
// base `views[i].base`.
struct ViewShape {
  Dims sizes;
  Dims strides;
  size_t base = 0;  // which base a view reads (multi-read over several bases)
};
std::string strided_multi_read_module(const TensorType& base, const std::vector<ViewShape>& views);
std::string strided_multi_read_module(const std::vector<TensorType>& bases,
                                      const std::vector<ViewShape>& views);
std::string strided_multi_write_module(const TensorType& base,
                                       const std::vector<ViewShape>& views);
// (base, offset, sizes, strides) -> the view (sizes, strides, offset) of base padded with
// zeros to `padded` (each size <= its padded size), as a tensor of shape `out` (the same
// element count). Offset is a 0-d i64, sizes and strides i64 vectors of padded's rank, all
// runtime operands: one program per (base type, padded, out) reads a view of any size
// that fits, which is how a compiled graph padded to shape buckets takes its inputs.
std::string padded_read_module(const TensorType& base, const Dims& padded, const Dims& out);
// (src) -> src converted to `dtype` and broadcast (NumPy rules) to `dims`.
std::string convert_module(const TensorType& src, DType dtype, const Dims& dims);
// (src) -> src conjugated (when `conj`; complex types only) and negated (when `neg`): how a
// value with PyTorch's conjugate / negative bits reads, or is written through such a view.
std::string math_bits_module(const TensorType& src, bool conj, bool neg);
// () -> zeros of type `t`.
std::string zeros_module(const TensorType& t);

// The view (sizes, strides) at `offset` (a 0-d i64, runtime) of `flat`, a storage as 1-D;
// and `flat` with that view's elements replaced by `value` (of flat's dtype). What the
// modules above are made of, and what a fused graph's view nodes lower to.
Value read_view(Builder& b, Value flat, const Dims& sizes, const Dims& strides, Value offset);
Value write_view(Builder& b, Value flat, Value value, const Dims& sizes, const Dims& strides,
                 Value offset);

// True when the view (sizes, strides, offset) covers the buffer exactly in row-major
// order, so the buffer can be used as the view's value after a reshape.
bool is_whole_buffer_view(int64_t buffer_numel, const Dims& sizes, const Dims& strides,
                          int64_t offset);

}  // namespace torchtpu::lowering
