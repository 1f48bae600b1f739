// linalg_matrix_exp: the [13/13] Padé approximant with scaling and squaring (Higham, "The
// scaling and squaring method for the matrix exponential revisited", 2005).
//
// Each matrix A of the batch is scaled by 2^-s, s the least non-negative integer with
// ||A||_1 / 2^s <= theta_13; r(A / 2^s) = (V - U)^-1 (V + U) is solved with LU; the result
// is squared s times. The squarings are one stablehlo.while over the batch's largest s, in
// which a matrix with a smaller s keeps its value. float16 and bfloat16 compute in float32
// and round once, as the CPU kernel does; complex inputs run PyTorch's CPU kernel.
#include <cmath>

#include "lowering/families.h"
#include "lowering/linalg_util.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// Higham's theta_13 (the 1-norm bound for unit roundoff 2^-53; float32 takes the same bound,
// which costs it at most a squaring or two and no accuracy).
constexpr double kTheta13 = 5.371920351148152;
// The Padé [13/13] coefficients b_0 .. b_13.
constexpr double kPade13[] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                              1187353796428800.0,  129060195264000.0,   10559470521600.0,
                              670442572800.0,      33522128640.0,       1323241920.0,
                              40840800.0,          960960.0,            16380.0,
                              182.0,               1.0};

// sum_i coef_i * term_i over the same-shaped terms.
Value combine(Builder& b, const std::vector<std::pair<double, Value>>& terms) {
  Value sum;
  for (const auto& [coef, term] : terms) {
    Value scaled = b.mul(b.splat(coef, term.type), term);
    sum = sum.id < 0 ? scaled : b.add(sum, scaled);
  }
  return sum;
}

Result linalg_matrix_exp(LoweringContext& c) {
  const TensorType& out = c.out_type(0);
  DType t = out.dtype;
  bool half = t == DType::kF16 || t == DType::kBF16;
  DType work = half ? DType::kF32 : t;
  TORCHTPU_RETURN_IF_ERROR(linalg::require_float(c, work));
  Builder& b = c.b();
  if (out.num_elements() == 0) return std::vector<Value>{b.zeros(out)};
  Value a = linalg::flatten_batch(b, b.convert(c.tensor(0), work));  // [B, n, n]
  int64_t nb = a.dims()[0];
  const Dims& cube = a.dims();
  auto per_matrix = [&](Value v) { return b.broadcast_in_dim(v, cube, {0}); };

  // s per matrix, from the 1-norm (the largest column sum of |A|). A matrix with a NaN or
  // infinite entry takes s = 0: its result is NaN either way.
  TensorType lanes{work, {nb}};
  Value norm = b.reduce_max(b.reduce_sum(b.unary("abs", a), {1}), {1});
  Value log2 = b.div(b.unary("log", b.div(norm, b.splat(kTheta13, lanes))),
                     b.splat(0.69314718055994531, lanes));
  // 2^s stays finite in the work type: s <= its largest exponent.
  double max_s = work == DType::kF64 ? 1023 : 127;
  Value s = b.clamp(b.splat(0, lanes), b.unary("ceil", log2), b.splat(max_s, lanes));
  Value finite = b.compare(norm, b.splat(INFINITY, lanes), "LT");
  s = b.select(finite, s, b.zeros(lanes));
  Value scale = b.binary("power", b.splat(2, lanes), b.unary("negate", s));
  a = b.mul(a, per_matrix(scale));

  Value eye = linalg::eye(b, a.type);
  Value a2 = linalg::matmul(b, a, a);
  Value a4 = linalg::matmul(b, a2, a2);
  Value a6 = linalg::matmul(b, a4, a2);
  const double* p = kPade13;
  Value u_inner = linalg::matmul(b, a6, combine(b, {{p[13], a6}, {p[11], a4}, {p[9], a2}}));
  Value u = linalg::matmul(
      b, a, b.add(u_inner, combine(b, {{p[7], a6}, {p[5], a4}, {p[3], a2}, {p[1], eye}})));
  Value v_inner = linalg::matmul(b, a6, combine(b, {{p[12], a6}, {p[10], a4}, {p[8], a2}}));
  Value v = b.add(v_inner, combine(b, {{p[6], a6}, {p[4], a4}, {p[2], a2}, {p[0], eye}}));
  linalg::Lu f = linalg::lu_factor(b, b.sub(v, u), /*pivot=*/true);
  Value r = linalg::lu_solve(b, f.lu, f.pivots, b.add(v, u), /*left=*/true, /*adjoint=*/false);

  // Squarings: step i squares the matrices with i < s.
  Value steps = b.convert(s, DType::kI64);
  Value most = b.reduce_max(steps, {0});
  auto squared = b.while_loop(
      {b.constant_i64(0, DType::kI64), r},
      [&](Builder& lb, const std::vector<Value>& st) {
        return std::vector<Value>{lb.compare(st[0], most, "LT")};
      },
      [&](Builder& lb, const std::vector<Value>& st) {
        Value i = st[0], x = st[1];
        Value due = lb.compare(lb.broadcast_in_dim(i, {nb}, {}), steps, "LT");
        Value next = lb.select(lb.broadcast_in_dim(due, cube, {0}), linalg::matmul(lb, x, x), x);
        return std::vector<Value>{lb.add(i, lb.constant_i64(1, DType::kI64)), next};
      });
  Value result = linalg::unflatten_batch(b, squared[1], linalg::batch_dims(out.dims));
  return std::vector<Value>{b.convert(result, t)};
}

}  // namespace

void register_linalg_matrix_exp_lowerings() {
  register_lowering({"aten::linalg_matrix_exp"}, linalg_matrix_exp);
}

}  // namespace torchtpu::lowering
