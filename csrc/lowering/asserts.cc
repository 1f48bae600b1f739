// torch._assert_async: aten::_assert_async(self) and aten::_assert_async.msg(self, msg).
//
// The op computes nothing; its one effect is a data check that `self`, a one-element
// tensor, is nonzero (NaN counts as nonzero, as in PyTorch's is_nonzero). The check is a
// Check of the module: compiled graphs queue it for the next host read, and so does the
// eager path for a call that writes nothing (aten/deferred_checks.h), so the op never
// waits for the device, as CUDA's kernel does not. Dynamo turns `assert tensor_cond` into
// this op, and TorchTitan's RoPE calls it once per attention layer in eager runs.
// Messages are the CPU kernel's; the element count (PyTorch's "Boolean value of Tensor
// with ... is ambiguous") is checked by the aten layer before the call (eager) or here.
#include <string>
#include <vector>

#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

LoweringFn assert_async(bool has_message) {
  return [has_message](LoweringContext& c) -> Result {
    const TensorType& type = c.tensor_type(0);
    if (c.arg(0).kind != ArgKind::kTensor || type.num_elements() != 1) {
      return base::invalid_argument("lowering: " + c.op_name() + " takes a one-element tensor");
    }
    std::string message = "Expected Tensor with single nonzero value, but got zero";
    if (has_message) {
      message = c.string_arg(1).empty() ? "Assertion is failed" : c.string_arg(1);
    }
    Value ok = c.b().convert(c.b().reshape(c.tensor(0), {}), DType::kBool);
    c.require(ok, message, CheckKind::kRuntimeError);
    return std::vector<Value>{};
  };
}

}  // namespace

void register_assert_lowerings() {
  register_lowering({"aten::_assert_async"}, assert_async(/*has_message=*/false));
  register_lowering({"aten::_assert_async.msg"}, assert_async(/*has_message=*/true));
}

}  // namespace torchtpu::lowering
