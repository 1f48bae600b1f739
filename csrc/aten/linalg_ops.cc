// Kernels of the linalg ops whose CPU kernels are compositions that depend on strides:
// _linalg_det and _linalg_slogdet factor A^T instead of A when A is contiguous
// (det(A^T) = det(A)), and their backward formulas read the LU factors they return under
// the same rule (lu_solve with adjoint = !contiguous). A lowering sees types, not strides,
// so these run PyTorch's composition step by step, every step a lowered op
// (linalg_lu_factor_ex, prod, ...), with the CPU kernel's choice of factors. (In compiled
// graphs they have no lowering: the graph cannot tell which factors the backward expects.)
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torchtpu::aten {
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

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_det_out(const at::Tensor& A,
                                                               at::Tensor& result,
                                                               at::Tensor& LU,
                                                               at::Tensor& pivots) {
  auto info = at::empty({0}, A.options().dtype(at::kInt));
  at::linalg_lu_factor_ex_out(LU, pivots, info, use_transpose(A) ? A.mH() : A);
  at::mul_out(result, lu_det_P(pivots), at::prod(LU.diagonal(0, -2, -1), /*dim=*/-1));
  return {result, LU, pivots};
}

std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> linalg_slogdet_out(
    const at::Tensor& A, at::Tensor& sign, at::Tensor& logabsdet, at::Tensor& LU,
    at::Tensor& pivots) {
  auto info = at::empty({0}, A.options().dtype(at::kInt));
  at::linalg_lu_factor_ex_out(LU, pivots, info, use_transpose(A) ? A.mH() : A);
  auto diag_U = LU.diagonal(0, -2, -1);
  at::mul_out(sign, diag_U.sgn().prod(-1), lu_det_P(pivots));
  at::sum_out(logabsdet, diag_U.abs().log_(), -1);
  return {sign, logabsdet, LU, pivots};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_linalg_det.result", linalg_det_out);
  m.impl("_linalg_slogdet.sign", linalg_slogdet_out);
}

}  // namespace
}  // namespace torchtpu::aten
