// grid_sampler_2d and its backward (F.grid_sample on 4-D inputs): PyTorch's sampling
// (ATen/native/GridSampler.h). A grid point (x, y) in [-1, 1] is unnormalized to the
// input's pixel space (align_corners picks pixel centers or corners), then folded by the
// padding mode (zeros: left as is; border: clipped; reflection: mirrored, then clipped).
// Bilinear mixes the four pixels around the point, nearest takes the one at the rounded
// point (half to even), bicubic mixes 4x4 pixels with the cubic convolution (A = -0.75),
// folding each tap by the padding mode. Pixels outside the input read as 0, and gradients
// for them are dropped.
//
// Pixels are read with one gather per tap from the input viewed as [N, C, H*W] and the
// grid as [N, P] points (P = Ho*Wo); the input gradient scatter-adds to the same places.
#include <array>
#include <optional>
#include <utility>
#include <vector>

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
// values of the accumulation type.
class Sampler {
 public:
  Sampler(LoweringContext& c, size_t input_i, size_t grid_i, size_t mode_i)
      : b_(c.b()), padding_(c.int_arg(mode_i + 1)), align_(c.bool_arg(mode_i + 2)) {
    const Dims& in = c.tensor_type(input_i).dims;
    const Dims& g = c.tensor_type(grid_i).dims;
    DType t = c.tensor_type(input_i).dtype;
    a_ = t == DType::kBF16 || t == DType::kF16 ? DType::kF32 : t;
    n_ = in[0], c_ = in[1], h_ = in[2], w_ = in[3], p_ = g[1] * g[2];
    input_ = b_.reshape(b_.convert(c.tensor(input_i), a_), {n_, c_, h_ * w_});
    Value grid = b_.reshape(b_.convert(c.tensor(grid_i), a_), {n_, p_, 2});
    x_ = b_.reshape(b_.slice(grid, {0, 0, 0}, {n_, p_, 1}, {1, 1, 1}), {n_, p_});
    y_ = b_.reshape(b_.slice(grid, {0, 0, 1}, {n_, p_, 2}, {1, 1, 1}), {n_, p_});
  }

  Builder& b() { return b_; }
  DType acc() const { return a_; }
  int64_t width() const { return w_; }
  int64_t height() const { return h_; }
  Value x() const { return x_; }
  Value y() const { return y_; }
  Dims point_dims() const { return {n_, p_}; }
  Dims value_dims() const { return {n_, c_, p_}; }
  Dims flat_input_dims() const { return {n_, c_, h_ * w_}; }
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

  // The value at integer pixel (ix, iy) ([N, P] i64) of every channel: [N, C, P], 0
  // outside the input.
  Value tap(Value ix, Value iy) {
    auto [indices, inside] = pixel_indices(ix, iy);
    Value v = b_.transpose(gather(b_, input_, indices, {2}, {0, 2}, {0, 2}, 2, {1, c_, 1},
                                  {n_, p_, c_}),
                           {0, 2, 1});
    return b_.select(per_channel_mask(inside), v, b_.zeros(TensorType{a_, value_dims()}));
  }

  // Adds `v` ([N, C, P]) at pixel (ix, iy) of `acc` ([N, C, H*W]), dropping what falls
  // outside the input.
  Value scatter_tap(Value acc, Value ix, Value iy, Value v) {
    auto [indices, inside] = pixel_indices(ix, iy);
    v = b_.select(per_channel_mask(inside), v, b_.zeros(TensorType{a_, value_dims()}));
    return scatter(b_, acc, indices, b_.transpose(v, {0, 2, 1}), {2}, {0, 2}, {0, 2}, 2, "add");
  }

  Value to_index(Value coord) { return b_.convert(coord, DType::kI64); }

 private:
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

  // Gather/scatter indices (n, iy * W + ix) as [N, P, 2], and where (ix, iy) is inside.
  std::pair<Value, Value> pixel_indices(Value ix, Value iy) {
    TensorType it{DType::kI64, {n_, p_}};
    auto between = [&](Value v, int64_t size) {
      return b_.binary("and", b_.compare(v, b_.zeros(it), "GE"),
                       b_.compare(v, b_.splat(static_cast<double>(size), it), "LT"));
    };
    Value inside = b_.binary("and", between(ix, w_), between(iy, h_));
    auto clamped = [&](Value v, int64_t size) {
      return b_.clamp(b_.zeros(it), v, b_.splat(static_cast<double>(size - 1), it));
    };
    Value flat = b_.add(b_.mul(clamped(iy, h_), b_.splat(static_cast<double>(w_), it)),
                        clamped(ix, w_));
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
  int64_t n_ = 0, c_ = 0, h_ = 0, w_ = 0, p_ = 0;
  Value input_, x_, y_;
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

// The bilinear corners around (ix, iy): pixel coordinates and weights.
struct Corners {
  std::array<Value, 2> x, y;   // integer pixels x0, x0 + 1 and y0, y0 + 1 (i64)
  std::array<Value, 2> dx, dy; // distances: x0 + 1 - ix, ix - x0 (the weights' factors)
};

Corners corners(Sampler& s, Value ix, Value iy) {
  Builder& b = s.b();
  Value x0 = b.unary("floor", ix), y0 = b.unary("floor", iy);
  Value x1 = b.add(x0, s.splat(1)), y1 = b.add(y0, s.splat(1));
  return {{s.to_index(x0), s.to_index(x1)},
          {s.to_index(y0), s.to_index(y1)},
          {b.sub(x1, ix), b.sub(ix, x0)},
          {b.sub(y1, iy), b.sub(iy, y0)}};
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
    t.x[k] = s.to_index(s.fold(b.add(x0, off), s.width()).first);
    t.y[k] = s.to_index(s.fold(b.add(y0, off), s.height()).first);
  }
  return t;
}

Value result(Sampler& s, Value v, const TensorType& out) {
  return s.b().convert(s.b().reshape(v, out.dims), out.dtype);
}

// grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners).
Result lower_grid_sampler_2d(LoweringContext& c) {
  int64_t mode = c.int_arg(2);
  if (mode < kBilinear || mode > kBicubic || c.int_arg(3) < kZeros || c.int_arg(3) > kReflection) {
    return base::invalid_argument("lowering: grid_sampler_2d: unknown interpolation or padding "
                                  "mode");
  }
  Sampler s(c, 0, 1, 2);
  Builder& b = s.b();
  Value out;
  if (mode == kBicubic) {
    CubicTaps t = cubic_taps(s, s.unnormalize(s.x(), s.width()),
                             s.unnormalize(s.y(), s.height()));
    std::array<Value, 4> wx = cubic_weights(s, t.tx), wy = cubic_weights(s, t.ty);
    for (int j = 0; j < 4; ++j) {
      Value row = b.mul(s.tap(t.x[0], t.y[j]), s.per_channel(wx[0]));
      for (int i = 1; i < 4; ++i) row = b.add(row, b.mul(s.tap(t.x[i], t.y[j]), s.per_channel(wx[i])));
      Value term = b.mul(row, s.per_channel(wy[j]));
      out = j == 0 ? term : b.add(out, term);
    }
    return std::vector<Value>{result(s, out, c.out_type())};
  }
  Value ix = s.fold(s.unnormalize(s.x(), s.width()), s.width()).first;
  Value iy = s.fold(s.unnormalize(s.y(), s.height()), s.height()).first;
  if (mode == kNearest) {
    out = s.tap(s.to_index(b.unary("round_nearest_even", ix)),
                s.to_index(b.unary("round_nearest_even", iy)));
    return std::vector<Value>{result(s, out, c.out_type())};
  }
  Corners k = corners(s, ix, iy);
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < 2; ++i) {
      // nw, ne, sw, se: the weight of a corner is the product of the opposite distances.
      Value term = b.mul(s.tap(k.x[i], k.y[j]), s.per_channel(b.mul(k.dx[i], k.dy[j])));
      out = i == 0 && j == 0 ? term : b.add(out, term);
    }
  }
  return std::vector<Value>{result(s, out, c.out_type())};
}

// grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode,
// align_corners, output_mask) -> (grad_input?, grad_grid): PyTorch's backward kernel
// (gradients scattered to the pixels the forward read; the grid's gradient from the
// weights' derivatives, times the coordinate transform's).
Result lower_grid_sampler_2d_backward(LoweringContext& c) {
  int64_t mode = c.int_arg(3);
  if (mode < kBilinear || mode > kBicubic || c.int_arg(4) < kZeros || c.int_arg(4) > kReflection ||
      c.arg(6).kind != ArgKind::kIntList || c.int_list(6).size() != 2) {
    return base::invalid_argument("lowering: grid_sampler_2d_backward: unknown mode or mask");
  }
  bool want_input = c.int_list(6)[0] != 0, want_grid = c.int_list(6)[1] != 0;
  Sampler s(c, 1, 2, 3);
  Builder& b = s.b();
  Value g = b.reshape(b.convert(c.tensor(0), s.acc()), s.value_dims());
  Value grad_input = b.zeros(TensorType{s.acc(), s.flat_input_dims()});
  Value gx = s.splat(0), gy = s.splat(0);
  auto channel_sum = [&](Value v) { return b.reduce_sum(b.mul(v, g), {1}); };
  if (mode == kBicubic) {
    Value ix = s.unnormalize(s.x(), s.width()), iy = s.unnormalize(s.y(), s.height());
    CubicTaps t = cubic_taps(s, ix, iy);
    std::array<Value, 4> wx = cubic_weights(s, t.tx), wy = cubic_weights(s, t.ty);
    std::array<Value, 4> dwx = cubic_weight_grads(s, t.tx), dwy = cubic_weight_grads(s, t.ty);
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        if (want_input) {
          Value w = s.per_channel(b.mul(wx[i], wy[j]));
          grad_input = s.scatter_tap(grad_input, t.x[i], t.y[j], b.mul(g, w));
        }
        if (want_grid) {
          Value v = channel_sum(s.tap(t.x[i], t.y[j]));
          gx = b.sub(gx, b.mul(v, b.mul(dwx[i], wy[j])));
          gy = b.sub(gy, b.mul(v, b.mul(dwy[j], wx[i])));
        }
      }
    }
    gx = b.mul(gx, s.splat(s.unnormalize_grad(s.width())));
    gy = b.mul(gy, s.splat(s.unnormalize_grad(s.height())));
  } else {
    auto [ix, fold_x] = s.fold(s.unnormalize(s.x(), s.width()), s.width());
    auto [iy, fold_y] = s.fold(s.unnormalize(s.y(), s.height()), s.height());
    if (mode == kNearest) {
      if (want_input) {
        grad_input = s.scatter_tap(grad_input, s.to_index(b.unary("round_nearest_even", ix)),
                                   s.to_index(b.unary("round_nearest_even", iy)), g);
      }
    } else {
      Corners k = corners(s, ix, iy);
      for (int j = 0; j < 2; ++j) {
        for (int i = 0; i < 2; ++i) {
          if (want_input) {
            Value w = s.per_channel(b.mul(k.dx[i], k.dy[j]));
            grad_input = s.scatter_tap(grad_input, k.x[i], k.y[j], b.mul(g, w));
          }
          if (want_grid) {
            // d(weight)/dx is -dy for the left corners and +dy for the right ones; d/dy
            // likewise with dx.
            Value v = channel_sum(s.tap(k.x[i], k.y[j]));
            Value by_x = b.mul(v, k.dy[j]), by_y = b.mul(v, k.dx[i]);
            gx = i == 0 ? b.sub(gx, by_x) : b.add(gx, by_x);
            gy = j == 0 ? b.sub(gy, by_y) : b.add(gy, by_y);
          }
        }
      }
      gx = b.mul(gx, b.mul(fold_x, s.splat(s.unnormalize_grad(s.width()))));
      gy = b.mul(gy, b.mul(fold_y, s.splat(s.unnormalize_grad(s.height()))));
    }
  }
  std::vector<Value> out;
  size_t k = 0;
  const bool all_listed = c.out_types().size() == 2;
  if (want_input || all_listed) {
    const TensorType& t = c.out_type(k++);
    out.push_back(want_input ? result(s, grad_input, t) : b.zeros(t));
  }
  const TensorType& t = c.out_type(k);
  Dims pts = s.point_dims();
  Value grid_grad = b.concatenate({b.reshape(gx, {pts[0], pts[1], 1}),
                                   b.reshape(gy, {pts[0], pts[1], 1})},
                                  2);
  out.push_back(want_grid ? result(s, grid_grad, t) : b.zeros(t));
  return out;
}

}  // namespace

void register_grid_sample_lowerings() {
  register_lowering({"aten::grid_sampler_2d", "aten::grid_sampler_2d.out"},
                    lower_grid_sampler_2d);
  register_lowering({"aten::grid_sampler_2d_backward", "aten::grid_sampler_2d_backward.out"},
                    lower_grid_sampler_2d_backward);
}

}  // namespace torchtpu::lowering
