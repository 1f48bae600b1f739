// Factorization lowerings: Cholesky (a stablehlo.while over the columns), triangular solves
// (stablehlo.triangular_solve), LU with partial pivoting (a stablehlo.while over the
// columns, linalg_util's lu_factor), and what is built from them: lu_solve, lu_unpack,
// linalg_lu, linalg_inv_ex, cholesky_solve, cholesky_inverse.
//
// Results follow LAPACK's conventions as PyTorch's CPU kernels return them: 1-based int32
// pivots, int32 `info` per matrix (the first failing minor or zero pivot, 0 when none).
// `check_errors=True` and the ops that always check (cholesky, cholesky_inverse's input is
// taken as given) become data checks raising torch.linalg.LinAlgError; PyTorch's own
// wrappers (linalg.cholesky, linalg.inv, ...) check `info` themselves with
// _linalg_check_errors, which runs on tpu and gives PyTorch's exact messages.
// float32 and float64 only; other dtypes run PyTorch's CPU kernel (which raises for them).
#include <algorithm>

#include "lowering/families.h"
#include "lowering/linalg_util.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;
using linalg::all_zero;
using linalg::batch_dims;
using linalg::flatten_batch;
using linalg::unflatten_batch;

// info as the output's shape ([] for a matrix, the batch dims otherwise).
Value info_out(LoweringContext& c, Value info, size_t k) {
  return c.b().reshape(c.b().convert(info, DType::kI32), c.out_type(k).dims);
}

// Cholesky factor L (A = L L^T) of [B, n, n], reading A's lower triangle, column by
// column (LAPACK's potf2, left-looking): column j is a[:, j] - L[:, :j] L[j, :j]^T, scaled
// by the square root of its diagonal element d. info is the first j (1-based) whose d is
// not positive (or NaN): the order of the leading minor that is not positive-definite.
// (stablehlo.cholesky cannot say which minor failed: XLA fills the whole factor with NaN.)
std::pair<Value, Value> cholesky_lower(Builder& b, Value a) {
  int64_t nb = a.dims()[0], n = a.dims()[1];
  auto out = b.while_loop(
      {b.constant_i64(0, DType::kI64), b.zeros(a.type), b.zeros(TensorType{DType::kI32, {nb}})},
      [&](Builder& lb, const std::vector<Value>& s) {
        return std::vector<Value>{lb.compare(s[0], lb.constant_i64(n, DType::kI64), "LT")};
      },
      [&](Builder& lb, const std::vector<Value>& s) {
        Value j = s[0], l = s[1], info = s[2];
        Value zero = lb.constant_i64(0, DType::kI64);
        Value a_col = linalg::dynamic_slice(lb, a, {zero, zero, j}, {nb, n, 1});
        Value l_row = linalg::dynamic_slice(lb, l, {zero, j, zero}, {nb, 1, n});
        // Columns >= j of L are still zero, so the product sums over k < j only.
        Value col = lb.sub(a_col, linalg::matmul(lb, l, linalg::mT(lb, l_row)));  // [B, n, 1]
        Value d = linalg::dynamic_slice(lb, col, {zero, j, zero}, {nb, 1, 1});
        Value root = lb.broadcast_in_dim(lb.reshape(lb.unary("sqrt", d), {nb}), {nb, n, 1}, {0});
        Value rows = lb.iota(TensorType{DType::kI64, {nb, n, 1}}, 1);
        Value jj = linalg::splat_index(lb, j, {nb, n, 1});
        Value new_col = lb.select(lb.compare(rows, jj, "GT"), lb.div(col, root),
                                  lb.select(lb.compare(rows, jj, "EQ"), root,
                                            lb.zeros(col.type)));
        l = lb.op("stablehlo.dynamic_update_slice", {l, new_col, zero, zero, j}, l.type);
        Value d_b = lb.reshape(d, {nb});
        Value failed = lb.unary("not", lb.compare(d_b, lb.zeros(d_b.type), "GT"));
        Value first = lb.binary("and", failed, lb.compare(info, lb.zeros(info.type), "EQ"));
        Value j1 = lb.convert(lb.add(j, lb.constant_i64(1, DType::kI64)), DType::kI32);
        info = lb.select(first, linalg::splat_index(lb, j1, {nb}), info);
        return std::vector<Value>{lb.add(j, lb.constant_i64(1, DType::kI64)), l, info};
      });
  return {out[1], out[2]};
}

// linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info); cholesky(self, upper).
Result cholesky_impl(LoweringContext& c, bool upper, bool check, const std::string& api,
                     bool with_info) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) {
    std::vector<Value> out{b.zeros(c.out_type(0))};
    if (with_info) out.push_back(b.zeros(c.out_type(1)));
    return out;
  }
  Dims batch = batch_dims(a.dims());
  // The factor of A's upper triangle is the transpose of A^T's lower one.
  Value flat = flatten_batch(b, upper ? linalg::mT(b, a) : a);
  auto [l, info] = cholesky_lower(b, flat);
  l = unflatten_batch(b, upper ? linalg::mT(b, l) : l, batch);
  info = b.reshape(info, batch);
  if (check) {
    c.require(all_zero(b, info),
              api + ": The factorization could not be completed because the input is not "
                    "positive-definite.",
              CheckKind::kLinalgError);
  }
  std::vector<Value> out{b.convert(l, c.out_type(0).dtype)};
  if (with_info) out.push_back(info_out(c, info, 1));
  return out;
}

Result linalg_cholesky_ex(LoweringContext& c) {
  return cholesky_impl(c, c.bool_arg(1), c.bool_arg(2), "linalg.cholesky_ex", true);
}

Result cholesky(LoweringContext& c) {
  return cholesky_impl(c, !c.is_none(1) && c.bool_arg(1), true, "cholesky", false);
}

// Tensors `i` and `j` broadcast to the output's batch dims.
std::pair<Value, Value> broadcast_pair(LoweringContext& c, size_t i, size_t j,
                                       const Dims& out_dims) {
  Dims batch = batch_dims(out_dims);
  return {linalg::broadcast_batch(c.b(), c.tensor(i), batch),
          linalg::broadcast_batch(c.b(), c.tensor(j), batch)};
}

// linalg_solve_triangular(self=A, B, *, upper, left, unitriangular).
Result linalg_solve_triangular(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.out_type(0).dtype));
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out)};
  DType t = out.dtype;
  auto [a, rhs] = broadcast_pair(c, 0, 1, out.dims);
  a = b.convert(a, t);
  rhs = b.convert(rhs, t);
  bool upper = c.bool_arg(2), left = c.bool_arg(3), unit = c.bool_arg(4);
  return std::vector<Value>{linalg::triangular_solve(b, a, rhs, left, !upper, unit, false)};
}

// triangular_solve(self=B, A, upper, transpose, unitriangular) -> (solution, A cloned).
Result triangular_solve(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.out_type(0).dtype));
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  Value a_clone = b.broadcast_to(c.tensor(1), c.out_type(1).dims);
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out), a_clone};
  auto [rhs, a] = broadcast_pair(c, 0, 1, out.dims);
  bool upper = c.bool_arg(2), transpose = c.bool_arg(3), unit = c.bool_arg(4);
  Value x = linalg::triangular_solve(b, b.convert(a, out.dtype), b.convert(rhs, out.dtype), true,
                                     !upper, unit, transpose);
  return std::vector<Value>{x, b.convert(a_clone, c.out_type(1).dtype)};
}

// _cholesky_solve_helper(self=B, A=factor, upper): X with (L L^T) X = B or (U^T U) X = B.
Value cholesky_solve_with(Builder& b, Value factor, Value rhs, bool upper) {
  if (upper) {
    Value y = linalg::triangular_solve(b, factor, rhs, true, false, false, true);
    return linalg::triangular_solve(b, factor, y, true, false, false, false);
  }
  Value y = linalg::triangular_solve(b, factor, rhs, true, true, false, false);
  return linalg::triangular_solve(b, factor, y, true, true, false, true);
}

Result cholesky_solve_helper(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.out_type(0).dtype));
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out)};
  auto [rhs, factor] = broadcast_pair(c, 0, 1, out.dims);
  return std::vector<Value>{cholesky_solve_with(b, factor, rhs, c.bool_arg(2))};
}

// cholesky_inverse(self=factor, upper): (L L^T)^-1 or (U^T U)^-1.
Result cholesky_inverse(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.out_type(0).dtype));
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out)};
  Value factor = b.convert(c.tensor(0), out.dtype);
  bool upper = !c.is_none(1) && c.bool_arg(1);
  // A zero on the factor's diagonal: the CPU's LAPACK potri refuses it (NaN otherwise).
  Value diag = linalg::diagonal(b, factor);
  c.require(b.unary("not", b.reduce_any(b.compare(diag, b.zeros(diag.type), "EQ"),
                                        iota_dims(diag.rank()))),
            "cholesky_inverse: The inversion could not be completed because the input matrix "
            "is singular (a diagonal element of the factor is zero).",
            CheckKind::kLinalgError);
  return std::vector<Value>{cholesky_solve_with(b, factor, linalg::eye(b, factor.type), upper)};
}

// linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info).
Result linalg_lu_factor_ex(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) return linalg::empty_input_results(c, 3);
  Dims batch = batch_dims(a.dims());
  linalg::Lu f = linalg::lu_factor(b, flatten_batch(b, a), c.bool_arg(1));
  if (c.bool_arg(2)) {
    c.require(all_zero(b, f.info),
              "torch.linalg.lu_factor_ex: U is singular (a diagonal element of U is zero) and "
              "using it on lu_solve would result in a division by zero. If you still want to "
              "perform the factorization, consider calling linalg.lu(A, pivot) or "
              "linalg.lu_factor_ex(A, pivot)",
              CheckKind::kRuntimeError);  // PyTorch raises this one as a plain RuntimeError
  }
  return std::vector<Value>{b.convert(unflatten_batch(b, f.lu, batch), c.out_type(0).dtype),
                            b.reshape(f.pivots, c.out_type(1).dims), info_out(c, f.info, 2)};
}

// P, L, U from packed factors [B, m, n] and pivots [B, k]; either part may be skipped.
std::vector<Value> unpack(LoweringContext& c, Value lu, Value pivots, bool data, bool perm) {
  Builder& b = c.b();
  int64_t nb = lu.dims()[0], m = lu.dims()[1], n = lu.dims()[2], k = std::min(m, n);
  std::vector<Value> out;
  if (perm && m > 0) {
    Value p = linalg::permutation_from_pivots(b, pivots, m);
    // P[j, i] = (perm[i] == j), so that A = P L U.
    TensorType cube{DType::kI64, {nb, m, m}};
    Value hit = b.compare(b.broadcast_in_dim(p, {nb, m, m}, {0, 2}), b.iota(cube, 1), "EQ");
    out.push_back(b.reshape(b.convert(hit, c.out_type(0).dtype), c.out_type(0).dims));
  } else {
    out.push_back(b.zeros(c.out_type(0)));
  }
  if (data) {
    Value l = b.slice(lu, {0, 0, 0}, {nb, m, k}, {1, 1, 1});
    l = b.add(linalg::tril(b, l, -1), linalg::eye(b, l.type));
    Value u = linalg::triu(b, b.slice(lu, {0, 0, 0}, {nb, k, n}, {1, 1, 1}));
    out.push_back(b.reshape(b.convert(l, c.out_type(1).dtype), c.out_type(1).dims));
    out.push_back(b.reshape(b.convert(u, c.out_type(2).dtype), c.out_type(2).dims));
  } else {
    out.push_back(b.zeros(c.out_type(1)));
    out.push_back(b.zeros(c.out_type(2)));
  }
  return out;
}

// linalg_lu(A, *, pivot) -> (P, L, U).
Result linalg_lu(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) return linalg::empty_input_results(c, 3);
  bool pivot = c.bool_arg(1);
  linalg::Lu f = linalg::lu_factor(b, flatten_batch(b, a), pivot);
  return unpack(c, f.lu, f.pivots, true, pivot);
}

// lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U).
Result lu_unpack(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  const TensorType& lu_type = c.tensor_type(0);
  if (lu_type.num_elements() == 0) return linalg::empty_input_results(c, 3);
  Value lu = flatten_batch(b, c.tensor(0));
  Value piv = c.tensor(1);
  int64_t nb = lu.dims()[0];
  piv = b.reshape(b.convert(piv, DType::kI32), {nb, piv.dims().back()});
  return unpack(c, lu, piv, c.bool_arg(2), c.bool_arg(3));
}

// linalg_lu_solve(LU, pivots, B, *, left, adjoint).
Result linalg_lu_solve(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.out_type(0).dtype));
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out)};
  Dims batch = batch_dims(out.dims);
  Value lu = linalg::broadcast_batch(b, c.tensor(0), batch);
  Dims piv_dims = batch;
  piv_dims.push_back(c.tensor_type(1).dims.back());
  Value piv = b.broadcast_to(b.convert(c.tensor(1), DType::kI32), piv_dims);
  Value rhs = linalg::broadcast_batch(b, c.tensor(2), batch);
  int64_t nb = linalg::batch_count(out.dims);
  Value x = linalg::lu_solve(b, flatten_batch(b, lu), b.reshape(piv, {nb, piv_dims.back()}),
                             flatten_batch(b, b.convert(rhs, out.dtype)), c.bool_arg(3),
                             c.bool_arg(4));
  return std::vector<Value>{unflatten_batch(b, x, batch)};
}

// linalg_inv_ex(A, *, check_errors) -> (inverse, info).
Result linalg_inv_ex(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.tensor_type(0).dtype));
  Builder& b = c.b();
  Value a = c.tensor(0);
  if (a.type.num_elements() == 0) return linalg::empty_input_results(c, 2);
  Dims batch = batch_dims(a.dims());
  Value flat = flatten_batch(b, a);
  linalg::Lu f = linalg::lu_factor(b, flat, true);
  Value inv = linalg::lu_solve(b, f.lu, f.pivots, linalg::eye(b, flat.type), true, false);
  if (c.bool_arg(1)) {
    c.require(all_zero(b, f.info),
              "linalg.inv_ex: The inversion could not be completed because the input matrix is "
              "singular.",
              CheckKind::kLinalgError);
  }
  return std::vector<Value>{b.convert(unflatten_batch(b, inv, batch), c.out_type(0).dtype),
                            info_out(c, f.info, 1)};
}

// _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info): LU of A as
// given (PyTorch 2.13's CPU kernel factors A itself, contiguous or not, and its backward
// reads these factors with that assumption). B is a (batch of) vector(s) when it is 1-d or
// has A's shape without the last dim (numpy's rule).
Result linalg_solve_ex(LoweringContext& c) {
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, c.out_type(0).dtype));
  Builder& b = c.b();
  const TensorType& out = c.out_type(0);
  const TensorType& a_type = c.tensor_type(0);
  if (out.num_elements() == 0 || a_type.num_elements() == 0) {
    return std::vector<Value>{b.zeros(c.out_type(0)), b.zeros(c.out_type(1)),
                              b.zeros(c.out_type(2)), b.zeros(c.out_type(3))};
  }
  Value a = c.tensor(0);
  Value rhs = b.convert(c.tensor(1), out.dtype);
  bool left = c.bool_arg(2);
  Dims a_rows(a_type.dims.begin(), a_type.dims.end() - 1);
  bool vector_case = rhs.rank() == 1 || (a.rank() - 1 == rhs.rank() && rhs.dims() == a_rows);
  if (vector_case) {
    Dims d = rhs.dims();
    d.push_back(1);
    rhs = b.reshape(rhs, d);
  }
  Dims out_dims = out.dims;
  if (vector_case) out_dims.push_back(1);
  Dims batch = batch_dims(out_dims);
  Dims a_batch = batch_dims(a_type.dims);
  linalg::Lu f = linalg::lu_factor(b, flatten_batch(b, a), true);
  if (c.bool_arg(3)) {
    c.require(all_zero(b, f.info),
              "torch.linalg.solve_ex: The solver failed because the input matrix is singular.",
              CheckKind::kLinalgError);
  }
  int64_t n = a_type.dims.back(), nb = linalg::batch_count(out_dims);
  Value lu = linalg::broadcast_batch(b, unflatten_batch(b, f.lu, a_batch), batch);
  Dims piv_dims = a_batch;
  piv_dims.push_back(n);
  Dims piv_out = batch;
  piv_out.push_back(n);
  Value piv = b.broadcast_to(b.reshape(f.pivots, piv_dims), piv_out);
  rhs = linalg::broadcast_batch(b, rhs, batch);
  Value x = linalg::lu_solve(b, flatten_batch(b, lu), b.reshape(piv, {nb, n}),
                             flatten_batch(b, rhs), left, false);
  return std::vector<Value>{b.reshape(x, out.dims),
                            b.convert(b.reshape(f.lu, c.out_type(1).dims), c.out_type(1).dtype),
                            b.reshape(f.pivots, c.out_type(2).dims), info_out(c, f.info, 3)};
}

}  // namespace

void register_linalg_factor_lowerings() {
  register_lowering({"aten::_linalg_solve_ex", "aten::_linalg_solve_ex.result"}, linalg_solve_ex);
  register_lowering({"aten::linalg_cholesky_ex", "aten::linalg_cholesky_ex.L"},
                    linalg_cholesky_ex);
  register_lowering({"aten::cholesky", "aten::cholesky.out"}, cholesky);
  register_lowering({"aten::linalg_solve_triangular", "aten::linalg_solve_triangular.out"},
                    linalg_solve_triangular);
  register_lowering({"aten::triangular_solve", "aten::triangular_solve.X"}, triangular_solve);
  // cholesky_solve (CompositeExplicitAutograd) is claimed directly, so compiled graphs,
  // which keep it, lower it too; its helper is what PyTorch's composite calls.
  register_lowering({"aten::cholesky_solve", "aten::cholesky_solve.out",
                     "aten::_cholesky_solve_helper"},
                    cholesky_solve_helper);
  register_lowering({"aten::cholesky_inverse", "aten::cholesky_inverse.out"}, cholesky_inverse);
  register_lowering({"aten::linalg_lu_factor_ex", "aten::linalg_lu_factor_ex.out"},
                    linalg_lu_factor_ex);
  register_lowering({"aten::linalg_lu", "aten::linalg_lu.out"}, linalg_lu);
  register_lowering({"aten::lu_unpack", "aten::lu_unpack.out"}, lu_unpack);
  register_lowering({"aten::linalg_lu_solve", "aten::linalg_lu_solve.out"}, linalg_lu_solve);
  register_lowering({"aten::linalg_inv_ex", "aten::linalg_inv_ex.inverse"}, linalg_inv_ex);
}

}  // namespace torchtpu::lowering
