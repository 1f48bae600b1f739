// Kernels registered explicitly for `tpu` that are not lowerings: copies, scalar reads,
// resize. Registered in register.cc.
#pragma once

#include <ATen/Tensor.h>

namespace torchtpu::aten {

// _copy_from for tpu: a side with a math bit set goes through copy_from_with_math_bits.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
// _copy_from at the Conjugate and Negative keys (and copy_from's with a bit set). PyTorch's math-bit fallback would resolve
// `dst` into a clone (the schema does not mark dst as written), so a copy into a
// conjugate view (x.conj().copy_(y)) would be lost: this resolves the source and stores
// into dst's elements what its bits read back as the source's value.
at::Tensor copy_from_with_math_bits(const at::Tensor& self, const at::Tensor& dst,
                                    bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
// A new contiguous tensor holding `self`'s logical value: its stored elements conjugated
// and negated per its math bits (what clone of a tensor with a bit set returns).
at::Tensor resolved_clone(const at::Tensor& self);
c10::Scalar local_scalar_dense(const at::Tensor& self);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);

}  // namespace torchtpu::aten
