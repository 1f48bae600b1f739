// The dtypes an out= tensor may have, as PyTorch's CPU kernels decide.
//
// Our result types come from PyTorch's meta kernels, and many of those (Python references)
// accept an out= tensor of any dtype the result safely casts to. Most CPU and CUDA kernels
// do too (TensorIterator ops cast into out), but a measured set writes out only in the
// dtype it computes (sort's values and indices, amax, tril, gelu, ...): for those, without
// this check, a lowering either cast where the CPU refuses or failed with an internal error.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchtpu::aten {

// Raises a RuntimeError like the CPU's when the call `args` (meta arguments, before the
// meta kernel runs) of the out= form `op` passes an out tensor of another dtype than its
// CPU kernel writes. A no-op for ops that cast into out, and for functional and in-place
// forms.
void check_out_dtypes(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

// The same check for a kernel of ours that writes `out` in `computed`.
void check_out_dtype(const at::Tensor& out, c10::ScalarType computed);

}  // namespace torchtpu::aten
