// _linalg_eigh: the cyclic Jacobi eigenvalue method for symmetric matrices, in
// stablehlo.while loops.
//
// The matrix is first made symmetric from the triangle UPLO names (LAPACK never reads the
// other one). Each step rotates one pair (p, q) so that a_pq becomes zero (Golub and Van
// Loan's sym.schur2: t = sign(z) / (|z| + sqrt(1 + z^2)), z = (a_qq - a_pp) / (2 a_pq)),
// A <- J^T A J and V <- V J; a pair is rotated only while |a_pq| > eps sqrt(|a_pp a_qq|),
// and the sweeps stop when a whole sweep rotated nothing (or after kMaxJacobiSweeps).
// Jacobi is backward stable and computes eigenvalues to high relative accuracy where they
// are well determined; eigenvalues come out ascending, eigenvectors as columns, each unique only up
// to sign (and within repeated eigenvalues), like LAPACK's.
//
// XLA's own Jacobi ("Eigh" custom call, EighExpander) is accepted by the CPU plugin but
// stops early on this plugin's build: its eigenvectors diagonalized float64 matrices only
// to ~1e-8 relative (residual ||A - V diag(w) V^T||), whatever its tolerance argument.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "lowering/families.h"
#include "lowering/linalg_util.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;
using linalg::dynamic_slice;

Value i64(Builder& b, int64_t v) { return b.constant_i64(v, DType::kI64); }

Value update(Builder& b, Value x, Value part, const std::vector<Value>& at) {
  std::vector<Value> operands{x, part};
  operands.insert(operands.end(), at.begin(), at.end());
  return b.op("stablehlo.dynamic_update_slice", operands, x.type);
}

// The rotation of the pair (p, q) that zeroes A[p, q] in every lane where it exceeds
// tol * sqrt(|A[p, p] A[q, q]|), applied to A from both sides and to V from the right:
// (A, V, the lanes rotated).
std::vector<Value> rotate_pair(Builder& lb, Value p, Value q, Value x, Value y, double tol) {
  int64_t nb = x.dims()[0];
  DType t = x.dtype();
  Value zero = i64(lb, 0);
  auto element = [&](Value i, Value j) {
    return lb.reshape(dynamic_slice(lb, x, {zero, i, j}, {nb, 1, 1}), {nb});
  };
  Value app = element(p, p), aqq = element(q, q), apq = element(p, q);
  TensorType bt{t, {nb}};
  Value one = lb.splat(1, bt), zeros = lb.zeros(bt);
  Value limit = lb.mul(lb.splat(tol, bt), lb.unary("sqrt", lb.unary("abs", lb.mul(app, aqq))));
  Value needed = lb.binary("and", lb.compare(lb.unary("abs", apq), limit, "GT"),
                           lb.compare(apq, zeros, "NE"));
  Value safe = lb.select(needed, apq, one);
  Value z = lb.div(lb.sub(aqq, app), lb.mul(lb.splat(2, bt), safe));
  Value tan = lb.select(needed, linalg::jacobi_tangent(lb, z), zeros);
  Value c = lb.div(one, lb.unary("sqrt", lb.add(one, lb.mul(tan, tan))));
  Value sn = lb.mul(c, tan);
  // (x_p, x_q) <- (c x_p - s x_q, s x_p + c x_q) for rows (dim 1) or columns (dim 2).
  auto rotate = [&](Value m, int64_t dim) {
    Dims size = m.dims();
    size[dim] = 1;
    std::vector<Value> at_p{zero, zero, zero}, at_q{zero, zero, zero};
    at_p[dim] = p;
    at_q[dim] = q;
    Value xp = dynamic_slice(lb, m, at_p, size), xq = dynamic_slice(lb, m, at_q, size);
    Value cb = lb.broadcast_in_dim(c, size, {0}), sb = lb.broadcast_in_dim(sn, size, {0});
    Value np = lb.sub(lb.mul(cb, xp), lb.mul(sb, xq));
    Value nq = lb.add(lb.mul(sb, xp), lb.mul(cb, xq));
    return update(lb, update(lb, m, np, at_p), nq, at_q);
  };
  x = rotate(rotate(x, 2), 1);
  y = rotate(y, 2);
  // The rotated pair, exactly (GVL: a_pp - t a_pq, a_qq + t a_pq, and zero).
  auto put = [&](Value m, Value val, Value i, Value j) {
    return update(lb, m, lb.reshape(val, {nb, 1, 1}), {zero, i, j});
  };
  Value new_pp = lb.select(needed, lb.sub(app, lb.mul(tan, apq)), app);
  Value new_qq = lb.select(needed, lb.add(aqq, lb.mul(tan, apq)), aqq);
  Value new_pq = lb.select(needed, zeros, apq);
  x = put(put(put(put(x, new_pp, p, p), new_qq, q, q), new_pq, p, q), new_pq, q, p);
  return {x, y, needed};
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues ascending, eigenvectors as columns).
Result linalg_eigh(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) return linalg::empty_input_results(c, 2);
  bool lower = c.string_arg(1) != "U";
  Dims batch = linalg::batch_dims(a.dims());
  Value x = linalg::flatten_batch(b, a);
  int64_t nb = x.dims()[0], n = x.dims()[1];
  DType t = x.dtype();
  // Symmetric from the UPLO triangle.
  Value tri = lower ? linalg::tril(b, x) : linalg::triu(b, x);
  Value strict = lower ? linalg::tril(b, x, -1) : linalg::triu(b, x, 1);
  x = b.add(tri, linalg::mT(b, strict));
  // A NaN or inf in the triangle read gives NaN eigenvalues and eigenvectors, as LAPACK's
  // syevd does on the CPU (the rotations would otherwise skip it: finite, wrong results).
  Value finite = b.op("stablehlo.is_finite", {x}, TensorType{DType::kBool, x.dims()});
  Value bad = b.unary("not", b.reduce_all(finite, {1, 2}));  // [B]
  auto nan_where_bad = [&](Value r) {
    Value mask = b.broadcast_in_dim(bad, r.dims(), {0});
    return b.select(mask, b.splat(NAN, r.type), r);
  };
  x = b.select(b.broadcast_in_dim(bad, x.dims(), {0}), b.zeros(x.type), x);
  Value v = linalg::eye(b, TensorType{t, {nb, n, n}});
  if (n > 1) {
    double tol = t == DType::kF64 ? 2.220446049250313e-16 : 1.1920929e-07;
    std::tie(x, v) = linalg::cyclic_jacobi(
        b, x, v, n, [tol](Builder& lb, Value p, Value q, Value a, Value vv) {
          return rotate_pair(lb, p, q, a, vv, tol);
        });
  }
  Value w = linalg::diagonal(b, x);  // [B, n]
  TensorType st{t, {}}, it{DType::kI64, {}};
  std::vector<Value> sorted = b.op_with_region(
      "stablehlo.sort", {w, b.iota(TensorType{DType::kI64, {nb, n}}, 1)},
      {w.type, TensorType{DType::kI64, {nb, n}}}, {st, st, it, it},
      [&](Builder& rb, const std::vector<Value>& s) {
        return std::vector<Value>{rb.compare(s[0], s[1], "LT")};
      },
      "dimension = 1 : i64, is_stable = true");
  Value values = b.reshape(nan_where_bad(sorted[0]), c.out_type(0).dims);
  if (!c.bool_arg(2)) return std::vector<Value>{values, b.zeros(c.out_type(1))};
  Value vectors =
      nan_where_bad(linalg::mT(b, linalg::gather_rows(b, linalg::mT(b, v), sorted[1])));
  return std::vector<Value>{values, linalg::unflatten_batch(b, vectors, batch)};
}

}  // namespace

void register_linalg_eigh_lowerings() {
  register_lowering({"aten::_linalg_eigh", "aten::_linalg_eigh.eigenvalues"}, linalg_eigh);
}

}  // namespace torchtpu::lowering
