// QR lowerings: geqrf, linalg_householder_product, linalg_qr (the symmetric eigensolver is
// in linalg_eigh.cc, the SVD in linalg_svd.cc).
//
// QR is XLA's own Householder algorithm, reached through the custom calls its compiler
// expands on every backend (QrExpander; the XLA CPU plugin accepts them):
//   "Qr"(a) -> (packed reflectors, taus)      LAPACK geqrf's layout and signs
//   "ProductOfElementaryHouseholderReflectors"(a, taus) -> Q   (LAPACK orgqr)
#include <algorithm>

#include "lowering/families.h"
#include "lowering/linalg_util.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// geqrf(self) -> (a, tau).
Result geqrf(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  if (c.tensor_type(0).num_elements() == 0) return linalg::empty_input_results(c, 2);
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
  int64_t k = std::min(out.dims[out.rank() - 2], out.dims.back());
  Value taus = linalg::pad_last(b, b.convert(c.tensor(1), out.dtype), k);
  return std::vector<Value>{linalg::householder_product(b, a, taus)};
}

// linalg_qr(A, mode) -> (Q, R); mode is "reduced", "complete" or "r" (Q empty).
Result linalg_qr(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  const std::string& mode = c.string_arg(1);
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) return linalg::empty_input_results(c, 2);
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
    q = linalg::householder_product(b, linalg::pad_last(b, packed, m),
                                    linalg::pad_last(b, taus, m));
  } else {
    Dims q_limit = a.dims();
    q_limit[r - 1] = k;
    q = linalg::householder_product(b, b.slice(packed, start, q_limit, step), taus);
  }
  return std::vector<Value>{q, rr};
}

}  // namespace

void register_linalg_decomp_lowerings() {
  register_lowering({"aten::geqrf", "aten::geqrf.a"}, geqrf);
  register_lowering({"aten::linalg_householder_product",
                     "aten::linalg_householder_product.out"},
                    linalg_householder_product);
  register_lowering({"aten::linalg_qr", "aten::linalg_qr.out"}, linalg_qr);
}

}  // namespace torchtpu::lowering
