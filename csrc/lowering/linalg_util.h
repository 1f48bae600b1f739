// Matrix helpers shared by the linalg lowering families (linalg_factor.cc, linalg_decomp.cc).
//
// Matrices are [..., rows, cols]; most helpers take the batch flattened into one leading
// dim ([B, m, n], see flatten_batch) so that loops carry one state shape. Every helper
// is exact where the mathematics allows it: row selections and permutations are selects
// and gathers, never products with 0/1 matrices (0 * inf would turn a row into NaN).
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "lowering/lowering.h"

namespace torchtpu::lowering::linalg {

// The batch dims of `dims` (all but the last two) and their element count.
Dims batch_dims(const Dims& dims);
int64_t batch_count(const Dims& dims);
// [..., m, n] -> [B, m, n] (B = product of the batch dims, 1 for a matrix).
Value flatten_batch(Builder& b, Value x);
// [B, ...tail] -> [batch..., ...tail].
Value unflatten_batch(Builder& b, Value x, const Dims& batch);
// `x` ([..., m, n]) broadcast to the batch dims `batch` (numpy rules on the batch only).
Value broadcast_batch(Builder& b, Value x, const Dims& batch);
// Broadcast of two batch shapes (numpy rules); the caller's meta check guarantees it exists.
Dims broadcast_shapes(const Dims& a, const Dims& b);

// Batched product x @ y over the shared leading dims (which must match), HIGHEST precision.
Value matmul(Builder& b, Value x, Value y);
// The last two dims swapped.
Value mT(Builder& b, Value x);
// i1 mask of `dims` [..., m, n]: col - row <= k when `lower` (tril), col - row >= k otherwise.
Value band_mask(Builder& b, const Dims& dims, int64_t k, bool lower);
// `x` with the elements outside tril(k) / triu(k) set to zero.
Value tril(Builder& b, Value x, int64_t k = 0);
Value triu(Builder& b, Value x, int64_t k = 0);
// The identity of type `t` ([..., m, n]: ones where row == col).
Value eye(Builder& b, const TensorType& t);
// The main diagonal of [..., m, n] as [..., min(m, n)].
Value diagonal(Builder& b, Value x);
// A 0-d i64 broadcast to `dims`.
Value splat_index(Builder& b, Value i, const Dims& dims);
// LAPACK's `info` == 0 for every matrix, as an i1 scalar.
Value all_zero(Builder& b, Value info);

// stablehlo.dynamic_slice of `x` at the i64 0-d `starts` with `sizes`.
Value dynamic_slice(Builder& b, Value x, const std::vector<Value>& starts, const Dims& sizes);

// stablehlo.triangular_solve: op(a) x = rhs (left) or x op(a) = rhs; `a` and `rhs` share
// their batch dims. Only the `lower` (or upper) triangle of `a` is read (the rest may hold
// anything, NaN included); `unit` takes its diagonal as ones; `transpose` uses a^T.
Value triangular_solve(Builder& b, Value a, Value rhs, bool left, bool lower, bool unit,
                       bool transpose);

// Rows of [B, m, r] reordered: result[b, i] = x[b, index[b, i]] (index [B, m] i64 in
// [0, m)).
Value gather_rows(Builder& b, Value x, Value index);
// The row permutation LAPACK's 1-based pivots [B, k] (i32) describe, as perm [B, m] i64:
// row i of P^T A is row perm[i] of A (A = P L U). Out-of-range pivots are clamped.
Value permutation_from_pivots(Builder& b, Value pivots, int64_t m);
// inv[b, perm[b, i]] = i.
Value invert_permutation(Builder& b, Value perm);

// LU with partial pivoting (LAPACK getrf's results) of [B, m, n]: the packed factors,
// 1-based pivots [B, min(m, n)] i32 and info [B] i32 (the first zero pivot, 1-based; 0
// when none). Without `pivot`, rows are never exchanged (pivots are 1..k).
struct Lu {
  Value lu, pivots, info;
};
Lu lu_factor(Builder& b, Value a, bool pivot);

// X with A X = rhs (left, !adjoint), A^T X = rhs (left, adjoint), X A = rhs (!left,
// !adjoint) or X A^T = rhs, from A's packed LU [B, m, m] and pivots [B, m]; rhs is
// [B, m, r] (left) or [B, r, m].
Value lu_solve(Builder& b, Value lu, Value pivots, Value rhs, bool left, bool adjoint);

// XLA's Householder QR (the "Qr" custom call its QrExpander expands) of [..., m, n]:
// LAPACK geqrf's packed reflectors [..., m, n] and taus [..., min(m, n)].
std::pair<Value, Value> qr_packed(Builder& b, Value a);
// Q = H_1 ... H_k applied to the first n columns of the identity ([..., m, n]; LAPACK
// orgqr), through the "ProductOfElementaryHouseholderReflectors" custom call.
Value householder_product(Builder& b, Value a, Value taus);
// `x` padded with zeros along its last dim to `n`.
Value pad_last(Builder& b, Value x, int64_t n);

// Error if `t` is not float32 or float64 (the dtypes these lowerings compute in); the
// caller falls back to PyTorch's CPU kernel, which supports others or raises its error.
base::Status require_float(LoweringContext& c, DType t);

// A factorization's first `n` results for an empty input: a square matrix that is not
// empty (the orthogonal or permutation factor of the side that is not: svd's U of a 3x0
// input, qr's complete Q, lu's P) is the identity, as on the CPU; the rest are zeros
// (empty, or an info of 0).
std::vector<Value> empty_input_results(LoweringContext& c, int n);

// Cyclic Jacobi, shared by eigh and the SVD. `rotate` rotates the pair (p, q) (0-d i64,
// p < q) of every batch lane of (a, v) and returns {a', v', needed}, needed [B] bool
// marking the lanes whose pair needed a rotation. Sweeps run over every pair p < q < n in
// order until a whole sweep rotates nothing or kMaxJacobiSweeps sweeps ran
// (stablehlo.while loops); returns the final {a, v}.
// Jacobi converges quadratically once nearly diagonal (orthogonal): a handful of sweeps in
// practice; the bound keeps a pathological input from looping for long.
constexpr int64_t kMaxJacobiSweeps = 60;
using PairRotation =
    std::function<std::vector<Value>(Builder&, Value p, Value q, Value a, Value v)>;
std::pair<Value, Value> cyclic_jacobi(Builder& b, Value a, Value v, int64_t n,
                                      const PairRotation& rotate);
// tan of the smaller Jacobi rotation angle for `zeta` [B]: sign(zeta) / (|zeta| +
// sqrt(1 + zeta^2)), the root taken as |zeta| sqrt(1 + zeta^-2) where |zeta| > 1 so that
// it cannot overflow.
Value jacobi_tangent(Builder& b, Value zeta);

}  // namespace torchtpu::lowering::linalg
