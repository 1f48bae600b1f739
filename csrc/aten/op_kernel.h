// The one boxed kernel behind every lowered aten op on `tpu`, and the CPU fallback.
//
// Per call: signature (op, arg dtypes/shapes, structural args, device) -> cached
// CompiledOp (on a miss: PyTorch's meta kernel validates the call and gives the result
// types, the lowering table emits the module, the runtime compiles it) -> inputs gathered
// per ParamBinding -> asynchronous execute -> data checks -> results wrapped or written
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
// Reads the i1 check results outputs[first..] (one per message) and raises the error a
// failed check stands for (IndexError or RuntimeError). Blocks on the results.
void run_data_checks(const std::vector<runtime::BufferPtr>& outputs, size_t first,
                     const std::vector<lowering::CheckKind>& kinds,
                     const std::vector<std::string>& messages);
// Number of distinct op signatures compiled in this process.
size_t op_cache_size();

}  // namespace torchtpu::aten
