#include "aten/op_special_cases.h"

#include <cmath>
#include <limits>
#include <optional>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include "aten/conv_arguments.h"
#include "aten/op_info.h"
#include "base/metrics.h"

namespace torchtpu::aten {

bool is_optional_tensor_list(const c10::IValue& v) {
  return v.isList() && !v.isTensorList() &&
         v.type()->castRaw<c10::ListType>() != nullptr &&
         v.type()->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::OptionalType;
}

// The defined tensors of a Tensor[] or Tensor?[] argument, in order.
std::vector<at::Tensor> present_tensors(const c10::IValue& v) {
  if (v.isTensorList()) return v.toTensorVector();
  std::vector<at::Tensor> out;
  for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
    if (t && t->defined()) out.push_back(*t);
  }
  return out;
}

// Ops whose output shape depends on the data: they run on the host by design (one
// round-trip, counted under host_roundtrip_ops, allowed in strict mode).
bool is_data_dependent(const std::string& name) {
  static const char* kOps[] = {"aten::nonzero", "aten::nonzero.out", "aten::masked_select",
                               "aten::masked_select.out", "aten::_unique2", "aten::unique_dim",
                               "aten::unique_consecutive", "aten::_unique"};
  for (const char* op : kOps) if (name == op) return true;
  return false;
}

void type_optional_tensor_lists(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  size_t n = schema.arguments().size();
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[stack->size() - n + i];
    if (!v.isList() || v.isOptionalTensorList() ||
        !is_optional_tensor_list_type(schema.arguments()[i])) {
      continue;
    }
    c10::List<std::optional<at::Tensor>> typed;
    for (const c10::IValue& item : v.toListRef()) {
      typed.push_back(item.isNone() ? std::nullopt : std::optional<at::Tensor>(item.toTensor()));
    }
    v = std::move(typed);
  }
}

namespace {

bool is_index_put(const std::string& name) {
  return name.rfind("aten::index_put", 0) == 0 || name.rfind("aten::_index_put_impl", 0) == 0;
}

// A mask indexing `self` from dim `dim` on: its sizes must be those dims' (the CPU's
// IndexError otherwise).
void check_mask_shape(const at::Tensor& mask, const at::Tensor& self, int64_t dim) {
  for (int64_t j = 0; j < mask.dim(); ++j) {
    TORCH_CHECK_INDEX(dim + j < self.dim() && mask.size(j) == self.size(dim + j),
                      "The shape of the mask ", mask.sizes(), " at index ", j,
                      " does not match the shape of the indexed tensor ", self.sizes(),
                      " at index ", dim + j);
  }
}

// index_put (args: self, indices, values, accumulate, ...) of one bool mask, a one-element
// value and no accumulation (`x[x < 0] = 0`): the CPU and CUDA kernels fill through the
// mask (masked_fill), no host read; the lowering selects the same way (`masked_index_put`).
// The mask's shape and the index count are checked here as expanding it would check them.
bool is_masked_fill_form(c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& values = args[2].toTensor();
  if (values.numel() != 1 || (args.size() > 3 && args[3].isBool() && args[3].toBool())) {
    return false;
  }
  const c10::List<std::optional<at::Tensor>> list = args[1].toOptionalTensorList();
  int64_t dim = 0, indexed = 0;
  const at::Tensor* mask = nullptr;
  for (const std::optional<at::Tensor>& t : list) {
    if (!t || !t->defined()) {
      if (mask == nullptr) ++dim;
      ++indexed;
      continue;
    }
    if (mask != nullptr || t->scalar_type() != at::kBool || t->device() != self.device()) {
      return false;
    }
    mask = &*t;
    indexed += t->dim();
  }
  if (mask == nullptr) return false;
  // The CPU counts the list's entries, then the dims they index.
  for (int64_t count : {static_cast<int64_t>(list.size()), indexed}) {
    TORCH_CHECK_INDEX(count <= self.dim(), "too many indices for tensor of dimension ",
                      self.dim(), " (got ", count, ")");
  }
  check_mask_shape(*mask, self, dim);
  return true;
}

}  // namespace

// CPU index tensors move to the indexed tensor's device. Bool/uint8 masks become the
// integer index tensors they select, as PyTorch's own indexing does: the mask's nonzero
// positions are data, so this costs one host round-trip per mask (counted). Not the mask
// of an index_put of one value (`is_masked_fill_form`): the program selects through it.
void expand_index_masks(const c10::FunctionSchema& schema, const std::string& name,
                        torch::jit::Stack* stack) {
  size_t n = schema.arguments().size();
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[stack->size() - n + i];
    if (!is_optional_tensor_list(v)) continue;
    c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
    const at::Tensor& self = (*stack)[stack->size() - n].toTensor();
    // CPU index tensors are accepted as on CUDA (x[cpu_indices], index_put_ with CPU
    // indices): they move to the indexed tensor's device, one transfer each.
    bool moved = false;
    for (size_t k = 0; k < list.size(); ++k) {
      std::optional<at::Tensor> t = list.get(k);
      if (!t || !t->defined() || !t->device().is_cpu() || !self.device().is_privateuseone()) {
        continue;
      }
      list.set(k, t->to(self.device()));
      moved = true;
    }
    if (moved) v = list;
    bool has_mask = false;
    for (const std::optional<at::Tensor>& t : list) {
      has_mask |= t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
    }
    if (!has_mask) continue;
    if (is_index_put(name) && is_masked_fill_form(torch::jit::last(*stack, n))) continue;
    c10::List<std::optional<at::Tensor>> expanded;
    int64_t dim = 0;
    for (size_t k = 0; k < list.size(); ++k) {
      std::optional<at::Tensor> t = list.get(k);
      bool mask = t && t->defined() && (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte);
      if (!mask) {
        expanded.push_back(t);
        ++dim;
        continue;
      }
      // PyTorch's expandTensors warns the same way; for aten::index it already has (the
      // structured wrapper that calls index.Tensor_out runs its meta first).
      if (t->scalar_type() == at::kByte && name != "aten::index.Tensor_out") {
        TORCH_WARN("indexing with dtype torch.uint8 is now deprecated, please use a dtype "
                   "torch.bool instead.");
      }
      check_mask_shape(*t, self, dim);
      at::Tensor positions = at::nonzero(t->cpu());
      base::keyed_counter_add("host_roundtrip_ops", name + " (bool mask)");
      base::counter_add("num_host_roundtrips");
      for (int64_t j = 0; j < t->dim(); ++j) {
        expanded.push_back(positions.select(1, j).to(t->device()));
      }
      dim += t->dim();
    }
    v = expanded;
  }
}

void check_index_put_values(const std::string& name, c10::ArrayRef<c10::IValue> args) {
  if (!is_index_put(name)) return;
  // A bool mask left for the program (checked by expand_index_masks): one value broadcasts
  // and takes self's dtype (the CPU's masked_fill path).
  if (is_masked_fill_form(args)) return;
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& values = args[2].toTensor();
  // Integer indices that do not broadcast together: the CPU's IndexError (the meta index
  // kernel below raises a RuntimeError of its own wording).
  std::vector<at::IntArrayRef> shapes;
  bool integer = true;
  for (const std::optional<at::Tensor>& index : args[1].toOptionalTensorList()) {
    if (!index || !index->defined()) continue;
    integer &= at::isIntegralType(index->scalar_type(), /*includeBool=*/false);
    shapes.push_back(index->sizes());
  }
  if (integer && shapes.size() > 1) {
    std::vector<int64_t> common;
    bool ok = true;
    try {
      for (at::IntArrayRef shape : shapes) common = at::infer_size(common, shape);
    } catch (const c10::Error&) {
      ok = false;
    }
    if (!ok) {
      std::string listed;
      for (at::IntArrayRef shape : shapes) listed += (listed.empty() ? "" : ", ") + c10::str(shape);
      TORCH_CHECK_INDEX(false, "shape mismatch: indexing tensors could not be broadcast "
                        "together with shapes ", listed);
    }
  }
  at::Tensor result = at::index(self, args[1].toOptionalTensorList());
  TORCH_CHECK(at::is_expandable_to(values.sizes(), result.sizes()),
              "shape mismatch: value tensor of shape ", values.sizes(),
              " cannot be broadcast to indexing result of shape ", result.sizes());
  // The CPU checks the dtype after the shape (its masked_fill path, which casts, returned
  // above).
  TORCH_CHECK(values.scalar_type() == self.scalar_type(),
              "Index put requires the source and destination dtypes match, got ",
              self.scalar_type(), " for the destination and ", values.scalar_type(),
              " for the source.");
}

bool writes_unreturned_args(const std::string& name) {
  return name == "aten::_amp_foreach_non_finite_check_and_unscale_" ||
         name == "aten::_amp_update_scale_" || name == "aten::_batch_norm_with_update" ||
         name == "aten::rrelu_with_noise" ||
         name == "aten::rrelu_with_noise.out" || name == "aten::rrelu_with_noise_";
}

namespace {

bool is_fused_adam(const std::string& name) {
  return name.rfind("aten::_fused_adam", 0) == 0;  // _fused_adam(w)(_)(.tensor_lr)
}

const c10::IValue& named_arg(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                             const char* arg_name) {
  std::optional<int> i = schema.argumentIndexWithName(arg_name);
  TORCH_INTERNAL_ASSERT(i.has_value() && static_cast<size_t>(*i) < args.size(), schema.name(),
                        " has no argument ", arg_name);
  return args[*i];
}

}  // namespace

bool is_runtime_float_arg(const std::string& name, const std::string& arg_name) {
  return (arg_name == "lr" || arg_name == "beta1" || arg_name == "beta2") &&
         name.rfind("aten::_fused_", 0) == 0;
}

bool is_structural_scalar_arg(const std::string& name, const std::string& arg_name) {
  if (arg_name == "p") {
    return name.rfind("aten::norm.", 0) == 0 || name.rfind("aten::renorm", 0) == 0 ||
           name.rfind("aten::multi_margin_loss", 0) == 0;
  }
  if (arg_name == "exponent") return name.rfind("aten::pow.Tensor_Scalar", 0) == 0;
  if (arg_name != "ord") return false;
  return name.rfind("aten::linalg_vector_norm", 0) == 0 ||
         name.rfind("aten::_foreach_norm", 0) == 0;
}

bool leaves_list_arg_unchanged(const std::string& name, const std::string& arg_name,
                               const c10::FunctionSchema& schema,
                               c10::ArrayRef<c10::IValue> args) {
  if (name.rfind("aten::_fused_adagrad_", 0) == 0) {
    if (arg_name == "grads") return named_arg(schema, args, "grad_scale").isNone();
    return arg_name == "state_steps";  // read for the learning rate, never written
  }
  if (name.rfind("aten::_fused_sgd_", 0) == 0) {
    if (arg_name == "grads") return named_arg(schema, args, "grad_scale").isNone();
    if (arg_name == "momentum_buffer_list") {
      return named_arg(schema, args, "momentum").toDouble() == 0;
    }
    return false;
  }
  if (!is_fused_adam(name)) return false;
  if (arg_name == "grads") return named_arg(schema, args, "grad_scale").isNone();
  if (arg_name == "max_exp_avg_sqs") return !named_arg(schema, args, "amsgrad").toBool();
  return false;
}

// Batch norm in training mode also updates the running statistics in place, which the
// schema does not declare as results: running = (1 - momentum) * running + momentum *
// batch statistic, with the unbiased variance (PyTorch's CPU kernel does the same).
bool is_batch_norm(const std::string& name) {
  return name == "aten::native_batch_norm" || name == "aten::_native_batch_norm_legit";
}

void update_batch_norm_stats(c10::ArrayRef<c10::IValue> args, const torch::jit::Stack& results) {
  const at::Tensor& input = args[0].toTensor();
  if (!args[5].toBool() || args[3].isNone() || args[4].isNone()) return;
  const at::Tensor& running_mean = args[3].toTensor();
  const at::Tensor& running_var = args[4].toTensor();
  if (!running_mean.defined() || !running_var.defined()) return;
  double momentum = args[6].toDouble();
  double eps = args[7].toDouble();
  int64_t n = input.numel() / std::max<int64_t>(input.size(1), 1);
  at::Tensor save_mean = results[results.size() - 2].toTensor();
  at::Tensor save_invstd = results[results.size() - 1].toTensor();
  at::Tensor biased_var = save_invstd.pow(-2).sub_(eps);
  at::Tensor unbiased_var = biased_var.mul_(static_cast<double>(n) / std::max<int64_t>(n - 1, 1));
  running_mean.mul_(1 - momentum).add_(save_mean.to(running_mean.scalar_type()), momentum);
  running_var.mul_(1 - momentum).add_(unbiased_var.to(running_var.scalar_type()), momentum);
}

// Argument checks the CPU kernels make and the meta kernels do not, with the CPU's
// messages: one function per op family, looked up by op name once per op (OpInfo).
namespace {

using Args = c10::ArrayRef<c10::IValue>;

// rrelu_with_noise's noise: its shape always, its dtype in training (when the CPU kernel
// writes it).
void check_rrelu_noise(const std::string&, Args args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& noise = args[1].toTensor();
  TORCH_CHECK(self.sizes() == noise.sizes(),
              "noise tensor shape must match self tensor shape. Got self.shape = ",
              self.sizes(), " noise.shape = ", noise.sizes());
  TORCH_CHECK(!args[4].toBool() || !at::isFloatingType(self.scalar_type()) ||
                  noise.scalar_type() == self.scalar_type(),
              "expected scalar type ", self.scalar_type(), " but found ", noise.scalar_type());
}

// put_'s dtypes and element counts.
void check_put(const std::string&, Args args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& index = args[1].toTensor();
  const at::Tensor& source = args[2].toTensor();
  TORCH_CHECK(index.scalar_type() == at::kLong,
              "put_(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "put_(): self and source expected to have the same dtype, but got self.dtype = ",
              self.scalar_type(), " and source.dtype = ", source.scalar_type());
  TORCH_CHECK_INDEX(source.numel() == index.numel(),
                    "put_(): Expected source and index to have the same number of elements, "
                    "but got source.numel() = ", source.numel(), ", index.numel() = ",
                    index.numel());
  TORCH_CHECK_INDEX(!(self.numel() == 0 && index.numel() != 0),
                    "put_(): Tried to put elements into an empty tensor");
}

// narrow_copy's dim, which the CPU kernel checks before wrapping (a RuntimeError, where
// the meta kernel's wrap raises an IndexError).
void check_narrow_copy(const std::string&, Args args) {
  const at::Tensor& self = args[0].toTensor();
  TORCH_CHECK(self.dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  int64_t dim = args[1].toInt();
  TORCH_CHECK(dim < 0 || dim < self.dim(),
              "Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got "
              "false.  (narrow_copy: dim ", dim, " of a tensor with ", self.dim(),
              " dimensions)");
}

// convolution's parameters and shapes (conv_arguments.h).
void check_convolution(const std::string&, Args args) { check_convolution_like_cpu(args); }

// aminmax.out(self, *, dim, keepdim, min, max): the out dtypes.
void check_aminmax_out(const std::string&, Args args) {
  const at::Tensor& self = args[0].toTensor();
  for (size_t i : {3, 4}) {
    const at::Tensor& out = args[i].toTensor();
    TORCH_CHECK(out.dtype() == self.dtype(), "Expected out tensor to have dtype ",
                self.dtype(), ", but got ", out.dtype(), " instead");
  }
}

void check_masked_scatter(const std::string&, Args args) {
  c10::ScalarType mask = args[1].toTensor().scalar_type();
  TORCH_CHECK(mask == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ", mask);
}

// The meta kernel asserts instead.
void check_embedding(const std::string&, Args args) {
  TORCH_CHECK(args[0].toTensor().dim() == 2, "'weight' must be 2-D");
}

// Reductions without an identity over nothing, whose lowerings would otherwise return the
// fill value (+-inf, NaN) or another error: max() / min() of an empty tensor ...
void check_max_min_nonempty(const std::string& name, Args args) {
  const char* fn = name.compare(6, 3, "max") == 0 ? "max()" : "min()";
  TORCH_CHECK(args[0].toTensor().numel() > 0, fn,
              ": Expected reduction dim to be specified for input.numel() == 0. Specify the "
              "reduction dim with the 'dim' argument.");
}

// ... and median / nanmedian / kthvalue / mode along an empty dim.
void check_reduced_dim_nonempty(const std::string& name, Args args) {
  bool kthvalue = name.rfind("aten::kthvalue", 0) == 0;
  const char* what = kthvalue ? "kthvalue()" : name.rfind("aten::mode", 0) == 0 ? "mode()"
                                                                                : "median()";
  const at::Tensor& self = args[0].toTensor();
  if (self.dim() == 0) return;  // the meta kernel checks a 0-d tensor's dim
  int64_t dim = c10::maybe_wrap_dim(args[kthvalue ? 2 : 1].toInt(), self.dim());
  TORCH_CHECK_INDEX(self.size(dim) != 0, what, ": Expected reduction dim ", dim,
                    " to have non-zero size.");
}

// uniform_'s bounds in the dtype drawn (a complex tensor draws its real parts), as the CPU
// checks them: the draw would otherwise saturate to a constant.
void check_uniform_range(const std::string&, Args args) {
  const at::Tensor& self = args[0].toTensor();
  double from = args[1].toDouble(), to = args[2].toDouble();
  c10::ScalarType t = c10::toRealValueType(self.scalar_type());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "check_uniform_bounds", [&] {
    caffe2::TypeMeta dtype = caffe2::TypeMeta::fromScalarType(t);
    auto lowest = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
    auto max = static_cast<double>(std::numeric_limits<scalar_t>::max());
    TORCH_CHECK(from >= lowest && from <= max, "from is out of bounds for ", dtype);
    TORCH_CHECK(to >= lowest && to <= max, "to is out of bounds for ", dtype);
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=",
                from, " > to=", to);
    TORCH_CHECK(to - from <= max, "uniform_ expects to-from <= std::numeric_limits<",
                c10::toString(t), ">::max(), but found to=", to, " and from=", from,
                " which result in to-from to exceed the limit");
  });
}

// Whether `v` (a scalar argument, or anything else) converts to every floating type.
bool fits_every_float(const c10::IValue& v) {
  if (!v.isScalar()) return true;
  c10::Scalar s = v.toScalar();
  if (s.isComplex()) return true;  // complex dtypes, whose values are not checked here
  return s.isIntegral(/*includeBool=*/true) ? std::abs(s.toLong()) <= 65504
                                            : !(std::abs(s.toDouble()) > 65504);  // NaN fits
}

// A scalar argument the CPU kernel converts to the computation's dtype with an overflow
// check (alpha.to<scalar_t>()): half + half with alpha=1e5 raises there, where the lowering
// would compute in float32 and give inf. Floating types only (`reduced_only`: float16 and
// bfloat16, as pow converts its exponent for those only).
void check_scalar_fits(const c10::IValue& v, c10::ScalarType t, bool reduced_only = false) {
  if (fits_every_float(v) || (reduced_only && !at::isReducedFloatingType(t))) return;
  if (!at::isFloatingType(t)) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "check_scalar_fits", [&] {
    (void)v.toScalar().to<scalar_t>();
  });
}

// add / sub(self, other, alpha): alpha in the common dtype of self and other.
void check_alpha_fits(const std::string&, Args args) {
  if (fits_every_float(args[2])) return;  // alpha=1, the common case: no result_type
  const at::Tensor& self = args[0].toTensor();
  c10::ScalarType t = args[1].isTensor() ? at::result_type(self, args[1].toTensor())
                                         : at::result_type(self, args[1].toScalar());
  check_scalar_fits(args[2], t);
}

// Scalars the CPU kernel converts to self's dtype, with the overflow check, although it
// computes in float32 for half types: hardtanh(self, min_val, max_val), threshold(self,
// threshold, value)'s value, hardshrink(self, lambd).
void check_scalars_fit_self(const std::string& name, Args args) {
  c10::ScalarType t = args[0].toTensor().scalar_type();
  if (name.rfind("aten::threshold", 0) == 0) return check_scalar_fits(args[2], t);
  check_scalar_fits(args[1], t);
  if (name.rfind("aten::hardtanh", 0) == 0) check_scalar_fits(args[2], t);
}

// pow(self, exponent) of a float16 / bfloat16 tensor.
void check_exponent_fits(const std::string&, Args args) {
  check_scalar_fits(args[1], args[0].toTensor().scalar_type(), /*reduced_only=*/true);
}

// var / std / var_mean / std_mean with no more elements per result than the correction:
// the CPU kernel's warning (the lowering gives its inf / NaN without a word).
void warn_nonpositive_degrees_of_freedom(const std::string& name, Args args) {
  const at::Tensor& self = args[0].toTensor();
  int64_t factor = 1;
  if (args[1].isNone() || args[1].toDimVector().empty() || self.dim() == 0) {
    factor = self.numel();
  } else {
    for (int64_t d : args[1].toDimVector()) factor *= self.size(c10::maybe_wrap_dim(d, self.dim()));
  }
  double correction = args[2].isNone() ? 1.0 : args[2].toScalar().toDouble();
  if (static_cast<double>(factor) - correction > 0) return;
  std::string op = name.substr(6, name.find('.') - 6);  // "aten::var.correction" -> "var"
  TORCH_WARN(op, "(): degrees of freedom is <= 0. Correction should be strictly less than "
             "the reduction factor (input numel divided by output numel).");
}

// index_reduce is a beta API: the CPU kernel says so once per process.
void warn_index_reduce_beta(const std::string&, Args) {
  TORCH_WARN_ONCE("index_reduce() is in beta and the API may change at any time.");
}

// mm's operands share a dtype (the CPU kernel's check; the meta kernel has none).
void check_mm_dtypes(const std::string&, Args args) {
  const at::Tensor& a = args[0].toTensor();
  const at::Tensor& b = args[1].toTensor();
  TORCH_CHECK(a.dtype() == b.dtype(), "expected m1 and m2 to have the same dtype, but got: ",
              a.dtype(), " != ", b.dtype());
}

// searchsorted's argument checks on the CPU that its meta kernel skips: side's value, a
// 0-d sequence, out's dtype against out_int32, and the sorter's dtype and size (its range
// is checked by the lowering, on the device).
void check_searchsorted(const std::string&, Args args) {
  const at::Tensor& seq = args[0].toTensor();
  if (!args[4].isNone()) {
    const std::string side(args[4].toStringRef());
    TORCH_CHECK(side == "left" || side == "right", "torch.searchsorted(): side can only be "
                "'left' or 'right' but got ", side);
    TORCH_CHECK(!args[3].toBool() || side == "right", "torch.searchsorted(): side and right "
                "can't be set to opposites, got side of ", side, " while right was True");
  }
  TORCH_CHECK(seq.dim() != 0, "torch.searchsorted(): boundaries tensor should have positive "
              "dimension, but got 0 dimension");
  if (args.size() > 6) {
    bool out_int32 = args[2].toBool();
    c10::ScalarType got = args[6].toTensor().scalar_type();
    TORCH_CHECK(got == (out_int32 ? at::kInt : at::kLong), "torch.searchsorted(): output "
                "tensor's dtype is wrong, it can only be Int(int32) or Long(int64) depending "
                "on whether out_int32 flag is True, but we got output tensor's dtype ", got,
                " and out_int32 flag is ", out_int32 ? "True" : "False");
  }
  if (args[5].isNone()) return;
  const at::Tensor& sorter = args[5].toTensor();
  TORCH_CHECK(sorter.sizes() == seq.sizes(), "torch.searchsorted(): boundary and sorter must "
              "have the same size, but got boundary tensor ", seq.sizes(),
              "and got sorter tensor ", sorter.sizes());
  TORCH_CHECK(sorter.scalar_type() == at::kLong, "torch.searchsorted(): sorter must be a tensor "
              "of long dtype but got dtype ", sorter.scalar_type());
}

// sort's dim (the meta kernel takes any dim; the CPU raises IndexError).
void check_sort_dim(const std::string& name, Args args) {
  const bool stable = name.find("stable") != std::string::npos;  // sort.stable(self, *, stable, dim, ...)
  (void)c10::maybe_wrap_dim(args[stable ? 2 : 1].toInt(), args[0].toTensor().dim());
}

// randperm(n)'s result type must hold n - 1, and a float type every integer below n.
void check_randperm(const std::string&, Args args) {
  int64_t n = args[0].isInt() ? args[0].toInt() : args[0].toSymInt().expect_int();
  const at::Tensor& out = args[args.size() - 1].toTensor();
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  (void)at::scalar_tensor(n > 0 ? n - 1 : n, at::TensorOptions().dtype(out.scalar_type()));
  switch (out.scalar_type()) {
    case at::kHalf:
      TORCH_CHECK(n <= (int64_t{1} << 11) + 1, "n cannot be greater than 2049 for Half type.");
      break;
    case at::kFloat:
      TORCH_CHECK(n <= (int64_t{1} << 24) + 1, "n cannot be greater than 2^24+1 for Float type.");
      break;
    case at::kDouble:
      TORCH_CHECK(n <= (int64_t{1} << 53) + 1, "n cannot be greater than 2^53+1 for Double type.");
      break;
    default:
      break;
  }
}

// bernoulli_(float p) and bernoulli(self, float p): the CPU's check of p (NaN fails it).
void check_bernoulli_p(const std::string&, Args args) {
  double p = args[1].toDouble();
  TORCH_CHECK(p >= 0 && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
}

// bucketize: the CPU kernel's check of the boundaries' rank (its meta kernel has none).
void check_bucketize(const std::string&, Args args) {
  int64_t dim = args[1].toTensor().dim();
  TORCH_CHECK(dim == 1, "boundaries tensor must be 1 dimension, but got dim(", dim, ")");
}

// complex_check_dtype of the CPU kernel (the Python meta asserts instead).
void check_complex_parts(const std::string& name, Args args) {
  c10::ScalarType a = args[0].toTensor().scalar_type(), b = args[1].toTensor().scalar_type();
  auto ok = [](c10::ScalarType t) { return t == at::kFloat || t == at::kDouble || t == at::kHalf; };
  TORCH_CHECK(ok(a) && ok(b), "Expected both inputs to be Half, Float or Double tensors but got ",
              a, " and ", b);
  TORCH_CHECK(a == b, "Expected object of scalar type ", a, " but got scalar type ", b,
              " for second argument");
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".out") == 0) {
    c10::ScalarType want = c10::toComplexType(a), got = args[2].toTensor().scalar_type();
    TORCH_CHECK(got == want, "Expected object of scalar type ", want, " but got scalar type ",
                got, " for argument 'out'");
  }
}

// is_nonzero's checks, which the meta kernels skip (the lowering takes one element).
void check_assert_async(const std::string&, Args args) {
  int64_t n = args[0].toTensor().numel();
  TORCH_CHECK(n != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(n < 2, "Boolean value of Tensor with more than one value is ambiguous");
}

// The CPU kernel's dtypes and sizes; the meta has none.
void check_amp_update_scale(const std::string&, Args args) {
  const at::Tensor& scale = args[0].toTensor();
  const at::Tensor& tracker = args[1].toTensor();
  const at::Tensor& found_inf = args[2].toTensor();
  TORCH_CHECK(tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(scale.numel() == 1, "current_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(scale.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
}

// The meta kernel checks only the rank.
void check_multinomial(const std::string& name, Args args) {
  const at::Tensor& self = args[0].toTensor();
  int64_t n_sample = args[1].isInt() ? args[1].toInt() : args[1].toSymInt().expect_int();
  bool with_replacement = args[2].toBool();
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()),
              "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  if (name == "aten::multinomial.out") {
    const at::Tensor& out = args[4].toTensor();
    TORCH_CHECK(out.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ",
                out.scalar_type());
  }
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  int64_t n_categories = self.size(-1);
  TORCH_CHECK(with_replacement || n_sample <= n_categories,
              "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
}

// The CPU kernel's check that per_sample_weights has weight's dtype; the meta has none.
void check_embedding_bag(const std::string&, Args args) {
  if (args.size() < 7 || !args[6].isTensor()) return;
  const at::Tensor& weight = args[0].toTensor();
  const at::Tensor& psw = args[6].toTensor();
  TORCH_CHECK(!psw.defined() || psw.scalar_type() == weight.scalar_type(),
              "Expected tensor for argument #1 'weight' to have the same type as tensor for "
              "argument #1 'per_sample_weights'; but type ", weight.scalar_type(),
              " does not equal ", psw.scalar_type(),
              " (while checking arguments for embedding_bag)");
}

// The CPU's (and CUDA's) _foreach_norm refuses an empty tensor for every norm without an
// identity: inf itself, and ord < 0 through linalg_vector_norm. The Python meta checks only
// inf, with other words.
void check_foreach_norm(const std::string&, Args args) {
  double ord = args[1].toScalar().toDouble();
  if (!(ord < 0 || ord == INFINITY)) return;
  for (const at::Tensor& t : args[0].toTensorList().vec()) {
    if (t.numel() > 0) continue;
    TORCH_CHECK(ord != INFINITY, "_foreach_norm cannot compute the infinity norm on an empty "
                "tensor because the operation does not have an identity");
    TORCH_CHECK(false, "linalg.vector_norm cannot compute the ", ord,
                " norm on an empty tensor because the operation does not have an identity");
  }
}

// masked_fill's CPU checks, in its order: the mask's dtype (the Python meta words it
// otherwise, and the in-place form took a uint8 mask as bool), the out-of-place form's
// broadcast of mask with self, a 0-dim value tensor.
void check_masked_fill(const std::string& name, Args args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& mask = args[1].toTensor();
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, "
              "but got mask with dtype ", mask.dtype());
  if (name.rfind("aten::masked_fill_", 0) != 0) (void)at::infer_size(mask.sizes(), self.sizes());
  if (args[2].isTensor()) {
    int64_t dim = args[2].toTensor().dim();
    TORCH_CHECK(dim == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got "
                "tensor with ", dim, " dimension(s).");
  }
}

}  // namespace

CpuArgumentCheck cpu_argument_check(const std::string& name) {
  static const auto* table = [] {
    auto* t = new std::unordered_map<std::string, CpuArgumentCheck>;
    auto add = [t](std::initializer_list<const char*> names, CpuArgumentCheck fn) {
      for (const char* n : names) t->emplace(n, fn);
    };
    add({"aten::rrelu_with_noise", "aten::rrelu_with_noise.out", "aten::rrelu_with_noise_",
         "aten::rrelu_with_noise_functional"},
        check_rrelu_noise);
    add({"aten::put_", "aten::put", "aten::put.out"}, check_put);
    add({"aten::narrow_copy", "aten::narrow_copy.out"}, check_narrow_copy);
    add({"aten::convolution", "aten::convolution.out"}, check_convolution);
    add({"aten::aminmax.out"}, check_aminmax_out);
    add({"aten::masked_scatter", "aten::masked_scatter_", "aten::masked_scatter.out"},
        check_masked_scatter);
    add({"aten::embedding"}, check_embedding);
    add({"aten::_embedding_bag", "aten::_embedding_bag_forward_only"}, check_embedding_bag);
    add({"aten::max", "aten::max.unary_out", "aten::min", "aten::min.unary_out"},
        check_max_min_nonempty);
    add({"aten::median.dim", "aten::median.dim_values", "aten::nanmedian.dim",
         "aten::nanmedian.dim_values", "aten::kthvalue", "aten::kthvalue.values", "aten::mode",
         "aten::mode.values"},
        check_reduced_dim_nonempty);
    add({"aten::uniform_", "aten::uniform", "aten::uniform.out"}, check_uniform_range);
    add({"aten::randperm.generator_out", "aten::randperm.out"}, check_randperm);
    add({"aten::mm", "aten::mm.out"}, check_mm_dtypes);
    add({"aten::sort", "aten::sort.values", "aten::sort.stable", "aten::sort.values_stable"},
        check_sort_dim);
    add({"aten::var.correction", "aten::var.correction_out", "aten::std.correction",
         "aten::std.correction_out", "aten::var_mean.correction",
         "aten::var_mean.correction_out", "aten::std_mean.correction",
         "aten::std_mean.correction_out"},
        warn_nonpositive_degrees_of_freedom);
    add({"aten::add.Tensor", "aten::add_.Tensor", "aten::add.out", "aten::add.Scalar",
         "aten::add_.Scalar", "aten::add.Scalar_out", "aten::sub.Tensor", "aten::sub_.Tensor",
         "aten::sub.out", "aten::sub.Scalar", "aten::sub_.Scalar", "aten::sub.Scalar_out"},
        check_alpha_fits);
    add({"aten::hardtanh", "aten::hardtanh_", "aten::hardtanh.out", "aten::threshold",
         "aten::threshold_", "aten::threshold.out", "aten::hardshrink", "aten::hardshrink.out"},
        check_scalars_fit_self);
    add({"aten::pow.Tensor_Scalar", "aten::pow_.Scalar", "aten::pow.Tensor_Scalar_out"},
        check_exponent_fits);
    add({"aten::searchsorted.Tensor", "aten::searchsorted.Tensor_out",
         "aten::searchsorted.Scalar", "aten::searchsorted.Scalar_out"},
        check_searchsorted);
    add({"aten::bernoulli_.float", "aten::bernoulli.p"}, check_bernoulli_p);
    add({"aten::bucketize.Tensor", "aten::bucketize.Tensor_out", "aten::bucketize.Scalar"},
        check_bucketize);
    add({"aten::complex", "aten::complex.out", "aten::polar", "aten::polar.out"},
        check_complex_parts);
    add({"aten::_assert_async", "aten::_assert_async.msg"}, check_assert_async);
    add({"aten::_foreach_norm.Scalar"}, check_foreach_norm);
    add({"aten::masked_fill.Scalar", "aten::masked_fill_.Scalar", "aten::masked_fill.Scalar_out",
         "aten::masked_fill.Tensor", "aten::masked_fill_.Tensor", "aten::masked_fill.Tensor_out"},
        check_masked_fill);
    add({"aten::_amp_update_scale_"}, check_amp_update_scale);
    add({"aten::multinomial", "aten::multinomial.out"}, check_multinomial);
    add({"aten::index_reduce", "aten::index_reduce_", "aten::index_reduce.out"},
        warn_index_reduce_beta);
    return t;
  }();
  auto it = table->find(name);
  return it == table->end() ? nullptr : it->second;
}

}  // namespace torchtpu::aten
