#include "aten/out_dtypes.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "aten/interrupts.h"

namespace torchtpu::aten {
namespace {

// Ops (every out= overload of each name) whose CPU kernels write out= tensors only in the
// dtype they compute: measured by calling every out= op of PyTorch's OpInfo database with
// an out tensor of another dtype (float64, float16, int32, bool) on torch 2.13's CPU.
bool writes_computed_dtype_only(const std::string& name) {
  static const std::unordered_set<std::string> kOps = {
      "aten::_linalg_eigh", "aten::_log_softmax", "aten::_softmax", "aten::amax",
      "aten::amin", "aten::avg_pool3d", "aten::bitwise_not", "aten::bucketize",
      "aten::ceil", "aten::conj_physical", "aten::diag_embed", "aten::floor",
      "aten::frac", "aten::frexp", "aten::gelu", "aten::hardshrink", "aten::heaviside",
      "aten::histc", "aten::index_add", "aten::index_copy", "aten::index_select",
      "aten::isin", "aten::kthvalue", "aten::linalg_cross", "aten::linalg_lu",
      "aten::linalg_lu_factor_ex", "aten::linalg_lu_solve", "aten::linalg_qr",
      "aten::linalg_solve_triangular", "aten::log_sigmoid_forward", "aten::lu_unpack",
      "aten::median", "aten::mode", "aten::nan_to_num", "aten::nanmedian",
      "aten::native_batch_norm", "aten::neg", "aten::renorm", "aten::round",
      "aten::scatter_reduce", "aten::searchsorted", "aten::sgn", "aten::slice_scatter",
      "aten::softmax", "aten::softplus", "aten::softshrink", "aten::sort", "aten::take",
      "aten::tril", "aten::triu", "aten::trunc"};
  return kOps.count(name) > 0;
}

bool is_out_argument(const c10::Argument& a) {
  return a.kwarg_only() && a.alias_info() != nullptr && a.alias_info()->isWrite();
}

bool same_arguments(const c10::FunctionSchema& functional, const c10::FunctionSchema& out) {
  std::vector<const c10::Argument*> inputs;
  for (const c10::Argument& a : out.arguments()) {
    if (!is_out_argument(a)) inputs.push_back(&a);
  }
  const std::vector<c10::Argument>& args = functional.arguments();
  if (args.size() != inputs.size()) return false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].name() != inputs[i]->name() || args[i].alias_info() != nullptr ||
        args[i].type()->str() != inputs[i]->type()->str()) {
      return false;
    }
  }
  return true;
}

// The functional form of an out= overload (sort for sort.values): the overload of the same
// name whose arguments are the out= form's without its out tensors. Looked up once per op.
std::optional<c10::OperatorHandle> functional_form(const c10::OperatorHandle& op) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::vector<std::string>> overloads;
  static std::unordered_map<std::string, std::optional<c10::OperatorHandle>> found;
  const c10::OperatorName& name = op.operator_name();
  std::string key = name.name + "." + name.overload_name;
  std::lock_guard<std::mutex> lock(mu);
  auto hit = found.find(key);
  if (hit != found.end()) return hit->second;
  if (overloads.empty()) {
    for (const c10::OperatorName& n : c10::Dispatcher::singleton().getAllOpNames()) {
      overloads[n.name].push_back(n.overload_name);
    }
  }
  std::optional<c10::OperatorHandle> result;
  for (const std::string& overload : overloads[name.name]) {
    std::optional<c10::OperatorHandle> other =
        c10::Dispatcher::singleton().findSchema({name.name, overload});
    if (other && same_arguments(other->schema(), op.schema())) {
      result = other;
      break;
    }
  }
  found.emplace(key, result);
  return result;
}

std::string dtype_name(c10::ScalarType t) { return c10::str(c10::scalarTypeToTypeMeta(t)); }

// The unary ops among them build a TensorIterator of one dtype, which words it so (the
// others word theirs each their own way: ours is the most common one).
bool found_dtype_wording(const std::string& name) {
  static const std::unordered_set<std::string> kUnary = {
      "aten::neg",  "aten::floor", "aten::ceil",        "aten::trunc",        "aten::frac",
      "aten::sgn",  "aten::round", "aten::bitwise_not", "aten::conj_physical", "aten::gelu",
      "aten::hardshrink", "aten::softshrink", "aten::softplus"};
  return kUnary.count(name) > 0;
}

// any and all write bool, or uint8, whatever they read.
void check_boolean_out(const std::string& name, const at::Tensor& out) {
  c10::ScalarType t = out.scalar_type();
  TORCH_CHECK(t == c10::ScalarType::Bool || t == c10::ScalarType::Byte, name.substr(6),
              " only supports bool tensor for result, got: ", t);
}

}  // namespace

void check_out_dtypes(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string& name = schema.name();
  bool boolean = name == "aten::any" || name == "aten::all";
  if (!boolean && !writes_computed_dtype_only(name)) return;
  std::vector<at::Tensor> outs;
  torch::jit::Stack inputs;
  for (size_t i = 0; i < schema.arguments().size() && i < args.size(); ++i) {
    if (!is_out_argument(schema.arguments()[i])) {
      inputs.push_back(args[i]);
    } else if (args[i].isTensor()) {
      outs.push_back(args[i].toTensor());
    }
  }
  if (outs.empty()) return;  // a functional or in-place form
  if (boolean) {
    for (const at::Tensor& out : outs) check_boolean_out(name, out);
    return;
  }
  std::optional<c10::OperatorHandle> functional = functional_form(op);
  if (!functional) return;
  try {
    functional->callBoxed(&inputs);
  } catch (const std::exception& e) {
    if (is_interrupt(e)) throw;
    return;  // the call is invalid anyway: the out= form's own meta kernel says why
  }
  for (size_t j = 0; j < outs.size() && j < inputs.size(); ++j) {
    if (!inputs[j].isTensor() || !outs[j].defined()) continue;
    c10::ScalarType computed = inputs[j].toTensor().scalar_type();
    TORCH_CHECK(outs[j].scalar_type() == computed || !found_dtype_wording(name), "Found dtype ",
                outs[j].scalar_type(), " but expected ", computed);
    check_out_dtype(outs[j], computed);
  }
}

void check_out_dtype(const at::Tensor& out, c10::ScalarType computed) {
  TORCH_CHECK(out.scalar_type() == computed, "Expected out tensor to have dtype ",
              dtype_name(computed), ", but got ", dtype_name(out.scalar_type()), " instead");
}

}  // namespace torchtpu::aten
