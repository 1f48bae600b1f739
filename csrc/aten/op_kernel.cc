#include "aten/op_kernel.h"

#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "aten/copy_ops.h"
#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/host_transfer.h"
#include "aten/op_special_cases.h"
#include "aten/overlap_checks.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_storage.h"
#include "base/lru_map.h"
#include "base/metrics.h"
#include "lowering/lowering.h"
#include "runtime/execution_trace.h"

namespace torchtpu::aten {
namespace {

using lowering::ArgKind;
using lowering::OpArg;
using lowering::TensorType;

struct CompiledOp {
  runtime::ExecutablePtr exe;
  std::vector<lowering::ParamBinding> bindings;
  std::vector<TensorType> out_types;      // one per defined tensor return
  std::vector<bool> return_defined;       // per schema return
  std::vector<int> return_to_arg;         // per schema return: mutable arg it writes, or -1
  std::vector<int> return_list_size;      // per schema return: items of a Tensor[], or -1
  std::vector<int> list_write_args;       // a `-> ()` list op's written Tensor(a!)[] args
  std::vector<int> extra_write_args;      // written Tensor(a!) arguments no return names
                                          // (writes_unreturned_args), after the returns
  std::vector<std::string> check_messages;
  std::vector<lowering::CheckKind> check_kinds;
};

// Op signature -> its compiled program, bounded like the executable cache it draws from
// (an entry keeps its executable alive, so an unbounded map would defeat that bound).
// Created with the first op (its capacity comes from the device runtime); guarded by
// g_cache_mu.
using OpCache = base::LruMap<std::string, std::shared_ptr<CompiledOp>>;
std::mutex g_cache_mu;
OpCache* g_op_cache = nullptr;

OpCache& op_cache() {
  if (g_op_cache == nullptr) g_op_cache = new OpCache(compile_cache().capacity());
  return *g_op_cache;
}

std::string op_name(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  return name;
}

// Thrown internally when a call cannot run on tpu and must fall back.
struct NeedsFallback {
  std::string reason;
};

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().is_privateuseone(); }

TensorType type_of(const at::Tensor& t) {
  return TensorType{to_dtype(t.scalar_type()), std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
}

c10::TypePtr unwrap_optional(c10::TypePtr t) {
  if (auto o = t->cast<c10::OptionalType>()) return o->getElementType();
  return t;
}

lowering::ScalarCategory category_of(c10::ScalarType t) {
  if (t == c10::ScalarType::Bool) return lowering::ScalarCategory::kBool;
  if (c10::isIntegralType(t, /*includeBool=*/false)) return lowering::ScalarCategory::kInt;
  if (c10::isComplexType(t)) return lowering::ScalarCategory::kComplex;
  return lowering::ScalarCategory::kFloat;
}

// Ops whose result shape is computed from Scalar arguments: their values join the key.
bool shape_depends_on_scalars(const std::string& name) {
  return name.rfind("aten::arange", 0) == 0 || name.rfind("aten::linspace", 0) == 0 ||
         name.rfind("aten::logspace", 0) == 0;
}

bool is_scalar_list(const c10::TypePtr& type) {
  auto list = type->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::NumberType;
}

struct CallInfo {
  std::vector<OpArg> args;
  std::string key;
  int device = -1;
  std::optional<at::Generator> generator;  // a Generator argument, if any
};

void note_device(CallInfo& info, const at::Tensor& t, const std::string& name) {
  if (!is_tpu(t)) return;
  int d = t.device().index();
  if (info.device < 0) info.device = d;
  TORCH_CHECK(info.device == d, "Expected all tensors to be on the same device, but found at "
              "least two devices, tpu:", info.device, " and tpu:", d, "! (in ", name, ")");
}

OpArg tensor_arg(CallInfo& info, const at::Tensor& t, const std::string& name) {
  OpArg a;
  if (!t.defined()) return a;
  if (!is_tpu(t)) {
    // PyTorch lets 0-dim CPU tensors mix with device tensors: they are scalars.
    TORCH_CHECK(t.device().is_cpu() && t.dim() == 0,
                "Expected all tensors to be on the same device, but found at least two "
                "devices, tpu:", std::max(info.device, 0), " and ", t.device(), "! (in ", name,
                "; move the tensor with .to('tpu'))");
    a.kind = ArgKind::kScalar;
    a.scalar_category = category_of(t.scalar_type());
    return a;
  }
  note_device(info, t, name);
  a.kind = ArgKind::kTensor;
  a.type = type_of(t);
  return a;
}

CallInfo describe_call(const c10::FunctionSchema& schema, const std::string& name,
                       c10::ArrayRef<c10::IValue> ivalues) {
  CallInfo info;
  info.key = name;
  const auto& formals = schema.arguments();
  for (size_t i = 0; i < ivalues.size(); ++i) {
    const c10::IValue& v = ivalues[i];
    c10::TypePtr type = unwrap_optional(formals[i].type());
    // ScalarType, Layout and MemoryFormat arguments are ints in type(); real_type() names
    // them (a dtype read as an int was a reduction dim: prod(dtype=torch.int64) reduced 4).
    c10::TypeKind real = unwrap_optional(formals[i].real_type())->kind();
    OpArg a;
    if (v.isNone()) {
      // kNone
    } else if (v.isTensor()) {
      a = tensor_arg(info, v.toTensor(), name);
    } else if (v.isTensorList()) {
      a.kind = ArgKind::kTensorList;
      for (const at::Tensor& t : v.toTensorVector()) {
        TORCH_CHECK(is_tpu(t), "Expected all tensors to be on the same device, but found a ",
                    t.device(), " tensor in a list of ", name, " (move it with .to('tpu'))");
        note_device(info, t, name);
        a.list_types.push_back(type_of(t));
      }
    } else if (is_optional_tensor_list(v)) {
      // Tensor?[] (advanced indexing): the present items, with their positions.
      a.kind = ArgKind::kTensorList;
      c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
      for (size_t k = 0; k < list.size(); ++k) {
        std::optional<at::Tensor> t = list.get(k);
        if (!t || !t->defined()) continue;
        TORCH_CHECK(is_tpu(*t), "Expected all tensors to be on the same device, but found a ",
                    t->device(), " index tensor in ", name, " (move it with .to('tpu'))");
        note_device(info, *t, name);
        a.list_types.push_back(type_of(*t));
        a.ints.push_back(static_cast<int64_t>(k));
      }
    } else if (is_scalar_list(type)) {
      // Scalar[] (foreach ops): every item is a runtime scalar, like a Scalar argument.
      a.kind = ArgKind::kScalarList;
      for (const c10::IValue& item : v.toListRef()) {
        if (item.isComplexDouble()) throw NeedsFallback{"complex scalars are not lowered"};
        a.scalar_categories.push_back(item.isBool()  ? lowering::ScalarCategory::kBool
                                      : item.isInt() ? lowering::ScalarCategory::kInt
                                                     : lowering::ScalarCategory::kFloat);
      }
    } else if (v.isGenerator()) {
      info.generator = v.toGenerator();
    } else if (v.isDouble() && is_runtime_float_arg(name, formals[i].name())) {
      a.kind = ArgKind::kScalar;
      a.scalar_category = lowering::ScalarCategory::kFloat;
    } else if (type->kind() == c10::TypeKind::NumberType) {
      a.kind = ArgKind::kScalar;
      a.scalar_category = v.isBool()                  ? lowering::ScalarCategory::kBool
                          : v.isInt() || v.isSymInt() ? lowering::ScalarCategory::kInt
                          : v.isComplexDouble()       ? lowering::ScalarCategory::kComplex
                                                      : lowering::ScalarCategory::kFloat;
    } else if (real == c10::TypeKind::ScalarTypeType) {
      a.kind = ArgKind::kDType;
      a.dtype = to_dtype(static_cast<c10::ScalarType>(v.toInt()));
    } else if (real == c10::TypeKind::LayoutType || real == c10::TypeKind::DeviceObjType ||
               real == c10::TypeKind::MemoryFormatType) {
      // Irrelevant to the computation: the result is always a dense tpu tensor.
    } else if (v.isBool()) {
      a.kind = ArgKind::kBool;
      a.int_value = v.toBool();
    } else if (v.isInt() || v.isSymInt()) {
      a.kind = ArgKind::kInt;
      a.int_value = v.isInt() ? v.toInt() : v.toSymInt().expect_int();
    } else if (v.isDouble()) {
      a.kind = ArgKind::kDouble;
      a.double_value = v.toDouble();
    } else if (v.isIntList() || v.isSymIntList()) {
      a.kind = ArgKind::kIntList;
      for (const c10::SymInt& s : v.toSymIntVector()) a.ints.push_back(s.expect_int());
    } else if (v.isBoolList()) {
      a.kind = ArgKind::kIntList;
      for (bool b : v.toBoolList()) a.ints.push_back(b);
    } else if (v.isString()) {
      a.kind = ArgKind::kString;
      a.string_value = v.toStringRef();
    } else {
      throw NeedsFallback{"argument '" + formals[i].name() + "' of type " + type->str() +
                          " is not lowered"};
    }
    a.append_key(&info.key);
    if (a.kind == ArgKind::kScalar && shape_depends_on_scalars(name)) {
      // arange(0, n): the output length is a function of the scalar values.
      char buf[40];
      std::snprintf(buf, sizeof buf, "v%.17g;",
                    (v.isTensor() ? v.toTensor().item() : v.toScalar()).toDouble());
      info.key += buf;
    }
    info.args.push_back(std::move(a));
  }
  if (info.device < 0) info.device = 0;
  info.key += "@" + std::to_string(info.device);
  return info;
}

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  // Wrapped numbers (Python scalars) stay on the CPU: meta kernels accept them, and some
  // are Python kernels that turn them back into numbers. Other 0-dim CPU tensors become
  // meta, since some meta kernels (masked_fill) insist on a single device.
  bool cpu_scalar = t.device().is_cpu() && t.dim() == 0;
  if (!is_tpu(t) && !(cpu_scalar && !t.unsafeGetTensorImpl()->is_wrapped_number())) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

c10::IValue to_meta(const c10::IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (v.isTensorList()) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorVector()) out.push_back(to_meta(t));
    return out;
  }
  if (is_optional_tensor_list(v)) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t && t->defined() ? std::optional<at::Tensor>(to_meta(*t)) : std::nullopt);
    }
    return out;
  }
  return v;
}

// A lowering that produced an invalid program, or one the plugin would not compile: an
// internal error naming the op and its call signature (the op-cache key), counted per op.
[[noreturn]] void raise_lowering_error(const std::string& name, const std::string& signature,
                                       const std::string& what) {
  base::keyed_counter_add("lowering_errors", name);
  base::counter_add("num_lowering_errors");
  TORCH_CHECK(false, "tpu: internal error: the lowering of ", name, " failed for the call ",
              signature, ": ", what, ". This is a torchtpu bug, not an error in your code: "
              "please report it with this message (TORCHTPU_DUMP_DIR=<dir> writes the program).");
}

bool fallback_is_error() {
  const char* mode = std::getenv("TORCHTPU_FALLBACK");
  return mode != nullptr && std::strcmp(mode, "error") == 0;
}

// Tensor bytes of a call's arguments (lists included), for the CPU verdict below.
constexpr int64_t kCpuVerdictMaxBytes = 16 << 20;
int64_t tensor_bytes(c10::ArrayRef<c10::IValue> ivalues) {
  int64_t n = 0;
  auto add = [&n](const at::Tensor& t) {
    if (t.defined()) n += t.numel() * static_cast<int64_t>(t.element_size());
  };
  for (const c10::IValue& v : ivalues) {
    if (v.isTensor()) add(v.toTensor());
    if (v.isTensorList()) for (const at::Tensor& t : v.toTensorVector()) add(t);
    if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        if (t) add(*t);
      }
    }
  }
  return n;
}

bool same_alias_set(const c10::AliasInfo* a, const c10::AliasInfo* b) {
  return a && b && a->beforeSets() == b->beforeSets();
}

std::shared_ptr<CompiledOp> compile_op(const c10::OperatorHandle& op, const std::string& name,
                                       c10::ArrayRef<c10::IValue> ivalues, CallInfo& info) {
  const c10::FunctionSchema& schema = op.schema();
  // 1. Meta: validates the call exactly as PyTorch would and yields the result types.
  torch::jit::Stack meta_stack;
  for (const c10::IValue& v : ivalues) meta_stack.push_back(to_meta(v));
  check_index_put_values(name, meta_stack);
  check_same_dtype_out(name, meta_stack);
  try {
    if (!meta_by_equivalent(name, &meta_stack)) op.callBoxed(&meta_stack);
  } catch (const c10::NotImplementedError& e) {
    throw NeedsFallback{"no meta kernel"};
  } catch (const std::exception& e) {  // c10::Error, or a Python meta kernel's error
    // The CPU kernel is the reference: where a meta kernel rejects a call, the CPU kernel
    // decides. It raises PyTorch's own error (meta kernels that are Python references word
    // theirs differently), or computes a result the meta kernel wrongly refused
    // (max_pool2d_with_indices' decomposition cannot reshape a zero-size batch). Only for
    // ops with a CPU kernel (not the CUDA-only fused RNN cells, whose checks are ours) and
    // calls whose tensors are small: a rejected call on big tensors keeps the meta error
    // rather than copying them to the host just to fail.
    if (!fallback_is_error() && op.hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
        tensor_bytes(ivalues) <= kCpuVerdictMaxBytes) {
      std::string what = e.what();
      throw NeedsFallback{"its meta kernel rejected the call: " + what.substr(0, what.find('\n'))};
    }
    throw;
  }
  auto compiled = std::make_shared<CompiledOp>();
  const auto& returns = schema.returns();
  for (size_t j = 0; j < returns.size(); ++j) {
    const c10::IValue& r = meta_stack[j];
    if (r.isTensorList()) {  // foreach ops: a new tensor per item
      std::vector<at::Tensor> items = r.toTensorVector();
      for (const at::Tensor& t : items) compiled->out_types.push_back(type_of(t));
      compiled->return_defined.push_back(true);
      compiled->return_list_size.push_back(static_cast<int>(items.size()));
      compiled->return_to_arg.push_back(-1);
      continue;
    }
    if (!r.isTensor()) throw NeedsFallback{"returns a non-tensor value"};
    const at::Tensor& t = r.toTensor();
    compiled->return_defined.push_back(t.defined());
    if (t.defined()) compiled->out_types.push_back(type_of(t));
    int arg = -1;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
      if (ai && ai->isWrite() && same_alias_set(ai, returns[j].alias_info())) arg = static_cast<int>(i);
    }
    if (returns[j].alias_info() && arg < 0) throw NeedsFallback{"returns a view"};
    if (arg >= 0 && shape_depends_on_scalars(name)) {
      // PyTorch's CPU range factories resize `out` only when its element count differs;
      // otherwise they fill it in its own shape (a (2, 2) view takes a 4-step arange).
      // Their Python meta kernels resize whenever the shape differs, so keep out's shape.
      const at::Tensor& out = ivalues[arg].toTensor();
      if (out.numel() == t.numel()) compiled->out_types.back() = type_of(out);
    }
    compiled->return_to_arg.push_back(arg);
    compiled->return_list_size.push_back(-1);
  }
  // In-place list ops (_foreach_*, the fused optimizer steps) return nothing and write
  // every item of their Tensor(a!)[] arguments (those leaves_list_arg_unchanged does not
  // exclude); the results are the items' new values, of the items' own types, list after
  // list in argument order.
  if (returns.empty()) {
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
      if (!ai || !ai->isWrite() || info.args[i].kind != ArgKind::kTensorList) continue;
      if (leaves_list_arg_unchanged(name, schema.arguments()[i].name(), schema, ivalues)) {
        continue;
      }
      compiled->list_write_args.push_back(static_cast<int>(i));
      const std::vector<TensorType>& items = info.args[i].list_types;
      compiled->out_types.insert(compiled->out_types.end(), items.begin(), items.end());
    }
  }
  // Ops that also write arguments they do not return (the grad-scaler ops' found_inf and
  // growth_tracker): their new values are the results after the returns, in order.
  if (writes_unreturned_args(name)) {
    const std::vector<int>& to_arg = compiled->return_to_arg;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
      if (!ai || !ai->isWrite() || info.args[i].kind == ArgKind::kTensorList) continue;
      if (std::find(to_arg.begin(), to_arg.end(), static_cast<int>(i)) != to_arg.end()) continue;
      if (info.args[i].kind != ArgKind::kTensor) {
        throw NeedsFallback{"argument '" + schema.arguments()[i].name() +
                            "' is not a tpu tensor"};
      }
      compiled->extra_write_args.push_back(static_cast<int>(i));
      compiled->out_types.push_back(info.args[i].type);
    }
  }
  // 2. Lower and compile.
  auto lowered = lowering::lower_op(name, info.args, compiled->out_types);
  if (!lowered.ok()) {
    // Unimplemented or unsupported cases are fallbacks; a lowering that failed its own
    // invariants is a bug, and running the op elsewhere would hide it.
    if (lowered.status().code() == base::StatusCode::kInternal) {
      raise_lowering_error(name, info.key, lowered.status().message());
    }
    throw NeedsFallback{lowered.status().message()};
  }
  auto exe = compile_cache().get_or_compile(lowered->text, info.device);
  if (!exe.ok()) {
    raise_lowering_error(name, info.key,
                         "the plugin rejected its program: " + exe.status().message());
  }
  compiled->exe = *exe;
  compiled->bindings = std::move(lowered->bindings);
  compiled->check_messages = std::move(lowered->check_messages);
  compiled->check_kinds = std::move(lowered->check_kinds);
  base::counter_add("num_op_signatures_compiled");
  return compiled;
}

runtime::BufferPtr scalar_buffer(const c10::IValue& v, base::DType dtype, int device) {
  if (v.isTensor()) {
    // A 0-dim CPU tensor (also a Python number the arithmetic operators wrap) is cast the
    // way TensorIterator casts it, without an overflow check: uint8 + 1000 wraps on the
    // CPU. Scalar arguments keep the checked conversion their CPU kernels apply (fill_).
    return host_scalar_to_buffer(v.toTensor().to(to_scalar_type(dtype)), device);
  }
  return scalar_to_buffer(v.toScalar(), dtype, device);
}

runtime::BufferPtr rng_buffer(const CallInfo& info) {
  bool given = info.generator && info.generator->defined();
  return next_rng_state_buffer(
      given ? *info.generator : default_generator(static_cast<c10::DeviceIndex>(info.device)),
      info.device);
}

void run_compiled(const CompiledOp& c, const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                  const CallInfo& info) {
  size_t num_args = schema.arguments().size();
  auto ivalues = torch::jit::last(*stack, num_args);
  std::vector<runtime::BufferPtr> inputs;
  inputs.reserve(c.bindings.size());
  for (const lowering::ParamBinding& p : c.bindings) {
    switch (p.source) {
      case lowering::ParamBinding::Source::kTensor:
        inputs.push_back(read_tensor(ivalues[p.arg_index].toTensor()));
        break;
      case lowering::ParamBinding::Source::kTensorListItem:
        inputs.push_back(read_tensor(present_tensors(ivalues[p.arg_index])[p.list_index]));
        break;
      case lowering::ParamBinding::Source::kScalar:
        inputs.push_back(scalar_buffer(ivalues[p.arg_index], p.dtype, info.device));
        break;
      case lowering::ParamBinding::Source::kScalarListItem:
        inputs.push_back(scalar_buffer(ivalues[p.arg_index].toListRef()[p.list_index], p.dtype,
                                       info.device));
        break;
      case lowering::ParamBinding::Source::kRngState:
        inputs.push_back(rng_buffer(info));
        break;
    }
  }
  if (c.out_types.empty() && !c.list_write_args.empty()) {  // in-place list op, empty lists
    torch::jit::drop(*stack, num_args);
    return;
  }
  std::vector<const runtime::Buffer*> raw;
  for (const auto& b : inputs) raw.push_back(b.get());
  auto outputs = c.exe->execute(raw);
  TORCH_CHECK(outputs.ok(), outputs.status().message());
  base::counter_add("num_eager_ops");

  // Data checks run before anything is written, so a failing call changes nothing. A call
  // that writes nothing (_assert_async) queues them for the next host read instead, as a
  // compiled graph does and as CUDA reports a device-side assert: it never waits.
  size_t num_results = c.out_types.size();
  if (num_results == 0) {
    defer_data_checks(*outputs, 0, c.check_kinds, c.check_messages,
                      "an earlier call of " + op_name(schema));
  } else {
    run_data_checks(*outputs, num_results, c.check_kinds, c.check_messages);
  }

  std::vector<c10::IValue> results;
  size_t next = 0;
  for (int arg : c.list_write_args) {
    for (const at::Tensor& target : ivalues[arg].toTensorVector()) {
      write_tensor(target, (*outputs)[next++]);
    }
  }
  for (size_t j = 0; j < c.return_defined.size(); ++j) {
    if (c.return_list_size[j] >= 0) {
      c10::List<at::Tensor> items;
      for (int k = 0; k < c.return_list_size[j]; ++k, ++next) {
        items.push_back(wrap_buffer((*outputs)[next], to_scalar_type(c.out_types[next].dtype)));
      }
      results.emplace_back(std::move(items));
      continue;
    }
    if (!c.return_defined[j]) {
      results.emplace_back(at::Tensor());
      continue;
    }
    runtime::BufferPtr buf = (*outputs)[next++];
    int arg = c.return_to_arg[j];
    if (arg >= 0) {
      const at::Tensor& target = ivalues[arg].toTensor();
      if (target.sizes() != c10::IntArrayRef(buf->dims())) target.resize_(buf->dims());
      write_tensor(target, buf);
      results.emplace_back(target);
    } else {
      results.emplace_back(wrap_buffer(std::move(buf), to_scalar_type(c.out_types[next - 1].dtype)));
    }
  }
  for (int arg : c.extra_write_args) {
    write_tensor(ivalues[arg].toTensor(), (*outputs)[next++]);
  }
  torch::jit::drop(*stack, num_args);
  for (auto& r : results) stack->push_back(std::move(r));
}

}  // namespace

void run_data_checks(const std::vector<runtime::BufferPtr>& outputs, size_t first,
                     const std::vector<lowering::CheckKind>& kinds,
                     const std::vector<std::string>& messages) {
  for (size_t k = 0; k < messages.size(); ++k) {
    bool ok = false;
    auto status = outputs.at(first + k)->to_host(&ok, 1);
    TORCH_CHECK(status.ok(), status.message());
    base::counter_add("num_data_checks");
    if (ok) continue;
    if (kinds[k] == lowering::CheckKind::kIndexError) TORCH_CHECK_INDEX(false, messages[k]);
    if (kinds[k] == lowering::CheckKind::kLinalgError) TORCH_CHECK_LINALG(false, messages[k]);
    TORCH_CHECK(false, messages[k]);
  }
}

size_t op_cache_size() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return g_op_cache == nullptr ? 0 : g_op_cache->size();
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason) {
  std::string name = op_name(op.schema());
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "tpu: ", name, " cannot run on tpu (", reason,
                              ") and TORCHTPU_FALLBACK=error forbids running it on the CPU; "
                              "unset it (or set TORCHTPU_FALLBACK=warn) to allow the fallback");
  int64_t n = base::keyed_counter_add("fallback_ops", name);
  base::counter_add("num_cpu_fallbacks");
  if (n == 1) {
    TORCH_WARN("tpu: ", name, " ran on the CPU (", reason,
               "); this copies its inputs to the host and back. torchtpu.debug.report() lists "
               "every fallback; TORCHTPU_FALLBACK=error makes them errors.");
  }
  at::native::cpu_fallback(op, stack);
}

// Ops the Conjugate and Negative keys pass through (mm, bmm, dot, clone, ...) arrive with
// tensors whose math bits are set, and lowerings read stored elements. clone materializes
// the logical value (resolve_conj is a clone; copy_ cannot serve, since the fallbacks
// resolve its source through clone). Other inputs are resolved (a conjugated / negated
// copy, as PyTorch's own fallback makes) before anything runs. conj_physical_ and neg_ act
// on the stored elements whatever the bits (both commute with conjugation and negation);
// any other op writing into a tensor with a bit set raises rather than compute on the
// wrong elements.
bool clone_with_math_bits(const c10::FunctionSchema& schema, const std::string& name,
                          torch::jit::Stack* stack) {
  if (name != "aten::clone") return false;
  auto args = torch::jit::last(*stack, schema.arguments().size());
  const at::Tensor self = args[0].toTensor();
  if (!self.is_conj() && !self.is_neg()) return false;
  at::Tensor out = resolved_clone(self);
  torch::jit::drop(*stack, schema.arguments().size());
  stack->push_back(std::move(out));
  return true;
}

void resolve_math_bits(const c10::FunctionSchema& schema, const std::string& name,
                       torch::jit::Stack* stack) {
  size_t n = schema.arguments().size();
  size_t first = stack->size() - n;
  auto has_bits = [](const at::Tensor& t) { return t.defined() && (t.is_conj() || t.is_neg()); };
  bool physical = name == "aten::conj_physical_" || name == "aten::neg_";
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[first + i];
    const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
    bool written = ai != nullptr && ai->isWrite();
    if (v.isTensor() && has_bits(v.toTensor())) {
      if (written && physical) continue;
      TORCH_CHECK_NOT_IMPLEMENTED(!written, "tpu: ", name, " writes into a tensor with the ",
                                  v.toTensor().is_conj() ? "conjugate" : "negative",
                                  " bit set; call resolve_conj() / resolve_neg() on it first");
      v = v.toTensor().resolve_conj().resolve_neg();
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> items = v.toTensorVector();
      bool any = false;
      for (const at::Tensor& t : items) any |= has_bits(t);
      if (!any) continue;
      TORCH_CHECK_NOT_IMPLEMENTED(!written, "tpu: ", name, " writes into a list holding a "
                                  "tensor with the conjugate or negative bit set; resolve it "
                                  "first");
      for (at::Tensor& t : items) t = t.resolve_conj().resolve_neg();
      v = items;
    }
  }
}

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  std::string name = op_name(schema);
  runtime::trace::Label label(name.c_str());
  if (clone_with_math_bits(schema, name, stack)) return;
  resolve_math_bits(schema, name, stack);
  check_written_overlap(schema, name, torch::jit::last(*stack, schema.arguments().size()));
  check_arguments_like_cpu(name, torch::jit::last(*stack, schema.arguments().size()));
  if (is_data_dependent(name)) {
    base::keyed_counter_add("host_roundtrip_ops", name);
    base::counter_add("num_host_roundtrips");
    at::native::cpu_fallback(op, stack);
    return;
  }
  if (lowering::find_lowering(name) == nullptr) {
    cpu_fallback(op, stack, "no lowering");
    return;
  }
  expand_index_masks(schema, name, stack);
  auto ivalues = torch::jit::last(*stack, schema.arguments().size());
  std::shared_ptr<CompiledOp> compiled;
  CallInfo info;
  try {
    info = describe_call(schema, name, ivalues);
    {
      std::lock_guard<std::mutex> lock(g_cache_mu);
      if (auto* hit = op_cache().find(info.key)) compiled = *hit;
    }
    if (!compiled) {
      compiled = compile_op(op, name, ivalues, info);
      std::lock_guard<std::mutex> lock(g_cache_mu);
      size_t dropped = op_cache().insert(info.key, compiled).second;
      if (dropped > 0) base::counter_add("num_op_cache_evictions", static_cast<int64_t>(dropped));
    }
  } catch (const NeedsFallback& f) {
    cpu_fallback(op, stack, f.reason);
    return;
  }
  if (!is_batch_norm(name)) {
    run_compiled(*compiled, schema, stack, info);
    return;
  }
  std::vector<c10::IValue> args(ivalues.begin(), ivalues.end());  // the stack is consumed
  run_compiled(*compiled, schema, stack, info);
  update_batch_norm_stats(args, *stack);
}

}  // namespace torchtpu::aten
