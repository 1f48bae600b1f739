// What the generic boxed kernel (op_kernel.cc) needs to know about particular ops:
// argument forms it must unpack, ops whose shapes depend on data, ops without a meta
// kernel, and side effects a schema does not declare. Each function is small and named
// after the op family it serves, so the generic path stays generic.
#pragma once

#include <ATen/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

namespace torchtpu::aten {

// A Tensor?[] argument (advanced indexing), as opposed to a Tensor[].
bool is_optional_tensor_list(const c10::IValue& v);
// The defined tensors of a Tensor[] or Tensor?[] argument, in order.
std::vector<at::Tensor> present_tensors(const c10::IValue& v);

// Ops whose output shape depends on the data (nonzero, masked_select, unique): they run
// on the host by design (one round-trip, counted, allowed in strict mode).
bool is_data_dependent(const std::string& name);

// Gives each Tensor?[] argument on `stack` its own list type: TorchScript's interpreter
// passes one as a Tensor[] or generic list, which every reader here would refuse.
void type_optional_tensor_lists(const c10::FunctionSchema& schema, torch::jit::Stack* stack);

// Moves CPU index tensors in the Tensor?[] argument of an indexing op on `stack` to the
// indexed tensor's device (PyTorch accepts them on CUDA), then replaces bool/uint8 masks
// by the integer index tensors they select, as PyTorch's own indexing does (one host
// round-trip per mask, counted). Raises IndexError when a mask's shape does not match.
void expand_index_masks(const c10::FunctionSchema& schema, const std::string& name,
                        torch::jit::Stack* stack);

// index_put's values must broadcast to the indexing result and, unless they are one
// element, have self's dtype (PyTorch's CPU kernel checks both at run time, shape first;
// its meta kernel does not): raises the CPU's errors.
// Takes the meta arguments of a call after expand_index_masks (shapes decide it, so once
// per op signature); a no-op for other ops.
void check_index_put_values(const std::string& name, c10::ArrayRef<c10::IValue> args);

// Ops that write a Tensor(a!) argument that none of their returns aliases
// (_amp_foreach_non_finite_check_and_unscale_'s found_inf, _amp_update_scale_'s
// growth_tracker, rrelu_with_noise's noise, _batch_norm_with_update's running statistics):
// their lowerings return those arguments' new values after the returns. Opt-in by name,
// since other such ops (_native_batch_norm_legit) are handled otherwise.
bool writes_unreturned_args(const std::string& name);

// Float arguments that are data, not structure: the fused optimizer steps' learning rate
// and betas (`lr`, `beta1`, `beta2` of aten::_fused_*), which schedules change every step
// (OneCycleLR cycles beta1). They are described as runtime scalars (a new value never
// recompiles) instead of joining the op-cache key.
bool is_runtime_float_arg(const std::string& name, const std::string& arg_name);

// Scalar arguments that are structure, not data: the order of the vector norms (`p` of
// aten::norm.*, `ord` of aten::linalg_vector_norm and aten::_foreach_norm), which picks
// the reduction itself (p = 2 is sqrt(sum(x*x)), p = inf a max). They are described as
// float structural arguments (their value joins the op-cache key), so a lowering emits
// only the chosen norm; a program per order costs nothing, since models use one or two.
// Likewise the `exponent` of aten::pow.Tensor_Scalar(_out): a constant exponent is what XLA
// simplifies (x^2 as x*x instead of powf per element); models use a handful.
bool is_structural_scalar_arg(const std::string& name, const std::string& arg_name);

// Ops returning `()` write every item of each of their Tensor(a!)[] arguments, in argument
// order, except the lists this names as left unchanged: the fused Adam steps write `grads`
// only with a grad_scale (unscaled) and `max_exp_avg_sqs` only with amsgrad, the fused SGD
// step `grads` only with a grad_scale and `momentum_buffer_list` only with momentum, the
// fused Adagrad step `grads` only with a grad_scale and never `state_steps`, as PyTorch's
// kernels do. Their lowerings return exactly the written lists
// (lowering/optimizer.cc).
bool leaves_list_arg_unchanged(const std::string& name, const std::string& arg_name,
                               const c10::FunctionSchema& schema,
                               c10::ArrayRef<c10::IValue> args);

// For ops without a meta kernel (convolution_overrideable and its backward, the fused RNN
// cells, several backward ops, histogram), whose meta kernel fails (_batch_norm_with_update
// without weight), or whose meta kernel's results differ from the CPU's (eval-mode batch
// norm, a loss of one sample, nansum over dim=()), replaces the meta arguments on
// `meta_stack` by the op's meta results (meta_results.cc: from an equivalent op, or from
// the real kernel's shapes).
// Returns false for every other op; raises PyTorch-style errors for arguments the real
// kernel would reject.
bool meta_by_equivalent(const std::string& name, torch::jit::Stack* meta_stack);

// Checks that PyTorch's CPU kernel of an op makes and its meta kernel does not, raising
// the CPU's message: called with the op's name and arguments before anything runs.
using CpuArgumentCheck = void (*)(const std::string& name, c10::ArrayRef<c10::IValue> args);
// The check for op `name` (the table is at the definition), or nullptr when it has none.
CpuArgumentCheck cpu_argument_check(const std::string& name);

// The CPU fallback of an eigendecomposition (linalg_eig, _linalg_eigvals and their out
// forms) whose input has a NaN: MKL's geev crashes the process there (PyTorch issues
// 61251, 93124). The matrices with a NaN are given to it as zeros and their results
// replaced by NaN, what LAPACK gives a matrix with an inf. Returns false (nothing run) for
// any other op or input.
bool run_eig_fallback_guarding_nan(const std::string& name, const c10::OperatorHandle& op,
                                   torch::jit::Stack* stack);

// Batch norm in training mode also updates its running statistics in place, which the
// schema does not declare as results.
bool is_batch_norm(const std::string& name);
void update_batch_norm_stats(c10::ArrayRef<c10::IValue> args, const torch::jit::Stack& results);

}  // namespace torchtpu::aten
