// Resampling by compile-time positions: the interpolation lowerings
// upsample_{nearest,_nearest_exact}{1,2,3}d, upsample_linear1d, upsample_bilinear2d,
// upsample_trilinear3d, upsample_bicubic2d and their antialiased forms
// _upsample_{bilinear,bicubic}2d_aa (what F.interpolate and nn.Upsample call), and
// reflection/replication padding (F.pad modes "reflect" and "replicate").
//
// Every mode is separable: along each spatial dim, output position o reads a few input
// positions with fixed weights. Sizes are compile-time, so the positions and weights are
// computed here with ATen's formulas (UpSample.h, in the type its CPU kernels use) and
// emitted as constants; the device does constant-index gathers along each dim and a
// weighted sum. The last spatial dim goes first, the order of the CPU kernels' sums.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Lowered = base::StatusOr<std::vector<Value>>;

enum class Mode { kNearest, kNearestExact, kLinear, kCubic, kLinearAA, kCubicAA };

// One output position: input positions and their weights (computed in the op's
// accumulation type, float or double, and held exactly as doubles). Antialiased modes
// give positions different numbers of taps.
struct Taps {
  std::vector<int64_t> index;
  std::vector<double> weight;
};

// ATen's formulas below are templates over that type T, as in UpSample.h: float for
// float and half inputs, double for double ones.

// ATen's compute_scales_value: 1/scale when a positive scale was given, else in/out.
template <typename T>
T scale_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale && *scale > 0 ? static_cast<T>(1.0 / *scale)
                             : static_cast<T>(in) / static_cast<T>(out);
}

// ATen's area_pixel_compute_scale.
template <typename T>
T area_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) {
    return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  }
  return scale_value<T>(scale, in, out);
}

// ATen's area_pixel_compute_source_index.
template <typename T>
T source_index(T scale, int64_t dst, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<T>(dst);
  T src = scale * (static_cast<T>(dst) + T(0.5)) - T(0.5);
  return (!cubic && src < 0) ? T(0) : src;
}

template <typename T>
T cubic1(T x, T a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
template <typename T>
T cubic2(T x, T a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

// The antialiasing filters (UpSampleKernel.cpp's aa_filter): a triangle for bilinear, Keys'
// cubic with a = -0.5 for bicubic.
template <typename T>
T aa_filter(bool cubic, T x) {
  if (x < 0) x = -x;
  if (!cubic) return x < 1 ? T(1) - x : T(0);
  const T a = T(-0.5);
  if (x < 1) return cubic1<T>(x, a);
  if (x < 2) return cubic2<T>(x, a);
  return T(0);
}

// Antialiased taps (_compute_indices_min_size_weights_aa): output o reads the inputs within
// the filter's support around its center, the support widened by the scale when
// downsampling, with normalized weights. The double literals of ATen's expressions promote
// as they do there.
template <typename T>
std::vector<Taps> aa_taps(bool cubic, int64_t in, int64_t out, bool align_corners,
                          std::optional<double> scale) {
  const T s = area_scale<T>(in, out, align_corners, scale);
  const int interp = cubic ? 4 : 2;
  const T support = s >= 1.0 ? static_cast<T>((interp * 0.5) * s) : static_cast<T>(interp * 0.5);
  const int64_t max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const T invscale = s >= 1.0 ? static_cast<T>(1.0 / s) : T(1);
  std::vector<Taps> taps(out);
  for (int64_t o = 0; o < out; ++o) {
    const T center = static_cast<T>(s * (o + 0.5));
    int64_t xmin = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    int64_t xsize = std::min(static_cast<int64_t>(center + support + 0.5), in) - xmin;
    xsize = std::clamp(xsize, int64_t{0}, max_taps);
    std::vector<T> w;
    T total = 0;
    for (int64_t j = 0; j < xsize; ++j) {
      w.push_back(aa_filter<T>(cubic, static_cast<T>((j + xmin - center + 0.5) * invscale)));
      total += w.back();
    }
    for (int64_t j = 0; j < xsize; ++j) {
      taps[o].index.push_back(xmin + j);
      taps[o].weight.push_back(static_cast<double>(total != 0 ? w[j] / total : w[j]));
    }
  }
  return taps;
}

// Taps of every output position along one dim, in output order. `nearest_shortcut`: ATen's
// nearest_idx, which copies an unchanged size and halves the index of a doubled one
// whatever the scale says (its 2-d forward and every nearest backward use it; the 1-d and
// 3-d forwards and CUDA floor o / scale).
template <typename T>
std::vector<Taps> taps_in(Mode mode, int64_t in, int64_t out, bool align_corners,
                          std::optional<double> scale, bool nearest_shortcut) {
  if (mode == Mode::kLinearAA || mode == Mode::kCubicAA) {
    return aa_taps<T>(mode == Mode::kCubicAA, in, out, align_corners, scale);
  }
  std::vector<Taps> taps(out);
  for (int64_t o = 0; o < out; ++o) {
    Taps& t = taps[o];
    if (mode == Mode::kNearest) {
      // Nearest modes use float scales for every dtype, as ATen's nearest kernels do.
      float src = static_cast<float>(o) * scale_value<float>(scale, in, out);
      int64_t i = nearest_shortcut && out == in       ? o
                  : nearest_shortcut && out == 2 * in ? o >> 1
                  : std::min(static_cast<int64_t>(std::floor(src)), in - 1);
      t = {{i}, {1.0}};
    } else if (mode == Mode::kNearestExact) {
      float s = scale_value<float>(scale, in, out);
      float src = static_cast<float>((o + 0.5) * s);
      int64_t i = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
      t = {{i}, {1.0}};
    } else if (mode == Mode::kLinear) {
      T real = source_index<T>(area_scale<T>(in, out, align_corners, scale), o, align_corners,
                               false);
      int64_t i0 = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
      T l1 = std::min(std::max(real - static_cast<T>(i0), T(0)), T(1));
      int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
      t = {{i0, i1}, {static_cast<double>(T(1) - l1), static_cast<double>(l1)}};
    } else {
      T real = source_index<T>(area_scale<T>(in, out, align_corners, scale), o, align_corners,
                               true);
      T fl = std::floor(real);
      T x = real - fl;
      const T a = T(-0.75);
      T w[4] = {cubic2<T>(x + 1, a), cubic1<T>(x, a), cubic1<T>(1 - x, a), cubic2<T>(2 - x, a)};
      for (int k = 0; k < 4; ++k) {
        int64_t i = std::clamp<int64_t>(static_cast<int64_t>(fl) - 1 + k, 0, in - 1);
        t.index.push_back(i);
        t.weight.push_back(static_cast<double>(w[k]));
      }
    }
  }
  return taps;
}

std::vector<Taps> taps_for(Mode mode, DType t, int64_t in, int64_t out, bool align_corners,
                           std::optional<double> scale, bool nearest_shortcut) {
  return t == DType::kF64
             ? taps_in<double>(mode, in, out, align_corners, scale, nearest_shortcut)
             : taps_in<float>(mode, in, out, align_corners, scale, nearest_shortcut);
}

// Weights as a dense literal; each is exactly a value of the constant's type.
std::string weight_dense(const std::vector<double>& v) {
  std::string s = "[";
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%.17e", v[i]);
    s += (i ? ", " : "") + std::string(buf);
  }
  return s + "]";
}

// The weights of tap k of every position (0 where a position has fewer taps), as a
// constant of dtype `t` broadcast along `dim` of `like`; nullopt when every weight is 1.
std::optional<Value> tap_weights(Builder& b, const std::vector<Taps>& taps, size_t k,
                                 const Value& like, int64_t dim) {
  std::vector<double> weight;
  bool all_one = true;
  for (const Taps& t : taps) {
    weight.push_back(k < t.weight.size() ? t.weight[k] : 0.0);
    all_one &= weight.back() == 1.0;
  }
  if (all_one) return std::nullopt;
  TensorType wt{like.dtype(), {static_cast<int64_t>(weight.size())}};
  Value w = b.op("stablehlo.constant", {}, wt,
                 "value = dense<" + weight_dense(weight) + "> : " + wt.str());
  return b.broadcast_in_dim(w, like.dims(), {dim});
}

// A constant [k, 1] i64 tensor of positions (gather/scatter indices).
Value index_constant(Builder& b, const std::vector<int64_t>& index) {
  return b.constant_i64s(index, {static_cast<int64_t>(index.size()), 1});
}

// x's entries at input positions `index` along `dim` (a constant-index gather).
Value take(Builder& b, Value x, int64_t dim, const std::vector<int64_t>& index) {
  int64_t k = static_cast<int64_t>(index.size());
  Value idx = index_constant(b, index);
  Dims out = x.dims(), offset, slice = x.dims();
  out[dim] = k;
  slice[dim] = 1;
  for (int64_t d = 0; d < x.rank(); ++d) if (d != dim) offset.push_back(d);
  std::string nums = "#stablehlo.gather<offset_dims = " + i64_list(offset) +
                     ", collapsed_slice_dims = [" + std::to_string(dim) +
                     "], start_index_map = [" + std::to_string(dim) + "], index_vector_dim = 1>";
  return b.op("stablehlo.gather", {x, idx}, TensorType{x.dtype(), out},
              "dimension_numbers = " + nums + ", slice_sizes = " + i64_array(slice) +
                  ", indices_are_sorted = false");
}

// The transpose of take(): `g`'s entries along `dim` added into `in_size` positions.
Value put_add(Builder& b, Value g, int64_t dim, const std::vector<int64_t>& index,
              int64_t in_size) {
  Value idx = index_constant(b, index);
  Dims out = g.dims(), window;
  out[dim] = in_size;
  for (int64_t d = 0; d < g.rank(); ++d) if (d != dim) window.push_back(d);
  TensorType scalar{g.dtype(), {}};
  return b.op_with_region(
      "stablehlo.scatter", {b.zeros(TensorType{g.dtype(), out}), idx, g},
      {TensorType{g.dtype(), out}}, {scalar, scalar},
      [](Builder& rb, const std::vector<Value>& a) {
        return std::vector<Value>{rb.add(a[0], a[1])};
      },
      "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " + i64_list(window) +
          ", inserted_window_dims = [" + std::to_string(dim) +
          "], scatter_dims_to_operand_dims = [" + std::to_string(dim) +
          "], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false")[0];
}

// The most taps of any position.
size_t max_taps(const std::vector<Taps>& taps) {
  size_t n = 0;
  for (const Taps& t : taps) n = std::max(n, t.index.size());
  return n;
}

// Tap k's input position of every output position (0 where a position has fewer taps).
std::vector<int64_t> tap_index(const std::vector<Taps>& taps, size_t k) {
  std::vector<int64_t> index;
  for (const Taps& t : taps) index.push_back(k < t.index.size() ? t.index[k] : 0);
  return index;
}

// `v` (along `dim`, one entry per position) where the positions have a tap k, 0 elsewhere:
// a missing tap adds nothing, not 0 times an input that may be inf or NaN (PyTorch's
// kernels sum a position's own taps only).
Value only_present(Builder& b, const std::vector<Taps>& taps, size_t k, Value v, int64_t dim) {
  std::vector<int64_t> present;
  bool all = true;
  for (const Taps& t : taps) {
    present.push_back(k < t.index.size());
    all &= present.back() != 0;
  }
  if (all) return v;
  Value mask = b.compare(b.constant_i64s(present, {static_cast<int64_t>(present.size())}),
                         b.zeros(TensorType{DType::kI64, {static_cast<int64_t>(present.size())}}),
                         "NE");
  return b.select(b.broadcast_in_dim(mask, v.dims(), {dim}), v, b.zeros(v.type));
}

// The gradient of resample(): each output's gradient flows back to its taps, weighted.
Value resample_backward(Builder& b, Value g, int64_t dim, const std::vector<Taps>& taps,
                        int64_t in_size) {
  Value sum;
  for (size_t k = 0; k < max_taps(taps); ++k) {
    Value w_g = g;
    if (auto w = tap_weights(b, taps, k, g, dim)) w_g = b.mul(g, *w);
    Value part = put_add(b, only_present(b, taps, k, w_g, dim), dim, tap_index(taps, k),
                         in_size);
    sum = k == 0 ? part : b.add(sum, part);
  }
  return sum;
}

// Resamples `x` (float32 or float64) along `dim` to `taps.size()` positions.
Value resample(Builder& b, Value x, int64_t dim, const std::vector<Taps>& taps) {
  Value sum;
  for (size_t k = 0; k < max_taps(taps); ++k) {
    Value g = take(b, x, dim, tap_index(taps, k));
    if (auto w = tap_weights(b, taps, k, g, dim)) g = b.mul(g, *w);
    g = only_present(b, taps, k, g, dim);
    sum = k == 0 ? g : b.add(sum, g);
  }
  return sum;
}

// The scale factor argument `index` of an upsample op, when given (None otherwise).
std::optional<double> scale_arg(const LoweringContext& c, size_t index) {
  if (c.is_none(index) || c.arg(index).kind != ArgKind::kDouble) return std::nullopt;
  return c.double_arg(index);
}

// upsample_*(self, output_size, [align_corners,] scales...) and
// upsample_*_backward(grad_output, output_size, input_size, [align_corners,] scales...):
// the backward has one more size argument before align_corners (linear modes only) and
// the scales, and sends each output's gradient back to its taps. The forward resamples
// the last spatial dim first, the backward the first.
LoweringFn upsample(Mode mode, bool backward) {
  return [mode, backward](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value x = c.tensor(0);
    const Dims result = c.out_type().dims;
    const Dims in = backward ? result : x.dims();   // sizes of the forward's input
    const Dims out = backward ? x.dims() : result;  // and of its output
    int64_t spatial = x.rank() - 2;
    bool aa = mode == Mode::kLinearAA || mode == Mode::kCubicAA;
    if (aa && !base::is_floating(x.dtype())) {
      // PyTorch's uint8 images take an int16 fixed-point kernel of their own.
      return base::unimplemented("lowering: " + c.op_name() + " of " +
                                 base::dtype_name(x.dtype()) + " is not lowered");
    }
    bool linear = mode == Mode::kLinear || mode == Mode::kCubic || aa;
    size_t align_arg = backward ? 3 : 2;
    bool align_corners = linear && c.bool_arg(align_arg);
    size_t first_scale = linear ? align_arg + 1 : align_arg;
    DType t = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
    Value y = b.convert(x, t);
    for (int64_t k = 0; k < spatial; ++k) {
      int64_t s = backward ? k : spatial - 1 - k;
      int64_t dim = 2 + s;
      if (in[dim] == 0 || out[dim] == 0) continue;  // empty result: shape only
      // PyTorch's antialiased forward skips a dim whose size does not change (its taps
      // there, weights 1 and 0, would still turn an inf into NaN); its linear kernels,
      // forward and backward, copy such a dim whatever the scale.
      if (in[dim] == out[dim] && ((aa && !backward) || mode == Mode::kLinear)) continue;
      std::optional<double> scale = scale_arg(c, first_scale + static_cast<size_t>(s));
      std::vector<Taps> taps = taps_for(mode, t, in[dim], out[dim], align_corners, scale,
                                        /*nearest_shortcut=*/backward || spatial == 2);
      y = backward ? resample_backward(b, y, dim, taps, in[dim]) : resample(b, y, dim, taps);
      // PyTorch's CPU kernel for uint8 images is separable with a uint8 result per pass
      // (rounded to nearest and clamped), not one rounding at the end.
      if (!backward && c.out_type().dtype == DType::kU8 && mode != Mode::kNearest &&
          mode != Mode::kNearestExact) {
        y = b.clamp(b.splat(0, y.type), b.unary("round_nearest_afz", y), b.splat(255, y.type));
      }
    }
    if (y.dims() != result) return std::vector<Value>{b.zeros(c.out_type())};
    return std::vector<Value>{b.convert(y, c.out_type().dtype)};
  };
}

// reflection_pad{1,2,3}d / replication_pad{1,2,3}d(self, padding): padding lists
// (before, after) pairs from the last dim backwards; negative amounts crop.
std::vector<Taps> pad_taps(bool reflect, int64_t in, int64_t out, int64_t before) {
  std::vector<Taps> taps(out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i = o - before;
    if (reflect) {
      // PyTorch requires pad < size, so one reflection lands inside.
      if (i < 0) i = -i;
      if (i >= in) i = 2 * (in - 1) - i;
    } else {
      i = std::clamp<int64_t>(i, 0, in - 1);
    }
    taps[o] = {{i}, {1.0}};
  }
  return taps;
}

LoweringFn pad(bool reflect) {
  return [reflect](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value y = c.tensor(0);
    const Dims& padding = c.int_list(1);
    const Dims& out_dims = c.out_type().dims;
    for (size_t p = 0; p + 1 < padding.size(); p += 2) {
      int64_t dim = y.rank() - 1 - static_cast<int64_t>(p / 2);
      int64_t in = y.dims()[dim], out = out_dims[dim];
      if (in == 0 || out == 0) continue;
      y = resample(b, y, dim, pad_taps(reflect, in, out, padding[p]));
    }
    if (y.dims() != out_dims) return std::vector<Value>{b.zeros(c.out_type())};
    return std::vector<Value>{y};
  };
}

// *_pad{1,2,3}d_backward(grad_output, self, padding): padded positions add into the
// positions they copied.
LoweringFn pad_backward(bool reflect) {
  return [reflect](LoweringContext& c) -> Lowered {
    Builder& b = c.b();
    Value g = c.tensor(0);
    const Dims& padding = c.int_list(2);
    const Dims& in_dims = c.out_type().dims;
    DType t = base::is_floating(g.dtype()) ? (g.dtype() == DType::kF64 ? DType::kF64 : DType::kF32)
                                           : g.dtype();
    Value y = b.convert(g, t);
    for (size_t p = 0; p + 1 < padding.size(); p += 2) {
      int64_t dim = g.rank() - 1 - static_cast<int64_t>(p / 2);
      int64_t in = in_dims[dim], out = g.dims()[dim];
      if (in == 0 || out == 0) continue;
      y = resample_backward(b, y, dim, pad_taps(reflect, in, out, padding[p]), in);
    }
    if (y.dims() != in_dims) return std::vector<Value>{b.zeros(c.out_type())};
    return std::vector<Value>{b.convert(y, c.out_type().dtype)};
  };
}

}  // namespace

void register_interpolate_lowerings() {
  for (const char* d : {"1d", "2d", "3d"}) {
    std::string r = std::string("aten::reflection_pad") + d;
    std::string p = std::string("aten::replication_pad") + d;
    register_lowering({r.c_str(), (r + ".out").c_str()}, pad(/*reflect=*/true));
    register_lowering({p.c_str(), (p + ".out").c_str()}, pad(/*reflect=*/false));
    register_lowering({(r + "_backward").c_str(), (r + "_backward.grad_input").c_str()},
                      pad_backward(/*reflect=*/true));
    register_lowering({(p + "_backward").c_str(), (p + "_backward.grad_input").c_str()},
                      pad_backward(/*reflect=*/false));
  }
  for (const char* d : {"1d", "2d", "3d"}) {
    std::string n = std::string("aten::upsample_nearest") + d;
    std::string e = std::string("aten::_upsample_nearest_exact") + d;
    register_lowering({n.c_str(), (n + ".out").c_str()},
                      upsample(Mode::kNearest, /*backward=*/false));
    register_lowering({e.c_str(), (e + ".out").c_str()},
                      upsample(Mode::kNearestExact, /*backward=*/false));
    register_lowering({(n + "_backward").c_str(), (n + "_backward.grad_input").c_str()},
                      upsample(Mode::kNearest, /*backward=*/true));
    register_lowering({(e + "_backward").c_str(), (e + "_backward.grad_input").c_str()},
                      upsample(Mode::kNearestExact, /*backward=*/true));
  }
  for (const char* n : {"aten::upsample_linear1d", "aten::upsample_bilinear2d",
                        "aten::upsample_trilinear3d"}) {
    std::string bw = std::string(n) + "_backward";
    register_lowering({bw.c_str(), (bw + ".grad_input").c_str()},
                      upsample(Mode::kLinear, /*backward=*/true));
  }
  register_lowering({"aten::upsample_bicubic2d_backward",
                     "aten::upsample_bicubic2d_backward.grad_input"},
                    upsample(Mode::kCubic, /*backward=*/true));
  register_lowering({"aten::upsample_linear1d", "aten::upsample_linear1d.out",
                     "aten::upsample_bilinear2d", "aten::upsample_bilinear2d.out",
                     "aten::upsample_trilinear3d", "aten::upsample_trilinear3d.out"},
                    upsample(Mode::kLinear, /*backward=*/false));
  register_lowering({"aten::upsample_bicubic2d", "aten::upsample_bicubic2d.out"},
                    upsample(Mode::kCubic, /*backward=*/false));
  for (auto [n, mode] : {std::pair{"aten::_upsample_bilinear2d_aa", Mode::kLinearAA},
                         std::pair{"aten::_upsample_bicubic2d_aa", Mode::kCubicAA}}) {
    std::string f = n, bw = f + "_backward";
    register_lowering({f.c_str(), (f + ".out").c_str()}, upsample(mode, /*backward=*/false));
    register_lowering({bw.c_str(), (bw + ".grad_input").c_str()},
                      upsample(mode, /*backward=*/true));
  }
}

}  // namespace torchtpu::lowering
