// grid_sampler_2d / grid_sampler_3d and their backward (F.grid_sample on 4-D and 5-D
// inputs): PyTorch's sampling (ATen/native/GridSampler.h). A grid point (x, y[, z]) in
// [-1, 1] is unnormalized to the input's pixel space (align_corners picks pixel centers or
// corners), then folded by the padding mode (zeros: left as is; border: clipped;
// reflection: mirrored, then clipped). Bilinear (trilinear) mixes the 2^d pixels around
// the point, nearest takes the one at the rounded point (half to even), bicubic (2-D only)
// mixes 4x4 pixels with the cubic convolution (A = -0.75), folding each tap by the padding
// mode. Pixels outside the input read as 0, and gradients for them are dropped.
//
// Pixels are read with one gather per tap from the input viewed as [N, C, pixels] and the
// grid as [N, P] points; the input gradient scatter-adds to the same places.
#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

enum Interpolation : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };
constexpr double kCubicA = -0.75;

// One call's sampling problem and the coordinate arithmetic of GridSampler.h, on [N, P]
// values of the accumulation type. Grid component k (x, y, z) indexes spatial dim
// d - 1 - k of the input (W, H, D).
class Sampler {
 public:
  Sampler(LoweringContext& c, size_t input_i, size_t grid_i, size_t mode_i)
      : b_(c.b()), padding_(c.int_arg(mode_i + 1)), align_(c.bool_arg(mode_i + 2)) {
    const Dims& in = c.tensor_type(input_i).dims;
    const Dims& g = c.tensor_type(grid_i).dims;
    a_ = opmath(c.tensor_type(input_i).dtype);
    int64_t d = static_cast<int64_t>(in.size()) - 2;
    n_ = in[0], c_ = in[1], p_ = 1, pixels_ = 1;
    for (int64_t k = 0; k < d; ++k) {
      sizes_.push_back(in[in.size() - 1 - k]);
      pixels_ *= in[2 + k];
      p_ *= g[1 + k];
    }
    input_ = b_.reshape(b_.convert(c.tensor(input_i), a_), {n_, c_, pixels_});
    Value grid = b_.reshape(b_.convert(c.tensor(grid_i), a_), {n_, p_, d});
    for (int64_t k = 0; k < d; ++k) {
      coords_.push_back(b_.reshape(b_.slice(grid, {0, 0, k}, {n_, p_, k + 1}, {1, 1, 1}),
                                   {n_, p_}));
    }
  }

  Builder& b() { return b_; }
  DType acc() const { return a_; }
  int dims() const { return static_cast<int>(sizes_.size()); }
  int64_t size(int k) const { return sizes_[k]; }
  Value coord(int k) const { return coords_[k]; }
  Dims point_dims() const { return {n_, p_}; }
  Dims value_dims() const { return {n_, c_, p_}; }
  Dims flat_input_dims() const { return {n_, c_, pixels_}; }
  Value splat(double v) { return b_.splat(v, TensorType{a_, {n_, p_}}); }
  // A [N, P] weight over the channels: [N, C, P].
  Value per_channel(Value v) { return b_.broadcast_in_dim(v, value_dims(), {0, 2}); }

  // grid_sampler_unnormalize, and its derivative.
  Value unnormalize(Value coord, int64_t size) {
    Value one = splat(1);
    if (align_) {
      return b_.mul(b_.div(b_.add(coord, one), splat(2)), splat(static_cast<double>(size - 1)));
    }
    return b_.div(b_.sub(b_.mul(b_.add(coord, one), splat(static_cast<double>(size))), one),
                  splat(2));
  }
  double unnormalize_grad(int64_t size) const {
    return align_ ? static_cast<double>(size - 1) / 2 : static_cast<double>(size) / 2;
  }

  // compute_coordinates: the padding mode's fold of an unnormalized coordinate, with its
  // derivative (0 where a clip holds the coordinate at a border, as PyTorch counts it).
  std::pair<Value, Value> fold(Value coord, int64_t size) {
    Value grad = splat(1);
    if (padding_ == kReflection) {
      auto [reflected, sign] = align_ ? reflect(coord, 0, 2 * (size - 1))
                                      : reflect(coord, -1, 2 * size - 1);
      coord = reflected, grad = sign;
    }
    if (padding_ == kBorder || padding_ == kReflection) {
      Value top = splat(static_cast<double>(size - 1));
      Value inside = b_.binary("and", b_.compare(coord, splat(0), "GT"),
                               b_.compare(coord, top, "LT"));
      grad = b_.select(inside, grad, splat(0));
      coord = b_.clamp(splat(0), coord, top);
    }
    return {coord, grad};
  }

  // The value at integer pixel `at` (one [N, P] i64 per grid component) of every
  // channel: [N, C, P], 0 outside the input.
  Value tap(const std::vector<Value>& at) {
    if (empty()) return b_.zeros(TensorType{a_, value_dims()});
    auto [indices, inside] = pixel_indices(at);
    Value v = b_.transpose(gather(b_, input_, indices, {2}, {0, 2}, {0, 2}, 2, {1, c_, 1},
                                  {n_, p_, c_}),
                           {0, 2, 1});
    return b_.select(per_channel_mask(inside), v, b_.zeros(TensorType{a_, value_dims()}));
  }

  // Adds `v` ([N, C, P]) at pixel `at` of `acc` ([N, C, pixels]), dropping what falls
  // outside the input.
  Value scatter_tap(Value acc, const std::vector<Value>& at, Value v) {
    if (empty()) return acc;
    auto [indices, inside] = pixel_indices(at);
    v = b_.select(per_channel_mask(inside), v, b_.zeros(TensorType{a_, value_dims()}));
    return scatter(b_, acc, indices, b_.transpose(v, {0, 2, 1}), {2}, {0, 2}, {0, 2}, 2, "add");
  }

  Value to_index(Value coord) { return b_.convert(coord, DType::kI64); }

 private:
  // Nothing to read or write (an empty batch, no channels, no points): XLA refuses a
  // gather whose slice is wider than an empty operand.
  bool empty() const { return n_ == 0 || c_ == 0 || p_ == 0 || pixels_ == 0; }

  // reflect_coordinates(coord, twice_low, twice_high), and the sign it gives the gradient.
  std::pair<Value, Value> reflect(Value coord, int64_t twice_low, int64_t twice_high) {
    if (twice_low == twice_high) return {splat(0), splat(0)};
    double lo = static_cast<double>(twice_low) / 2;
    double span = static_cast<double>(twice_high - twice_low) / 2;
    Value shifted = b_.sub(coord, splat(lo));
    Value sign = b_.select(b_.compare(shifted, splat(0), "LT"), splat(-1), splat(1));
    Value in = b_.unary("abs", shifted);
    Value extra = b_.binary("remainder", in, splat(span));
    Value flips = b_.unary("floor", b_.div(in, splat(span)));
    Value even = b_.compare(b_.binary("remainder", flips, splat(2)), splat(0), "EQ");
    Value folded = b_.select(even, b_.add(extra, splat(lo)),
                             b_.add(b_.sub(splat(span), extra), splat(lo)));
    return {folded, b_.select(even, sign, b_.unary("negate", sign))};
  }

  // Gather/scatter indices (n, flat pixel) as [N, P, 2], and where `at` is inside.
  std::pair<Value, Value> pixel_indices(const std::vector<Value>& at) {
    TensorType it{DType::kI64, {n_, p_}};
    Value inside, flat;
    for (int k = dims() - 1; k >= 0; --k) {  // the outermost spatial dim first
      Value size = b_.splat(static_cast<double>(sizes_[k]), it);
      Value in_k = b_.binary("and", b_.compare(at[k], b_.zeros(it), "GE"),
                             b_.compare(at[k], size, "LT"));
      Value clamped = b_.clamp(b_.zeros(it), at[k], b_.sub(size, b_.splat(1, it)));
      inside = k == dims() - 1 ? in_k : b_.binary("and", inside, in_k);
      flat = k == dims() - 1 ? clamped : b_.add(b_.mul(flat, size), clamped);
    }
    Value indices = b_.concatenate({b_.reshape(b_.iota(it, 0), {n_, p_, 1}),
                                    b_.reshape(flat, {n_, p_, 1})},
                                   2);
    return {indices, inside};
  }

  Value per_channel_mask(Value inside) {
    return b_.broadcast_in_dim(inside, value_dims(), {0, 2});
  }

  Builder& b_;
  int64_t padding_;
  bool align_;
  DType a_ = DType::kF32;
  int64_t n_ = 0, c_ = 0, p_ = 0, pixels_ = 0;
  std::vector<int64_t> sizes_;  // per grid component: W, H[, D]
  Value input_;
  std::vector<Value> coords_;   // per grid component: [N, P]
};

// The cubic convolution weights of the four taps around a point at fraction t, and their
// derivatives in t (UpSample.h's get_cubic_upsample_coefficients and
// get_cubic_coefficients_grad).
std::array<Value, 4> cubic_weights(Sampler& s, Value t) {
  Builder& b = s.b();
  auto conv1 = [&](Value x) {  // ((A + 2) x - (A + 3)) x x + 1, for |x| <= 1
    Value inner = b.sub(b.mul(s.splat(kCubicA + 2), x), s.splat(kCubicA + 3));
    return b.add(b.mul(b.mul(inner, x), x), s.splat(1));
  };
  auto conv2 = [&](Value x) {  // ((A x - 5A) x + 8A) x - 4A, for 1 < |x| < 2
    Value inner = b.add(b.mul(b.sub(b.mul(s.splat(kCubicA), x), s.splat(5 * kCubicA)), x),
                        s.splat(8 * kCubicA));
    return b.sub(b.mul(inner, x), s.splat(4 * kCubicA));
  };
  Value one = s.splat(1);
  Value rest = b.sub(one, t);
  return {conv2(b.add(t, one)), conv1(t), conv1(rest), conv2(b.add(rest, one))};
}

std::array<Value, 4> cubic_weight_grads(Sampler& s, Value t) {
  Builder& b = s.b();
  const double a = kCubicA;
  auto poly = [&](Value x, double c2, double c1, double c0) {  // (c2 x + c1) x + c0
    return b.add(b.mul(b.add(b.mul(s.splat(c2), x), s.splat(c1)), x), s.splat(c0));
  };
  Value x0 = b.sub(s.splat(-1), t), x1 = b.unary("negate", t);
  Value x2 = b.sub(s.splat(1), t), x3 = b.sub(s.splat(2), t);
  return {poly(x0, -3 * a, -10 * a, -8 * a), poly(x1, -3 * (a + 2), -2 * (a + 3), 0),
          poly(x2, 3 * (a + 2), -2 * (a + 3), 0), poly(x3, 3 * a, -10 * a, 8 * a)};
}

// The 2^d pixels around a point: per grid component k, the integer pixels floor(i_k) and
// floor(i_k) + 1 (i64) and the weights' factors for each (the distance to the other one).
// Corner m takes the upper pixel of component k where bit k of m is set; PyTorch sums the
// corners in that order (nw, ne, sw, se; then the far z plane).
struct Corners {
  std::vector<std::array<Value, 2>> at, factor;
  std::vector<Value> pixel(int m) const {
    std::vector<Value> p;
    for (size_t k = 0; k < at.size(); ++k) p.push_back(at[k][(m >> k) & 1]);
    return p;
  }
  // The product of corner m's factors, skipping component `skip` (-1: none).
  Value weight(Builder& b, int m, int skip = -1) const {
    std::optional<Value> w;
    for (size_t k = 0; k < at.size(); ++k) {
      if (static_cast<int>(k) == skip) continue;
      Value f = factor[k][(m >> k) & 1];
      w = w ? b.mul(*w, f) : f;
    }
    return *w;
  }
};

Corners corners(Sampler& s, const std::vector<Value>& source) {
  Builder& b = s.b();
  Corners k;
  for (const Value& i : source) {
    Value lo = b.unary("floor", i), hi = b.add(lo, s.splat(1));
    k.at.push_back({s.to_index(lo), s.to_index(hi)});
    k.factor.push_back({b.sub(hi, i), b.sub(i, lo)});
  }
  return k;
}

// The 4x4 bicubic taps around unnormalized (ix, iy): each tap's pixel after the padding
// fold, and the fractions tx, ty.
struct CubicTaps {
  std::array<Value, 4> x, y;  // i64 pixels
  Value tx, ty;
};

CubicTaps cubic_taps(Sampler& s, Value ix, Value iy) {
  Builder& b = s.b();
  Value x0 = b.unary("floor", ix), y0 = b.unary("floor", iy);
  CubicTaps t;
  t.tx = b.sub(ix, x0);
  t.ty = b.sub(iy, y0);
  for (int k = 0; k < 4; ++k) {
    Value off = s.splat(k - 1);
    t.x[k] = s.to_index(s.fold(b.add(x0, off), s.size(0)).first);
    t.y[k] = s.to_index(s.fold(b.add(y0, off), s.size(1)).first);
  }
  return t;
}

Value result(Sampler& s, Value v, const TensorType& out) {
  return s.b().convert(s.b().reshape(v, out.dims), out.dtype);
}

// Unnormalized grid components (bicubic's taps are folded one by one instead).
std::vector<Value> unnormalized(Sampler& s) {
  std::vector<Value> out;
  for (int k = 0; k < s.dims(); ++k) out.push_back(s.unnormalize(s.coord(k), s.size(k)));
  return out;
}

base::Status check_modes(LoweringContext& c, int64_t mode, int64_t padding, int spatial) {
  if (mode < kBilinear || mode > kBicubic || padding < kZeros || padding > kReflection ||
      (mode == kBicubic && spatial != 2)) {
    return base::invalid_argument("lowering: " + c.op_name() + ": interpolation mode " +
                                  std::to_string(mode) + " with padding mode " +
                                  std::to_string(padding) + " is not lowered");
  }
  return base::Status::ok_status();
}

// grid_sampler_2d / _3d(input, grid, interpolation_mode, padding_mode, align_corners).
Result lower_grid_sampler(LoweringContext& c) {
  int64_t mode = c.int_arg(2);
  int spatial = static_cast<int>(c.tensor_type(0).rank()) - 2;
  if (auto st = check_modes(c, mode, c.int_arg(3), spatial); !st.ok()) return st;
  Sampler s(c, 0, 1, 2);
  Builder& b = s.b();
  std::optional<Value> out;
  auto accumulate = [&](Value term) { out = out ? b.add(*out, term) : term; };
  if (mode == kBicubic) {
    std::vector<Value> src = unnormalized(s);
    CubicTaps t = cubic_taps(s, src[0], src[1]);
    std::array<Value, 4> wx = cubic_weights(s, t.tx), wy = cubic_weights(s, t.ty);
    for (int j = 0; j < 4; ++j) {
      Value row = b.mul(s.tap({t.x[0], t.y[j]}), s.per_channel(wx[0]));
      for (int i = 1; i < 4; ++i) {
        row = b.add(row, b.mul(s.tap({t.x[i], t.y[j]}), s.per_channel(wx[i])));
      }
      accumulate(b.mul(row, s.per_channel(wy[j])));
    }
    return std::vector<Value>{result(s, *out, c.out_type())};
  }
  std::vector<Value> src = unnormalized(s);
  for (int k = 0; k < s.dims(); ++k) src[k] = s.fold(src[k], s.size(k)).first;
  if (mode == kNearest) {
    std::vector<Value> at;
    for (const Value& i : src) at.push_back(s.to_index(b.unary("round_nearest_even", i)));
    return std::vector<Value>{result(s, s.tap(at), c.out_type())};
  }
  Corners k = corners(s, src);
  for (int m = 0; m < (1 << s.dims()); ++m) {
    accumulate(b.mul(s.tap(k.pixel(m)), s.per_channel(k.weight(b, m))));
  }
  return std::vector<Value>{result(s, *out, c.out_type())};
}

// grid_sampler_2d / _3d_backward(grad_output, input, grid, interpolation_mode,
// padding_mode, align_corners, output_mask) -> (grad_input?, grad_grid): PyTorch's
// backward kernels (gradients scattered to the pixels the forward read; the grid's
// gradient from the weights' derivatives, times the coordinate transform's).
Result lower_grid_sampler_backward(LoweringContext& c) {
  int64_t mode = c.int_arg(3);
  int spatial = static_cast<int>(c.tensor_type(1).rank()) - 2;
  if (auto st = check_modes(c, mode, c.int_arg(4), spatial); !st.ok()) return st;
  if (c.arg(6).kind != ArgKind::kIntList || c.int_list(6).size() != 2) {
    return base::invalid_argument("lowering: " + c.op_name() +
                                  ": output_mask must be a list of 2 bools");
  }
  bool want_input = c.int_list(6)[0] != 0, want_grid = c.int_list(6)[1] != 0;
  Sampler s(c, 1, 2, 3);
  Builder& b = s.b();
  Value g = b.reshape(b.convert(c.tensor(0), s.acc()), s.value_dims());
  Value grad_input = b.zeros(TensorType{s.acc(), s.flat_input_dims()});
  std::vector<Value> grid_grad(s.dims(), s.splat(0));
  auto channel_sum = [&](Value v) { return b.reduce_sum(b.mul(v, g), {1}); };
  std::vector<Value> src = unnormalized(s);
  std::vector<Value> chain;  // d(source index)/d(grid) per component
  for (int k = 0; k < s.dims(); ++k) chain.push_back(s.splat(s.unnormalize_grad(s.size(k))));
  if (mode == kBicubic) {
    CubicTaps t = cubic_taps(s, src[0], src[1]);
    std::array<Value, 4> wx = cubic_weights(s, t.tx), wy = cubic_weights(s, t.ty);
    std::array<Value, 4> dwx = cubic_weight_grads(s, t.tx), dwy = cubic_weight_grads(s, t.ty);
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        if (want_input) {
          Value w = s.per_channel(b.mul(wx[i], wy[j]));
          grad_input = s.scatter_tap(grad_input, {t.x[i], t.y[j]}, b.mul(g, w));
        }
        if (want_grid) {
          Value v = channel_sum(s.tap({t.x[i], t.y[j]}));
          grid_grad[0] = b.sub(grid_grad[0], b.mul(v, b.mul(dwx[i], wy[j])));
          grid_grad[1] = b.sub(grid_grad[1], b.mul(v, b.mul(dwy[j], wx[i])));
        }
      }
    }
  } else {
    for (int k = 0; k < s.dims(); ++k) {
      auto [folded, fold_grad] = s.fold(src[k], s.size(k));
      src[k] = folded;
      chain[k] = b.mul(fold_grad, chain[k]);
    }
    if (mode == kNearest) {
      if (want_input) {
        std::vector<Value> at;
        for (const Value& i : src) at.push_back(s.to_index(b.unary("round_nearest_even", i)));
        grad_input = s.scatter_tap(grad_input, at, g);
      }
    } else {
      Corners k = corners(s, src);
      for (int m = 0; m < (1 << s.dims()); ++m) {
        if (want_input) {
          grad_input = s.scatter_tap(grad_input, k.pixel(m),
                                     b.mul(g, s.per_channel(k.weight(b, m))));
        }
        if (!want_grid) continue;
        // The weight's derivative along component d is minus (lower pixel) or plus
        // (upper pixel) the product of the other factors.
        Value v = channel_sum(s.tap(k.pixel(m)));
        for (int d = 0; d < s.dims(); ++d) {
          Value term = b.mul(v, k.weight(b, m, d));
          grid_grad[d] = (m >> d) & 1 ? b.add(grid_grad[d], term) : b.sub(grid_grad[d], term);
        }
      }
    }
  }
  std::vector<Value> out;
  size_t next = 0;
  const bool all_listed = c.out_types().size() == 2;
  if (want_input || all_listed) {
    const TensorType& t = c.out_type(next++);
    out.push_back(want_input ? result(s, grad_input, t) : b.zeros(t));
  }
  const TensorType& t = c.out_type(next);
  Dims pts = s.point_dims();
  std::vector<Value> parts;
  for (int k = 0; k < s.dims(); ++k) {
    parts.push_back(b.reshape(b.mul(grid_grad[k], chain[k]), {pts[0], pts[1], 1}));
  }
  out.push_back(want_grid ? result(s, b.concatenate(parts, 2), t) : b.zeros(t));
  return out;
}

}  // namespace

void register_grid_sample_lowerings() {
  register_lowering({"aten::grid_sampler_2d", "aten::grid_sampler_2d.out",
                     "aten::grid_sampler_3d", "aten::grid_sampler_3d.out"},
                    lower_grid_sampler);
  register_lowering({"aten::grid_sampler_2d_backward", "aten::grid_sampler_2d_backward.out",
                     "aten::grid_sampler_3d_backward", "aten::grid_sampler_3d_backward.out"},
                    lower_grid_sampler_backward);
}

}  // namespace torchtpu::lowering
