// One eager op signature, compiled: what the boxed kernel caches per signature
// (call_signature.h) and how a call of it runs op by op.
//
// On a miss, PyTorch's meta kernel validates the call exactly as PyTorch would and yields
// the result types; the op is lowered as a graph of one node (lowering::lower_op), and the
// program is compiled on first use (at once in op-by-op mode; fused eager runs most calls
// inside fused graphs and compiles an op alone only when it runs alone).
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "aten/dispatch_profile.h"
#include "aten/op_info.h"
#include "aten/program_executor.h"
#include "lowering/lowering.h"

namespace torchtpu::aten {

struct CompiledOp {
  std::vector<int64_t> words;  // the signature it was compiled for (a hash hit is verified)
  int uid = 0;                 // distinct per entry (part of a fused graph's structure)
  std::string name;            // "aten::add.Tensor"
  std::string signature;       // readable form, for error messages
  int device = 0;
  std::vector<lowering::OpArg> args;        // the call's classification
  lowering::LoweredGraph lowered;           // the op as a graph of one node
  std::vector<std::pair<int, int>> inputs;  // per graph input: (argument, item or -1)
  std::vector<lowering::TensorType> out_types;  // one per defined tensor result
  std::vector<c10::ScalarType> out_scalar_types;
  std::vector<bool> return_defined;       // per schema return
  std::vector<int> return_to_arg;         // per schema return: mutable arg it writes, or -1
  std::vector<int> return_list_size;      // per schema return: items of a Tensor[], or -1
  std::vector<int> list_write_args;       // a `-> ()` list op's written Tensor(a!)[] args
  std::vector<int> extra_write_args;      // written Tensor(a!) arguments no return names
                                          // (writes_unreturned_args), after the returns
  // (graph input, output) pairs of a written argument and its new value, of one type: the
  // program may write the value into the argument's buffer (EagerArgs::donatable).
  std::vector<std::pair<int, int>> donations;

  bool has_checks() const { return !lowered.check_messages.empty(); }
  // The program, compiled on first use (a plugin that rejects it is a torchtpu bug: raises).
  const CompiledProgram& program() const;

 private:
  mutable std::once_flag compiled_;  // a failed compile raises and is retried next call
  mutable std::shared_ptr<const CompiledProgram> program_;
};

// Compiles the call `ivalues` of `op` (classified as `args` on `device`). Throws
// NeedsFallback (call_signature.h) for calls that cannot run on tpu; raises PyTorch's error
// for calls PyTorch rejects, and an internal error for a lowering that fails itself.
std::shared_ptr<CompiledOp> compile_op(const c10::OperatorHandle& op, const OpInfo& info,
                                       c10::ArrayRef<c10::IValue> ivalues,
                                       std::vector<lowering::OpArg> args, int device,
                                       bool compile_now);

// Runs the call on `stack` (its arguments on top) op by op: parameters from its arguments,
// data checks read at once (a failed call changes nothing), results pushed or written
// into its mutable arguments.
void run_compiled(const CompiledOp& c, const c10::FunctionSchema& schema,
                  torch::jit::Stack* stack, const std::optional<at::Generator>& generator,
                  dispatch_profile::Timer& timer);

// The 0-d buffer of dtype `dtype` for scalar parameter `p`'s argument `v` (a Scalar,
// converted as `p.cast` says, or a 0-dim CPU tensor cast the way TensorIterator casts it).
runtime::BufferPtr scalar_buffer(const c10::IValue& v, const lowering::GraphParam& p,
                                 int device);
// Item `j` of the present tensors of a Tensor[] or Tensor?[] argument.
at::Tensor present_tensor(const c10::IValue& v, int j);

bool fallback_is_error();

// PyTorch's validation of a call on meta arguments (`meta_stack`: meta tensors and values in
// schema order), as eager mode runs it before lowering: the op's meta kernel (the structured
// meta and out= form for a structured op's functional form), and for a few ops our own
// checks of what their meta kernels leave out. Leaves the results on the stack; throws what
// the checks throw.
void run_meta(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack& meta_stack);

// Why eager mode refuses the call of `op` on `meta_args` (meta tensors and values in schema
// order) before running anything: the dtypes its CPU kernel refuses (cpu_dtypes.h), or its
// meta kernel's error (argmax of a bool tensor); nullopt when it would run. A compiled
// graph's fake tensors run Python meta functions that check less: such a node runs
// eagerly there, and raises as eager mode does.
std::optional<std::string> eager_refusal(const c10::OperatorHandle& op, torch::jit::Stack meta_args);

}  // namespace torchtpu::aten
