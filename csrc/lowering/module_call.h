// Module calls: ops whose lowering is a StableHLO function supplied from outside the
// table, per call signature. JAX and Pallas kernels registered as PyTorch custom ops
// (python/torchtpu/kernels) are module calls: JAX exports the function once per
// signature and the provider hands its functions here.
//
// The lowering of a module call asks the provider for the functions of this call's
// signature (its tensor argument types, its structural arguments, its result types),
// splices them into the module being built (once per module, however many calls) and
// calls the entry function with the op's tensor arguments in schema order, the items of a
// Tensor[] argument in place (`func.call`). XLA inlines the call, so in a compiled graph
// the function fuses with its neighbours like any lowered op; in eager mode the op is a
// module of its own.
//
// Thread safety: every function may be called from any thread. The provider is called
// without any lock of this file held, and may run on any thread that lowers.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {

struct ModuleFunctions {
  // The function to call: private, and named uniquely for the exported module (so two
  // calls of one module share its functions, and two modules never clash).
  std::string entry;
  // Top-level `func.func` ops in generic form: the entry and every function it calls.
  std::string text;
};

// Returns the functions for `op_name` called with `args` (schema order) whose results
// have `out_types`. An error is the op's error: its message names the op and the reason.
using ModuleProvider = std::function<base::StatusOr<ModuleFunctions>(
    const std::string& op_name, const std::vector<OpArg>& args,
    const std::vector<TensorType>& out_types)>;

// Sets the provider every module call asks (replacing any earlier one).
void set_module_provider(ModuleProvider provider);

// Makes `op_name` ("ns::name") a module call: find_lowering() returns the module-call
// lowering for it from now on. Names the table already has are refused.
base::Status register_module_call(const std::string& op_name);
bool is_module_call(std::string_view op_name);
std::vector<std::string> module_calls();

// The module-call lowering when `op_name` is registered as one, else nullptr (the
// table's own lookup falls through to this).
const LoweringFn* find_module_call(std::string_view op_name);

}  // namespace torchtpu::lowering
