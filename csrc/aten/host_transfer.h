// Moving data between host (CPU tensors, scalars) and tpu buffers.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Scalar.h>

#include "runtime/buffer.h"

namespace torchtpu::aten {

// A 0-d buffer holding `s` converted to `dtype`: `checked` raises on a value the dtype
// cannot hold (fill_), else it is cast as TensorIterator casts a wrapped number. Small
// buffers are cached by value so optimizer hyper-parameters do not cost a transfer on
// every step.
runtime::BufferPtr scalar_to_buffer(const c10::Scalar& s, base::DType dtype, int device,
                                    bool checked = true);
// The same for a 0-d CPU tensor, in its own dtype (cached alike).
runtime::BufferPtr host_scalar_to_buffer(const at::Tensor& host, int device);
// Drops the cached scalar buffers (torch.tpu.empty_cache()).
void clear_scalar_cache();
// Copies a CPU tensor (any layout; it is made contiguous first) into a new buffer.
runtime::BufferPtr cpu_to_buffer(const at::Tensor& cpu, int device);
// Reads a buffer back into a new contiguous CPU tensor (blocks until it is computed).
at::Tensor buffer_to_cpu(const runtime::Buffer& buffer);
// Reads a buffer straight into `dst`, a contiguous CPU tensor of the buffer's dtype and
// element count (no intermediate host tensor; blocks until it is computed).
void buffer_into_cpu(const runtime::Buffer& buffer, const at::Tensor& dst);

}  // namespace torchtpu::aten
