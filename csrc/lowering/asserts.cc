// torch._assert_async: aten::_assert_async(self) and aten::_assert_async.msg(self, msg);
// and the linalg wrappers' aten::_linalg_check_errors (below).
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
#include <utility>
#include <vector>

#include "lowering/families.h"
#include "lowering/linalg_util.h"
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

// _linalg_check_errors(info, api_name, is_matrix): the check PyTorch's linalg wrappers
// (inv, solve, cholesky, ...) make of LAPACK's `info`, as a data check that every info is
// zero, with PyTorch's message for `api_name` less the failing element and batch index
// (a check's message is fixed when the program is built). Eager mode runs PyTorch's own
// kernel, which reads `info` at once and names them; compiled graphs reach this.
std::pair<std::string, CheckKind> linalg_error(const std::string& api, bool is_matrix) {
  auto has = [&](const char* part) { return api.find(part) != std::string::npos; };
  std::string where = api + (is_matrix ? ": " : ": (a matrix of the batch): ");
  if (has("inv")) {
    return {where + "A diagonal element is zero, the inversion could not be completed because "
                    "the input matrix is singular.",
            CheckKind::kLinalgError};
  }
  if (has("solve")) {
    return {where + "The solver failed because the input matrix is singular.",
            CheckKind::kLinalgError};
  }
  if (has("cholesky")) {
    return {where + "The factorization could not be completed because the input is not "
                    "positive-definite.",
            CheckKind::kLinalgError};
  }
  if (has("eigh") || has("syevd")) {
    return {where + "The algorithm failed to converge because the input matrix is "
                    "ill-conditioned or has too many repeated eigenvalues.",
            CheckKind::kLinalgError};
  }
  if (has("lstsq")) {
    return {where + "The least squares solution could not be computed because the input "
                    "matrix does not have full rank.",
            CheckKind::kLinalgError};
  }
  if (has("lu_factor")) {  // PyTorch raises this one as a plain RuntimeError
    return {where + "U is singular (a diagonal element of U is zero) and using it on lu_solve "
                    "would result in a division by zero. If you still want to perform the "
                    "factorization, consider calling linalg.lu(A, pivot) or "
                    "linalg.lu_factor_ex(A, pivot)",
            CheckKind::kRuntimeError};
  }
  return {where + "LAPACK reported an error (info != 0).", CheckKind::kRuntimeError};
}

Result linalg_check_errors(LoweringContext& c) {
  auto [message, kind] = linalg_error(c.string_arg(1), c.bool_arg(2));
  c.require(linalg::all_zero(c.b(), c.tensor(0)), message, kind);
  return std::vector<Value>{};
}

}  // namespace

void register_assert_lowerings() {
  register_lowering({"aten::_linalg_check_errors"}, linalg_check_errors);
  register_lowering({"aten::_assert_async"}, assert_async(/*has_message=*/false));
  register_lowering({"aten::_assert_async.msg"}, assert_async(/*has_message=*/true));
}

}  // namespace torchtpu::lowering
