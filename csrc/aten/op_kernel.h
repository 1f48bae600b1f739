// The one boxed kernel behind every lowered aten op on `tpu`, and the CPU fallback.
//
// Per call: signature (call_signature.h) -> cached CompiledOp (on a miss: PyTorch's meta
// kernel validates the call and gives the result types, the op is lowered as a graph of one
// node, the runtime compiles it) -> run by program_executor.h (parameters from the call's
// arguments, asynchronous execute, data checks read at once) -> results wrapped or written
// into the op's mutable arguments. Ops without a lowering run on the CPU: counted per op,
// warned once, an error when TORCHTPU_FALLBACK=error.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "lowering/lowering.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// Runs `op` on the CPU and accounts for it; `reason` says why it could not run on tpu.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason);
// Number of distinct op signatures compiled in this process.
size_t op_cache_size();

}  // namespace torchtpu::aten
