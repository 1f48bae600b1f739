// Kernels registered explicitly for `tpu` that are not lowerings: copies, scalar reads,
// resize. Registered in register.cc.
#pragma once

#include <ATen/Tensor.h>

namespace torchtpu::aten {

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
c10::Scalar local_scalar_dense(const at::Tensor& self);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);

}  // namespace torchtpu::aten
