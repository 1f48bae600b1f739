// The CTC loss (Graves et al. 2006) and its gradient: PyTorch's CPU kernels (LossCTC.cpp),
// batched over the samples and the positions of the extended target instead of one sample
// at a time. With the lengths as int lists (the overloads F.ctc_loss reaches), every
// length is structure, so the masks below are constants; the target labels are data.
//
// The extended target of a sample with target l (length L) is l' = (blank, l1, blank, l2,
// ..., lL, blank), 2L + 1 positions, padded to S' = 2 max(L) + 1 with blanks. Over the
// log-probabilities lp[t, n, c] of T steps:
//   alpha[0, s] = lp[0, l'[s]] for s < 2 (s = 1 only when L > 0), -inf otherwise;
//   alpha[t, s] = lse(alpha[t-1, s], alpha[t-1, s-1], alpha[t-1, s-2] when l'[s] !=
//                     l'[s-2]) + lp[t, l'[s]]  for s <= 2L, t < the sample's input length;
//   nll = -alpha[I-1, 0] when L = 0, else -lse(alpha[I-1, 2L], alpha[I-1, 2L-1]);
// beta is the same recursion backward in time from beta[I-1, s] = lp[I-1, l'[s]] for
// s in {2L, 2L - 1}, and the gradient is
//   grad[t, n, c] = (exp(lp) - exp(lse_{s: l'[s] = c}(alpha + beta)[t, s] + nll - lp)) * g[n]
// for t < I (0 after; 0 for the whole sample when zero_infinity and nll is inf). lse is
// max + log(sum exp(x - max)), the max taken as 0 when every term is -inf, as there. Where
// the CPU reads memory it never wrote (an input length of 0, alpha past a sample's
// lengths), this gives -inf and the loss of no time steps: 0 for an empty target, inf for
// another.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/linalg_util.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;
using linalg::dynamic_slice;
using linalg::splat_index;

// What the lengths decide, as constants, and the extended target as data.
struct Ctc {
  int64_t T = 0, N = 0, C = 0, S = 0;  // S: positions of the longest extended target
  Dims input_lengths, target_lengths;
  Value lp;         // [T, N, S]: lp[t, n, l'[n, s]]
  Value label;      // [N, S] i64: l'[n, s]
  Value skip_ok;    // [N, S] i1: s > 1 and l'[s] != l'[s - 2] (alpha may come from s - 2)
  Value in_target;  // [N, S] i1: s <= 2 L
  Value row_of;     // [N, S] i64: n * C + l'[n, s], the row of (n, l') in lp as [N * C, T]
};

Value neg_inf(Builder& b, const TensorType& t) { return b.splat(-INFINITY, t); }

// [N, S] i64 constant from a function of (n, s).
template <typename F>
Value per_position(Builder& b, int64_t n_count, int64_t s_count, F f) {
  std::vector<int64_t> v;
  v.reserve(n_count * s_count);
  for (int64_t n = 0; n < n_count; ++n) {
    for (int64_t s = 0; s < s_count; ++s) v.push_back(f(n, s));
  }
  return b.constant_i64s(v, {n_count, s_count});
}

Value flag(Builder& b, Value v) { return b.compare(v, b.zeros(v.type), "NE"); }

// rows[n, s, :] = x[idx[n, s], :] for x [R, W] and idx [N, S] i64.
Value take_rows(Builder& b, Value x, Value idx) {
  int64_t n = idx.dims()[0], s = idx.dims()[1], w = x.dims()[1];
  Value flat = b.reshape(idx, {n * s, 1});
  return b.reshape(gather(b, x, flat, {1}, {0}, {0}, 1, {1, w}, {n * s, w}), {n, s, w});
}

Ctc extended_target(LoweringContext& c, size_t lp_i, size_t targets_i, size_t il_i,
                    size_t tl_i, int64_t blank) {
  Builder& b = c.b();
  Ctc k;
  const Dims& lp_dims = c.tensor_type(lp_i).dims;
  k.T = lp_dims[0], k.N = lp_dims[1], k.C = lp_dims[2];
  k.input_lengths = c.int_list(il_i);
  k.target_lengths = c.int_list(tl_i);
  const TensorType& tt = c.tensor_type(targets_i);
  int64_t max_len = 0;
  for (int64_t l : k.target_lengths) max_len = std::max(max_len, l);
  k.S = 2 * max_len + 1;
  // Where target label j of sample n sits in the flattened targets: row n of padded [N, M]
  // targets, or after the earlier samples' labels in concatenated ones.
  Dims start(k.N, 0);
  for (int64_t n = 0, offset = 0; n < k.N; ++n) {
    start[n] = tt.rank() == 2 ? n * tt.dims[1] : offset;
    offset += k.target_lengths[n];
  }
  int64_t total = tt.num_elements();
  auto label_pos = [&](int64_t n, int64_t s) -> int64_t {
    bool is_label = s % 2 == 1 && (s - 1) / 2 < k.target_lengths[n];
    return is_label ? std::min(start[n] + (s - 1) / 2, std::max<int64_t>(total - 1, 0)) : -1;
  };
  Value pos = per_position(b, k.N, k.S, label_pos);
  Value is_label = b.compare(pos, b.zeros(pos.type), "GE");
  Value blanks = b.splat(static_cast<double>(blank), pos.type);
  if (total > 0) {
    Value flat = b.reshape(b.convert(c.tensor(targets_i), DType::kI64), {total, 1});
    Value labels = b.reshape(
        take_rows(b, flat, b.select(is_label, pos, b.zeros(pos.type))), {k.N, k.S});
    k.label = b.select(is_label, labels, blanks);
  } else {
    k.label = blanks;
  }
  if (k.S > 2) {
    Value two_back = b.concatenate(
        {b.splat(static_cast<double>(blank), TensorType{DType::kI64, {k.N, 2}}),
         b.slice(k.label, {0, 0}, {k.N, k.S - 2}, {1, 1})},
        1);
    Value s_gt_1 = flag(b, per_position(b, k.N, k.S, [](int64_t, int64_t s) { return s > 1; }));
    k.skip_ok = b.binary("and", s_gt_1, b.compare(k.label, two_back, "NE"));
  } else {
    k.skip_ok = b.splat(0, TensorType{DType::kBool, {k.N, k.S}});
  }
  k.in_target = flag(b, per_position(b, k.N, k.S, [&](int64_t n, int64_t s) {
    return s <= 2 * k.target_lengths[n];
  }));
  // lp at the extended labels: rows (n, c) of lp as [N * C, T], gathered at n * C + l'.
  Value lp = c.tensor(lp_i);
  Value rows = b.reshape(b.transpose(lp, {1, 2, 0}), {k.N * k.C, k.T});
  k.row_of = b.add(b.mul(b.iota(TensorType{DType::kI64, {k.N, k.S}}, 0),
                         b.splat(static_cast<double>(k.C), k.label.type)),
                   k.label);
  k.lp = b.transpose(take_rows(b, rows, k.row_of), {2, 0, 1});
  return k;
}

// lse of up to three terms with the CPU's rule for the max (0 when every term is -inf).
Value log_add3(Builder& b, Value x, Value y, Value z) {
  Value m = b.max(x, b.max(y, z));
  m = b.select(b.compare(m, neg_inf(b, m.type), "EQ"), b.zeros(m.type), m);
  auto term = [&](Value v) { return b.unary("exponential", b.sub(v, m)); };
  Value sum = b.add(b.add(term(x), term(y)), term(z));  // the CPU kernel's order
  return b.add(b.unary("log", sum), m);
}

// v[:, s + shift] with -inf past either end (shift is +-1 or +-2).
Value shifted(Builder& b, Value v, int64_t shift) {
  int64_t n = v.dims()[0], s = v.dims()[1], k = std::abs(shift);
  if (k >= s) return neg_inf(b, v.type);
  Value pad = neg_inf(b, TensorType{v.dtype(), {n, k}});
  if (shift < 0) return b.concatenate({pad, b.slice(v, {0, 0}, {n, s - k}, {1, 1})}, 1);
  return b.concatenate({b.slice(v, {0, k}, {n, s}, {1, 1}), pad}, 1);
}

// [N, S] row t of a [T, N, S] value (t an i64 0-d value).
Value row_at(Builder& b, Value x, Value t) {
  Value zero = b.constant_i64(0, DType::kI64);
  const Dims& d = x.dims();
  return b.reshape(dynamic_slice(b, x, {t, zero, zero}, {1, d[1], d[2]}), {d[1], d[2]});
}

Value put_row(Builder& b, Value x, Value row, Value t) {
  Value zero = b.constant_i64(0, DType::kI64);
  const Dims& d = x.dims();
  return b.op("stablehlo.dynamic_update_slice", {x, b.reshape(row, {1, d[1], d[2]}), t, zero, zero},
              x.type);
}

// Per-sample [N] i64 constant broadcast to [N, S].
Value per_sample(Builder& b, const Dims& v, int64_t s) {
  return b.broadcast_in_dim(b.constant_i64s(v, {static_cast<int64_t>(v.size())}),
                            {static_cast<int64_t>(v.size()), s}, {0});
}

// alpha for every step, [T, N, S] (-inf at t >= a sample's input length), and the nll [N].
std::pair<Value, Value> forward(Builder& b, const Ctc& k) {
  TensorType row_t{k.lp.dtype(), {k.N, k.S}};
  Value t0 = b.constant_i64(0, DType::kI64);
  Value lp0 = row_at(b, k.lp, t0);
  Value first = flag(b, per_position(b, k.N, k.S, [&](int64_t n, int64_t s) {
    return k.input_lengths[n] > 0 && (s == 0 || (s == 1 && k.target_lengths[n] > 0));
  }));
  Value alpha0 = b.select(first, lp0, neg_inf(b, row_t));
  Value all = put_row(b, neg_inf(b, TensorType{k.lp.dtype(), {k.T, k.N, k.S}}), alpha0, t0);
  Value il = per_sample(b, k.input_lengths, k.S);
  auto out = b.while_loop(
      {b.constant_i64(1, DType::kI64), alpha0, all},
      [&](Builder& lb, const std::vector<Value>& st) {
        return std::vector<Value>{lb.compare(st[0], lb.constant_i64(k.T, DType::kI64), "LT")};
      },
      [&](Builder& lb, const std::vector<Value>& st) {
        Value t = st[0], prev = st[1];
        Value from_skip = lb.select(k.skip_ok, shifted(lb, prev, -2), neg_inf(lb, row_t));
        Value next = lb.add(log_add3(lb, prev, shifted(lb, prev, -1), from_skip),
                            row_at(lb, k.lp, t));
        next = lb.select(k.in_target, next, neg_inf(lb, row_t));
        Value active = lb.compare(splat_index(lb, t, {k.N, k.S}), il, "LT");
        Value written = put_row(lb, st[2], lb.select(active, next, neg_inf(lb, row_t)), t);
        return std::vector<Value>{lb.add(t, lb.constant_i64(1, DType::kI64)),
                                  lb.select(active, next, prev), written};
      });
  // The last step's alpha at 2L and 2L - 1; for L = 0 the latter is -inf and the lse is
  // alpha[0] exactly, the CPU's value for an empty target.
  Value last = out[1];
  auto at = [&](auto pick) {
    Value mask = flag(b, per_position(b, k.N, k.S, pick));
    return b.reduce_max(b.select(mask, last, neg_inf(b, row_t)), {1});
  };
  Value end = at([&](int64_t n, int64_t s) { return s == 2 * k.target_lengths[n]; });
  Value before = at([&](int64_t n, int64_t s) { return s == 2 * k.target_lengths[n] - 1; });
  TensorType nt{k.lp.dtype(), {k.N}};
  Value nll = b.unary("negate", log_add3(b, end, before, b.splat(-INFINITY, nt)));
  // No time steps: the empty target has probability 1, any other 0.
  std::vector<int64_t> none_code(k.N, 0);
  for (int64_t n = 0; n < k.N; ++n) {
    if (k.input_lengths[n] == 0) none_code[n] = k.target_lengths[n] == 0 ? 1 : 2;
  }
  Value code = b.constant_i64s(none_code, {k.N});
  auto is = [&](int64_t v) {
    return b.compare(code, b.splat(static_cast<double>(v), code.type), "EQ");
  };
  nll = b.select(is(1), b.zeros(nt), b.select(is(2), b.splat(INFINITY, nt), nll));
  return {b.transpose(out[2], {1, 0, 2}), nll};
}

// _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity)
// -> (neg_log_likelihood [N], log_alpha [N, T, S]).
Result lower_ctc_loss(LoweringContext& c) {
  if (c.tensor_type(0).rank() != 3) {
    return base::unimplemented("lowering: _ctc_loss takes log_probs [T, N, C]");
  }
  Ctc k = extended_target(c, 0, 1, 2, 3, c.int_arg(4));
  auto [alpha, nll] = forward(c.b(), k);
  return std::vector<Value>{nll, alpha};
}

// _ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
// neg_log_likelihood, log_alpha, blank, zero_infinity) -> grad of log_probs [T, N, C].
Result lower_ctc_loss_backward(LoweringContext& c) {
  if (c.tensor_type(1).rank() != 3) {
    return base::unimplemented("lowering: _ctc_loss_backward takes log_probs [T, N, C]");
  }
  Builder& b = c.b();
  Ctc k = extended_target(c, 1, 2, 3, 4, c.int_arg(7));
  DType ft = k.lp.dtype();
  TensorType row_t{ft, {k.N, k.S}}, steps_t{ft, {k.T, k.N, k.S}};
  Value il = per_sample(b, k.input_lengths, k.S);
  Value start = flag(b, per_position(b, k.N, k.S, [&](int64_t n, int64_t s) {
    int64_t l = k.target_lengths[n];
    return s == 2 * l || (l > 0 && s == 2 * l - 1);
  }));
  // beta may come from s + 2 when l'[s + 2] != l'[s]: skip_ok two positions on.
  Value skip_next = k.S > 2 ? b.concatenate({b.slice(k.skip_ok, {0, 2}, {k.N, k.S}, {1, 1}),
                                              b.splat(0, TensorType{DType::kBool, {k.N, 2}})},
                                             1)
                            : k.skip_ok;
  auto out = b.while_loop(
      {b.constant_i64(k.T - 1, DType::kI64), neg_inf(b, row_t), neg_inf(b, steps_t)},
      [&](Builder& lb, const std::vector<Value>& st) {
        return std::vector<Value>{lb.compare(st[0], lb.constant_i64(0, DType::kI64), "GE")};
      },
      [&](Builder& lb, const std::vector<Value>& st) {
        Value t = st[0], later = st[1];
        Value lp_t = row_at(lb, k.lp, t);
        Value from_skip = lb.select(skip_next, shifted(lb, later, 2), neg_inf(lb, row_t));
        Value rec = lb.add(log_add3(lb, later, shifted(lb, later, 1), from_skip), lp_t);
        rec = lb.select(k.in_target, rec, neg_inf(lb, row_t));
        Value t_plus_1 = splat_index(lb, lb.add(t, lb.constant_i64(1, DType::kI64)), {k.N, k.S});
        Value at_last = lb.compare(t_plus_1, il, "EQ");  // t = I - 1
        Value before_last = lb.compare(t_plus_1, il, "LT");
        Value beta = lb.select(at_last, lb.select(start, lp_t, neg_inf(lb, row_t)),
                               lb.select(before_last, rec, neg_inf(lb, row_t)));
        return std::vector<Value>{lb.sub(t, lb.constant_i64(1, DType::kI64)), beta,
                                  put_row(lb, st[2], beta, t)};
      });
  // lse over the positions of each label: a segment max, then a segment sum of exp(x - max),
  // scattered into rows (n, c) of [N * C, T].
  Value ab = b.add(b.transpose(c.tensor(6), {1, 0, 2}), out[2]);  // [T, N, S]
  Value ab_rows = b.reshape(b.transpose(ab, {1, 2, 0}), {k.N * k.S, k.T});
  Value idx = b.reshape(k.row_of, {k.N * k.S, 1});
  TensorType rows_t{ft, {k.N * k.C, k.T}};
  Value seg_max = scatter(b, neg_inf(b, rows_t), idx, ab_rows, {1}, {0}, {0}, 1, "maximum");
  Value safe_max = b.select(b.compare(seg_max, neg_inf(b, rows_t), "EQ"), b.zeros(rows_t), seg_max);
  Value max_at = b.reshape(take_rows(b, safe_max, k.row_of), {k.N * k.S, k.T});
  Value seg_sum = scatter(b, b.zeros(rows_t), idx, b.unary("exponential", b.sub(ab_rows, max_at)),
                          {1}, {0}, {0}, 1, "add");
  Value lcab = b.add(b.unary("log", seg_sum), safe_max);  // [N * C, T]
  lcab = b.transpose(b.reshape(lcab, {k.N, k.C, k.T}), {2, 0, 1});  // [T, N, C]
  Value lp = c.tensor(1);
  const Dims& d = lp.dims();
  Value nll = b.broadcast_in_dim(c.tensor(5), d, {1});
  Value g = b.sub(b.unary("exponential", lp),
                  b.unary("exponential", b.sub(b.add(lcab, nll), lp)));
  g = b.mul(g, b.broadcast_in_dim(c.tensor(0), d, {1}));
  // Zero at t >= I, and for a whole sample whose loss is inf under zero_infinity.
  Value t_idx = b.iota(TensorType{DType::kI64, d}, 0);
  Value lengths = b.broadcast_in_dim(b.constant_i64s(k.input_lengths, {k.N}), d, {1});
  Value keep = b.compare(t_idx, lengths, "LT");
  if (c.bool_arg(8)) {
    keep = b.binary("and", keep, b.compare(nll, b.splat(INFINITY, nll.type), "NE"));
  }
  return std::vector<Value>{b.select(keep, g, b.zeros(g.type))};
}

}  // namespace

void register_ctc_loss_lowerings() {
  register_lowering({"aten::_ctc_loss", "aten::_ctc_loss.out"}, lower_ctc_loss);
  register_lowering({"aten::_ctc_loss_backward", "aten::_ctc_loss_backward.out"},
                    lower_ctc_loss_backward);
}

}  // namespace torchtpu::lowering
