#include "aten/cpu_dtypes.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <optional>
#include <unordered_map>

namespace torchtpu::aten {

// The dtypes a CPU kernel's dispatch leaves out.
enum class Refused {
  kNonFloat,   // bool and every integer dtype (floating and complex dispatch)
  kBool,       // bool only (arithmetic dispatch)
  kBelowInt64,  // bool and the integer dtypes but int64 (avg_pool's float-and-long dispatch)
  kBelowUint8,  // bool and the integer dtypes but uint8 (upsampling's float-and-byte dispatch)
  kComplex,     // the complex dtypes (a rounding division)
  kBoolOrWideUnsigned  // bool, uint16, uint32, uint64 (integral dispatch: ldexp's exponent)
};

struct CpuDtypeRule {
  const char* kernel;  // the kernel named in the CPU's NotImplementedError
  Refused refused;
  // The kernel named when the dim (argument 1) is not the last one; null: `kernel`.
  const char* other_dim_kernel = nullptr;
  // The dtype dispatched on is the promotion of arguments 0 and 1 (a binary op), not
  // argument 0's.
  bool promoted = false;
  // A RuntimeError with this message instead of the NotImplementedError.
  const char* message = nullptr;
  // For an op whose CPU kernel depends on its arguments' values (a convolution's kind, a
  // reduction's mode): the rule of this call, or null when its kernel takes every dtype.
  // The fields above are then unused.
  const CpuDtypeRule* (*by_arguments)(c10::ArrayRef<c10::IValue> args) = nullptr;
  // The argument whose dtype the kernel dispatches on (bernoulli_.Tensor's p).
  size_t dispatch_arg = 0;
  // For a kernel that dispatches on its result's dtype (cumsum): that dtype for this call,
  // or nullopt to leave the call to the meta kernel. Replaces dispatch_arg.
  std::optional<c10::ScalarType> (*result_dtype)(c10::ArrayRef<c10::IValue> args) = nullptr;
};

namespace {

bool refuses(Refused r, c10::ScalarType t) {
  switch (r) {
    case Refused::kNonFloat: return c10::isIntegralType(t, /*includeBool=*/true);
    case Refused::kBool: return t == c10::ScalarType::Bool;
    case Refused::kBelowInt64:
      return c10::isIntegralType(t, /*includeBool=*/true) && t != c10::ScalarType::Long;
    case Refused::kBelowUint8:
      return c10::isIntegralType(t, /*includeBool=*/true) && t != c10::ScalarType::Byte;
    case Refused::kComplex: return c10::isComplexType(t);
    case Refused::kBoolOrWideUnsigned:
      return t == c10::ScalarType::Bool || t == c10::ScalarType::UInt16 ||
             t == c10::ScalarType::UInt32 || t == c10::ScalarType::UInt64;
  }
  return false;
}

// convolution and convolution_overrideable(input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups): the CPU picks a slow kernel by kind and rank, each
// with its own dtypes; an empty input returns before any of them.
const CpuDtypeRule* convolution_rule(c10::ArrayRef<c10::IValue> args) {
  static const CpuDtypeRule conv2d{"slow_conv2d_cpu", Refused::kBool};
  static const CpuDtypeRule conv3d{"compute_columns3d", Refused::kBool};
  static const CpuDtypeRule dilated{"slow_conv_dilated<>", Refused::kBelowInt64};
  static const CpuDtypeRule transposed2d{"slow_conv_transpose2d_out_cpu", Refused::kBelowInt64};
  static const CpuDtypeRule transposed3d{"slow_conv_transpose3d_out_cpu", Refused::kBelowInt64};
  if (args.size() < 7 || !args[0].isTensor() || !args[6].isBool()) return nullptr;
  const at::Tensor& input = args[0].toTensor();
  if (!input.defined() || input.numel() == 0) return nullptr;
  bool three_d = input.dim() == 5;
  if (args[6].toBool()) return three_d ? &transposed3d : &transposed2d;
  if (args[5].isIntList()) {
    for (int64_t d : args[5].toIntVector()) {
      if (d != 1) return &dilated;
    }
  }
  return three_d ? &conv3d : &conv2d;
}

// scatter_reduce.two(self, dim, index, src, reduce, include_self): only "mean" leaves
// bool out.
const CpuDtypeRule* scatter_reduce_rule(c10::ArrayRef<c10::IValue> args) {
  static const CpuDtypeRule mean{"scatter_gather_tensor_cpu_reduce_mean", Refused::kBool};
  if (args.size() < 5 || !args[4].isString()) return nullptr;
  return args[4].toStringRef() == "mean" ? &mean : nullptr;
}

// div.Tensor_mode / div.Scalar_mode(self, other, rounding_mode): a rounding division has
// no complex kernel (a true division does).
const CpuDtypeRule* rounding_div_rule(c10::ArrayRef<c10::IValue> args) {
  static const CpuDtypeRule trunc{"div_trunc_cpu", Refused::kComplex, nullptr, true};
  static const CpuDtypeRule floor{"div_floor_cpu", Refused::kComplex, nullptr, true};
  if (args.size() < 3 || !args[2].isString()) return nullptr;
  const std::string& mode = args[2].toStringRef();
  return mode == "trunc" ? &trunc : mode == "floor" ? &floor : nullptr;
}

// cumsum / cumprod (self, dim, dtype) and their out= forms (out last): the result is out,
// else of the dtype argument, else int64 for an integer or bool self. Where out and the
// dtype argument disagree, the meta kernel raises the CPU's error.
std::optional<c10::ScalarType> scan_result_dtype(c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::ScalarType> asked;
  if (args.size() > 2 && args[2].isInt()) asked = static_cast<c10::ScalarType>(args[2].toInt());
  if (args.size() > 3 && args[3].isTensor()) {
    c10::ScalarType out = args[3].toTensor().scalar_type();
    if (asked && *asked != out) return std::nullopt;
    return out;
  }
  return asked;
}

// Their in-place forms: self is the result, and a dtype argument must be self's (else the
// meta kernel raises the CPU's "Bad in-place call").
std::optional<c10::ScalarType> scan_in_place_result_dtype(c10::ArrayRef<c10::IValue> args) {
  if (args.empty() || !args[0].isTensor()) return std::nullopt;
  c10::ScalarType self = args[0].toTensor().scalar_type();
  if (args.size() > 2 && args[2].isInt() && args[2].toInt() != static_cast<int64_t>(self)) {
    return std::nullopt;
  }
  return self;
}

// Keyed by the op's name without namespace and overload, an in-place op's trailing `_`
// dropped unless the in-place form has a key of its own ("cumsum_"); a key with an overload
// ("round.decimals", its _out form included) wins, and "bernoulli." is the overload-less
// form alone.
const std::unordered_map<std::string, CpuDtypeRule>& rules() {
  static const auto* table = new std::unordered_map<std::string, CpuDtypeRule>{
      {"_softmax", {"softmax_lastdim_kernel_impl", Refused::kNonFloat, "softmax_kernel_impl"}},
      {"_log_softmax",
       {"log_softmax_lastdim_kernel_impl", Refused::kNonFloat, "log_softmax_kernel_impl"}},
      {"var", {"", Refused::kNonFloat, nullptr, false,
               "std and var only support floating point and complex dtypes"}},
      {"std", {"", Refused::kNonFloat, nullptr, false,
               "std and var only support floating point and complex dtypes"}},
      {"var_mean", {"", Refused::kNonFloat, nullptr, false,
                    "var_mean only support floating point and complex dtypes"}},
      {"std_mean", {"", Refused::kNonFloat, nullptr, false,
                    "std_mean only support floating point and complex dtypes"}},
      {"gelu", {"GeluKernelImpl", Refused::kNonFloat}},
      {"silu", {"silu_cpu", Refused::kNonFloat}},
      {"mish", {"mish_cpu", Refused::kNonFloat}},
      {"hardswish", {"hardswish_cpu", Refused::kNonFloat}},
      {"hardsigmoid", {"hardsigmoid_cpu", Refused::kNonFloat}},
      {"glu", {"glu_cpu", Refused::kNonFloat}},
      {"log_sigmoid_forward", {"log_sigmoid_cpu", Refused::kNonFloat}},
      {"softplus", {"softplus_cpu", Refused::kNonFloat}},
      {"hardshrink", {"hardshrink_cpu", Refused::kNonFloat}},
      {"huber_loss", {"huber_cpu", Refused::kNonFloat}},
      {"smooth_l1_loss", {"smooth_l1_cpu", Refused::kNonFloat}},
      {"nll_loss_forward", {"nll_loss_out_frame", Refused::kNonFloat}},
      {"nll_loss2d_forward", {"nll_loss2d_forward_out_frame", Refused::kNonFloat}},
      {"logaddexp", {"logaddexp_cpu", Refused::kNonFloat, nullptr, true}},
      {"logaddexp2", {"logaddexp2_cpu", Refused::kNonFloat, nullptr, true}},
      {"lerp.Scalar", {"lerp_kernel_scalar", Refused::kNonFloat}},
      {"lerp.Tensor", {"lerp_kernel_tensor", Refused::kNonFloat}},
      {"round.decimals", {"round_cpu", Refused::kNonFloat}},
      {"round", {"round_vml_cpu", Refused::kBool}},
      {"floor", {"floor_vml_cpu", Refused::kBool}},
      {"ceil", {"ceil_vml_cpu", Refused::kBool}},
      {"trunc", {"trunc_vml_cpu", Refused::kBool}},
      {"avg_pool2d", {"avg_pool2d", Refused::kBelowInt64}},
      {"avg_pool3d", {"avg_pool3d_out_frame", Refused::kBelowInt64}},
      {"mm", {"addmm_impl_cpu_", Refused::kBool}},
      {"addmm", {"addmm_impl_cpu_", Refused::kBool}},
      {"addbmm", {"addmm_impl_cpu_", Refused::kBool}},
      {"bmm", {"bmm", Refused::kBool}},
      {"baddbmm", {"baddbmm", Refused::kBool}},
      {"dot", {"dot", Refused::kBool}},
      {"vdot", {"dot", Refused::kBool}},
      {"mv", {"addmv_impl_cpu", Refused::kBool}},
      {"addmv", {"addmv_impl_cpu", Refused::kBool}},
      {"addcmul", {"addcmul_cpu_out", Refused::kBool}},
      {"threshold", {"threshold_cpu", Refused::kBool}},
      {"trace", {"trace", Refused::kBool}},
      {"median", {"median_cpu", Refused::kBool}},
      {"median.dim", {"median_out", Refused::kBool}},
      {"nanmedian", {"median_cpu", Refused::kBool}},
      {"nanmedian.dim", {"median_out", Refused::kBool}},
      {"kthvalue", {"kthvalue_cpu", Refused::kBool}},
      {"relu", {"", Refused::kBool, nullptr, false, "Boolean inputs not supported for relu"}},
      {"max_pool2d", {"max_pool2d", Refused::kBool}},
      {"max_pool2d_with_indices", {"max_pool2d", Refused::kBool}},
      {"max_unpool2d", {"max_unpool2d", Refused::kNonFloat}},
      {"max_unpool3d", {"max_unpool3d", Refused::kNonFloat}},
      {"reflection_pad1d", {"reflection_pad1d", Refused::kBool}},
      {"reflection_pad2d", {"reflection_pad2d", Refused::kBool}},
      {"reflection_pad3d", {"reflection_pad3d", Refused::kBool}},
      {"index_reduce", {"index_func_", Refused::kBool}},
      {"searchsorted", {"searchsorted_out_cpu", Refused::kBool}},
      {"upsample_nearest1d", {"compute_indices_weights_nearest", Refused::kBelowUint8}},
      {"upsample_nearest2d", {"upsample_nearest2d_channels_last", Refused::kBelowUint8}},
      {"upsample_nearest3d", {"compute_indices_weights_nearest", Refused::kBelowUint8}},
      {"_upsample_nearest_exact1d", {"compute_indices_weights_nearest", Refused::kBelowUint8}},
      {"_upsample_nearest_exact2d",
       {"upsample_nearest2d_channels_last", Refused::kBelowUint8}},
      {"_upsample_nearest_exact3d", {"compute_indices_weights_nearest", Refused::kBelowUint8}},
      {"upsample_linear1d", {"compute_indices_weights_linear", Refused::kNonFloat}},
      {"upsample_bilinear2d", {"upsample_bilinear2d_channels_last", Refused::kBelowUint8}},
      {"upsample_trilinear3d", {"compute_indices_weights_linear", Refused::kNonFloat}},
      {"upsample_bicubic2d", {"compute_indices_weights_cubic", Refused::kBelowUint8}},
      {"_upsample_bilinear2d_aa", {"compute_index_ranges_weights", Refused::kBelowUint8}},
      {"_upsample_bicubic2d_aa", {"compute_index_ranges_weights", Refused::kBelowUint8}},
      {"bernoulli.", {"bernoulli_tensor_cpu_p_", Refused::kNonFloat}},
      {"bernoulli.Tensor",
       {"bernoulli_tensor_cpu_p_", Refused::kNonFloat, nullptr, false, nullptr, nullptr, 1}},
      {"cumsum", {"cumsum_out_cpu", Refused::kBool, nullptr, false, nullptr, nullptr, 0,
                  scan_result_dtype}},
      {"cumprod", {"cumprod_out_cpu", Refused::kBool, nullptr, false, nullptr, nullptr, 0,
                   scan_result_dtype}},
      {"cumsum_", {"cumsum_out_cpu", Refused::kBool, nullptr, false, nullptr, nullptr, 0,
                   scan_in_place_result_dtype}},
      {"cumprod_", {"cumprod_out_cpu", Refused::kBool, nullptr, false, nullptr, nullptr, 0,
                    scan_in_place_result_dtype}},
      {"ldexp",
       {"ldexp_cpu_exp", Refused::kBoolOrWideUnsigned, nullptr, false, nullptr, nullptr, 1}},
      {"convolution", {"", Refused::kBool, nullptr, false, nullptr, convolution_rule}},
      {"convolution_overrideable",
       {"", Refused::kBool, nullptr, false, nullptr, convolution_rule}},
      {"scatter_reduce.two", {"", Refused::kBool, nullptr, false, nullptr, scatter_reduce_rule}},
      {"div.Tensor_mode", {"", Refused::kComplex, nullptr, false, nullptr, rounding_div_rule}},
      {"div.Scalar_mode", {"", Refused::kComplex, nullptr, false, nullptr, rounding_div_rule}},
      {"div.out_mode", {"", Refused::kComplex, nullptr, false, nullptr, rounding_div_rule}},
  };
  return *table;
}

}  // namespace

const CpuDtypeRule* cpu_dtype_rule(const c10::OperatorName& name) {
  if (name.name.rfind("aten::", 0) != 0) return nullptr;
  std::string op = name.name.substr(6), overload = name.overload_name;
  const auto& table = rules();
  auto in_place = table.find(op);  // an in-place form with a rule of its own
  if (in_place != table.end() && op.back() == '_') return &in_place->second;
  if (op.size() > 1 && op.back() == '_' && op[op.size() - 2] != '_') op.pop_back();
  for (const char* suffix : {"_out", "_values"}) {  // an out= overload is its functional's
    size_t n = std::char_traits<char>::length(suffix);
    if (overload.size() > n && overload.compare(overload.size() - n, n, suffix) == 0) {
      overload.resize(overload.size() - n);
    }
  }
  if (overload == "out" || overload == "values") overload.clear();
  auto it = table.find(op + "." + overload);
  if (it != table.end()) return &it->second;
  it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

void check_dtype_like_cpu(const CpuDtypeRule& call_rule, c10::ArrayRef<c10::IValue> args) {
  const CpuDtypeRule* picked =
      call_rule.by_arguments != nullptr ? call_rule.by_arguments(args) : &call_rule;
  if (picked == nullptr) return;
  const CpuDtypeRule& rule = *picked;
  if (rule.result_dtype != nullptr) {
    std::optional<c10::ScalarType> t = rule.result_dtype(args);
    TORCH_CHECK_NOT_IMPLEMENTED(!t || !refuses(rule.refused, *t), "\"", rule.kernel,
                                "\" not implemented for '", c10::toString(*t), "'");
    return;
  }
  if (args.size() <= rule.dispatch_arg || !args[rule.dispatch_arg].isTensor()) return;
  const at::Tensor& self = args[rule.dispatch_arg].toTensor();
  if (!self.defined()) return;
  c10::ScalarType t = self.scalar_type();
  if (rule.promoted && args.size() > 1) {
    if (args[1].isTensor()) {
      t = at::result_type(self, args[1].toTensor());
    } else if (args[1].isScalar()) {
      t = at::result_type(self, args[1].toScalar());
    }
  }
  if (!refuses(rule.refused, t)) return;
  TORCH_CHECK(rule.message == nullptr, rule.message);
  const char* kernel = rule.kernel;
  if (rule.other_dim_kernel != nullptr && args.size() > 1 && args[1].isInt() && self.dim() > 0 &&
      c10::maybe_wrap_dim(args[1].toInt(), self.dim()) != self.dim() - 1) {
    kernel = rule.other_dim_kernel;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, "\"", kernel, "\" not implemented for '",
                              c10::toString(t), "'");
}

}  // namespace torchtpu::aten
