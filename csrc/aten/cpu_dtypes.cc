#include "aten/cpu_dtypes.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <unordered_map>

namespace torchtpu::aten {

// The dtypes a CPU kernel's dispatch leaves out.
enum class Refused {
  kNonFloat,   // bool and every integer dtype (floating and complex dispatch)
  kBool,       // bool only (arithmetic dispatch)
  kBelowInt64  // bool and the integer dtypes but int64 (avg_pool's float-and-long dispatch)
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
};

namespace {

bool refuses(Refused r, c10::ScalarType t) {
  switch (r) {
    case Refused::kNonFloat: return c10::isIntegralType(t, /*includeBool=*/true);
    case Refused::kBool: return t == c10::ScalarType::Bool;
    case Refused::kBelowInt64:
      return c10::isIntegralType(t, /*includeBool=*/true) && t != c10::ScalarType::Long;
  }
  return false;
}

// Keyed by the op's name without namespace and overload, an in-place op's trailing `_`
// dropped; a key with an overload ("round.decimals", its _out form included) wins.
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
  };
  return *table;
}

}  // namespace

const CpuDtypeRule* cpu_dtype_rule(const c10::OperatorName& name) {
  if (name.name.rfind("aten::", 0) != 0) return nullptr;
  std::string op = name.name.substr(6), overload = name.overload_name;
  if (op.size() > 1 && op.back() == '_' && op[op.size() - 2] != '_') op.pop_back();
  for (const char* suffix : {"_out", "_values"}) {  // an out= overload is its functional's
    size_t n = std::char_traits<char>::length(suffix);
    if (overload.size() > n && overload.compare(overload.size() - n, n, suffix) == 0) {
      overload.resize(overload.size() - n);
    }
  }
  if (overload == "out" || overload == "values") overload.clear();
  const auto& table = rules();
  if (!overload.empty()) {
    auto it = table.find(op + "." + overload);
    if (it != table.end()) return &it->second;
  }
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

void check_dtype_like_cpu(const CpuDtypeRule& rule, c10::ArrayRef<c10::IValue> args) {
  if (args.empty() || !args[0].isTensor()) return;
  const at::Tensor& self = args[0].toTensor();
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
