// Programs the device layer needs that are not aten ops: reading a strided view out of a
// storage buffer, writing a value back through a view, converting and broadcasting for
// copies, and zero-filling. Each returns a module with one result.
//
// A storage buffer has the logical shape it was produced with (`base`); views address it
// by PyTorch's (sizes, strides, offset) over the flattened buffer, row-major.
#pragma once

#include <string>

#include "lowering/hlo_builder.h"

namespace torchtpu::lowering {

// Views are read and written by one program per (base type, sizes, strides): the storage
// offset is a runtime operand (a 0-d i64), so `y[i]` for every i shares one executable.
// (base, offset) -> the view's values, shape `sizes`, dtype base.dtype.
std::string strided_read_module(const TensorType& base, const Dims& sizes, const Dims& strides);
// (base, value[sizes], offset) -> base with the view's elements replaced by value.
std::string strided_write_module(const TensorType& base, const Dims& sizes, const Dims& strides);
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

// True when the view (sizes, strides, offset) covers the buffer exactly in row-major
// order, so the buffer can be used as the view's value after a reshape.
bool is_whole_buffer_view(int64_t buffer_numel, const Dims& sizes, const Dims& strides,
                          int64_t offset);

}  // namespace torchtpu::lowering
