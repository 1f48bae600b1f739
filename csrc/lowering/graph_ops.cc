// Graph-mode lowerings: value forms of the view ops, copies and factories that
// AOTAutograd graphs contain, and the graph names of ops eager mode reaches under another
// name (convolution, batch norm, embedding).
//
// In eager mode a view is metadata over a storage and the aten layer never asks the table
// for one (register.cc claims no alias-returning op for PrivateUse1, and view/as_strided
// have explicit kernels). In a compiled graph values have no storage, so a view is a new
// value: a reshape, transpose, slice or broadcast. as_strided reads its input as a dense
// row-major buffer, which is what a functionalized graph hands it (a base, not a view).
//
// Ops that register.cc would claim for eager PrivateUse1 (a CompositeExplicitAutograd
// kernel, no alias) must be right in eager mode too. Those with a Device or MemoryFormat
// argument (factories, _to_copy, clone) are left to their composite kernels in eager mode
// by register.cc (the boxed kernel drops both arguments), so their lowerings here
// (register_graph_factory_lowerings) serve compiled graphs only.
#include <algorithm>
#include <string>

#include "lowering/families.h"
#include "lowering/lowering.h"
#include "lowering/storage_programs.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

Result one(Value v) { return std::vector<Value>{v}; }

// A tensor of `type` filled with `v`; broadcasting a 0-d constant also covers zero-size
// types, where a splat literal would be empty.
Value filled(Builder& b, double v, const TensorType& type) {
  return b.broadcast_in_dim(b.constant(v, type.dtype), type.dims, {});
}

// view, _unsafe_view, alias, detach, lift_fresh_copy, unsqueeze, squeeze.*: same elements
// in row-major order, new dims (the out type's).
Result lower_reshape(LoweringContext& c) {
  return one(c.b().reshape(c.tensor(0), c.out_type().dims));
}

// permute(self, int[] dims)
Result lower_permute(LoweringContext& c) {
  Value x = c.tensor(0);
  Dims perm;
  for (int64_t d : c.int_list(1)) perm.push_back(wrap_dim(d, x.rank()));
  return one(c.b().transpose(x, perm));
}

// transpose.int(self, dim0, dim1)
Result lower_transpose(LoweringContext& c) {
  Value x = c.tensor(0);
  if (x.rank() == 0) return one(x);
  Dims perm;
  for (int64_t i = 0; i < x.rank(); ++i) perm.push_back(i);
  std::swap(perm[wrap_dim(c.int_arg(1), x.rank())], perm[wrap_dim(c.int_arg(2), x.rank())]);
  return one(c.b().transpose(x, perm));
}

// t(self): rank 0 and 1 are unchanged.
Result lower_t(LoweringContext& c) {
  Value x = c.tensor(0);
  return one(x.rank() < 2 ? x : c.b().transpose(x, {1, 0}));
}

// expand(self, size, implicit): size-1 and missing leading dims broadcast to the out type.
Result lower_expand(LoweringContext& c) {
  return one(c.b().broadcast_to(c.tensor(0), c.out_type().dims));
}

// The elements start, start + step, ... of x along `dim`, as many as the out type has
// there (start already in range).
Value slice_along(Builder& b, Value x, int64_t dim, int64_t start, int64_t step,
                  const TensorType& out) {
  if (out.num_elements() == 0) return filled(b, 0, out);
  Dims lo(x.rank(), 0), hi = x.dims(), strides(x.rank(), 1);
  lo[dim] = start;
  hi[dim] = start + (out.dims[dim] - 1) * step + 1;
  strides[dim] = step;
  return b.slice(x, lo, hi, strides);
}

// slice.Tensor(self, dim, start?, end?, step): start is clamped as PyTorch does; the
// length comes from the out type, so `end` need not be re-derived.
Result lower_slice(LoweringContext& c) {
  Value x = c.tensor(0);
  int64_t dim = wrap_dim(c.int_arg(1), x.rank());
  int64_t size = x.dims()[dim];
  int64_t start = c.is_none(2) ? 0 : c.int_arg(2);
  if (start < 0) start += size;
  start = std::clamp<int64_t>(start, 0, size);
  return one(slice_along(c.b(), x, dim, start, c.int_arg(4), c.out_type()));
}

// narrow_copy(self, dim, start, length): start may be negative (wrapped); the argument
// checks ran before (cpu_argument_check, then the meta kernel's narrow).
Result lower_narrow_copy(LoweringContext& c) {
  Value x = c.tensor(0);
  int64_t dim = wrap_dim(c.int_arg(1), x.rank());
  int64_t start = c.int_arg(2);
  if (start < 0) start += x.dims()[dim];
  return one(slice_along(c.b(), x, dim, start, 1, c.out_type()));
}

// select.int(self, dim, index)
Result lower_select(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  int64_t dim = wrap_dim(c.int_arg(1), x.rank());
  int64_t size = x.dims()[dim];
  int64_t index = c.int_arg(2);
  if (index < -size || index >= size) {
    return base::invalid_argument("lowering: " + c.op_name() + ": index " + std::to_string(index) +
                                  " is out of range for dim " + std::to_string(dim) + " of size " +
                                  std::to_string(size));
  }
  if (index < 0) index += size;
  Dims lo(x.rank(), 0), hi = x.dims(), strides(x.rank(), 1);
  lo[dim] = index;
  hi[dim] = index + 1;
  return one(b.reshape(b.slice(x, lo, hi, strides), c.out_type().dims));
}

// unfold(self, dimension, size, step): the windows along `dimension` at its place and each
// window's elements as a new last dim, out[..., w, ..., j] = self[..., w * step + j, ...];
// one strided slice per window element (a window is a few elements: a kernel, a frame).
Result lower_unfold(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  const TensorType& out = c.out_type();
  if (x.rank() == 0 || out.num_elements() == 0) return one(b.reshape(x, out.dims));
  int64_t dim = wrap_dim(c.int_arg(1), x.rank()), size = c.int_arg(2), step = c.int_arg(3);
  int64_t windows = out.dims[dim];
  Dims with_one = out.dims;
  with_one.back() = 1;
  std::vector<Value> columns;
  for (int64_t j = 0; j < size; ++j) {
    Dims lo(x.rank(), 0), hi = x.dims(), strides(x.rank(), 1);
    lo[dim] = j;
    hi[dim] = j + (windows - 1) * step + 1;
    strides[dim] = step;
    columns.push_back(b.reshape(b.slice(x, lo, hi, strides), with_one));
  }
  return one(columns.size() == 1 ? columns[0] : b.concatenate(columns, out.rank() - 1));
}

// split.Tensor(self, split_size, dim), split_with_sizes(self, sizes, dim) and
// unbind.int(self, dim): consecutive pieces along `dim`, sized by the out types.
Result lower_split(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  bool unbind = c.op_name().find("unbind") != std::string::npos;
  int64_t dim = wrap_dim(c.int_arg(unbind ? 1 : 2), x.rank());
  std::vector<Value> pieces;
  int64_t offset = 0;
  for (const TensorType& t : c.out_types()) {
    int64_t len = unbind ? 1 : t.dims.at(dim);
    Dims lo(x.rank(), 0), hi = x.dims(), strides(x.rank(), 1);
    lo[dim] = offset;
    hi[dim] = offset + len;
    offset += len;
    pieces.push_back(t.num_elements() == 0 ? filled(b, 0, t)
                                           : b.reshape(b.slice(x, lo, hi, strides), t.dims));
  }
  if (offset > x.dims()[dim]) {
    return base::invalid_argument("lowering: " + c.op_name() + ": pieces cover " +
                                  std::to_string(offset) + " elements of dim " +
                                  std::to_string(dim) + " (size " +
                                  std::to_string(x.dims()[dim]) + ")");
  }
  return pieces;
}

// The storage offset of an as_strided(_scatter) node whose size and stride lists are
// arguments `index` - 2 and `index` - 1, over a dense row-major value of n elements: a
// runtime scalar as it is, or a constant (none is 0) checked to keep the view inside.
base::StatusOr<Value> view_offset(LoweringContext& c, size_t index, int64_t n) {
  if (c.arg(index).kind == ArgKind::kScalar) return c.scalar(index, DType::kI64);
  int64_t offset = c.is_none(index) ? 0 : c.int_arg(index);
  const Dims& sizes = c.int_list(index - 2);
  const Dims& strides = c.int_list(index - 1);
  int64_t last = offset;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] == 0) return c.b().constant_i64(offset, DType::kI64);  // addresses nothing
    last += (sizes[k] - 1) * strides[k];
  }
  if (offset < 0 || last >= n) {
    return base::invalid_argument("lowering: " + c.op_name() + ": view reaches element " +
                                  std::to_string(last) + " of a value of " + std::to_string(n) +
                                  " elements");
  }
  return c.b().constant_i64(offset, DType::kI64);
}

// as_strided(self, size, stride, storage_offset?): element i of the result is
// flat(self)[offset + sum(i_k * stride_k)], the eager strided read (storage_programs.cc)
// over self read as a dense row-major value. A constant offset is checked against self's
// size here; a fused eager graph's view reads pass it as a runtime scalar (the view was
// valid when recorded), so `y[i]` for every i is one program.
Result lower_as_strided(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  const TensorType& out = c.out_type();
  if (out.num_elements() == 0) return one(filled(b, 0, out));
  int64_t n = x.type.num_elements();
  TORCHTPU_ASSIGN_OR_RETURN(Value offset, view_offset(c, 3, n));
  return one(read_view(b, b.reshape(x, {n}), c.int_list(1), c.int_list(2), offset));
}

// as_strided_scatter(self, src, size, stride, storage_offset?): self with the elements
// as_strided(self, size, stride, storage_offset) addresses replaced by src, the eager
// strided write (storage_programs.cc) with the offset as above. In graphs only (fused eager
// writes through views with it): eager mode keeps PyTorch's composite kernel, which
// addresses self's memory layout.
Result lower_as_strided_scatter(LoweringContext& c) {
  Builder& b = c.b();
  Value x = c.tensor(0);
  const TensorType& out = c.out_type();
  int64_t n = x.type.num_elements();
  TORCHTPU_ASSIGN_OR_RETURN(Value offset, view_offset(c, 4, n));
  Value flat = write_view(b, b.reshape(x, {n}), b.convert(c.tensor(1), x.dtype()), c.int_list(2),
                          c.int_list(3), offset);
  return one(b.reshape(flat, out.dims));
}

// copy(self, src, non_blocking): src converted to self's dtype and broadcast to its shape.
Result lower_copy(LoweringContext& c) {
  const TensorType& out = c.out_type();
  return one(c.b().broadcast_to(c.b().convert(c.tensor(1), out.dtype), out.dims));
}

// empty.memory_format / empty_strided: a functional graph never reads what it did not
// write, so zeros are as good as garbage and deterministic.
Result lower_zeros(LoweringContext& c) { return one(filled(c.b(), 0, c.out_type())); }

Result lower_ones(LoweringContext& c) { return one(filled(c.b(), 1, c.out_type())); }

// What a delegated-to lowering reads: target argument j is argument source[j] of the
// delegating op (-1: not one of its arguments).
class DelegatedValues : public ValueSource {
 public:
  DelegatedValues(LoweringContext& outer, const std::vector<int>& source)
      : outer_(outer), source_(source) {}

  Value tensor(size_t arg, int item) override {
    int k = arg < source_.size() ? source_[arg] : -1;
    if (k >= 0 && item < 0) return outer_.tensor(k);
    if (k >= 0) return outer_.tensor_list(k).at(item);
    return outer_.b().report_misuse(outer_.op_name() + ": delegated argument " +
                                        std::to_string(arg) + " has no source",
                                    TensorType{DType::kF32, {}});
  }
  Value scalar(size_t arg, int item, DType t, ScalarCast cast) override {
    int k = arg < source_.size() ? source_[arg] : -1;
    if (k >= 0) {
      return item < 0 ? outer_.scalar(k, t, cast) : outer_.scalar_list_item(k, item, t, cast);
    }
    return outer_.b().report_misuse(outer_.op_name() + ": delegated scalar argument " +
                                        std::to_string(arg) + " has no source",
                                    TensorType{t, {}});
  }
  Value rng_state() override { return outer_.rng_state(); }

 private:
  LoweringContext& outer_;
  const std::vector<int>& source_;
};

// Runs the lowering registered as `target` on `args` (target's schema order), argument j
// read from argument source[j] of `c` (-1: none).
Result delegate(LoweringContext& c, const std::string& target, std::vector<OpArg> args,
                const std::vector<int>& source, std::vector<TensorType> out_types) {
  const LoweringFn* fn = find_lowering(target);
  if (fn == nullptr) {
    return base::internal_error("lowering: " + c.op_name() + " lowers through " + target +
                                ", which has no lowering");
  }
  DelegatedValues values(c, source);
  LoweringContext sub(c.b(), target, args, std::move(out_types), values);
  TORCHTPU_ASSIGN_OR_RETURN(std::vector<Value> results, (*fn)(sub));
  for (const Check& k : sub.checks()) c.require(k.ok, k.message, k.kind, k.guarded);
  return results;
}

std::vector<int> identity_sources(size_t n) {
  std::vector<int> s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<int>(i));
  return s;
}

std::vector<OpArg> args_of(const LoweringContext& c) {
  std::vector<OpArg> args;
  for (size_t i = 0; i < c.num_args(); ++i) args.push_back(c.arg(i));
  return args;
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding,
// groups): the schema of convolution_overrideable, which eager mode reaches instead.
Result lower_convolution(LoweringContext& c) {
  return delegate(c, "aten::convolution_overrideable", args_of(c), identity_sources(c.num_args()),
                  c.out_types());
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
// transposed, output_padding, groups, output_mask): the overrideable form without bias_sizes.
Result lower_convolution_backward(LoweringContext& c) {
  std::vector<OpArg> args;
  std::vector<int> source;
  for (size_t i = 0; i < c.num_args(); ++i) {
    if (i == 3) continue;
    args.push_back(c.arg(i));
    source.push_back(static_cast<int>(i));
  }
  return delegate(c, "aten::convolution_backward_overrideable", args, source, c.out_types());
}

// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var,
// momentum, eps): _native_batch_norm_legit with training=false.
Result lower_batch_norm_no_training(LoweringContext& c) {
  std::vector<OpArg> args = args_of(c);
  OpArg training;
  training.kind = ArgKind::kBool;
  args.insert(args.begin() + 5, training);
  return delegate(c, "aten::_native_batch_norm_legit", args, {0, 1, 2, 3, 4, -1, 5, 6},
                  c.out_types());
}

// _native_batch_norm_legit_functional(input, weight?, bias?, running_mean, running_var,
// training, momentum, eps) -> (out, save_mean, save_invstd, running_mean', running_var'):
// the running statistics move toward the batch mean and unbiased variance by `momentum`.
Result lower_batch_norm_functional(LoweringContext& c) {
  Builder& b = c.b();
  std::vector<TensorType> first(c.out_types().begin(), c.out_types().begin() + 3);
  TORCHTPU_ASSIGN_OR_RETURN(std::vector<Value> r,
                            delegate(c, "aten::_native_batch_norm_legit", args_of(c),
                                     identity_sources(c.num_args()), first));
  Value rm = c.tensor(3), rv = c.tensor(4);
  if (!c.bool_arg(5)) {
    r.push_back(b.convert(rm, c.out_type(3).dtype));
    r.push_back(b.convert(rv, c.out_type(4).dtype));
    return r;
  }
  Value x = c.tensor(0);
  DType a = x.dtype() == DType::kF64 ? DType::kF64 : DType::kF32;
  int64_t ch = x.dims().at(1);
  int64_t n = x.type.num_elements() / std::max<int64_t>(ch, 1);
  Dims red{0};
  for (int64_t i = 2; i < x.rank(); ++i) red.push_back(i);
  Value xf = b.convert(x, a);
  TensorType stat{a, {ch}};
  Value count = b.splat(static_cast<double>(n), stat);
  Value mean = b.div(b.reduce_sum(xf, red), count);
  Value centered = b.sub(xf, b.broadcast_in_dim(mean, x.dims(), {1}));
  Value var = b.div(b.reduce_sum(b.mul(centered, centered), red), count);
  Value unbiased = b.mul(var, b.splat(static_cast<double>(n) / std::max<int64_t>(n - 1, 1), stat));
  double momentum = c.double_arg(6);
  auto update = [&](Value running, Value batch, const TensorType& t) {
    Value keep = b.mul(b.convert(running, a), b.splat(1 - momentum, stat));
    return b.convert(b.add(keep, b.mul(batch, b.splat(momentum, stat))), t.dtype);
  };
  r.push_back(update(rm, mean, c.out_type(3)));
  r.push_back(update(rv, unbiased, c.out_type(4)));
  return r;
}

// --- Factories and conversions (see the file comment: not yet registered) ---

// at::acc_type<T, /*is_cuda=*/false>, the type PyTorch's CPU arange accumulates in.
DType cpu_acc_type(DType t) {
  if (t == DType::kF32 || t == DType::kF64) return DType::kF64;
  if (base::is_floating(t)) return DType::kF32;
  return DType::kI64;
}

// arange(end), arange.start(start, end) and arange.start_step(start, end, step): the
// length is the out type's; start + step * i in the accumulate type, rounded once.
Result lower_arange(LoweringContext& c) {
  Builder& b = c.b();
  const TensorType& out = c.out_type();
  if (out.rank() != 1 || out.dtype == DType::kBool) {
    return base::invalid_argument("lowering: " + c.op_name() + " cannot produce " + out.str());
  }
  DType acc = cpu_acc_type(out.dtype);
  bool has_start = c.op_name().find(".start") != std::string::npos;
  bool has_step = c.op_name().find(".start_step") != std::string::npos;
  Value start = has_start ? c.scalar(0, acc) : b.constant(0, acc);
  Value step = has_step ? c.scalar(2, acc) : b.constant(1, acc);
  Value i = b.convert(b.iota(TensorType{DType::kI64, out.dims}, 0), acc);
  Value r = b.add(b.broadcast_to(start, out.dims), b.mul(b.broadcast_to(step, out.dims), i));
  return one(b.convert(r, out.dtype));
}

// full(size, value), full_like(self, value), new_full(self, size, value) and
// scalar_tensor(value): the runtime scalar at `arg`, in the out dtype as a fill casts it
// (where(m, h, 1e30) of float16 h, decomposed to a scalar_tensor, is inf where m is false).
LoweringFn fill_from(size_t arg) {
  return [arg](LoweringContext& c) -> Result {
    const TensorType& out = c.out_type();
    return one(c.b().broadcast_to(c.scalar(arg, out.dtype, fill_cast(out)), out.dims));
  };
}

// _to_copy(self, dtype?, ...), clone(self, memory_format?) and prims' convert_element_type(a,
// dtype) (decompositions of sizes used as data emit it): same values in the out dtype.
Result lower_convert(LoweringContext& c) {
  return one(c.b().convert(c.tensor(0), c.out_type().dtype));
}

}  // namespace

void register_graph_factory_lowerings();  // below

void register_graph_lowerings() {
  register_lowering({"aten::view", "aten::view_copy", "aten::alias", "aten::alias_copy",
                     "aten::detach", "aten::detach_copy", "aten::lift_fresh_copy",
                     "aten::unsqueeze", "aten::unsqueeze_copy", "aten::squeeze",
                     "aten::squeeze.dim", "aten::squeeze.dims", "aten::squeeze_copy",
                     "aten::squeeze_copy.dim", "aten::squeeze_copy.dims"},
                    lower_reshape);
  register_lowering({"aten::permute", "aten::permute_copy"}, lower_permute);
  register_lowering({"aten::transpose.int", "aten::transpose_copy.int"}, lower_transpose);
  register_lowering({"aten::t", "aten::t_copy"}, lower_t);
  register_lowering({"aten::expand", "aten::expand_copy"}, lower_expand);
  register_lowering({"aten::slice.Tensor", "aten::slice_copy.Tensor"}, lower_slice);
  register_lowering({"aten::select.int", "aten::select_copy.int"}, lower_select);
  register_lowering({"aten::unfold", "aten::unfold_copy"}, lower_unfold);
  register_lowering({"aten::narrow_copy", "aten::narrow_copy.out"}, lower_narrow_copy);
  register_lowering({"aten::split.Tensor", "aten::split_copy.Tensor", "aten::split_with_sizes",
                     "aten::split_with_sizes_copy", "aten::unbind.int", "aten::unbind_copy.int"},
                    lower_split);
  register_lowering({"aten::as_strided", "aten::as_strided_copy"}, lower_as_strided);
  register_lowering({"aten::as_strided_scatter"}, lower_as_strided_scatter);
  register_lowering({"aten::copy"}, lower_copy);
  register_lowering({"aten::empty.memory_format", "aten::empty_strided"}, lower_zeros);
  register_lowering({"aten::convolution"}, lower_convolution);
  register_lowering({"aten::convolution_backward"}, lower_convolution_backward);
  register_lowering({"aten::_native_batch_norm_legit_no_training"}, lower_batch_norm_no_training);
  register_lowering({"aten::_native_batch_norm_legit_functional"}, lower_batch_norm_functional);
  register_graph_factory_lowerings();
}

// Factories, _to_copy and clone: their Device/MemoryFormat arguments keep register.cc from
// claiming them for eager PrivateUse1 (see the file comment), so these serve graphs only.
void register_graph_factory_lowerings() {
  register_lowering({"aten::_to_copy", "aten::clone", "prims::convert_element_type"},
                    lower_convert);
  register_lowering({"aten::full", "aten::full_like", "aten::scalar_tensor", "aten::new_full"},
                    [](LoweringContext& c) -> Result {
                      const std::string& op = c.op_name();
                      size_t arg = op == "aten::scalar_tensor" ? 0 : op == "aten::new_full" ? 2 : 1;
                      return fill_from(arg)(c);
                    });
  // _efficientzerotensor (autograd's zero gradients) is an ordinary zero tensor here.
  register_lowering({"aten::zeros", "aten::zeros_like", "aten::new_zeros", "aten::empty_like",
                     "aten::new_empty", "aten::empty_permuted", "aten::_efficientzerotensor"},
                    lower_zeros);
  register_lowering({"aten::ones", "aten::ones_like", "aten::new_ones"}, lower_ones);
  register_lowering({"aten::arange", "aten::arange.start", "aten::arange.start_step"},
                    lower_arange);
}

}  // namespace torchtpu::lowering
