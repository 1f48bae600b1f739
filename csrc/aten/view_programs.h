// The programs that read a view out of a storage's buffer and write a value back through
// one (lowering/storage_programs.h), run with their executables cached by the view's
// shape: (kind, buffer type, sizes, strides) as integer words, so a cache hit builds no
// module text and allocates no key. The storage offset is a runtime operand.
// Thread safety: every function may be called from any thread.
#pragma once

#include <ATen/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <vector>

#include "runtime/buffer.h"

namespace torchtpu::aten {

// The view (sizes, strides, offset) of `base`'s elements (row-major), as a new buffer.
runtime::BufferPtr view_read(const runtime::Buffer& base, c10::IntArrayRef sizes,
                             c10::IntArrayRef strides, int64_t offset);
// `base` reshaped to `sizes` (same element count).
runtime::BufferPtr view_reshape(const runtime::Buffer& base, c10::IntArrayRef sizes);
// `base` with the view's elements replaced by `value` (shaped `sizes`), as a new buffer.
// `donate_base`: the caller holds `base` alone (see donatable_base), and gives it up: XLA
// then writes the view into its memory instead of copying the whole base.
runtime::BufferPtr view_write(const runtime::Buffer& base, const runtime::Buffer& value,
                              c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset,
                              bool donate_base = false);

// Many views (tensors over `base`'s storage) in one program: their values, in order; and
// `base` with `values[i]` written through views[i], in order (a list op's in-place results
// into gradients that are views of one flat buffer cost one program, not one per item).
std::vector<runtime::BufferPtr> views_read(const runtime::Buffer& base,
                                           c10::ArrayRef<at::Tensor> views);
// Views of several storages in one program: views[i] of bases[base_of[i]] (a compiled
// graph's inputs, a list's items: each a window or a reshape of its own storage).
std::vector<runtime::BufferPtr> views_read(const std::vector<const runtime::Buffer*>& bases,
                                           c10::ArrayRef<at::Tensor> views,
                                           const std::vector<size_t>& base_of);
runtime::BufferPtr views_write(const runtime::Buffer& base,
                               const std::vector<runtime::BufferPtr>& values,
                               c10::ArrayRef<at::Tensor> views, bool donate_base = false);

}  // namespace torchtpu::aten
