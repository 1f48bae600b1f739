#include "lowering/linalg_util.h"

#include <algorithm>

#include "lowering/gather_scatter.h"

namespace torchtpu::lowering::linalg {

Dims batch_dims(const Dims& dims) { return Dims(dims.begin(), dims.end() - 2); }

int64_t batch_count(const Dims& dims) {
  int64_t n = 1;
  for (size_t i = 0; i + 2 < dims.size(); ++i) n *= dims[i];
  return n;
}

Value flatten_batch(Builder& b, Value x) {
  const Dims& d = x.dims();
  int64_t r = x.rank();
  return b.reshape(x, {batch_count(d), d[r - 2], d[r - 1]});
}

Value unflatten_batch(Builder& b, Value x, const Dims& batch) {
  Dims out = batch;
  out.insert(out.end(), x.dims().begin() + 1, x.dims().end());
  return b.reshape(x, out);
}

Dims broadcast_shapes(const Dims& a, const Dims& b) {
  size_t n = std::max(a.size(), b.size());
  Dims out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

Value broadcast_batch(Builder& b, Value x, const Dims& batch) {
  Dims out = batch;
  out.push_back(x.dims()[x.rank() - 2]);
  out.push_back(x.dims()[x.rank() - 1]);
  return b.broadcast_to(x, out);
}

Value matmul(Builder& b, Value x, Value y) {
  int64_t r = x.rank();
  Dims batch, out;
  for (int64_t i = 0; i + 2 < r; ++i) {
    batch.push_back(i);
    out.push_back(x.dims()[i]);
  }
  out.push_back(x.dims()[r - 2]);
  out.push_back(y.dims()[r - 1]);
  std::string attrs = "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = " +
                      i64_list(batch) + ", rhs_batching_dimensions = " + i64_list(batch) +
                      ", lhs_contracting_dimensions = " + i64_list({r - 1}) +
                      ", rhs_contracting_dimensions = " + i64_list({r - 2}) +
                      ">, precision_config = [#stablehlo<precision HIGHEST>, "
                      "#stablehlo<precision HIGHEST>]";
  return b.op("stablehlo.dot_general", {x, y}, TensorType{x.dtype(), out}, attrs);
}

Value mT(Builder& b, Value x) {
  Dims perm;
  for (int64_t i = 0; i < x.rank(); ++i) perm.push_back(i);
  std::swap(perm[x.rank() - 1], perm[x.rank() - 2]);
  return b.transpose(x, perm);
}

Value band_mask(Builder& b, const Dims& dims, int64_t k, bool lower) {
  int64_t r = static_cast<int64_t>(dims.size());
  Value row = b.iota(TensorType{DType::kI64, dims}, r - 2);
  Value col = b.iota(TensorType{DType::kI64, dims}, r - 1);
  Value offset = b.sub(col, row);
  Value kk = b.splat(static_cast<double>(k), TensorType{DType::kI64, dims});
  return b.compare(offset, kk, lower ? "LE" : "GE");
}

Value tril(Builder& b, Value x, int64_t k) {
  return b.select(band_mask(b, x.dims(), k, true), x, b.zeros(x.type));
}

Value triu(Builder& b, Value x, int64_t k) {
  return b.select(band_mask(b, x.dims(), k, false), x, b.zeros(x.type));
}

Value eye(Builder& b, const TensorType& t) {
  int64_t r = t.rank();
  Value row = b.iota(TensorType{DType::kI64, t.dims}, r - 2);
  Value col = b.iota(TensorType{DType::kI64, t.dims}, r - 1);
  return b.convert(b.compare(row, col, "EQ"), t.dtype);
}

Value diagonal(Builder& b, Value x) {
  int64_t r = x.rank();
  int64_t m = x.dims()[r - 2], n = x.dims()[r - 1], k = std::min(m, n);
  Value square = b.slice(x, Dims(r, 0), [&] {
    Dims lim = x.dims();
    lim[r - 2] = k;
    lim[r - 1] = k;
    return lim;
  }(), Dims(r, 1));
  Value on_diag = b.compare(b.iota(TensorType{DType::kI64, square.dims()}, r - 2),
                            b.iota(TensorType{DType::kI64, square.dims()}, r - 1), "EQ");
  // Exactly one term per sum is not zero, so the sum is that element (inf included).
  return b.reduce_sum(b.select(on_diag, square, b.zeros(square.type)), {r - 1});
}

Value splat_index(Builder& b, Value i, const Dims& dims) {
  return b.broadcast_in_dim(i, dims, {});
}

Value all_zero(Builder& b, Value info) {
  return b.all_of(b.compare(info, b.zeros(info.type), "EQ"));
}

Value dynamic_slice(Builder& b, Value x, const std::vector<Value>& starts, const Dims& sizes) {
  std::vector<Value> operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return b.op("stablehlo.dynamic_slice", operands, TensorType{x.dtype(), sizes},
              "slice_sizes = " + i64_array(sizes));
}

Value triangular_solve(Builder& b, Value a, Value rhs, bool left, bool lower, bool unit,
                       bool transpose) {
  // XLA's expansion may read the other triangle (and the diagonal when `unit`) in products
  // that are then discarded; a NaN or inf there would still poison them. LAPACK never
  // reads those elements, so they are zeroed (and the unit diagonal made ones) first.
  a = lower ? tril(b, a, unit ? -1 : 0) : triu(b, a, unit ? 1 : 0);
  if (unit) a = b.add(a, eye(b, a.type));
  std::string attrs = std::string("left_side = ") + (left ? "true" : "false") +
                      ", lower = " + (lower ? "true" : "false") +
                      ", unit_diagonal = " + (unit ? "true" : "false") +
                      ", transpose_a = #stablehlo<transpose " +
                      (transpose ? "TRANSPOSE" : "NO_TRANSPOSE") + ">";
  return b.op("stablehlo.triangular_solve", {a, rhs}, rhs.type, attrs);
}

Value gather_rows(Builder& b, Value x, Value index) {
  int64_t nb = x.dims()[0], m = x.dims()[1], r = x.dims()[2];
  Value base = b.mul(b.iota(TensorType{DType::kI64, {nb, m}}, 0),
                     b.splat(static_cast<double>(m), TensorType{DType::kI64, {nb, m}}));
  Value flat_index = b.reshape(b.add(base, index), {nb * m, 1});
  Value rows = gather(b, b.reshape(x, {nb * m, r}), flat_index, {1}, {0}, {0}, 1, {1, r},
                      {nb * m, r});
  return b.reshape(rows, {nb, m, r});
}

Value permutation_from_pivots(Builder& b, Value pivots, int64_t m) {
  int64_t nb = pivots.dims()[0], k = pivots.dims()[1];
  TensorType perm_type{DType::kI64, {nb, m}};
  Value perm = b.iota(perm_type, 1);
  Value piv = b.convert(pivots, DType::kI64);
  Value i0 = b.constant_i64(0, DType::kI64);
  auto out = b.while_loop(
      {i0, perm},
      [&](Builder& lb, const std::vector<Value>& s) {
        return std::vector<Value>{lb.compare(s[0], lb.constant_i64(k, DType::kI64), "LT")};
      },
      [&](Builder& lb, const std::vector<Value>& s) {
        Value i = s[0], p = s[1];
        Value zero = lb.constant_i64(0, DType::kI64);
        // The row exchanged with row i (pivots are 1-based).
        Value target = lb.reshape(dynamic_slice(lb, piv, {zero, i}, {nb, 1}), {nb});
        target = lb.clamp(lb.constant_i64(0, DType::kI64),
                          lb.sub(target, lb.splat(1, target.type)),
                          lb.constant_i64(m - 1, DType::kI64));
        Value cols = lb.iota(perm_type, 1);
        Value target_b = lb.broadcast_in_dim(target, {nb, m}, {0});
        Value at_i = lb.compare(cols, splat_index(lb, i, {nb, m}), "EQ");
        Value at_target = lb.compare(cols, target_b, "EQ");
        Value v_i = lb.broadcast_in_dim(lb.reshape(dynamic_slice(lb, p, {zero, i}, {nb, 1}), {nb}),
                                        {nb, m}, {0});
        Value v_t = lb.broadcast_in_dim(
            lb.reduce_sum(lb.select(at_target, p, lb.zeros(p.type)), {1}), {nb, m}, {0});
        Value next = lb.select(at_i, v_t, lb.select(at_target, v_i, p));
        return std::vector<Value>{lb.add(i, lb.constant_i64(1, DType::kI64)), next};
      });
  return out[1];
}

Value invert_permutation(Builder& b, Value perm) {
  int64_t nb = perm.dims()[0], m = perm.dims()[1];
  TensorType cube{DType::kI64, {nb, m, m}};
  // hit[b, j, i] = (perm[b, i] == j); inv[b, j] = the i that hits.
  Value hit = b.compare(b.broadcast_in_dim(perm, {nb, m, m}, {0, 2}), b.iota(cube, 1), "EQ");
  return b.reduce_sum(b.select(hit, b.iota(cube, 2), b.zeros(cube)), {2});
}

Lu lu_factor(Builder& b, Value a, bool pivot) {
  int64_t nb = a.dims()[0], m = a.dims()[1], n = a.dims()[2], k = std::min(m, n);
  TensorType full{DType::kI64, {nb, m, n}};
  Value piv0 = b.zeros(TensorType{DType::kI32, {nb, k}});
  Value info0 = b.zeros(TensorType{DType::kI32, {nb}});
  auto out = b.while_loop(
      {b.constant_i64(0, DType::kI64), a, piv0, info0},
      [&](Builder& lb, const std::vector<Value>& s) {
        return std::vector<Value>{lb.compare(s[0], lb.constant_i64(k, DType::kI64), "LT")};
      },
      [&](Builder& lb, const std::vector<Value>& s) {
        Value j = s[0], x = s[1], piv = s[2], info = s[3];
        Value zero = lb.constant_i64(0, DType::kI64);
        Value rows = lb.iota(full, 1), cols = lb.iota(full, 2);
        Value j_full = splat_index(lb, j, full.dims);
        // Pivot row p >= j: the first row of largest |x[., j]| (LAPACK's idamax).
        Value p;  // [nb] i64
        if (pivot) {
          Value col = lb.reshape(dynamic_slice(lb, x, {zero, zero, j}, {nb, m, 1}), {nb, m});
          Value row_idx = lb.iota(TensorType{DType::kI64, {nb, m}}, 1);
          Value eligible = lb.compare(row_idx, splat_index(lb, j, {nb, m}), "GE");
          Value mag = lb.select(eligible, lb.unary("abs", col), lb.splat(-1, col.type));
          Value best = lb.broadcast_in_dim(lb.reduce_max(mag, {1}), {nb, m}, {0});
          Value is_best = lb.binary("and", eligible, lb.compare(mag, best, "EQ"));
          Value none = lb.splat(static_cast<double>(m), row_idx.type);
          p = lb.reduce_min(lb.select(is_best, row_idx, none), {1});
          // A NaN column has no largest element: keep row j.
          Value jj = splat_index(lb, j, {nb});
          p = lb.select(lb.compare(p, lb.splat(static_cast<double>(m), p.type), "EQ"), jj, p);
        } else {
          p = splat_index(lb, j, {nb});
        }
        Value p_full = lb.broadcast_in_dim(p, full.dims, {0});
        // Exchange rows j and p of every batch element.
        Value row_j = lb.broadcast_in_dim(
            lb.reshape(dynamic_slice(lb, x, {zero, j, zero}, {nb, 1, n}), {nb, n}), full.dims,
            {0, 2});
        Value at_p = lb.compare(rows, p_full, "EQ");
        Value row_p = lb.broadcast_in_dim(lb.reduce_sum(lb.select(at_p, x, lb.zeros(x.type)), {1}),
                                          full.dims, {0, 2});
        Value at_j = lb.compare(rows, j_full, "EQ");
        x = lb.select(at_j, row_p, lb.select(at_p, row_j, x));
        // Eliminate below the pivot d: multipliers l = x[i, j] / d, rank-1 update of the
        // trailing block. A zero d leaves its column as it is (LAPACK's getf2).
        Value d = lb.broadcast_in_dim(
            lb.reshape(dynamic_slice(lb, x, {zero, j, j}, {nb, 1, 1}), {nb}), full.dims, {0});
        Value col = lb.broadcast_in_dim(
            lb.reshape(dynamic_slice(lb, x, {zero, zero, j}, {nb, m, 1}), {nb, m}), full.dims,
            {0, 1});
        Value pivot_row = lb.broadcast_in_dim(
            lb.reshape(dynamic_slice(lb, x, {zero, j, zero}, {nb, 1, n}), {nb, n}), full.dims,
            {0, 2});
        Value nonzero = lb.compare(d, lb.zeros(d.type), "NE");
        Value l = lb.select(nonzero, lb.div(col, d), col);
        Value below = lb.compare(rows, j_full, "GT");
        Value right = lb.compare(cols, j_full, "GT");
        Value trailing = lb.binary("and", below, right);
        x = lb.select(trailing, lb.sub(x, lb.mul(l, pivot_row)), x);
        x = lb.select(lb.binary("and", below, lb.compare(cols, j_full, "EQ")), l, x);
        // Bookkeeping: pivots[j] = p + 1; info = j + 1 at the first zero pivot.
        Value kidx = lb.iota(TensorType{DType::kI64, {nb, k}}, 1);
        Value p1 = lb.convert(lb.add(p, lb.splat(1, p.type)), DType::kI32);
        piv = lb.select(lb.compare(kidx, splat_index(lb, j, {nb, k}), "EQ"),
                        lb.broadcast_in_dim(p1, {nb, k}, {0}), piv);
        Value d_b = lb.reshape(dynamic_slice(lb, x, {zero, j, j}, {nb, 1, 1}), {nb});
        Value first_zero = lb.binary("and", lb.compare(d_b, lb.zeros(d_b.type), "EQ"),
                                     lb.compare(info, lb.zeros(info.type), "EQ"));
        Value j1 = lb.convert(lb.add(j, lb.constant_i64(1, DType::kI64)), DType::kI32);
        info = lb.select(first_zero, splat_index(lb, j1, {nb}), info);
        return std::vector<Value>{lb.add(j, lb.constant_i64(1, DType::kI64)), x, piv, info};
      });
  return Lu{out[1], out[2], out[3]};
}

Value lu_solve(Builder& b, Value lu, Value pivots, Value rhs, bool left, bool adjoint) {
  if (!left) {
    // X A = B  <=>  A^T X^T = B^T;  X A^T = B  <=>  A X^T = B^T.
    return mT(b, lu_solve(b, lu, pivots, mT(b, rhs), true, !adjoint));
  }
  int64_t m = lu.dims()[1];
  Value perm = permutation_from_pivots(b, pivots, m);
  if (!adjoint) {
    // A = P L U: X = U^-1 L^-1 P^T B.
    Value y = gather_rows(b, rhs, perm);
    y = triangular_solve(b, lu, y, true, true, true, false);
    return triangular_solve(b, lu, y, true, false, false, false);
  }
  // A^T = U^T L^T P^T: X = P L^-T U^-T B.
  Value y = triangular_solve(b, lu, rhs, true, false, false, true);
  y = triangular_solve(b, lu, y, true, true, true, true);
  return gather_rows(b, y, invert_permutation(b, perm));
}

// geqrf of [..., m, n]: packed reflectors [..., m, n] and taus [..., min(m, n)].
std::pair<Value, Value> qr_packed(Builder& b, Value a) {
  const Dims& d = a.dims();
  int64_t r = a.rank();
  Dims tau_dims(d.begin(), d.end() - 2);
  tau_dims.push_back(std::min(d[r - 2], d[r - 1]));
  auto outs = b.op_multi("stablehlo.custom_call", {a}, {a.type, TensorType{a.dtype(), tau_dims}},
                         "call_target_name = \"Qr\", api_version = 1 : i32");
  return {outs[0], outs[1]};
}

// Q = H_1 ... H_k applied to the first n columns of the identity ([..., m, n]).
Value householder_product(Builder& b, Value a, Value taus) {
  return b.op("stablehlo.custom_call", {a, taus}, a.type,
              "call_target_name = \"ProductOfElementaryHouseholderReflectors\", "
              "api_version = 1 : i32");
}

// `x` padded with zeros along its last dim to `n`.
Value pad_last(Builder& b, Value x, int64_t n) {
  int64_t have = x.dims().back();
  if (have == n) return x;
  Dims zdims = x.dims();
  zdims.back() = n - have;
  return b.concatenate({x, b.zeros(TensorType{x.dtype(), zdims})}, x.rank() - 1);
}

base::Status require_float(LoweringContext& c, DType t) {
  if (t == DType::kF32 || t == DType::kF64) return base::Status::ok_status();
  return base::unimplemented("lowering: " + c.op_name() +
                             " is lowered for float32 and float64 (got " + base::dtype_name(t) +
                             ")");
}

std::vector<Value> empty_input_results(LoweringContext& c, int n) {
  std::vector<Value> out;
  for (int i = 0; i < n; ++i) {
    const TensorType& t = c.out_type(i);
    int64_t r = t.rank();
    bool factor = base::is_floating(t.dtype) || base::is_complex(t.dtype);
    bool square = r >= 2 && t.dims[r - 1] == t.dims[r - 2] && t.num_elements() > 0;
    out.push_back(factor && square ? eye(c.b(), t) : c.b().zeros(t));
  }
  return out;
}

std::pair<Value, Value> cyclic_jacobi(Builder& b, Value a, Value v, int64_t n,
                                      const PairRotation& rotate) {
  auto i64 = [](Builder& lb, int64_t k) { return lb.constant_i64(k, DType::kI64); };
  // One sweep over the pairs: (a, v, whether any lane's pair was rotated).
  auto sweep = [&](Builder& sb, Value a0, Value v0) {
    Value no = sb.convert(i64(sb, 0), DType::kBool);
    return sb.while_loop(
        {i64(sb, 0), i64(sb, 1), a0, v0, no},
        [&](Builder& lb, const std::vector<Value>& s) {
          return std::vector<Value>{lb.compare(s[0], i64(lb, n - 1), "LT")};
        },
        [&](Builder& lb, const std::vector<Value>& s) {
          Value p = s[0], q = s[1];
          std::vector<Value> r = rotate(lb, p, q, s[2], s[3]);
          Value any = lb.any_of(r[2]);
          Value rotated = lb.binary("or", s[4], any);
          // Next pair: (p, q + 1), or (p + 1, p + 2) after the last column.
          Value q1 = lb.add(q, i64(lb, 1));
          Value wrap = lb.compare(q1, i64(lb, n), "EQ");
          Value p_next = lb.select(wrap, lb.add(p, i64(lb, 1)), p);
          Value q_next = lb.select(wrap, lb.add(p, i64(lb, 2)), q1);
          return std::vector<Value>{p_next, q_next, r[0], r[1], rotated};
        });
  };
  std::vector<Value> out = b.while_loop(
      {i64(b, 0), a, v, b.convert(i64(b, 1), DType::kBool)},
      [&](Builder& lb, const std::vector<Value>& s) {
        return std::vector<Value>{
            lb.binary("and", lb.compare(s[0], i64(lb, kMaxJacobiSweeps), "LT"), s[3])};
      },
      [&](Builder& lb, const std::vector<Value>& s) {
        std::vector<Value> r = sweep(lb, s[1], s[2]);
        return std::vector<Value>{lb.add(s[0], i64(lb, 1)), r[2], r[3], r[4]};
      });
  return {out[1], out[2]};
}

Value jacobi_tangent(Builder& b, Value zeta) {
  Value one = b.splat(1, zeta.type);
  Value az = b.unary("abs", zeta);
  Value big = b.compare(az, one, "GT");
  Value inv = b.div(one, b.select(big, az, one));
  Value root = b.select(big, b.mul(az, b.unary("sqrt", b.add(one, b.mul(inv, inv)))),
                        b.unary("sqrt", b.add(one, b.mul(zeta, zeta))));
  Value sign = b.select(b.compare(zeta, b.zeros(zeta.type), "GE"), one, b.splat(-1, zeta.type));
  return b.div(sign, b.add(az, root));
}

}  // namespace torchtpu::lowering::linalg
