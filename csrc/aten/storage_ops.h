// Kernels that point a tpu tensor at a storage (`Tensor.set_` in its forms) and the
// resize of a storage's bytes that PyTorch's hooks ask for. Metadata only: no data moves
// except when a storage must grow. Registered in register.cc.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Storage.h>

namespace torchtpu::aten {

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                               c10::SymIntArrayRef size, c10::SymIntArrayRef stride);
at::Tensor& set_storage(at::Tensor& self, c10::Storage source);
at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);

}  // namespace torchtpu::aten
