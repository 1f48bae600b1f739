// Shape lowerings: ops that rearrange or pad data into a new tensor (cat, flip, roll,
// constant_pad_nd, repeat, tril/triu, diag_embed, diagonal_copy/scatter, slice/select_scatter).
//
// Pure views (view, permute, expand, slice, ...) are not here: the aten layer keeps them
// as metadata over a storage and only materializes them through these or copy programs.
#include <algorithm>
#include <string>

#include "lowering/elementwise_util.h"
#include "lowering/families.h"
#include "lowering/gather_scatter.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

// A tensor of `type` filled with `v`. Broadcasting a 0-d constant works for zero-size
// shapes too, where a splat literal of an empty type would not.
Value filled(Builder& b, double v, const TensorType& type) {
  return b.broadcast_in_dim(b.constant(v, type.dtype), type.dims, {});
}

Dims wrap_dims(const Dims& dims, int64_t rank) {
  Dims out;
  for (int64_t d : dims) out.push_back(wrap_dim(d, rank));
  return out;
}

// cat(Tensor[] tensors, int dim): inputs of mixed dtypes are converted to the output's
// (promoted) dtype. Legacy 1-D empty tensors (shape [0]) are skipped whatever the rank of
// the others, as PyTorch does; other zero-size inputs add nothing and are dropped too.
Result lower_cat(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  int64_t dim = wrap_dim(c.int_arg(1), out.rank());
  std::vector<Value> parts;
  for (const Value& v : c.tensor_list(0)) {
    if (v.type.num_elements() == 0) continue;
    parts.push_back(b.convert(v, out.dtype));
  }
  if (parts.empty()) return std::vector<Value>{filled(b, 0, out)};
  return std::vector<Value>{b.concatenate(parts, dim)};
}

// stack(Tensor[] tensors, int dim=0): each item with a unit dimension at `dim`, joined
// there in one program. PyTorch's composite kernel unsqueezes every item (a view) and cats
// the views, so on tpu each view is materialized by its own program: clip_grad_norm_
// stacks one 0-dim norm per parameter.
Result lower_stack(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.num_elements() == 0) return std::vector<Value>{filled(b, 0, out)};
  int64_t dim = wrap_dim(c.int_arg(1), out.rank());
  Dims item = out.dims;
  item[dim] = 1;
  std::vector<Value> parts;
  for (const Value& v : c.tensor_list(0)) parts.push_back(b.reshape(b.convert(v, out.dtype), item));
  return std::vector<Value>{b.concatenate(parts, dim)};
}

// flip(self, int[] dims)
Result lower_flip(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  Dims dims = wrap_dims(c.int_list(1), x.rank());
  if (dims.empty() || x.rank() == 0) return std::vector<Value>{x};
  return std::vector<Value>{b.op("stablehlo.reverse", {x}, x.type, "dimensions = " + i64_array(dims))};
}

// Rotates `x` along `dim` by `shift` (positive moves elements toward higher indices).
Value roll_one(Builder& b, Value x, int64_t shift, int64_t dim) {
  int64_t n = x.dims()[dim];
  if (n == 0) return x;
  int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  Dims start(x.rank(), 0), limit = x.dims(), strides(x.rank(), 1);
  Dims tail_start = start;
  tail_start[dim] = n - s;
  Dims head_limit = limit;
  head_limit[dim] = n - s;
  Value tail = b.slice(x, tail_start, limit, strides);
  Value head = b.slice(x, start, head_limit, strides);
  return b.concatenate({tail, head}, dim);
}

// roll(self, int[] shifts, int[] dims=[]): with no dims the tensor rolls as if flattened.
Result lower_roll(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  const Dims& shifts = c.int_list(1);
  const Dims& dims = c.int_list(2);
  if (dims.empty()) {
    Value flat = b.reshape(x, {x.type.num_elements()});
    return std::vector<Value>{b.reshape(roll_one(b, flat, shifts.at(0), 0), x.dims())};
  }
  if (shifts.size() != dims.size()) {
    return base::invalid_argument("lowering: roll: shifts and dims differ in length (" +
                                  std::to_string(shifts.size()) + " vs " +
                                  std::to_string(dims.size()) + ")");
  }
  for (size_t i = 0; i < dims.size(); ++i) x = roll_one(b, x, shifts[i], wrap_dim(dims[i], x.rank()));
  return std::vector<Value>{x};
}

// channel_shuffle(self, groups) / native_channel_shuffle: [N, g, C/g, *] with the two
// middle dims swapped, read back as [N, C, *].
Result lower_channel_shuffle(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  int64_t g = c.int_arg(1);
  if (x.rank() < 3 || g <= 0 || x.dims()[1] % g != 0) {
    return base::invalid_argument("lowering: channel_shuffle: needs rank >= 3 and channels "
                                  "divisible by a positive groups");
  }
  Dims split = x.dims();
  split[1] = x.dims()[1] / g;
  split.insert(split.begin() + 1, g);
  Dims perm(split.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[1], perm[2]);
  return std::vector<Value>{b.reshape(b.transpose(b.reshape(x, split), perm), x.dims())};
}

// constant_pad_nd(self, int[] pad, Scalar value=0): pad pairs run from the last dim
// backwards; negative amounts crop, which stablehlo.pad supports directly.
Result lower_constant_pad_nd(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  const Dims& pad = c.int_list(1);
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size()) / 2 > x.rank()) {
    return base::invalid_argument("lowering: constant_pad_nd: pad length " +
                                  std::to_string(pad.size()) + " is odd or longer than 2*rank " +
                                  std::to_string(2 * x.rank()));
  }
  Dims low(x.rank(), 0), high(x.rank(), 0);
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    int64_t d = x.rank() - 1 - static_cast<int64_t>(i);
    low[d] = pad[2 * i];
    high[d] = pad[2 * i + 1];
  }
  DType t = x.dtype();
  Value value = c.is_none(2) ? b.constant(0, t) : c.scalar(2, t);
  return std::vector<Value>{b.pad(x, value, low, high)};
}

// repeat(self, int[] repeats): broadcast into interleaved [r0, s0, r1, s1, ...] and merge
// each pair, so every copy is laid out whole along its dim.
Result lower_repeat(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  const Dims& repeats = c.int_list(1);
  int64_t rank = static_cast<int64_t>(repeats.size());
  if (rank < x.rank()) {
    return base::invalid_argument("lowering: repeat: number of repeats (" + std::to_string(rank) +
                                  ") is smaller than the tensor's rank (" +
                                  std::to_string(x.rank()) + ")");
  }
  Dims padded(rank - x.rank(), 1);
  for (int64_t d : x.dims()) padded.push_back(d);
  x = b.reshape(x, padded);
  Dims interleaved, bdims;
  for (int64_t i = 0; i < rank; ++i) {
    interleaved.push_back(repeats[i]);
    interleaved.push_back(padded[i]);
    bdims.push_back(2 * i + 1);
  }
  Value wide = b.broadcast_in_dim(x, interleaved, bdims);
  return std::vector<Value>{b.reshape(wide, c.out_type().dims)};
}

// tril/triu(self, int diagonal=0) over the last two dims.
LoweringFn triangle(bool lower) {
  return [lower](LoweringContext& c) -> Result {
    Builder& b = c.b();
    Value x = c.tensor(0);
    if (x.rank() < 2) {
      return base::invalid_argument("lowering: " + c.op_name() +
                                    ": input must have at least 2 dims (got " +
                                    std::to_string(x.rank()) + ")");
    }
    TensorType it{DType::kI64, x.dims()};
    Value offset = b.sub(b.iota(it, x.rank() - 1), b.iota(it, x.rank() - 2));
    Value diagonal = b.broadcast_in_dim(b.constant_i64(c.int_arg(1), DType::kI64), x.dims(), {});
    Value keep = b.compare(offset, diagonal, lower ? "LE" : "GE");
    return std::vector<Value>{to_out(c, b.select(keep, x, filled(b, 0, x.type)))};
  };
}

// Length of the diagonal `offset` of an (n1 x n2) matrix.
int64_t diagonal_length(int64_t n1, int64_t n2, int64_t offset) {
  int64_t len = offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2);
  return std::max<int64_t>(len, 0);
}

// diagonal_copy(self, offset=0, dim1=0, dim2=1): moves dim1, dim2 last, flattens them, and
// takes every (n2 + 1)-th element from the diagonal's first one.
Result lower_diagonal_copy(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  int64_t offset = c.int_arg(1);
  int64_t d1 = wrap_dim(c.int_arg(2), x.rank()), d2 = wrap_dim(c.int_arg(3), x.rank());
  if (d1 == d2) {
    return base::invalid_argument("lowering: diagonal_copy: dim1 and dim2 are both " +
                                  std::to_string(d1));
  }
  const TensorType& out = c.out_type();
  int64_t n1 = x.dims()[d1], n2 = x.dims()[d2];
  int64_t len = diagonal_length(n1, n2, offset);
  if (len == 0 || out.num_elements() == 0) return std::vector<Value>{filled(b, 0, out)};
  Dims perm, batch;
  for (int64_t i = 0; i < x.rank(); ++i) {
    if (i != d1 && i != d2) {
      perm.push_back(i);
      batch.push_back(x.dims()[i]);
    }
  }
  perm.push_back(d1);
  perm.push_back(d2);
  Dims flat_dims = batch;
  flat_dims.push_back(n1 * n2);
  Value flat = b.reshape(b.transpose(x, perm), flat_dims);
  int64_t first = std::max<int64_t>(-offset, 0) * n2 + std::max<int64_t>(offset, 0);
  Dims start(batch.size(), 0), limit = batch, strides(batch.size(), 1);
  start.push_back(first);
  limit.push_back(first + (len - 1) * (n2 + 1) + 1);
  strides.push_back(n2 + 1);
  return std::vector<Value>{b.slice(flat, start, limit, strides)};
}

// diagonal_scatter(self, src, offset, dim1, dim2): self with the diagonal replaced by src.
// The plane is flattened as in diagonal_copy; src is padded (interior padding n2) onto the
// diagonal's flat positions and selected in by a mask padded the same way.
Result lower_diagonal_scatter(LoweringContext& c) {
  Builder& b = c.b();
  Value self = c.tensor(0);
  int64_t offset = c.int_arg(2);
  int64_t d1 = wrap_dim(c.int_arg(3), self.rank()), d2 = wrap_dim(c.int_arg(4), self.rank());
  int64_t n1 = self.dims()[d1], n2 = self.dims()[d2];
  int64_t len = diagonal_length(n1, n2, offset);
  if (d1 == d2 || len == 0 || self.type.num_elements() == 0) return std::vector<Value>{self};
  Dims perm, batch;
  for (int64_t i = 0; i < self.rank(); ++i) {
    if (i != d1 && i != d2) {
      perm.push_back(i);
      batch.push_back(self.dims()[i]);
    }
  }
  perm.push_back(d1);
  perm.push_back(d2);
  Value planes = b.transpose(self, perm);
  Dims flat_dims = batch;
  flat_dims.push_back(n1 * n2);
  Value flat = b.reshape(planes, flat_dims);
  int64_t first = std::max<int64_t>(-offset, 0) * n2 + std::max<int64_t>(offset, 0);
  int64_t end = first + (len - 1) * (n2 + 1) + 1;
  Dims low(batch.size(), 0), high(batch.size(), 0), interior(batch.size(), 0);
  low.push_back(first);
  high.push_back(n1 * n2 - end);
  interior.push_back(n2);
  Value src = b.convert(c.tensor(1), self.dtype());
  Value placed = b.pad(src, b.constant(0, self.dtype()), low, high, interior);
  Value ones = b.splat(1, TensorType{DType::kBool, src.dims()});
  Value mask = b.pad(ones, b.constant(0, DType::kBool), low, high, interior);
  Value merged = b.reshape(b.select(mask, placed, flat), planes.dims());
  Dims inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return std::vector<Value>{b.transpose(merged, inverse)};
}

// diag_embed(self, offset=0, dim1=-2, dim2=-1): the last dim of self becomes the diagonal
// `offset` of a new (dim1, dim2) plane. Self is broadcast along the plane (indexed by row
// for offset >= 0, by column otherwise) and masked to the diagonal.
Result lower_diag_embed(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  const TensorType& out = c.out_type();
  int64_t offset = c.int_arg(1);
  int64_t d1 = wrap_dim(c.int_arg(2), out.rank()), d2 = wrap_dim(c.int_arg(3), out.rank());
  if (d1 == d2 || x.rank() == 0) {
    return base::invalid_argument("lowering: diag_embed: needs a tensor of rank >= 1 and two "
                                  "distinct dims (got dim1 = dim2 = " + std::to_string(d1) + ")");
  }
  int64_t n = x.dims().back();
  int64_t m = n + (offset >= 0 ? offset : -offset);
  // Pad the diagonal's dim to the plane's size; padded entries are masked off below.
  Dims high(x.rank(), 0);
  high.back() = m - n;
  Value padded = b.pad(x, b.constant(0, x.dtype()), Dims(x.rank(), 0), high);
  Dims bdims;
  for (int64_t i = 0; i < out.rank(); ++i) {
    if (i != d1 && i != d2) bdims.push_back(i);
  }
  bdims.push_back(offset >= 0 ? d1 : d2);
  Value wide = b.broadcast_in_dim(padded, out.dims, bdims);
  TensorType it{DType::kI64, out.dims};
  Value diff = b.sub(b.iota(it, d2), b.iota(it, d1));
  Value on_diag = b.compare(diff, b.broadcast_in_dim(b.constant_i64(offset, DType::kI64), out.dims, {}), "EQ");
  return std::vector<Value>{to_out(c, b.select(on_diag, wide, filled(b, 0, wide.type)))};
}

// `src` laid into a tensor of self's shape along `dim`: element k of src lands at
// first + k * step; returns (placed, mask of the positions it covers).
std::pair<Value, Value> place_along(Builder& b, Value self, Value src, int64_t dim, int64_t first,
                                    int64_t step) {
  int64_t len = src.dims()[dim], size = self.dims()[dim];
  TensorType it{DType::kI64, self.dims()};
  Value last = filled(b, (len - 1) * step, it);
  Dims low(self.rank(), 0), high(self.rank(), 0), interior(self.rank(), 0);
  low[dim] = first;
  high[dim] = size - (first + (len - 1) * step + 1);
  interior[dim] = step - 1;
  Value placed = b.pad(b.convert(src, self.dtype()), b.constant(0, self.dtype()), low, high,
                       interior);
  Value rel = b.sub(b.iota(it, dim), b.broadcast_in_dim(b.constant_i64(first, DType::kI64), self.dims(), {}));
  Value zero = filled(b, 0, it);
  Value on_step = b.compare(b.binary("remainder", rel, filled(b, step, it)), zero, "EQ");
  Value in_range = b.binary("and", b.compare(rel, zero, "GE"), b.compare(rel, last, "LE"));
  return {placed, b.binary("and", on_step, in_range)};
}

// slice_scatter(self, src, dim=0, start=None, end=None, step=1): the functional form of
// writing src through self[start:end:step] along dim (compiled graphs use it).
Result lower_slice_scatter(LoweringContext& c) {
  Builder& b = c.b();
  Value self = c.tensor(0);
  Value src = c.tensor(1);
  int64_t dim = wrap_dim(c.int_arg(2), self.rank());
  int64_t size = self.dims()[dim];
  int64_t start = c.is_none(3) ? 0 : c.int_arg(3);
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  int64_t step = c.is_none(5) ? 1 : c.int_arg(5);
  if (src.type.num_elements() == 0 || src.dims()[dim] == 0) return std::vector<Value>{self};
  auto [placed, mask] = place_along(b, self, src, dim, start, step);
  return std::vector<Value>{b.select(mask, placed, self)};
}

// select_scatter(self, src, dim, index): src (self without dim) written at self[..., index].
Result lower_select_scatter(LoweringContext& c) {
  Builder& b = c.b();
  Value self = c.tensor(0);
  int64_t dim = wrap_dim(c.int_arg(2), self.rank());
  int64_t index = c.int_arg(3);
  if (index < 0) index += self.dims()[dim];
  Dims with_dim = self.dims();
  with_dim[dim] = 1;
  Value src = b.reshape(c.tensor(1), with_dim);
  if (self.type.num_elements() == 0) return std::vector<Value>{self};
  auto [placed, mask] = place_along(b, self, src, dim, index, 1);
  return std::vector<Value>{b.select(mask, placed, self)};
}

// unfold_backward(grad, input_sizes, dim, size, step): every window's gradient added back
// at its positions (Tensor.unfold's and istft's overlap-add).
Result lower_unfold_backward(LoweringContext& c) {
  Builder& b = c.b();
  Value g = c.tensor(0);
  const TensorType& out = c.out_type();
  int64_t rank = out.rank();
  if (rank == 0 && g.type.num_elements() == 1) {
    return std::vector<Value>{to_out(c, b.reshape(g, {}))};  // a 0-d input's one window
  }
  if (rank == 0 || g.rank() != rank + 1) {
    return base::unimplemented("lowering: unfold_backward of a 0-d input");
  }
  int64_t dim = wrap_dim(c.int_arg(2), rank), size = c.int_arg(3), step = c.int_arg(4);
  int64_t windows = g.dims()[dim], length = out.dims[dim];
  if (windows == 1) step = size;  // one window: its step is no distance (x.unfold(0, 2, 10**9))
  if (out.num_elements() == 0 || windows * size == 0) return std::vector<Value>{b.zeros(out)};
  Dims perm;
  for (int64_t i = 0; i < rank; ++i) if (i != dim) perm.push_back(i);
  perm.push_back(dim);
  perm.push_back(rank);
  Value moved = b.transpose(g, perm);
  // Overlap-add: each window padded to q * step values (q = ceil(size / step)) is q slabs of
  // step values; slab a of every window, laid end to end, starts at a * step. Each slab is
  // padded into place (a negative high pad crops zeros past the end) and the q are summed:
  // time and memory grow with q * length, not with windows * size * length. Past 8 slabs
  // (a step well below the window) one scatter-add of every element to w * step + j keeps
  // the program small.
  int64_t q = (size + step - 1) / step;
  Dims lead(moved.dims().begin(), moved.dims().end() - 2);
  Dims back(rank);
  for (int64_t i = 0, k = 0; i < rank; ++i) back[i] = i == dim ? rank - 1 : k++;
  if (q > 8) {
    int64_t rows = 1;
    for (int64_t d : lead) rows *= d;
    TensorType at{DType::kI64, {windows, size}};
    Value where = b.add(b.mul(b.iota(at, 0), b.splat(static_cast<double>(step), at)),
                        b.iota(at, 1));
    Value updates = b.transpose(b.reshape(moved, {rows, windows * size}), {1, 0});
    Value summed = scatter(b, b.zeros(TensorType{g.dtype(), {length, rows}}),
                           b.reshape(where, {windows * size, 1}), updates, {1}, {0}, {0}, 1,
                           "add");
    Dims flat = lead;
    flat.push_back(length);
    Value r = b.reshape(b.transpose(summed, {1, 0}), flat);
    return std::vector<Value>{to_out(c, b.transpose(r, back))};
  }
  auto pad = [&](Value x, int64_t low, int64_t high) {
    Dims lo(x.rank(), 0), hi(x.rank(), 0);
    lo.back() = low;
    hi.back() = high;
    return b.pad(x, b.zeros(TensorType{x.dtype(), {}}), lo, hi);
  };
  Value slabs = pad(moved, 0, q * step - size);  // [..., windows, q * step]
  Dims split = lead;
  split.insert(split.end(), {windows, q, step});
  slabs = b.reshape(slabs, split);
  Dims flat = lead;
  flat.push_back(windows * step);
  Value r;
  for (int64_t a = 0; a < q; ++a) {
    Dims start(split.size(), 0), limit = split;
    start[split.size() - 2] = a;
    limit[split.size() - 2] = a + 1;
    Value slab = b.reshape(b.slice(slabs, start, limit, Dims(split.size(), 1)), flat);
    Value placed = pad(slab, a * step, length - (a + windows) * step);
    r = a == 0 ? placed : b.add(r, placed);
  }
  return std::vector<Value>{to_out(c, b.transpose(r, back))};
}

}  // namespace

void register_shape_lowerings() {
  register_lowering({"aten::unfold_backward", "aten::unfold_backward.out"}, lower_unfold_backward);
  register_lowering({"aten::cat", "aten::cat.out"}, lower_cat);
  register_lowering({"aten::stack", "aten::stack.out"}, lower_stack);
  register_lowering({"aten::flip", "aten::flip.out"}, lower_flip);
  register_lowering({"aten::roll", "aten::roll.out"}, lower_roll);
  // constant_pad_nd and repeat have composite kernels today; registered so that compiled
  // graphs (which keep them as single aten ops) and any explicit override can use them.
  register_lowering({"aten::constant_pad_nd", "aten::constant_pad_nd.out"}, lower_constant_pad_nd);
  register_lowering({"aten::repeat", "aten::repeat.out"}, lower_repeat);
  register_lowering({"aten::tril", "aten::tril_", "aten::tril.out"}, triangle(true));
  register_lowering({"aten::triu", "aten::triu_", "aten::triu.out"}, triangle(false));
  // aten::diagonal is a view in eager mode (metadata); compiled graphs see it as a value.
  register_lowering({"aten::diagonal", "aten::diagonal_copy", "aten::diagonal_copy.out"},
                    lower_diagonal_copy);
  register_lowering({"aten::diagonal_scatter", "aten::diagonal_scatter.out"},
                    lower_diagonal_scatter);
  register_lowering({"aten::diag_embed", "aten::diag_embed.out"}, lower_diag_embed);
  register_lowering({"aten::slice_scatter", "aten::slice_scatter.out"}, lower_slice_scatter);
  register_lowering({"aten::select_scatter", "aten::select_scatter.out"}, lower_select_scatter);
  register_lowering({"aten::channel_shuffle", "aten::channel_shuffle.out",
                     "aten::native_channel_shuffle"},
                    lower_channel_shuffle);
}

}  // namespace torchtpu::lowering
