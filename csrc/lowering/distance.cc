// Pairwise distances: _cdist_forward / _cdist_backward (torch.cdist) and _pdist_forward /
// _pdist_backward (torch.nn.functional.pdist), as PyTorch's CPU kernels compute them. The
// p-norm of every row difference is one reduction over a [..., r1, r2, m] difference; the
// p = 2 distance of larger inputs goes through a matrix product as PyTorch's
// _euclidean_dist does (including its clamp at 1e-30 before the square root), so both
// paths give the CPU's values.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// x1 [..., r1, m] and x2 [..., r2, m] broadcast to the batch dims of `out` and expanded
// to [..., r1, r2, m]; returns x1 - x2 there.
Value row_differences(Builder& b, Value x1, Value x2, const Dims& batch) {
  int64_t r1 = x1.dims()[x1.rank() - 2], r2 = x2.dims()[x2.rank() - 2];
  int64_t m = x1.dims().back(), nb = static_cast<int64_t>(batch.size());
  Dims a = batch, c = batch, wide = batch;
  a.insert(a.end(), {r1, m});
  c.insert(c.end(), {r2, m});
  wide.insert(wide.end(), {r1, r2, m});
  Dims map1 = iota_dims(nb), map2 = iota_dims(nb);
  map1.insert(map1.end(), {nb, nb + 2});
  map2.insert(map2.end(), {nb + 1, nb + 2});
  return b.sub(b.broadcast_in_dim(b.broadcast_to(x1, a), wide, map1),
               b.broadcast_in_dim(b.broadcast_to(x2, c), wide, map2));
}

// _euclidean_dist: [-2 x1, |x1|^2, 1] . [x2, 1, |x2|^2], clamped at 1e-30, square root.
Value euclidean_by_matmul(Builder& b, Value x1, Value x2, const Dims& batch) {
  int64_t nb = static_cast<int64_t>(batch.size());
  auto extended = [&](Value x, bool first) {
    Dims d = batch;
    d.insert(d.end(), {x.dims()[x.rank() - 2], x.dims().back()});
    x = b.broadcast_to(x, d);
    Value norm = b.reshape(b.reduce_sum(b.mul(x, x), {nb + 1}), [&] {
      Dims k = d;
      k.back() = 1;
      return k;
    }());
    Value ones = b.splat(1, norm.type);
    if (first) return b.concatenate({b.mul(x, b.splat(-2, x.type)), norm, ones}, nb + 1);
    return b.concatenate({x, ones, norm}, nb + 1);
  };
  Value prod = b.dot_general(extended(x1, true), extended(x2, false), iota_dims(nb),
                             iota_dims(nb), {nb + 1}, {nb + 1}, x1.dtype());
  return b.unary("sqrt", b.max(prod, b.splat(1e-30, prod.type)));
}

}  // namespace

Value norm_of_last_dim(Builder& b, Value diff, double p) {
  Value d = b.unary("abs", diff);
  Dims last{d.rank() - 1};
  if (p == 0) return b.reduce_sum(b.min(b.unary("ceil", d), b.splat(1, d.type)), last);
  if (p == 1) return b.reduce_sum(d, last);
  if (p == 2) return b.unary("sqrt", b.reduce_sum(b.mul(d, d), last));
  if (std::isinf(p)) return b.reduce_max(d, last);
  Value sum = b.reduce_sum(b.binary("power", d, b.splat(p, d.type)), last);
  return b.binary("power", sum, b.splat(1.0 / p, sum.type));
}

namespace {

// The CPU kernels' gradient term of a p-norm distance for each element of `diff`, given
// the distance's gradient `g` and value `dist` (both broadcast to diff's shape; p != 0).
Value norm_gradient_terms(Builder& b, Value diff, Value g, Value dist, double p) {
  Value zero = b.zeros(diff.type), one = b.splat(1, diff.type);
  Value at_zero = b.compare(dist, zero, "EQ");
  Value sign = b.unary("sign", diff), ad = b.unary("abs", diff);
  auto pw = [&](Value v, double e) { return b.binary("power", v, b.splat(e, v.type)); };
  if (p == 1) return b.mul(g, sign);
  if (p < 2) {
    Value term = b.div(b.mul(b.mul(sign, pw(ad, p - 1)), g), pw(dist, p - 1));
    term = b.select(at_zero, zero, term);
    return p < 1 ? b.select(b.compare(diff, zero, "EQ"), zero, term) : term;
  }
  if (p == 2) return b.select(at_zero, zero, b.div(b.mul(g, diff), dist));
  if (std::isinf(p)) {
    Value off = b.min(one, b.unary("ceil", b.unary("abs", b.sub(ad, dist))));
    return b.mul(b.mul(g, sign), b.sub(one, off));
  }
  Value term = b.div(b.mul(b.mul(diff, pw(ad, p - 2)), g), pw(dist, p - 1));
  return b.select(at_zero, zero, term);
}

// _cdist_forward(x1, x2, p, compute_mode?).
Result lower_cdist_forward(LoweringContext& c) {
  Builder& b = c.b();
  DType t = c.out_type().dtype;
  if (t != DType::kF32 && t != DType::kF64) {
    return base::unimplemented("lowering: " + c.op_name() + " takes float32 and float64 only");
  }
  const Dims& out = c.out_type().dims;
  if (c.out_type().num_elements() == 0) return std::vector<Value>{b.zeros(c.out_type())};
  Dims batch(out.begin(), out.end() - 2);
  int64_t nb = static_cast<int64_t>(batch.size());
  Value x1 = c.tensor(0), x2 = c.tensor(1);
  double p = c.double_arg(2);
  int64_t mode = c.is_none(3) ? 0 : c.int_arg(3);
  int64_t r1 = out[nb], r2 = out[nb + 1];
  if (p == 2 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)))) {
    return std::vector<Value>{euclidean_by_matmul(b, x1, x2, batch)};
  }
  if (x1.dims().back() == 0) return std::vector<Value>{b.zeros(c.out_type())};
  return std::vector<Value>{norm_of_last_dim(b, row_differences(b, x1, x2, batch), p)};
}

// _cdist_backward(grad, x1, x2, p, cdist): the gradient for x1, each row the sum over the
// rows of x2 of the CPU kernel's per-norm term of diff = x1_i - x2_j, grad_ij and
// dist_ij. (Autograd asks for x2's with the arguments swapped.)
Result lower_cdist_backward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.dtype != DType::kF32 && out.dtype != DType::kF64) {
    return base::unimplemented("lowering: " + c.op_name() + " takes float32 and float64 only");
  }
  const TensorType& g_type = c.tensor_type(0);
  Dims batch(g_type.dims.begin(), g_type.dims.end() - 2);
  int64_t nb = static_cast<int64_t>(batch.size());
  if (out.rank() != nb + 2 || !std::equal(batch.begin(), batch.end(), out.dims.begin())) {
    return base::unimplemented("lowering: " + c.op_name() +
                               ": x1's batch dims are broadcast (" + out.str() + ")");
  }
  double p = c.double_arg(3);
  if (p == 0 || out.num_elements() == 0 || g_type.num_elements() == 0) {
    return std::vector<Value>{b.zeros(out)};
  }
  Value diff = row_differences(b, c.tensor(1), c.tensor(2), batch);  // [..., r1, r2, m]
  const Dims& wide = diff.dims();
  Dims map = iota_dims(nb + 2);
  Value g = b.broadcast_in_dim(b.convert(c.tensor(0), out.dtype), wide, map);
  Value dist = b.broadcast_in_dim(b.convert(c.tensor(4), out.dtype), wide, map);
  Value term = norm_gradient_terms(b, diff, g, dist, p);
  return std::vector<Value>{b.reduce_sum(term, {nb + 1})};
}

// pdist's list position of each pair (i, j), i < j, of n rows (row-major over the upper
// triangle), as an [n, n] i64 matrix; other entries hold `fill`.
Value pair_positions(Builder& b, int64_t n, int64_t fill) {
  std::vector<int64_t> row_start;
  for (int64_t i = 0, k = 0; i < n; k += n - 1 - i, ++i) row_start.push_back(k);
  TensorType grid{DType::kI64, {n, n}};
  Value i = b.iota(grid, 0), j = b.iota(grid, 1);
  Value pos = b.add(b.broadcast_in_dim(b.constant_i64s(row_start, {n}), grid.dims, {0}),
                    b.sub(b.sub(j, i), b.splat(1, grid)));
  return b.select(b.compare(j, i, "GT"), pos, b.splat(static_cast<double>(fill), grid));
}

// _pdist_forward(self, p): the distances of the pairs i < j of self's n rows, row-major:
// every pair's distance, then each scattered to its list position.
Result lower_pdist_forward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.dtype != DType::kF32 && out.dtype != DType::kF64) {
    return base::unimplemented("lowering: " + c.op_name() + " takes float32 and float64 only");
  }
  int64_t n = c.tensor_type(0).dims[0], m = c.tensor_type(0).dims[1];
  int64_t pairs = out.num_elements();
  if (pairs == 0 || m == 0) return std::vector<Value>{b.zeros(out)};
  Value x = c.tensor(0);
  Value dist = b.reshape(norm_of_last_dim(b, row_differences(b, x, x, {}), c.double_arg(1)),
                         {n * n});
  Value pos = b.reshape(pair_positions(b, n, pairs), {n * n, 1});
  Value list = scatter(b, b.zeros(TensorType{out.dtype, {pairs + 1}}), pos, dist, {}, {0}, {0},
                       1, "");
  return std::vector<Value>{b.slice(list, {0}, {pairs}, {1})};
}

// _pdist_backward(grad, self, p, pdist): row i's gradient sums the terms of its pairs,
// each pair's list entry read at (i, j) and at (j, i) (the terms are odd in the difference).
Result lower_pdist_backward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.dtype != DType::kF32 && out.dtype != DType::kF64) {
    return base::unimplemented("lowering: " + c.op_name() + " takes float32 and float64 only");
  }
  int64_t n = out.dims[0], m = out.dims[1];
  double p = c.double_arg(2);
  int64_t pairs = c.tensor_type(0).num_elements();
  if (p == 0 || n <= 1 || m == 0 || pairs == 0) return std::vector<Value>{b.zeros(out)};
  Value upper = pair_positions(b, n, 0);
  Value pos = b.add(upper, b.transpose(upper, {1, 0}));  // (j, i) reads pair (i, j)
  auto matrix = [&](Value list) {
    Value v = gather(b, b.convert(list, out.dtype), b.reshape(pos, {n, n, 1}), {}, {0}, {0}, 2,
                     {1}, {n, n});
    return b.broadcast_in_dim(v, {n, n, m}, {0, 1});
  };
  Value x = c.tensor(1);
  Value diff = row_differences(b, x, x, {});
  Value term = norm_gradient_terms(b, diff, matrix(c.tensor(0)), matrix(c.tensor(3)), p);
  TensorType grid{DType::kI64, {n, n, m}};
  Value off_diagonal = b.compare(b.iota(grid, 0), b.iota(grid, 1), "NE");
  term = b.select(off_diagonal, term, b.zeros(term.type));
  return std::vector<Value>{b.reduce_sum(term, {1})};
}

}  // namespace

void register_distance_lowerings() {
  register_lowering({"aten::_cdist_forward", "aten::_cdist_forward.out"}, lower_cdist_forward);
  register_lowering({"aten::_cdist_backward", "aten::_cdist_backward.out"},
                    lower_cdist_backward);
  register_lowering({"aten::_pdist_forward", "aten::_pdist_forward.out"}, lower_pdist_forward);
  register_lowering({"aten::_pdist_backward", "aten::_pdist_backward.out"},
                    lower_pdist_backward);
}

}  // namespace torchtpu::lowering
