// What the boxed kernel knows about one operator, worked out once per operator instead of
// on every call: its name, its lowering, the special cases it needs (op_special_cases.h)
// and how each schema argument is classified (call_signature.h).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

#include "aten/cpu_dtypes.h"
#include "aten/op_special_cases.h"
#include "lowering/lowering.h"

namespace torchtpu::aten {

// How a schema argument's value is read (from its declared type; see call_signature.cc).
enum class FormalKind {
  kGeneric,      // by the value's own tag (Tensor, Tensor[], int, float, bool, str, ...)
  kNumber,       // Scalar: a runtime scalar
  kScalarList,   // Scalar[] and float[]: runtime scalars
  kDType,        // ScalarType (an int in type(), named by real_type())
  kRuntimeFloat, // float that is data, not structure (is_runtime_float_arg): a runtime scalar
  kStructuralNumber,  // Scalar that is structure (is_structural_scalar_arg): a float key
  kIgnored,      // Layout, Device, MemoryFormat: never part of the computation
};

struct OpInfo {
  c10::OperatorName operator_name{"", ""};  // the operator this entry describes
  std::string name;                 // "aten::add.Tensor"
  int id = 0;                       // distinct per entry, part of every signature
  const lowering::LoweringFn* lowering = nullptr;  // null: no lowering
  std::vector<FormalKind> formals;  // per schema argument
  std::vector<bool> written;        // per schema argument: Tensor(a!) or Tensor(a!)[]
  bool writes = false;              // any argument written (in-place, out=)
  bool data_dependent = false;      // runs on the host by design (nonzero, unique, ...)
  bool batch_norm = false;          // updates running statistics after the call
  bool is_clone = false;            // materializes conjugate/negative bits
  bool writes_physical = false;     // conj_physical_ / neg_: write through math bits
  CpuArgumentCheck cpu_argument_check = nullptr;  // op_special_cases.h
  const CpuDtypeRule* cpu_dtypes = nullptr;  // cpu_dtypes.h: the dtypes its CPU kernel refuses
  bool optional_tensor_lists = false;  // has a Tensor?[] argument (index masks)
  bool shape_from_scalars = false;     // arange/linspace/logspace: scalar values are keys
  bool writes_unreturned = false;      // writes_unreturned_args (op_special_cases.h)
  int generator_arg = -1;              // the Generator? argument's position, or -1
  // An in-place _foreach_ op: per written tensor list argument, its tensors' version
  // counters are bumped by the backend kernel (autograd's in-place checks read them), as
  // CUDA's foreach kernels and the CPU's per-tensor path do.
  std::vector<size_t> bumped_lists;
  // A _foreach_ op's tensor lists after the first that it reads only (other, tensor1, ...):
  // their 0-dim CPU tensors are scalars, as for a single tensor argument, and move to the
  // device before the call (CUDA's per-tensor path takes them so: an optimizer whose lr
  // tensor came back on the CPU from a checkpoint).
  std::vector<size_t> scalar_tensor_lists;
  // Tensor arguments PyTorch's CUDA kernel moves to the device itself (bernoulli_'s p): a
  // CPU one moves to its first argument's device before the call.
  std::vector<size_t> moved_cpu_tensors;
  // A structured op's functional or in-place form (its CompositeExplicitAutograd-
  // NonFunctional kernel runs the structured meta, then the out= form).
  bool structured_functional = false;
};

// The entry for `op` (made on first use; entries live for the process).
const OpInfo& op_info(const c10::OperatorHandle& op);

// Whether a schema argument is a Tensor?[] (index_put_'s indices).
bool is_optional_tensor_list_type(const c10::Argument& formal);

}  // namespace torchtpu::aten
