// fractional_max_pool2d / fractional_max_pool3d and their backward: PyTorch's CPU kernels
// (FractionalMaxPool2d.cpp, FractionalMaxPool3d.cpp). Every (sample, channel) plane draws
// its pooling grid from its own random samples (one u in [0, 1) per spatial dim): along a
// dim of input size I, output size O and pool size K, window o starts at
// trunc((o + u) * a) - trunc(u * a) with a = (I - K) / (O - 1) in the input's dtype, and the
// last window at I - K. The output is each window's maximum (the first of equal ones; a NaN
// replaces whatever came before, as the CPU's `val > max || isnan(val)`) with its flat
// index in the plane; the backward adds each gradient at that index.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// An input viewed as [N, C, plane] with its spatial sizes (a missing batch dim is 1).
struct Planes {
  int64_t n = 1, ch = 1, plane = 1;
  Dims spatial;
};

Planes planes_of(const TensorType& t, int64_t d) {
  Planes p;
  bool batched = t.rank() == d + 2;
  p.n = batched ? t.dims[0] : 1;
  p.ch = t.dims[batched ? 1 : 0];
  p.spatial.assign(t.dims.end() - d, t.dims.end());
  for (int64_t s : p.spatial) p.plane *= s;
  return p;
}

// (n, c, index) gather/scatter coordinates for [N, C, P] indices into [N, C, plane].
Value plane_coords(Builder& b, Value index) {
  const Dims& dims = index.dims();
  TensorType it{DType::kI64, dims};
  Dims with_one{dims[0], dims[1], dims[2], 1};
  return b.concatenate({b.reshape(b.iota(it, 0), with_one), b.reshape(b.iota(it, 1), with_one),
                        b.reshape(index, with_one)},
                       3);
}

// The start of every window along spatial dim s, as [N, C, O] i64, from the plane's sample
// u ([N, C], the input's dtype): the CPU's arithmetic in scalar_t.
Value window_starts(Builder& b, Value u, int64_t in, int64_t out, int64_t pool, DType t) {
  const Dims& nc = u.dims();
  Dims nco{nc[0], nc[1], out};
  TensorType it{DType::kI64, nco};
  Value last = b.splat(static_cast<double>(in - pool), it);
  if (out <= 1) return last;
  // alpha in scalar_t: float division for float32 and the 16-bit types (which round it).
  double alpha = t == DType::kF64 ? static_cast<double>(in - pool) / static_cast<double>(out - 1)
                                  : static_cast<double>(static_cast<float>(in - pool) /
                                                        static_cast<float>(out - 1));
  DType ct = opmath(t);
  auto r = [&](Value v) { return round_to(b, v, t); };
  Value a = r(b.splat(alpha, TensorType{ct, nco}));
  Value uo = b.broadcast_in_dim(b.convert(u, ct), nco, {0, 1});
  auto trunc_i32 = [&](Value v) { return b.convert(b.convert(v, DType::kI32), DType::kI64); };
  Value o = r(b.convert(b.iota(it, 2), ct));
  Value start = b.sub(trunc_i32(r(b.mul(r(b.add(o, uo)), a))), trunc_i32(r(b.mul(uo, a))));
  Value is_last = b.compare(b.iota(it, 2), b.splat(static_cast<double>(out - 1), it), "EQ");
  return b.select(is_last, last, start);
}

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples) ->
// (output, indices).
Result lower_fractional_max_pool(LoweringContext& c) {
  Builder& b = c.b();
  const Dims& kernel = c.int_list(1);
  const Dims& out_sizes = c.int_list(2);
  const int64_t d = static_cast<int64_t>(kernel.size());
  const TensorType& st = c.tensor_type(0);
  DType t = st.dtype;
  if (!base::is_floating(t) || out_sizes.size() != kernel.size()) {
    return base::unimplemented("lowering: " + c.op_name() + " of " + base::dtype_name(t) +
                               " is not lowered");
  }
  Planes pl = planes_of(st, d);
  int64_t points = 1;
  for (int64_t o : out_sizes) points *= o;
  if (pl.n * pl.ch * points == 0 || pl.plane == 0) {
    return std::vector<Value>{b.zeros(c.out_type(0)), b.zeros(c.out_type(1))};
  }
  Value x = b.reshape(c.tensor(0), {pl.n, pl.ch, pl.plane});
  Value samples = b.reshape(b.convert(c.tensor(3), t), {pl.n, pl.ch, d});
  Dims grid{pl.n, pl.ch};
  for (int64_t o : out_sizes) grid.push_back(o);
  TensorType grid_i{DType::kI64, grid};
  // Per spatial dim s (outermost first): the windows' starts broadcast over the output
  // grid, times the dim's stride in the plane. 2-D draws (w, h) per plane, 3-D (t, h, w).
  std::vector<Value> starts;
  std::vector<int64_t> strides(d, 1);
  for (int64_t s = d - 2; s >= 0; --s) strides[s] = strides[s + 1] * pl.spatial[s + 1];
  for (int64_t s = 0; s < d; ++s) {
    int64_t k = d == 2 ? 1 - s : s;
    Value u = b.reshape(b.slice(samples, {0, 0, k}, {pl.n, pl.ch, k + 1}, {1, 1, 1}),
                        {pl.n, pl.ch});
    Value w = window_starts(b, u, pl.spatial[s], out_sizes[s], kernel[s], t);
    starts.push_back(b.broadcast_in_dim(w, grid, {0, 1, 2 + s}));
  }
  Dims flat{pl.n, pl.ch, points};
  Value best = b.broadcast_to(b.min_value(t), flat);
  Value best_index;
  int64_t windows = 1;
  for (int64_t k : kernel) windows *= k;
  for (int64_t w = 0; w < windows; ++w) {
    // Offsets in the CPU's loop order: the outermost spatial dim slowest.
    Value index = b.zeros(grid_i);
    for (int64_t s = 0, rest = w; s < d; ++s) {
      int64_t inner = 1;
      for (int64_t r = s + 1; r < d; ++r) inner *= kernel[r];
      int64_t off = rest / inner;
      rest %= inner;
      Value at = b.add(starts[s], b.splat(static_cast<double>(off), grid_i));
      index = b.add(index, b.mul(at, b.splat(static_cast<double>(strides[s]), grid_i)));
    }
    index = b.reshape(index, flat);
    Value v = gather(b, x, plane_coords(b, index), {}, {0, 1, 2}, {0, 1, 2}, 3, {1, 1, 1}, flat);
    if (w == 0) best_index = index;
    Value take = b.binary("or", b.compare(v, best, "GT"), b.compare(v, v, "NE"));
    best = b.select(take, v, best);
    best_index = b.select(take, index, best_index);
  }
  return std::vector<Value>{b.reshape(best, c.out_type(0).dims),
                            b.convert(b.reshape(best_index, c.out_type(1).dims),
                                      c.out_type(1).dtype)};
}

// fractional_max_pool{2,3}d_backward(grad_output, self, kernel_size, output_size, indices):
// each gradient added at its window's maximum.
Result lower_fractional_max_pool_backward(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  const int64_t d = static_cast<int64_t>(c.int_list(2).size());
  Planes pl = planes_of(c.tensor_type(1), d);
  int64_t points = c.tensor_type(0).num_elements() / std::max<int64_t>(pl.n * pl.ch, 1);
  if (pl.n * pl.ch * points == 0 || pl.plane == 0) return std::vector<Value>{b.zeros(out)};
  Dims flat{pl.n, pl.ch, points};
  Value g = b.reshape(c.tensor(0), flat);
  Value index = b.reshape(b.convert(c.tensor(4), DType::kI64), flat);
  Value grad = scatter(b, b.zeros(TensorType{g.dtype(), {pl.n, pl.ch, pl.plane}}),
                       plane_coords(b, index), g, {}, {0, 1, 2}, {0, 1, 2}, 3, "add");
  return std::vector<Value>{b.convert(b.reshape(grad, out.dims), out.dtype)};
}

}  // namespace

void register_fractional_pool_lowerings() {
  register_lowering({"aten::fractional_max_pool2d", "aten::fractional_max_pool2d.output",
                     "aten::fractional_max_pool3d", "aten::fractional_max_pool3d.output"},
                    lower_fractional_max_pool);
  register_lowering({"aten::fractional_max_pool2d_backward",
                     "aten::fractional_max_pool2d_backward.grad_input",
                     "aten::fractional_max_pool3d_backward",
                     "aten::fractional_max_pool3d_backward.grad_input"},
                    lower_fractional_max_pool_backward);
}

}  // namespace torchtpu::lowering
