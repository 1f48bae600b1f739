// _linalg_svd: one-sided Jacobi (Hestenes) SVD, in stablehlo.while loops.
//
// For A [m, n] with m >= n (a wide A is decomposed as A^T, U and V swapping roles), the
// columns of W = A are rotated in pairs (p, q), cyclically, until every pair is
// orthogonal to within tol = m * eps (|w_p . w_q| <= tol ||w_p|| ||w_q||); the same
// rotations applied to V = I accumulate the right singular vectors. Then S = the column
// norms of W (sorted descending, W and V reordered with them), and U comes from a
// Householder QR of the sorted W: its columns are w_j / s_j up to sign (the sign of R's
// diagonal, undone), orthonormal also where s_j = 0, and its complete Q gives the extra
// columns of full_matrices. One-sided Jacobi computes singular values to high relative
// accuracy (Demmel and Veselic), at least as accurately as LAPACK's bidiagonal methods;
// singular vectors are unique only up to sign (and rotations within repeated values), so
// they can differ from the CPU's while U S V^T reconstructs A as closely.
//
// Every batch element is rotated by the same pair sequence (the state is [B, m, n]); the
// sweeps stop when no element needed a rotation, or after linalg::kMaxJacobiSweeps.
#include <algorithm>
#include <tuple>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/linalg_util.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;
using linalg::dynamic_slice;

Value i64(Builder& b, int64_t v) { return b.constant_i64(v, DType::kI64); }

// The rotation of the columns (p, q) of W that makes them orthogonal, in every lane where
// |w_p . w_q| > tol ||w_p|| ||w_q||, applied to W and V: (W, V, the lanes rotated).
std::vector<Value> rotate_pair(Builder& lb, Value p, Value q, Value x, Value y, double tol) {
  int64_t nb = x.dims()[0], m = x.dims()[1], n = x.dims()[2];
  DType t = x.dtype();
  Value zero = i64(lb, 0);
  Value wp = dynamic_slice(lb, x, {zero, zero, p}, {nb, m, 1});
  Value wq = dynamic_slice(lb, x, {zero, zero, q}, {nb, m, 1});
  Value alpha = lb.reduce_sum(lb.mul(wp, wp), {1, 2});  // [B]
  Value beta = lb.reduce_sum(lb.mul(wq, wq), {1, 2});
  Value gamma = lb.reduce_sum(lb.mul(wp, wq), {1, 2});
  TensorType bt{t, {nb}};
  Value one = lb.splat(1, bt), two = lb.splat(2, bt);
  Value limit = lb.mul(lb.splat(tol, bt), lb.unary("sqrt", lb.mul(alpha, beta)));
  Value needed = lb.compare(lb.unary("abs", gamma), limit, "GT");
  // zeta = (beta - alpha) / (2 gamma): the smaller rotation that makes the pair orthogonal.
  Value safe_gamma = lb.select(needed, gamma, one);
  Value zeta = lb.div(lb.sub(beta, alpha), lb.mul(two, safe_gamma));
  Value tan = linalg::jacobi_tangent(lb, zeta);
  Value c = lb.div(one, lb.unary("sqrt", lb.add(one, lb.mul(tan, tan))));
  Value sn = lb.mul(c, tan);
  c = lb.select(needed, c, one);
  sn = lb.select(needed, sn, lb.zeros(bt));
  auto rotate = [&](Value mat, int64_t rows) {
    Value cp = dynamic_slice(lb, mat, {zero, zero, p}, {nb, rows, 1});
    Value cq = dynamic_slice(lb, mat, {zero, zero, q}, {nb, rows, 1});
    Value cb = lb.broadcast_in_dim(c, {nb, rows, 1}, {0});
    Value sb = lb.broadcast_in_dim(sn, {nb, rows, 1}, {0});
    Value np = lb.sub(lb.mul(cb, cp), lb.mul(sb, cq));
    Value nq = lb.add(lb.mul(sb, cp), lb.mul(cb, cq));
    mat = lb.op("stablehlo.dynamic_update_slice", {mat, np, zero, zero, p}, mat.type);
    return lb.op("stablehlo.dynamic_update_slice", {mat, nq, zero, zero, q}, mat.type);
  };
  return {rotate(x, m), rotate(y, n), needed};
}

// Columns of [B, r, n] reordered by `order` [B, n] (result[:, :, j] = x[:, :, order[j]]).
Value gather_columns(Builder& b, Value x, Value order) {
  return linalg::mT(b, linalg::gather_rows(b, linalg::mT(b, x), order));
}

// SVD of [B, m, n], m >= n: (U [B, m, m or n], S [B, n], V [B, n, n]).
std::vector<Value> jacobi_svd(Builder& b, Value a, bool full, bool compute_uv) {
  int64_t nb = a.dims()[0], m = a.dims()[1], n = a.dims()[2];
  DType t = a.dtype();
  double eps = t == DType::kF64 ? 2.220446049250313e-16 : 1.1920929e-07;
  double tol = eps * static_cast<double>(m);
  Value v0 = linalg::eye(b, TensorType{t, {nb, n, n}});
  Value w = a, v = v0;
  if (n > 1) {
    std::tie(w, v) = linalg::cyclic_jacobi(
        b, a, v0, n, [tol](Builder& lb, Value p, Value q, Value x, Value y) {
          return rotate_pair(lb, p, q, x, y, tol);
        });
  }
  Value norms = b.unary("sqrt", b.reduce_sum(b.mul(w, w), {1}));  // [B, n]
  // Descending order of the singular values (stable: ties keep column order).
  TensorType st{t, {}}, it{DType::kI64, {}};
  std::vector<Value> sorted = b.op_with_region(
      "stablehlo.sort", {norms, b.iota(TensorType{DType::kI64, {nb, n}}, 1)},
      {norms.type, TensorType{DType::kI64, {nb, n}}}, {st, st, it, it},
      [&](Builder& rb, const std::vector<Value>& x) {
        return std::vector<Value>{rb.compare(x[0], x[1], "GT")};
      },
      "dimension = 1 : i64, is_stable = true");
  Value s = sorted[0];
  if (!compute_uv) return {Value{}, s, Value{}};
  w = gather_columns(b, w, sorted[1]);
  v = gather_columns(b, v, sorted[1]);
  auto [packed, taus] = linalg::qr_packed(b, w);
  Value q = full && m > n ? linalg::householder_product(b, linalg::pad_last(b, packed, m),
                                                         linalg::pad_last(b, taus, m))
                          : linalg::householder_product(b, packed, taus);
  // Undo the signs QR put on R's diagonal, so that U S V^T = A.
  Value r_diag = linalg::diagonal(b, packed);  // [B, n]
  Value sign = b.select(b.compare(r_diag, b.zeros(r_diag.type), "LT"),
                        b.splat(-1, r_diag.type), b.splat(1, r_diag.type));
  int64_t cols = q.dims()[2];
  if (cols > n) sign = b.concatenate({sign, b.splat(1, TensorType{t, {nb, cols - n}})}, 1);
  Value u = b.mul(q, b.broadcast_in_dim(sign, q.dims(), {0, 2}));
  return {u, s, v};
}

// _linalg_svd(A, full_matrices, compute_uv, driver) -> (U, S, Vh).
Result linalg_svd(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  if (!c.is_none(3)) {
    return base::unimplemented("lowering: _linalg_svd with a driver= is CUDA-only");
  }
  Builder& b = c.b();
  Value a = c.tensor(0);
  bool full = c.bool_arg(1), compute_uv = c.bool_arg(2);
  if (a.type.num_elements() == 0) return linalg::empty_input_results(c, 3);
  // LAPACK's gesdd reports a NaN in the input as a convergence failure, which PyTorch's
  // CPU kernel raises (an inf it lets through: NaN results, as here).
  c.require(b.unary("not", b.reduce_any(is_nan(b, a), iota_dims(a.rank()))),
            "linalg.svd: The algorithm failed to converge because the input matrix contained "
            "non-finite values.",
            CheckKind::kLinalgError);
  const Dims& d = a.dims();
  int64_t r = a.rank(), m = d[r - 2], n = d[r - 1];
  Dims batch = linalg::batch_dims(d);
  Value flat = linalg::flatten_batch(b, a);
  bool wide = m < n;
  std::vector<Value> usv = jacobi_svd(b, wide ? linalg::mT(b, flat) : flat, full, compute_uv);
  Value s = linalg::unflatten_batch(b, usv[1], batch);
  if (!compute_uv) return std::vector<Value>{b.zeros(c.out_type(0)), s, b.zeros(c.out_type(2))};
  // A = U S V^T; for a wide A, A^T = U' S V'^T, so U = V' and V^T = U'^T.
  Value u = wide ? usv[2] : usv[0];
  Value vh = wide ? linalg::mT(b, usv[0]) : linalg::mT(b, usv[2]);
  return std::vector<Value>{linalg::unflatten_batch(b, u, batch), s,
                            linalg::unflatten_batch(b, vh, batch)};
}

}  // namespace

void register_linalg_svd_lowerings() {
  register_lowering({"aten::_linalg_svd", "aten::_linalg_svd.U"}, linalg_svd);
}

}  // namespace torchtpu::lowering
