// Decomposition lowerings: QR (geqrf, linalg_householder_product, linalg_qr), the symmetric
// eigendecomposition (_linalg_eigh) and the SVD (_linalg_svd, in linalg_svd.cc).
//
// QR and eigh are XLA's own algorithms, reached through the custom calls its compiler
// expands on every backend (QrExpander, EighExpander; the XLA CPU plugin accepts them):
//   "Qr"(a) -> (packed reflectors, taus)      LAPACK geqrf's layout and signs
//   "ProductOfElementaryHouseholderReflectors"(a, taus) -> Q   (LAPACK orgqr)
//   "Eigh"(a) -> (eigenvectors as columns, eigenvalues)   a cyclic Jacobi method, its
//      backend_config "lower,sort,max_sweeps,tolerance"
// Eigenvectors are unique only up to sign (and within repeated eigenvalues); callers that
// need a canonical choice must make it themselves, as with LAPACK.
#include <algorithm>
#include <cstdio>

#include "lowering/families.h"
#include "lowering/linalg_util.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// Jacobi sweeps before the eigensolver gives up (it converges quadratically: a dozen
// sweeps reach the tolerance for any matrix in practice).
constexpr int kMaxSweeps = 100;

// geqrf(self) -> (a, tau).
Result geqrf(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  if (c.tensor_type(0).num_elements() == 0) {
    return std::vector<Value>{b.zeros(c.out_type(0)), b.zeros(c.out_type(1))};
  }
  auto [packed, taus] = linalg::qr_packed(b, c.tensor(0));
  return std::vector<Value>{packed, taus};
}

// linalg_householder_product(input [..., m, n], tau [..., k]) -> [..., m, n].
Result linalg_householder_product(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.out_type(0).dtype));
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out)};
  Value a = b.convert(c.tensor(0), out.dtype);
  // Taus beyond k are zero: those reflectors are the identity.
  Value taus = linalg::pad_last(b, b.convert(c.tensor(1), out.dtype), std::min(out.dims[out.rank() - 2],
                                                                      out.dims.back()));
  return std::vector<Value>{linalg::householder_product(b, a, taus)};
}

// linalg_qr(A, mode) -> (Q, R); mode is "reduced", "complete" or "r" (Q empty).
Result linalg_qr(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  const std::string& mode = c.string_arg(1);
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) {
    return std::vector<Value>{b.zeros(c.out_type(0)), b.zeros(c.out_type(1))};
  }
  int64_t r = a.rank(), m = a.dims()[r - 2], n = a.dims()[r - 1], k = std::min(m, n);
  auto [packed, taus] = linalg::qr_packed(b, a);
  Dims start(r, 0), step(r, 1);
  bool complete = mode == "complete";
  Dims r_limit = a.dims();
  r_limit[r - 2] = complete ? m : k;
  Value rr = linalg::triu(b, b.slice(packed, start, r_limit, step));
  if (mode == "r") return std::vector<Value>{b.zeros(c.out_type(0)), rr};
  Value q;
  if (complete && m > n) {
    // Q is m x m: the k reflectors applied to the whole identity.
    q = linalg::householder_product(b, linalg::pad_last(b, packed, m), linalg::pad_last(b, taus, m));
  } else {
    Dims q_limit = a.dims();
    q_limit[r - 1] = k;
    q = linalg::householder_product(b, b.slice(packed, start, q_limit, step), taus);
  }
  return std::vector<Value>{q, rr};
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues ascending, eigenvectors as columns).
Result linalg_eigh(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) {
    return std::vector<Value>{b.zeros(c.out_type(0)), b.zeros(c.out_type(1))};
  }
  bool lower = c.string_arg(1) != "U";
  const Dims& d = a.dims();
  Dims w_dims(d.begin(), d.end() - 1);
  // Converged when the off-diagonal norm is below eps times the matrix's norm.
  double tol = a.dtype() == DType::kF64 ? 2.220446049250313e-16 : 1.1920929e-07;
  char config[64];
  std::snprintf(config, sizeof config, "%d,1,%d,%.9g", lower ? 1 : 0, kMaxSweeps, tol);
  auto outs = b.op_multi("stablehlo.custom_call", {a}, {a.type, TensorType{a.dtype(), w_dims}},
                         std::string("call_target_name = \"Eigh\", api_version = 1 : i32, "
                                     "backend_config = \"") + config + "\"");
  Value vectors = c.bool_arg(2) ? outs[0] : b.zeros(c.out_type(1));
  return std::vector<Value>{outs[1], vectors};
}

}  // namespace

void register_linalg_decomp_lowerings() {
  register_lowering({"aten::geqrf", "aten::geqrf.a"}, geqrf);
  register_lowering({"aten::linalg_householder_product",
                     "aten::linalg_householder_product.out"},
                    linalg_householder_product);
  register_lowering({"aten::linalg_qr", "aten::linalg_qr.out"}, linalg_qr);
  register_lowering({"aten::_linalg_eigh", "aten::_linalg_eigh.eigenvalues"}, linalg_eigh);
}

}  // namespace torchtpu::lowering
