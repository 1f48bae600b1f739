// Kernels of the linalg ops whose CPU kernels are compositions that depend on strides:
// _linalg_det and _linalg_slogdet factor A^T instead of A when A is contiguous
// (det(A^T) = det(A)), and their backward formulas read the LU factors they return under
// the same rule (lu_solve with adjoint = !contiguous). A lowering sees types, not strides,
// so these run PyTorch's composition step by step, every step a lowered op
// (linalg_lu_factor_ex, prod, ...), with the CPU kernel's choice of factors. (In compiled
// graphs they have no lowering: the graph cannot tell which factors the backward expects.)
// Also the eager check of LAPACK's info, and the guard of the eigendecompositions' CPU
// fallback against NaN inputs.
#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cmath>
#include <string>

#include "aten/op_special_cases.h"
#include "aten/out_dtypes.h"
#include "base/metrics.h"

namespace torchtpu::aten {

bool run_eig_fallback_guarding_nan(const std::string& name, const c10::OperatorHandle& op,
                                   torch::jit::Stack* stack) {
  bool eig = name == "aten::linalg_eig" || name == "aten::linalg_eig.out" ||
             name == "aten::_linalg_eigvals" || name == "aten::linalg_eigvals.out";
  size_t num_args = op.schema().arguments().size();
  if (!eig || stack->size() < num_args) return false;
  c10::IValue& self_arg = (*stack)[stack->size() - num_args];
  if (!self_arg.isTensor()) return false;
  at::Tensor self = self_arg.toTensor();
  if (self.dim() < 2 || self.numel() == 0) return false;
  // On the host, where the fallback copies the input anyway (the device's complex isnan
  // and masked_fill would be fallbacks of their own); a NaN input costs two more copies.
  at::Tensor host = self.cpu();
  at::Tensor bad = at::isnan(host).flatten(-2).any(-1);  // per matrix
  if (!bad.any().item<bool>()) return false;
  self_arg = host.masked_fill(bad.unsqueeze(-1).unsqueeze(-1), 0).to(self.device());
  at::native::cpu_fallback(op, stack);
  for (size_t i = stack->size() - op.schema().returns().size(); i < stack->size(); ++i) {
    at::Tensor out = (*stack)[i].toTensor();
    at::Tensor mask = bad;
    while (mask.dim() < out.dim()) mask = mask.unsqueeze(-1);
    at::Scalar nan =
        out.is_complex() ? at::Scalar(c10::complex<double>(NAN, NAN)) : at::Scalar(NAN);
    out.copy_(out.cpu().masked_fill_(mask, nan));
  }
  return true;
}

namespace {

bool use_transpose(const at::Tensor& A) { return A.is_contiguous() && !A.is_complex(); }

// det(P) from LAPACK pivots: +1 for an even permutation, -1 for an odd one.
at::Tensor lu_det_P(const at::Tensor& pivots) {
  return (at::arange(1, pivots.size(-1) + 1, pivots.options()) != pivots)
      .sum(-1, /*keepdim=*/false, /*dtype=*/at::kLong)
      .fmod_(2)
      .mul_(-2)
      .add_(1);
}

// The checks of the CPU's structured kernels: A's dtype, then the outs' (`api`: the
// function named in the message).
void check_factor_args(const char* api, const at::Tensor& A, const at::Tensor& LU,
                       const at::Tensor& pivots) {
  TORCH_CHECK(at::isFloatingType(A.scalar_type()) || at::isComplexType(A.scalar_type()), api,
              ": Expected a floating point or complex tensor as input. Got ", A.scalar_type());
  check_out_dtype(LU, A.scalar_type());
  check_out_dtype(pivots, at::kInt);
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_det_out(const at::Tensor& A,
                                                               at::Tensor& result,
                                                               at::Tensor& LU,
                                                               at::Tensor& pivots) {
  check_factor_args("linalg.det", A, LU, pivots);
  check_out_dtype(result, A.scalar_type());
  auto info = at::empty({0}, A.options().dtype(at::kInt));
  at::linalg_lu_factor_ex_out(LU, pivots, info, use_transpose(A) ? A.mH() : A);
  at::mul_out(result, lu_det_P(pivots), at::prod(LU.diagonal(0, -2, -1), /*dim=*/-1));
  return {result, LU, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_slogdet_out(
    const at::Tensor& A, at::Tensor& sign, at::Tensor& logabsdet, at::Tensor& LU,
    at::Tensor& pivots) {
  check_factor_args("linalg.slogdet", A, LU, pivots);
  check_out_dtype(sign, A.scalar_type());
  check_out_dtype(logabsdet, c10::toRealValueType(A.scalar_type()));
  auto info = at::empty({0}, A.options().dtype(at::kInt));
  at::linalg_lu_factor_ex_out(LU, pivots, info, use_transpose(A) ? A.mH() : A);
  auto diag_U = LU.diagonal(0, -2, -1);
  at::mul_out(sign, diag_U.sgn().prod(-1), lu_det_P(pivots));
  at::sum_out(logabsdet, diag_U.abs().log_(), -1);
  return {sign, logabsdet, LU, pivots};
}

// The linalg wrappers' check of LAPACK's `info`: PyTorch's kernel on the host copy, which
// names the failing matrix and element (a compiled graph's lowering is a data check with
// a fixed message instead; lowering/asserts.cc).
void linalg_check_errors(const at::Tensor& info, c10::string_view api_name, bool is_matrix) {
  base::keyed_counter_add("host_roundtrip_ops", "aten::_linalg_check_errors");
  base::counter_add("num_host_roundtrips");
  at::_linalg_check_errors(info.cpu(), api_name, is_matrix);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_linalg_check_errors", linalg_check_errors);
  m.impl("_linalg_det.result", linalg_det_out);
  m.impl("_linalg_slogdet.sign", linalg_slogdet_out);
}

}  // namespace
}  // namespace torchtpu::aten
