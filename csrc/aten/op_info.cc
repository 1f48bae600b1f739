#include "aten/op_info.h"

#include <memory>
#include <mutex>
#include <unordered_map>

#include "aten/op_special_cases.h"

namespace torchtpu::aten {
bool is_optional_tensor_list_type(const c10::Argument& formal) {
  auto list = formal.type()->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::OptionalType &&
         list->getElementType()->expectRef<c10::OptionalType>().getElementType()->kind() ==
             c10::TypeKind::TensorType;
}

namespace {

c10::TypePtr unwrap_optional(c10::TypePtr t) {
  if (auto o = t->cast<c10::OptionalType>()) return o->getElementType();
  return t;
}

FormalKind formal_kind(const std::string& op_name, const c10::Argument& formal) {
  c10::TypePtr type = unwrap_optional(formal.type());
  if (type->kind() == c10::TypeKind::FloatType && is_runtime_float_arg(op_name, formal.name())) {
    return FormalKind::kRuntimeFloat;
  }
  // ScalarType, Layout and MemoryFormat arguments are ints in type(); real_type() names
  // them (a dtype read as an int was a reduction dim: prod(dtype=torch.int64) reduced 4).
  c10::TypeKind real = unwrap_optional(formal.real_type())->kind();
  if (type->kind() == c10::TypeKind::NumberType) {
    return is_structural_scalar_arg(op_name, formal.name()) ? FormalKind::kStructuralNumber
                                                            : FormalKind::kNumber;
  }
  if (auto list = type->cast<c10::ListType>()) {
    // Scalar[] (foreach ops) and float[] (histogram's range): runtime scalars.
    c10::TypeKind item = list->getElementType()->kind();
    if (item == c10::TypeKind::NumberType || item == c10::TypeKind::FloatType) {
      return FormalKind::kScalarList;
    }
  }
  if (real == c10::TypeKind::ScalarTypeType) return FormalKind::kDType;
  if (real == c10::TypeKind::LayoutType || real == c10::TypeKind::DeviceObjType ||
      real == c10::TypeKind::MemoryFormatType) {
    return FormalKind::kIgnored;
  }
  return FormalKind::kGeneric;
}

std::unique_ptr<OpInfo> make_info(const c10::OperatorHandle& op, int id) {
  auto info = std::make_unique<OpInfo>();
  const c10::FunctionSchema& schema = op.schema();
  info->operator_name = op.operator_name();
  info->name = schema.name();
  if (!schema.overload_name().empty()) info->name += "." + schema.overload_name();
  info->id = id;
  info->lowering = lowering::find_lowering(info->name);
  for (const c10::Argument& a : schema.arguments()) {
    info->formals.push_back(formal_kind(info->name, a));
    bool w = a.alias_info() != nullptr && a.alias_info()->isWrite();
    info->written.push_back(w);
    info->writes |= w;
    info->optional_tensor_lists |= is_optional_tensor_list_type(a);
    c10::TypePtr t = a.type();
    if (auto o = t->cast<c10::OptionalType>()) t = o->getElementType();
    if (t->kind() == c10::TypeKind::GeneratorType) {
      info->generator_arg = static_cast<int>(info->formals.size()) - 1;
    }
  }
  const std::string& n = info->name;
  info->data_dependent = is_data_dependent(n);
  info->batch_norm = is_batch_norm(n);
  info->is_clone = n == "aten::clone";
  info->writes_physical = n == "aten::conj_physical_" || n == "aten::neg_";
  info->cpu_argument_check = cpu_argument_check(n);
  info->cpu_dtypes = cpu_dtype_rule(info->operator_name);
  info->shape_from_scalars = n.rfind("aten::arange", 0) == 0 ||
                             n.rfind("aten::linspace", 0) == 0 ||
                             n.rfind("aten::logspace", 0) == 0;
  info->writes_unreturned = writes_unreturned_args(n);
  if (n == "aten::bernoulli_.Tensor") info->moved_cpu_tensors = {1};
  if (n.rfind("aten::_foreach_", 0) == 0) {
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      c10::TypePtr t = schema.arguments()[i].type();
      if (info->written[i] && t->kind() == c10::TypeKind::ListType) info->bumped_lists.push_back(i);
      if (i > 0 && !info->written[i] && t->kind() == c10::TypeKind::ListType &&
          t->containedType(0)->kind() == c10::TypeKind::TensorType) {
        info->scalar_tensor_lists.push_back(i);
      }
    }
  }
  info->structured_functional =
      op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  return info;
}

struct Registry {
  std::mutex mu;
  // By the address of the operator's schema; an entry whose operator name differs (the
  // operator was deregistered and the address reused) is replaced. Old entries are kept:
  // a caller may still hold them.
  std::unordered_map<const void*, OpInfo*> by_schema;
  std::vector<std::unique_ptr<OpInfo>> all;
};

Registry& registry() {
  static auto* r = new Registry();  // entries outlive static destruction
  return *r;
}

// A small per-thread cache in front of the registry: no lock on the hot path.
struct CacheEntry {
  const void* key = nullptr;
  const OpInfo* info = nullptr;
};
constexpr size_t kThreadCacheSize = 256;
thread_local CacheEntry t_cache[kThreadCacheSize];

}  // namespace

const OpInfo& op_info(const c10::OperatorHandle& op) {
  const void* key = &op.schema();
  CacheEntry& e = t_cache[(reinterpret_cast<uintptr_t>(key) >> 4) % kThreadCacheSize];
  if (e.key == key && e.info->operator_name == op.operator_name()) return *e.info;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.by_schema.find(key);
  if (it == r.by_schema.end() || !(it->second->operator_name == op.operator_name())) {
    r.all.push_back(make_info(op, static_cast<int>(r.all.size()) + 1));
    it = r.by_schema.insert_or_assign(key, r.all.back().get()).first;
  }
  e.key = key;
  e.info = it->second;
  return *it->second;
}

}  // namespace torchtpu::aten
