// The regularized incomplete gamma functions igamma(a, x) = P(a, x) and igammac(a, x) =
// Q(a, x) = 1 - P(a, x) (torch.special.gammainc / gammaincc), with PyTorch's CPU kernel's
// boundary values and choice of method by region (Math.h, after Cephes and SciPy):
//   P by its power series (DLMF 8.11.4): x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a+1)...(a+n));
//   Q by Legendre's continued fraction (Cephes igamc), for x > 1 beyond a;
//   Q for small x by DLMF 8.7.3: -expm1(a log x - lgamma(a + 1)) - x^a / Gamma(a) *
//     sum_{n>=1} (-x)^n / (n! (a + n)).
// Each is a stablehlo.while over the whole tensor that stops when every element it serves
// has converged (a term below the dtype's epsilon, at most 2000 terms, as there). For
// large a near x (a > 20, |x - a| / a < 0.3) the CPU kernel takes Temme's uniform
// asymptotic expansion; here the series and the continued fraction still converge up to
// a = 1e4 (float64 results nearer the true values than the CPU's), and beyond it, where
// 2000 terms stop reaching (a = 1e6 gave P(a, a) = 0.48 for 0.50013), the expansion's
// first two terms (`temme`: an error of order a^-2.5, below 1e-13 there). Not taken from
// the CPU kernel: its Lanczos form of x^a e^-x / Gamma(a); the prefactor takes Stirling's
// series for large a (`prefactor`).
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

constexpr int64_t kMaxIterations = 2000;

double epsilon_of(DType t) {
  return t == DType::kF64 ? 1.11022302462515654042e-16 : 5.9604644775390625e-8;
}

// Runs `step` (state -> next state, the first value of the state being the per-element
// "done" mask) until every element is done or kMaxIterations; done elements keep their
// values.
using Step = std::function<std::vector<Value>(Builder&, const std::vector<Value>&)>;

std::vector<Value> iterate(Builder& b, std::vector<Value> init, const Step& step) {
  init.insert(init.begin(), b.constant_i64(0, DType::kI64));
  std::vector<Value> out = b.while_loop(
      init,
      [&](Builder& lb, const std::vector<Value>& s) {
        Value more = lb.compare(s[0], lb.constant_i64(kMaxIterations, DType::kI64), "LT");
        return std::vector<Value>{lb.binary("and", more, lb.any_of(lb.unary("not", s[1])))};
      },
      [&](Builder& lb, const std::vector<Value>& s) {
        std::vector<Value> state(s.begin() + 1, s.end());
        std::vector<Value> next = step(lb, state);
        Value done = state[0];
        std::vector<Value> out{lb.add(s[0], lb.constant_i64(1, DType::kI64)), next[0]};
        for (size_t i = 1; i < state.size(); ++i) out.push_back(lb.select(done, state[i], next[i]));
        out[1] = lb.binary("or", done, next[0]);
        return out;
      });
  return std::vector<Value>(out.begin() + 1, out.end());
}

// x^a e^-x / Gamma(a). Its log a log x - x - lgamma(a) cancels terms of size a log x, so
// for a > 10 it is taken with Stirling's series for lgamma instead:
// a (log1p(t) - t) + log(a / 2 pi) / 2 - (1/(12 a) - 1/(360 a^3) + ...), t = x/a - 1, whose
// terms stay small near x = a (six terms of the series: an error below 1/(156 a^13)).
Value prefactor(Builder& b, Value a, Value x) {
  auto k = [&](double v) { return b.splat(v, a.type); };
  Value direct = b.sub(b.sub(b.mul(a, b.unary("log", x)), x), b.unary("chlo.lgamma", a));
  Value t = b.div(b.sub(x, a), a);
  Value inv = b.div(k(1), a), inv2 = b.mul(inv, inv);
  // lgamma(a) - ((a - 1/2) log a - a + log(2 pi) / 2): sum_k B_2k / (2k (2k - 1) a^(2k-1)).
  Value correction = k(-691.0 / 360360);
  for (double c : {1.0 / 1188, -1.0 / 1680, 1.0 / 1260, -1.0 / 360, 1.0 / 12}) {
    correction = b.add(k(c), b.mul(inv2, correction));
  }
  correction = b.mul(inv, correction);
  Value stirling = b.sub(b.add(b.mul(a, b.sub(b.unary("log_plus_one", t), t)),
                               b.mul(k(0.5), b.unary("log", b.div(a, k(2 * M_PI))))),
                         correction);
  return b.unary("exponential", b.select(b.compare(a, k(10), "GT"), stirling, direct));
}

// v * prefactor(a, x), and 0 where the prefactor underflows to 0 (the CPU kernel returns
// there before iterating): far past a, the iteration's own terms overflow to inf or NaN.
Value times_prefactor(Builder& b, Value v, Value a, Value x) {
  Value f = prefactor(b, a, x);
  Value zero = b.zeros(f.type);
  return b.select(b.compare(f, zero, "EQ"), zero, b.mul(v, f));
}

// P(a, x) by its power series, for the elements of `active`.
Value p_series(Builder& b, Value a, Value x, Value active) {
  Value eps = b.splat(epsilon_of(a.dtype()), a.type), one = b.splat(1, a.type);
  auto out = iterate(b, {b.unary("not", active), a, one, one},
                     [&](Builder& lb, const std::vector<Value>& s) {
                       Value r = lb.add(s[1], one);
                       Value c = lb.mul(s[2], lb.div(x, r));
                       Value ans = lb.add(s[3], c);
                       Value converged = lb.compare(c, lb.mul(eps, ans), "LE");
                       return std::vector<Value>{converged, r, c, ans};
                     });
  return b.div(times_prefactor(b, out[3], a, x), a);
}

// Q(a, x) by the continued fraction, for the elements of `active`.
Value q_continued_fraction(Builder& b, Value a, Value x, Value active) {
  Value eps = b.splat(epsilon_of(a.dtype()), a.type), one = b.splat(1, a.type);
  Value big = b.splat(4.503599627370496e15, a.type);
  Value biginv = b.splat(2.22044604925031308085e-16, a.type);
  Value y = b.sub(one, a);
  Value z = b.add(b.add(x, y), one);
  Value pkm1 = b.add(x, one), qkm1 = b.mul(z, x);
  // State: done, c, y, z, pkm2, qkm2, pkm1, qkm1, ans.
  auto out = iterate(
      b, {b.unary("not", active), b.zeros(a.type), y, z, one, x, pkm1, qkm1, b.div(pkm1, qkm1)},
      [&](Builder& lb, const std::vector<Value>& s) {
        Value c = lb.add(s[1], one), yy = lb.add(s[2], one), zz = lb.add(s[3], lb.splat(2, a.type));
        Value yc = lb.mul(yy, c);
        Value pk = lb.sub(lb.mul(s[6], zz), lb.mul(s[4], yc));
        Value qk = lb.sub(lb.mul(s[7], zz), lb.mul(s[5], yc));
        Value nonzero = lb.compare(qk, lb.zeros(qk.type), "NE");
        Value r = lb.div(pk, lb.select(nonzero, qk, one));
        Value t = lb.select(nonzero, lb.unary("abs", lb.div(lb.sub(s[8], r), r)), one);
        Value ans = lb.select(nonzero, r, s[8]);
        Value pkm2 = s[6], qkm2 = s[7], p1 = pk, q1 = qk;
        Value rescale = lb.compare(lb.unary("abs", pk), big, "GT");
        auto scaled = [&](Value v) { return lb.select(rescale, lb.mul(v, biginv), v); };
        return std::vector<Value>{lb.compare(t, eps, "LE"), c, yy, zz, scaled(pkm2), scaled(qkm2),
                                  scaled(p1), scaled(q1), ans};
      });
  return times_prefactor(b, out[8], a, x);
}

// Q(a, x) for small x (DLMF 8.7.3), for the elements of `active`.
Value q_small_x_series(Builder& b, Value a, Value x, Value active) {
  Value eps = b.splat(epsilon_of(a.dtype()), a.type), one = b.splat(1, a.type);
  // State: done, n, fac, sum.
  auto out = iterate(b, {b.unary("not", active), b.zeros(a.type), one, b.zeros(a.type)},
                     [&](Builder& lb, const std::vector<Value>& s) {
                       Value n = lb.add(s[1], one);
                       Value fac = lb.mul(s[2], lb.div(lb.unary("negate", x), n));
                       Value term = lb.div(fac, lb.add(a, n));
                       Value sum = lb.add(s[3], term);
                       Value converged = lb.compare(lb.unary("abs", term),
                                                    lb.mul(eps, lb.unary("abs", sum)), "LE");
                       return std::vector<Value>{converged, n, fac, sum};
                     });
  Value a_log_x = b.mul(a, b.unary("log", x));
  Value lgamma1p = b.unary("chlo.lgamma", b.add(a, one));
  Value head = b.unary("negate", b.unary("exponential_minus_one", b.sub(a_log_x, lgamma1p)));
  Value scale = b.unary("exponential", b.sub(a_log_x, b.unary("chlo.lgamma", a)));
  return b.sub(head, b.mul(scale, out[3]));
}

// Q(a, x) = erfc(eta sqrt(a/2)) / 2 + e^(-a eta^2 / 2) / sqrt(2 pi a) (c0(eta) + c1(eta) / a)
// (Temme; DLMF 8.12.8), lambda = x / a, d = lambda - 1, eta^2 / 2 = d - log1p(d), eta with
// d's sign. With `lower`, P = 1 - Q in the same terms (erfc(-eta sqrt(a/2)) / 2 - R), which
// keeps P's digits where it is small. c0 = 1/d - 1/eta cancels near d = 0, where its
// Taylor series in eta takes over (|d| < 0.05: six terms, an error below 1e-12); c1 to
// first order in eta (its terms past that are below 1e-14 / a in this region).
Value temme(Builder& b, Value a, Value x, bool lower) {
  auto k = [&](double v) { return b.splat(v, a.type); };
  Value d = b.div(b.sub(x, a), a);
  Value near = b.compare(b.unary("abs", d), k(0.05), "LT");
  // d - log1p(d) = d^2 (1/2 - d/3 + d^2/4 - ...) near 0, where the difference cancels.
  Value series = k(1.0 / 16);
  for (int n = 15; n >= 2; --n) series = b.add(k((n % 2 ? -1.0 : 1.0) / n), b.mul(d, series));
  Value half_eta2 = b.select(near, b.mul(b.mul(d, d), series),
                             b.sub(d, b.unary("log_plus_one", d)));
  Value eta = b.mul(b.unary("sign", d), b.unary("sqrt", b.mul(k(2), half_eta2)));
  Value c0_series = k(-139.0 / 777600);
  for (double c : {1.0 / 2835, 1.0 / 864, -2.0 / 135, 1.0 / 12, -1.0 / 3}) {
    c0_series = b.add(k(c), b.mul(eta, c0_series));
  }
  Value safe_d = b.select(near, k(1), d), safe_eta = b.select(near, k(1), eta);
  Value c0 = b.select(near, c0_series, b.sub(b.div(k(1), safe_d), b.div(k(1), safe_eta)));
  Value c1 = b.sub(k(-1.0 / 540), b.div(eta, k(288)));
  Value r = b.mul(b.div(b.unary("exponential", b.mul(b.unary("negate", a), half_eta2)),
                        b.unary("sqrt", b.mul(k(2 * M_PI), a))),
                  b.add(c0, b.div(c1, a)));
  Value z = b.mul(eta, b.unary("sqrt", b.mul(k(0.5), a)));
  if (lower) return b.sub(b.mul(k(0.5), b.unary("chlo.erfc", b.unary("negate", z))), r);
  return b.add(b.mul(k(0.5), b.unary("chlo.erfc", z)), r);
}

// Where `temme` takes over: a above 1e4 and x within 30% of it.
Value temme_region(Builder& b, Value a, Value x) {
  Value far = b.compare(b.unary("abs", b.sub(x, a)), b.mul(b.splat(0.3, a.type), a), "GE");
  return b.binary("and", b.compare(a, b.splat(1e4, a.type), "GT"), b.unary("not", far));
}

// The CPU kernel's boundary values, as P (Q's are 1 - P's), in its order of tests: NaN
// for a < 0 or x < 0; for a = 0, 1 when x > 0 else NaN; 0 for x = 0; for a = inf, NaN when
// x = inf else 0 (a NaN x included); 1 for x = inf. A NaN argument past those is NaN.
Value with_boundaries(Builder& b, Value a, Value x, Value computed, bool upper) {
  Value zero = b.zeros(a.type), inf = b.splat(INFINITY, a.type), nan = b.splat(NAN, a.type);
  Value p_one = upper ? zero : b.splat(1, a.type), p_zero = upper ? b.splat(1, a.type) : zero;
  auto eq = [&](Value u, Value v) { return b.compare(u, v, "EQ"); };
  Value r = b.select(b.binary("or", b.compare(a, a, "NE"), b.compare(x, x, "NE")), nan, computed);
  r = b.select(eq(x, inf), p_one, r);
  r = b.select(eq(a, inf), b.select(eq(x, inf), nan, p_zero), r);
  r = b.select(eq(x, zero), p_zero, r);
  r = b.select(eq(a, zero), b.select(b.compare(x, zero, "GT"), p_one, nan), r);
  return b.select(b.binary("or", b.compare(x, zero, "LT"), b.compare(a, zero, "LT")), nan, r);
}

// Where no boundary value applies: a, x > 0, both finite.
Value interior(Builder& b, Value a, Value x) {
  Value zero = b.zeros(a.type), inf = b.splat(INFINITY, a.type);
  auto between = [&](Value v) {
    return b.binary("and", b.compare(v, zero, "GT"), b.compare(v, inf, "LT"));
  };
  return b.binary("and", between(a), between(x));
}

Value igamma(Builder& b, Value a, Value x, bool upper) {
  Value by_temme = b.binary("and", interior(b, a, x), temme_region(b, a, x));
  Value inside = b.binary("and", interior(b, a, x), b.unary("not", by_temme));
  Value one = b.splat(1, a.type);
  auto gt = [&](Value u, Value v) { return b.compare(u, v, "GT"); };
  auto both = [&](Value u, Value v) { return b.binary("and", u, v); };
  Value r;
  if (!upper) {
    Value by_q = both(inside, both(gt(x, one), gt(x, a)));
    Value by_p = both(inside, b.unary("not", by_q));
    r = b.select(by_q, b.sub(one, q_continued_fraction(b, a, x, by_q)), p_series(b, a, x, by_p));
  } else {
    // x > 1.1: 1 - P below a, else the fraction; x <= 0.5: 1 - P when -0.4 / log x < a,
    // else the small-x series; in between: 1 - P when 1.1 x < a, else the small-x series.
    Value above = gt(x, b.splat(1.1, a.type));
    Value low = b.compare(x, b.splat(0.5, a.type), "LE");
    Value small_x_p = gt(a, b.div(b.splat(-0.4, a.type), b.unary("log", x)));
    Value mid_p = b.compare(b.mul(x, b.splat(1.1, a.type)), a, "LT");
    Value use_p = b.select(above, b.compare(x, a, "LT"), b.select(low, small_x_p, mid_p));
    Value by_p = both(inside, use_p);
    Value by_cf = both(inside, both(above, b.unary("not", use_p)));
    Value by_series = both(inside, both(b.unary("not", above), b.unary("not", use_p)));
    r = b.select(by_p, b.sub(one, p_series(b, a, x, by_p)),
                 b.select(by_cf, q_continued_fraction(b, a, x, by_cf),
                          q_small_x_series(b, a, x, by_series)));
  }
  r = b.select(by_temme, temme(b, a, x, /*lower=*/!upper), r);
  return with_boundaries(b, a, x, r, upper);
}

LoweringFn incomplete_gamma(bool upper) {
  return [upper](LoweringContext& c) -> Result {
    DType rt = c.result_type({0, 1});
    if (!base::is_floating(rt)) {
      return base::unimplemented("lowering: " + c.op_name() + " takes floating-point tensors");
    }
    DType t = opmath(rt);
    Value r = igamma(c.b(), out_operand(c, 0, t), out_operand(c, 1, t), upper);
    return std::vector<Value>{to_out_via(c, rt, r)};
  };
}

}  // namespace

void register_incomplete_gamma_lowerings() {
  register_with_variants("igamma", {""}, incomplete_gamma(/*upper=*/false));
  register_with_variants("igammac", {""}, incomplete_gamma(/*upper=*/true));
}

}  // namespace torchtpu::lowering
