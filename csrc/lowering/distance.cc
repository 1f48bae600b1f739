// Pairwise distances: _cdist_forward and _cdist_backward (torch.cdist), as PyTorch's CPU
// kernels compute them. The p-norm of every row difference is one reduction over a
// [..., r1, r2, m] difference; the p = 2 distance of larger inputs goes through a matrix
// product as PyTorch's _euclidean_dist does (including its clamp at 1e-30 before the
// square root), so both paths give the CPU's values.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

Dims iota_dims(int64_t n) {
  Dims d;
  for (int64_t i = 0; i < n; ++i) d.push_back(i);
  return d;
}

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
  Value d = b.unary("abs", row_differences(b, x1, x2, batch));
  Dims last{nb + 2};
  Value r;
  if (p == 0) {
    r = b.reduce_sum(b.min(b.unary("ceil", d), b.splat(1, d.type)), last);
  } else if (p == 1) {
    r = b.reduce_sum(d, last);
  } else if (p == 2) {
    r = b.unary("sqrt", b.reduce_sum(b.mul(d, d), last));
  } else if (std::isinf(p)) {
    r = b.reduce_max(d, last);
  } else {
    Value sum = b.reduce_sum(b.binary("power", d, b.splat(p, d.type)), last);
    r = b.binary("power", sum, b.splat(1.0 / p, sum.type));
  }
  return std::vector<Value>{r};
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
  Value zero = b.zeros(diff.type), one = b.splat(1, diff.type);
  Value at_zero = b.compare(dist, zero, "EQ");
  Value sign = b.unary("sign", diff), ad = b.unary("abs", diff);
  auto pw = [&](Value v, double e) { return b.binary("power", v, b.splat(e, v.type)); };
  Value term;
  if (p == 1) {
    term = b.mul(g, sign);
  } else if (p < 2) {
    term = b.div(b.mul(b.mul(sign, pw(ad, p - 1)), g), pw(dist, p - 1));
    term = b.select(at_zero, zero, term);
    if (p < 1) term = b.select(b.compare(diff, zero, "EQ"), zero, term);
  } else if (p == 2) {
    term = b.select(at_zero, zero, b.div(b.mul(g, diff), dist));
  } else if (std::isinf(p)) {
    Value off = b.min(one, b.unary("ceil", b.unary("abs", b.sub(ad, dist))));
    term = b.mul(b.mul(g, sign), b.sub(one, off));
  } else {
    term = b.div(b.mul(b.mul(diff, pw(ad, p - 2)), g), pw(dist, p - 1));
    term = b.select(at_zero, zero, term);
  }
  return std::vector<Value>{b.reduce_sum(term, {nb + 1})};
}

}  // namespace

void register_distance_lowerings() {
  register_lowering({"aten::_cdist_forward", "aten::_cdist_forward.out"}, lower_cdist_forward);
  register_lowering({"aten::_cdist_backward", "aten::_cdist_backward.out"},
                    lower_cdist_backward);
}

}  // namespace torchtpu::lowering
