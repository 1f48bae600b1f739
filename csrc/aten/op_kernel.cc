#include "aten/op_kernel.h"

#include <ATen/ATen.h>
#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <vector>

#include "aten/call_signature.h"
#include "aten/compiled_op.h"
#include "aten/copy_ops.h"
#include "aten/device_runtime.h"
#include "aten/dispatch_profile.h"
#include "aten/fused_eager.h"
#include "aten/host_transfer.h"
#include "aten/op_info.h"
#include "aten/op_special_cases.h"
#include "aten/overlap_checks.h"
#include "aten/program_executor.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_guard.h"
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

// Op signature -> its compiled program, bounded like the executable cache it draws from
// (an entry keeps its executable alive, so an unbounded map would defeat that bound).
// Keyed by the signature's hash; a hit compares the words. Created with the first op (its
// capacity comes from the device runtime); guarded by g_cache_mu.
using OpCache = base::LruMap<uint64_t, std::shared_ptr<CompiledOp>>;
std::mutex g_cache_mu;
OpCache* g_op_cache = nullptr;

void shrink_op_cache(size_t n) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_op_cache->shrink_to(n);
}

OpCache& op_cache() {
  if (g_op_cache == nullptr) {
    g_op_cache = new OpCache(compile_cache().capacity());
    compile_cache().add_holder(shrink_op_cache);
  }
  return *g_op_cache;
}


// Signature buffers, one per nesting level of the boxed kernel on this thread (an op may
// run ops: batch norm's statistics update, a fallback's copies), reused call after call.
class SignatureScope {
 public:
  SignatureScope() {
    if (depth_ == pool_.size()) pool_.push_back(std::make_unique<CallSignature>());
    sig_ = pool_[depth_++].get();
  }
  ~SignatureScope() { --depth_; }
  CallSignature& get() { return *sig_; }

 private:
  static thread_local std::vector<std::unique_ptr<CallSignature>> pool_;
  static thread_local size_t depth_;
  CallSignature* sig_;
};
thread_local std::vector<std::unique_ptr<CallSignature>> SignatureScope::pool_;
thread_local size_t SignatureScope::depth_ = 0;

}  // namespace

size_t op_cache_size() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return g_op_cache == nullptr ? 0 : g_op_cache->size();
}

namespace {

// A random op run on the CPU draws from a CPU generator seeded by the tpu generator it
// was given (or the default one of its device), not from the CPU's default generator
// (torch.tpu.manual_seed would not reproduce it, and the CPU's stream would advance) and
// not from the tpu generator itself (the CPU kernel refuses another device's).
void use_tpu_generator_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpInfo& info = op_info(op);
  if (info.generator_arg < 0) return;
  const size_t n = op.schema().arguments().size();
  auto args = torch::jit::last(*stack, n);
  const c10::IValue& arg = args[info.generator_arg];
  at::Generator gen;
  if (arg.isGenerator() && arg.toGenerator().defined()) {
    gen = arg.toGenerator();
  } else {
    c10::DeviceIndex index = -1;
    for (const c10::IValue& v : args) {
      if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_privateuseone()) {
        index = v.toTensor().device().index();
        break;
      }
    }
    if (index < 0) index = static_cast<c10::DeviceIndex>(current_device_index());
    gen = default_generator(index);
  }
  check_tpu_generator(gen, info.name);
  (*stack)[stack->size() - n + info.generator_arg] = cpu_generator_for_fallback(gen);
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason) {
  const std::string& name = op_info(op).name;
  // PyTorch's fallback would say it cannot run the op "with arguments from the 'CPU'
  // backend", about tensors the user put on tpu.
  TORCH_CHECK_NOT_IMPLEMENTED(op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU),
                              "tpu: ", name, " cannot run on tpu (", reason, "), and PyTorch "
                              "has no CPU kernel of it to fall back to (it implements it for "
                              "other devices only, such as CUDA)");
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "tpu: ", name, " cannot run on tpu (", reason,
                              ") and TORCHTPU_FALLBACK=error forbids running it on the CPU; "
                              "unset it (or set TORCHTPU_FALLBACK=warn) to allow the fallback");
  if (!run_eig_fallback_guarding_nan(name, op, stack)) {
    use_tpu_generator_on_cpu(op, stack);
    at::native::cpu_fallback(op, stack);
  }
  // Counted once it ran: a call the CPU kernel refused (an error the meta kernel words
  // differently, left to the CPU to raise) computed nothing there.
  int64_t n = base::keyed_counter_add("fallback_ops", name);
  base::counter_add("num_cpu_fallbacks");
  if (n == 1) {
    TORCH_WARN("tpu: ", name, " ran on the CPU (", reason,
               "); this copies its inputs to the host and back. torchtpu.debug.report() lists "
               "every fallback; TORCHTPU_FALLBACK=error makes them errors.");
  }
}

namespace {


// The strides PyTorch's clone gives its result: the input's under Preserve (the default)
// when it is non-overlapping and dense, else those of the asked (or suggested) format; or
// nothing when they are contiguous, the dense row-major value a lowering returns.
std::optional<std::vector<int64_t>> clone_strides(const at::Tensor& self,
                                                  const c10::IValue& format_arg) {
  auto format = format_arg.isNone() ? c10::MemoryFormat::Preserve
                                    : static_cast<c10::MemoryFormat>(format_arg.toInt());
  if (format == c10::MemoryFormat::Contiguous ||
      (format == c10::MemoryFormat::Preserve && self.is_contiguous())) {
    return std::nullopt;
  }
  std::vector<int64_t> strides;
  if (format == c10::MemoryFormat::Preserve) {
    if (self.is_non_overlapping_and_dense()) {
      strides = self.strides().vec();
    } else {
      format = self.suggest_memory_format();
    }
  }
  if (format == c10::MemoryFormat::ChannelsLast) {
    TORCH_CHECK(self.dim() == 4, "required rank 4 tensor to use channels_last format");
    strides = c10::get_channels_last_strides_2d(self.sizes());
  } else if (format == c10::MemoryFormat::ChannelsLast3d) {
    TORCH_CHECK(self.dim() == 5, "required rank 5 tensor to use channels_last_3d format");
    strides = c10::get_channels_last_strides_3d(self.sizes());
  } else if (strides.empty()) {
    return std::nullopt;  // Preserve of a tensor that suggests contiguous
  }
  c10::DimVector dense = c10::contiguous_strides(self.sizes());
  if (std::equal(strides.begin(), strides.end(), dense.begin(), dense.end())) return std::nullopt;
  return strides;
}

// clone's two cases a lowering (a dense row-major value of the logical elements) does not
// cover. Ops the Conjugate and Negative keys pass through (mm, bmm, dot, clone, ...)
// arrive with tensors whose math bits are set, and lowerings read stored elements. clone
// materializes the logical value (resolve_conj is a clone; copy_ cannot serve, since the
// fallbacks resolve its source through clone). Other inputs are resolved (a conjugated /
// negated copy, as PyTorch's own fallback makes) before anything runs. conj_physical_ and
// neg_ act on the stored elements whatever the bits (both commute with conjugation and
// negation); any other op writing into a tensor with a bit set raises rather than compute
// on the wrong elements. And a result laid out other than contiguously (channels_last, or
// a transposed input's strides under Preserve) is written into a tensor of those strides.
bool clone_outside_lowering(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, schema.arguments().size());
  const at::Tensor self = args[0].toTensor();
  std::optional<std::vector<int64_t>> strides = clone_strides(self, args[1]);
  bool math_bits = self.is_conj() || self.is_neg();
  if (!math_bits && !strides) return false;
  at::Tensor out = math_bits ? resolved_clone(self) : self;
  if (strides) {
    at::Tensor laid_out = at::empty_strided(self.sizes(), *strides, self.options());
    laid_out.copy_(out);
    out = std::move(laid_out);
  }
  torch::jit::drop(*stack, schema.arguments().size());
  stack->push_back(std::move(out));
  return true;
}

void resolve_math_bits(const OpInfo& info, torch::jit::Stack* stack) {
  size_t n = info.formals.size();
  size_t first = stack->size() - n;
  auto has_bits = [](const at::Tensor& t) { return t.defined() && (t.is_conj() || t.is_neg()); };
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[first + i];
    bool written = info.written[i];
    if (v.isTensor()) {
      if (!has_bits(v.toTensor())) continue;
      if (written && info.writes_physical) continue;
      TORCH_CHECK_NOT_IMPLEMENTED(!written, "tpu: ", info.name, " writes into a tensor with the ",
                                  v.toTensor().is_conj() ? "conjugate" : "negative",
                                  " bit set; call resolve_conj() / resolve_neg() on it first");
      v = v.toTensor().resolve_conj().resolve_neg();
    } else if (v.isTensorList()) {
      const c10::List<at::Tensor> list = v.toTensorList();
      bool any = false;
      for (size_t k = 0; k < list.size() && !any; ++k) any = has_bits(list.get(k));
      if (!any) continue;
      TORCH_CHECK_NOT_IMPLEMENTED(!written, "tpu: ", info.name, " writes into a list holding a "
                                  "tensor with the conjugate or negative bit set; resolve it "
                                  "first");
      std::vector<at::Tensor> items = v.toTensorVector();
      for (at::Tensor& t : items) t = t.resolve_conj().resolve_neg();
      v = items;
    }
  }
}

// The op cache entry for `sig`, or null.
std::shared_ptr<CompiledOp> find_compiled(const CallSignature& sig) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  std::shared_ptr<CompiledOp>* hit = op_cache().find(sig.hash);
  if (hit == nullptr || (*hit)->words != sig.words) return nullptr;
  return *hit;
}

void insert_compiled(const CallSignature& sig, std::shared_ptr<CompiledOp> compiled) {
  compiled->words = sig.words;
  std::lock_guard<std::mutex> lock(g_cache_mu);
  OpCache& cache = op_cache();
  // A different signature with the same hash (vanishingly rare) gives way to this one.
  if (std::shared_ptr<CompiledOp>* present = cache.find(sig.hash)) {
    if ((*present)->words != sig.words) *present = std::move(compiled);
    return;
  }
  size_t dropped = cache.insert(sig.hash, std::move(compiled)).second;
  if (dropped > 0) base::counter_add("num_op_cache_evictions", static_cast<int64_t>(dropped));
}

}  // namespace

namespace {

// Bumps the version counters of an in-place _foreach_ op's written tensors once it has
// run (OpInfo::bumped_lists), whichever path ran it.
class ListVersionBump {
 public:
  ListVersionBump(const OpInfo& info, const c10::FunctionSchema& schema,
                  const torch::jit::Stack& stack) {
    if (info.bumped_lists.empty()) return;
    auto args = torch::jit::last(stack, schema.arguments().size());
    for (size_t i : info.bumped_lists) {
      for (const at::Tensor& t : args[i].toTensorList()) {
        // The check bump_version() makes, before anything is written (the CPU's per-tensor
        // path raises it at the first tensor, here it must not throw after the run).
        TORCH_CHECK(!t.is_inference() || c10::InferenceMode::is_enabled(),
                    "Inplace update to inference tensor outside InferenceMode is not allowed."
                    "You can make a clone to get a normal tensor before doing inplace update."
                    "See https://github.com/pytorch/rfcs/pull/17 for more details.");
        tensors_.push_back(t);
      }
    }
  }
  ~ListVersionBump() {
    if (std::uncaught_exceptions() > exceptions_) return;  // it failed: nothing written
    for (const at::Tensor& t : tensors_) t.unsafeGetTensorImpl()->bump_version();
  }

 private:
  std::vector<at::Tensor> tensors_;
  int exceptions_ = std::uncaught_exceptions();
};

// Argument `v` of a list op for item k alone (of n): a list holds its item k; the
// per-item scalars tensor of _foreach_addcmul_.Tensor and friends its element k.
c10::IValue item_argument(const c10::IValue& v, const c10::Argument& formal, size_t k,
                          size_t n) {
  if (v.isTensorList()) return c10::List<at::Tensor>({v.toTensorList().get(k)});
  if (v.isList() && v.toListRef().size() == n) {
    c10::impl::GenericList one(v.toList().elementType());
    one.push_back(v.toList().get(k));
    return one;
  }
  if (v.isTensor() && formal.name() == "scalars" && v.toTensor().numel() == n) {
    return v.toTensor().slice(0, k, k + 1);
  }
  return v;
}

// An in-place list op whose items share memory across positions runs item by item, in
// list order, as PyTorch's per-item kernels do: _foreach_add_([x, x], 1) adds 2, and
// clip_grad_norm_ / an optimizer over a list naming a tensor twice scales or steps it
// twice. Returns whether it ran so.
bool ran_items_in_order(const c10::OperatorHandle& op, const OpInfo& info,
                        const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  size_t num_args = schema.arguments().size();
  auto args = torch::jit::last(*stack, num_args);
  if (info.bumped_lists.empty() || !schema.returns().empty() ||
      !list_items_overlap_across_positions(schema, args)) {
    return false;
  }
  size_t n = args[info.bumped_lists[0]].toTensorList().size();
  std::vector<c10::IValue> call(args.begin(), args.end());
  torch::jit::drop(*stack, num_args);
  for (size_t k = 0; k < n; ++k) {
    torch::jit::Stack item;
    for (size_t i = 0; i < num_args; ++i) {
      item.push_back(item_argument(call[i], schema.arguments()[i], k, n));
    }
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), &item);
  }
  return true;
}

}  // namespace

namespace {

// A tpu generator routes a call here even when no tensor is on tpu (a DataLoader draws its
// seed into a 0-d CPU tensor with the generator it was given): the CPU kernel's refusal of
// another device's generator, as a CUDA generator gets it there.
void check_generator_device(const OpInfo& info, const c10::FunctionSchema& schema,
                            const torch::jit::Stack& stack) {
  auto args = torch::jit::last(stack, schema.arguments().size());
  const c10::IValue& g = args[info.generator_arg];
  if (!g.isGenerator() || !g.toGenerator().defined() ||
      !g.toGenerator().device().is_privateuseone()) {
    return;
  }
  for (const c10::IValue& v : args) {
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_privateuseone()) {
      return;
    }
  }
  TORCH_CHECK(false, "Expected a 'cpu' device type for generator but found '",
              c10::DeviceTypeName(c10::DeviceType::PrivateUse1, true), "'");
}

// The CPU tensors among an op's arguments that PyTorch's CUDA kernel moves to the device
// itself (OpInfo::moved_cpu_tensors), moved to the device of its first argument.
void move_cpu_tensors(const OpInfo& info, const c10::FunctionSchema& schema,
                      torch::jit::Stack* stack) {
  size_t n = schema.arguments().size();
  const c10::IValue& first = (*stack)[stack->size() - n];
  if (!first.isTensor() || !first.toTensor().device().is_privateuseone()) return;
  for (size_t i : info.moved_cpu_tensors) {
    c10::IValue& v = (*stack)[stack->size() - n + i];
    if (v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_cpu()) {
      v = v.toTensor().to(first.toTensor().device());
    }
  }
}

// The 0-dim CPU tensors in a _foreach_ op's read-only tensor lists (OpInfo::
// scalar_tensor_lists), moved to the device of the call's first tpu tensor.
void move_scalar_tensors(const OpInfo& info, const c10::FunctionSchema& schema,
                         torch::jit::Stack* stack) {
  auto args = torch::jit::last(*stack, schema.arguments().size());
  auto cpu_scalar = [](const at::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.dim() == 0;
  };
  for (size_t i : info.scalar_tensor_lists) {
    if (!args[i].isTensorList()) continue;
    c10::List<at::Tensor> list = args[i].toTensorList();
    if (std::none_of(list.begin(), list.end(), cpu_scalar)) continue;
    std::optional<c10::Device> device;
    for (const c10::IValue& v : args) {
      if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorList()) {
          if (t.defined() && t.device().is_privateuseone()) device = t.device();
          if (device) break;
        }
      } else if (v.isTensor() && v.toTensor().defined() &&
                 v.toTensor().device().is_privateuseone()) {
        device = v.toTensor().device();
      }
      if (device) break;
    }
    if (!device) return;
    c10::List<at::Tensor> moved;
    moved.reserve(list.size());
    for (const at::Tensor& t : list) {
      moved.push_back(cpu_scalar(t) ? t.to(*device) : t);
    }
    (*stack)[stack->size() - schema.arguments().size() + i] = moved;
  }
}

}  // namespace

void tpu_boxed_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const OpInfo& info = op_info(op);
  const c10::FunctionSchema& schema = op.schema();
  if (info.generator_arg >= 0) check_generator_device(info, schema, *stack);
  if (!info.scalar_tensor_lists.empty()) move_scalar_tensors(info, schema, stack);
  if (!info.moved_cpu_tensors.empty()) move_cpu_tensors(info, schema, stack);
  if (ran_items_in_order(op, info, schema, stack)) return;
  ListVersionBump bump(info, schema, *stack);
  runtime::trace::Label label(info.name.c_str());
  if (info.is_clone && clone_outside_lowering(schema, stack)) return;
  if (info.optional_tensor_lists) type_optional_tensor_lists(schema, stack);
  resolve_math_bits(info, stack);
  if (info.writes) {
    check_written_overlap(schema, info.name, torch::jit::last(*stack, schema.arguments().size()));
  }
  if (info.cpu_argument_check != nullptr) {
    info.cpu_argument_check(info.name, torch::jit::last(*stack, schema.arguments().size()));
  }
  if (info.cpu_dtypes != nullptr) {
    check_dtype_like_cpu(*info.cpu_dtypes, torch::jit::last(*stack, schema.arguments().size()));
  }
  if (info.data_dependent) {
    base::keyed_counter_add("host_roundtrip_ops", info.name);
    base::counter_add("num_host_roundtrips");
    at::native::cpu_fallback(op, stack);
    return;
  }
  if (info.lowering == nullptr) {
    cpu_fallback(op, stack, "no lowering");
    return;
  }
  dispatch_profile::Timer timer;
  if (info.optional_tensor_lists) expand_index_masks(schema, info.name, stack);
  auto ivalues = torch::jit::last(*stack, schema.arguments().size());
  std::shared_ptr<CompiledOp> compiled;
  SignatureScope scope;
  CallSignature& sig = scope.get();
  try {
    classify_call(info, ivalues, &sig, nullptr);
    compiled = find_compiled(sig);
    if (!compiled) {
      std::vector<OpArg> args;
      classify_call(info, ivalues, &sig, &args);
      bool fused = eager_mode() == EagerMode::kFused;
      compiled = compile_op(op, info, ivalues, std::move(args), sig.device, !fused);
      insert_compiled(sig, compiled);
    }
  } catch (const NeedsFallback& f) {
    cpu_fallback(op, stack, f.reason);
    return;
  }
  std::optional<at::Generator> generator = std::move(sig.generator);
  timer.mark(dispatch_profile::kKey);
  std::vector<c10::IValue> args;  // batch norm updates its statistics from its arguments
  if (info.batch_norm) args.assign(ivalues.begin(), ivalues.end());
  if (eager_mode() != EagerMode::kFused || !record_call(compiled, schema, stack, generator)) {
    run_compiled(*compiled, schema, stack, generator, timer);
  }
  if (info.batch_norm) update_batch_norm_stats(args, *stack);
}

}  // namespace torchtpu::aten
