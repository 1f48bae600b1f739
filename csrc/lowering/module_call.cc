#include "lowering/module_call.h"

#include <mutex>
#include <set>

namespace torchtpu::lowering {
namespace {

std::mutex g_mu;
ModuleProvider* g_provider = nullptr;             // guarded by g_mu; never freed
std::set<std::string, std::less<>>* g_names = nullptr;  // guarded by g_mu; never freed

std::set<std::string, std::less<>>& names() {
  if (g_names == nullptr) g_names = new std::set<std::string, std::less<>>();
  return *g_names;
}

base::StatusOr<std::vector<Value>> lower_module_call(LoweringContext& c) {
  ModuleProvider provider;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_provider != nullptr) provider = *g_provider;
  }
  if (!provider) {
    return base::internal_error("lowering: " + c.op_name() +
                                " is a module call but no module provider is set");
  }
  std::vector<OpArg> args;
  for (size_t i = 0; i < c.num_args(); ++i) args.push_back(c.arg(i));
  TORCHTPU_ASSIGN_OR_RETURN(ModuleFunctions f, provider(c.op_name(), args, c.out_types()));
  if (f.entry.empty() || f.text.empty()) {
    return base::internal_error("lowering: the module provider gave " + c.op_name() +
                                " no function to call");
  }
  std::vector<Value> operands;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].kind == ArgKind::kTensor) {
      operands.push_back(c.tensor(i));
    } else if (args[i].kind == ArgKind::kScalar) {
      // A 0-dim CPU tensor where the op takes a tensor: the exported function was traced
      // for a device tensor of a known dtype, which this call no longer says.
      return base::invalid_argument(c.op_name() + ": argument " + std::to_string(i) +
                                    " is a 0-dim CPU tensor; move it to the tpu device");
    } else if (args[i].kind == ArgKind::kTensorList) {
      for (const Value& v : c.tensor_list(i)) operands.push_back(v);
    }
  }
  c.b().add_functions(f.entry, f.text);
  std::vector<Value> results =
      c.b().op_multi("func.call", operands, c.out_types(), "callee = @" + f.entry);
  return results;
}

const LoweringFn& module_call_lowering() {
  static const LoweringFn* fn = new LoweringFn(lower_module_call);
  return *fn;
}

}  // namespace

void set_module_provider(ModuleProvider provider) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_provider == nullptr) g_provider = new ModuleProvider();
  *g_provider = std::move(provider);
}

base::Status register_module_call(const std::string& op_name) {
  if (op_name.find("::") == std::string::npos) {
    return base::invalid_argument("lowering: module call name '" + op_name +
                                  "' is not qualified (expected 'namespace::name')");
  }
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (names().count(op_name)) return base::Status();
  }
  // Outside g_mu: the table's lookup falls through to find_module_call, which takes it.
  if (find_lowering(op_name) != nullptr) {
    return base::invalid_argument("lowering: " + op_name +
                                  " already has a lowering; a module call needs a name of its own");
  }
  std::lock_guard<std::mutex> lock(g_mu);
  names().insert(op_name);
  return base::Status();
}

bool is_module_call(std::string_view op_name) {
  std::lock_guard<std::mutex> lock(g_mu);
  return names().count(op_name) > 0;
}

std::vector<std::string> module_calls() {
  std::lock_guard<std::mutex> lock(g_mu);
  return {names().begin(), names().end()};
}

const LoweringFn* find_module_call(std::string_view op_name) {
  return is_module_call(op_name) ? &module_call_lowering() : nullptr;
}

}  // namespace torchtpu::lowering
