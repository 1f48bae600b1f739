#include "aten/compiled_op.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "aten/call_signature.h"
#include "aten/cpu_dtypes.h"
#include "aten/fused_eager.h"
#include "aten/host_transfer.h"
#include "aten/interrupts.h"
#include "aten/op_special_cases.h"
#include "aten/out_dtypes.h"
#include "aten/overlap_checks.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_storage.h"
#include "base/metrics.h"

namespace torchtpu::aten {
namespace {

using lowering::ArgKind;
using lowering::OpArg;
using lowering::TensorType;

const base::Counter g_eager_ops("num_eager_ops");

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().is_privateuseone(); }

TensorType type_of(const at::Tensor& t) {
  return TensorType{to_dtype(t.scalar_type()), std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
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
  // A factory's device argument (tril_indices(..., device="tpu")): the meta kernel makes
  // the result on the meta device, not by calling back into this backend.
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::Device(c10::DeviceType::Meta);
  }
  // A generator decides values, not result types, and some meta kernels (exponential_'s
  // reference) refuse any: the program takes the generator's state at run time.
  if (v.isGenerator()) return c10::IValue();
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

}  // namespace

bool fallback_is_error() {
  const char* mode = std::getenv("TORCHTPU_FALLBACK");
  if (mode == nullptr || *mode == '\0' || std::strcmp(mode, "warn") == 0) return false;
  TORCH_CHECK(std::strcmp(mode, "error") == 0, "tpu: TORCHTPU_FALLBACK='", mode,
              "' is not a fallback policy (expected 'warn', the default: an op with no "
              "lowering runs on the CPU with a warning, or 'error': it raises)");
  return true;
}

namespace {

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

// The (graph input, output) pairs of `c` whose output is the new value of the argument the
// input reads, of the input's own type (a resized `out` is not one), outputs counted as
// run_compiled takes them: the returns (an op with a list's written items returns nothing,
// so those come first), then extra_write_args.
std::vector<std::pair<int, int>> written_inputs(const CompiledOp& c,
                                                const std::vector<lowering::OpArg>& args) {
  std::vector<std::pair<int, int>> inputs = lowering::op_inputs(args);
  std::vector<std::pair<int, int>> out;
  auto add = [&](int arg, int item, int output) {
    auto k = std::find(inputs.begin(), inputs.end(), std::make_pair(arg, item));
    if (k == inputs.end()) return;
    const lowering::TensorType& t = item < 0 ? args[arg].type : args[arg].list_types[item];
    if (t == c.out_types.at(output)) out.emplace_back(static_cast<int>(k - inputs.begin()), output);
  };
  int next = 0;
  for (size_t j = 0; j < c.return_defined.size(); ++j) {
    if (c.return_list_size[j] >= 0) {
      next += c.return_list_size[j];
    } else if (c.return_defined[j]) {
      if (c.return_to_arg[j] >= 0) add(c.return_to_arg[j], -1, next);
      ++next;
    }
  }
  for (int arg : c.list_write_args) {
    for (size_t item = 0; item < args[arg].list_types.size(); ++item) {
      add(arg, static_cast<int>(item), next++);
    }
  }
  for (int arg : c.extra_write_args) add(arg, -1, next++);
  return out;
}

}  // namespace

void run_meta(const c10::OperatorHandle& op, const OpInfo& info, torch::jit::Stack& meta_stack) {
  const std::string& name = info.name;
  check_index_put_values(name, meta_stack);
  check_out_dtypes(op, meta_stack);
  if (meta_by_equivalent(name, &meta_stack)) {
    // types from an equivalent op
  } else if (info.structured_functional) {
    // A structured op's functional or in-place form: the checks and result types of the
    // kernel PyTorch runs for it on every backend (the structured meta function, then the
    // out= form), which the Meta key's kernel does not always repeat (mul_ of a bool tensor
    // by an int64 one must fail its cast check).
    op.callBoxedForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
                               meta_stack);
  } else {
    op.callBoxed(&meta_stack);
  }
}

std::optional<std::string> eager_refusal(const c10::OperatorHandle& op,
                                         torch::jit::Stack meta_args) {
  const OpInfo& info = op_info(op);
  try {
    if (info.cpu_dtypes != nullptr) check_dtype_like_cpu(*info.cpu_dtypes, meta_args);
    run_meta(op, info, meta_args);
  } catch (const c10::NotImplementedError& e) {
    std::string what = e.what();
    // No meta kernel is no verdict; a CPU kernel's dtype refusal is one.
    if (what.find("not implemented for") == std::string::npos) return std::nullopt;
    return what.substr(0, what.find('\n'));
  } catch (const std::exception& e) {
    if (is_interrupt(e)) throw;
    std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
  return std::nullopt;
}

std::shared_ptr<CompiledOp> compile_op(const c10::OperatorHandle& op, const OpInfo& info,
                                       c10::ArrayRef<c10::IValue> ivalues,
                                       std::vector<OpArg> args, int device, bool compile_now) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string& name = info.name;
  std::string signature = describe_signature(info, args, device);
  // 1. Meta: validates the call exactly as PyTorch would and yields the result types.
  torch::jit::Stack meta_stack;
  for (const c10::IValue& v : ivalues) meta_stack.push_back(to_meta(v));
  try {
    run_meta(op, info, meta_stack);
  } catch (const c10::NotImplementedError& e) {
    throw NeedsFallback{"no meta kernel"};
  } catch (const std::exception& e) {  // c10::Error, or a Python meta kernel's error
    if (is_interrupt(e)) throw;  // Ctrl-C while the meta kernel ran: not its verdict
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
    // A meta kernel standing in for the op's own (meta_results.cc) gives the dtype the op
    // computes, whatever `out` is; PyTorch's kernels refuse an out of another dtype there.
    if (arg >= 0 && t.defined()) {
      const at::Tensor& out = ivalues[arg].toTensor();
      TORCH_CHECK(out.scalar_type() == t.scalar_type(), name, ": expected the out tensor '",
                  schema.arguments()[arg].name(), "' to have dtype ", t.scalar_type(),
                  " (what the op computes there), but got ", out.scalar_type(), " instead");
    }
    if (arg >= 0 && info.shape_from_scalars) {
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
      if (!ai || !ai->isWrite() || args[i].kind != ArgKind::kTensorList) continue;
      if (leaves_list_arg_unchanged(name, schema.arguments()[i].name(), schema, ivalues)) {
        continue;
      }
      compiled->list_write_args.push_back(static_cast<int>(i));
      const std::vector<TensorType>& items = args[i].list_types;
      compiled->out_types.insert(compiled->out_types.end(), items.begin(), items.end());
    }
  }
  // Ops that also write arguments they do not return (the grad-scaler ops' found_inf and
  // growth_tracker): their new values are the results after the returns, in order.
  if (info.writes_unreturned) {
    const std::vector<int>& to_arg = compiled->return_to_arg;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* ai = schema.arguments()[i].alias_info();
      if (!ai || !ai->isWrite() || args[i].kind == ArgKind::kTensorList) continue;
      if (std::find(to_arg.begin(), to_arg.end(), static_cast<int>(i)) != to_arg.end()) continue;
      if (args[i].kind != ArgKind::kTensor) {
        throw NeedsFallback{"argument '" + schema.arguments()[i].name() +
                            "' is not a tpu tensor"};
      }
      compiled->extra_write_args.push_back(static_cast<int>(i));
      compiled->out_types.push_back(args[i].type);
    }
  }
  // 2. Lower and compile.
  // A written argument may give its buffer to its new value, unless a failed data check
  // could leave a partly written value (a check that is not guarded): the call must then
  // change nothing, so its argument's buffer is kept.
  compiled->donations = written_inputs(*compiled, args);
  auto lowered = lowering::lower_op(name, args, compiled->out_types, compiled->donations);
  if (lowered.ok() && !compiled->donations.empty() && !lowered->checks_guarded) {
    compiled->donations.clear();
    lowered = lowering::lower_op(name, args, compiled->out_types);
  }
  if (!lowered.ok()) {
    // Unimplemented or unsupported cases are fallbacks; a lowering that failed its own
    // invariants is a bug, and running the op elsewhere would hide it.
    if (lowered.status().code() == base::StatusCode::kInternal) {
      raise_lowering_error(name, signature, lowered.status().message());
    }
    throw NeedsFallback{lowered.status().message()};
  }
  compiled->lowered = std::move(lowered).value();
  compiled->inputs = lowering::op_inputs(args);
  compiled->name = name;
  compiled->device = device;
  for (const TensorType& t : compiled->out_types) {
    compiled->out_scalar_types.push_back(to_scalar_type(t.dtype));
  }
  compiled->signature = std::move(signature);
  compiled->args = std::move(args);
  static std::atomic<int> next_uid{1};
  compiled->uid = next_uid.fetch_add(1, std::memory_order_relaxed);
  if (compile_now) compiled->program();
  base::counter_add("num_op_signatures_compiled");
  return compiled;
}

const CompiledProgram& CompiledOp::program() const {
  std::call_once(compiled_, [this] {
    auto program = compile_program(lowered, device);
    if (!program.ok()) {
      raise_lowering_error(name, signature,
                           "the plugin rejected its program: " + program.status().message());
    }
    program_ = *program;
  });
  return *program_;
}

runtime::BufferPtr scalar_buffer(const c10::IValue& v, const lowering::GraphParam& p,
                                 int device) {
  base::DType dtype = p.dtype;
  if (v.isTensor()) {
    // A 0-dim CPU tensor (also a Python number the arithmetic operators wrap) is cast the
    // way TensorIterator casts it, without an overflow check: uint8 + 1000 wraps on the
    // CPU. Scalar arguments keep the checked conversion their CPU kernels apply (fill_).
    const at::Tensor& t = v.toTensor();
    c10::ScalarType want = to_scalar_type(dtype);
    return host_scalar_to_buffer(t.scalar_type() == want ? t : t.to(want), device);
  }
  return scalar_to_buffer(v.toScalar(), dtype, device,
                          p.cast == lowering::ScalarCast::kChecked);
}

at::Tensor present_tensor(const c10::IValue& v, int j) {
  if (v.isTensorList()) return v.toTensorList().get(j);
  const c10::List<std::optional<at::Tensor>> list = v.toOptionalTensorList();
  for (size_t k = 0; k < list.size(); ++k) {
    std::optional<at::Tensor> t = list.get(k);
    if (t && t->defined() && j-- == 0) return *t;
  }
  TORCH_CHECK(false, "tpu: internal error: list item ", j, " is missing");
}

namespace {

// An eager call's parameter values: its own arguments (the op is a graph of one node).
class EagerArgs : public ProgramArgs {
 public:
  EagerArgs(const CompiledOp& c, c10::ArrayRef<c10::IValue> ivalues, int device,
            const std::optional<at::Generator>& generator)
      : c_(c), ivalues_(ivalues), device_(device), generator_(generator) {}

  // The tensor arguments and list items are read together: those that are views (windows,
  // reshapes of a whole storage) by one program for all of them (read_tensors).
  void read_inputs() {
    int views = 0;  // most calls have none: then nothing is allocated here
    for (size_t k = 0; k < c_.inputs.size() && views < 2; ++k) views += !reads_as_is(tensor(k));
    if (views < 2) return;
    std::vector<at::Tensor> items;
    std::vector<int> index;
    for (size_t k = 0; k < c_.inputs.size(); ++k) {
      items.push_back(tensor(k));
      index.push_back(static_cast<int>(k));
    }
    if (items.size() < 2) return;
    std::vector<runtime::BufferPtr> values = read_tensors(items);
    read_.assign(c_.inputs.size(), nullptr);
    for (size_t j = 0; j < index.size(); ++j) read_[index[j]] = std::move(values[j]);
  }

  runtime::BufferPtr input(size_t, int index) override {
    if (!read_.empty() && read_[index]) return std::move(read_[index]);
    return read_tensor(tensor(index));
  }
  runtime::BufferPtr scalar(size_t, const lowering::GraphParam& p) override {
    const c10::IValue& v = ivalues_[p.arg];
    return scalar_buffer(p.item < 0 ? v : v.toListRef()[p.item], p, device_);
  }
  runtime::BufferPtr rng_state(size_t, const lowering::GraphParam&) override {
    bool given = generator_ && generator_->defined();
    return next_rng_state_buffer(
        given ? *generator_ : default_generator(static_cast<c10::DeviceIndex>(device_)), device_);
  }
  // A written argument's buffer is given up when nothing else reads it: a view's value
  // read for this run alone, or the whole storage's buffer held by the storage and this
  // run only (the storage, locked meanwhile, takes the output at once). Otherwise XLA
  // copies it first.
  bool donatable(int index, const runtime::BufferPtr& b) override {
    if (b.use_count() == 1) return true;  // read for this run (a window, a reshape)
    return donations_.give_up(index, tensor(index), b);
  }
  void donated(int index, const runtime::BufferPtr& output) override {
    donations_.take(index, output);
    base::counter_add("num_donated_inputs");
  }

 private:
  const CompiledOp& c_;
  c10::ArrayRef<c10::IValue> ivalues_;
  int device_;
  const std::optional<at::Generator>& generator_;
  std::vector<runtime::BufferPtr> read_;  // inputs read ahead, by input index
  StorageDonations donations_;           // storages whose buffers this run gives up

  at::Tensor tensor(size_t k) const {
    const auto& [arg, item] = c_.inputs[k];
    return item < 0 ? ivalues_[arg].toTensor() : present_tensor(ivalues_[arg], item);
  }
};

}  // namespace

void run_compiled(const CompiledOp& c, const c10::FunctionSchema& schema,
                  torch::jit::Stack* stack, const std::optional<at::Generator>& generator,
                  dispatch_profile::Timer& timer) {
  int device = c.device;
  size_t num_args = schema.arguments().size();
  auto ivalues = torch::jit::last(*stack, num_args);
  if (c.out_types.empty() && !c.list_write_args.empty()) {  // in-place list op, empty lists
    torch::jit::drop(*stack, num_args);
    return;
  }
  // Fused eager: a failed data check still pending must be raised before this call writes
  // (a donating run's storage takes its output inside the run), so nothing is to undo.
  if (!c.donations.empty()) run_checked_pending(device);
  EagerArgs args(c, ivalues, device, generator);
  args.read_inputs();
  timer.mark(dispatch_profile::kBind);
  // Data checks are read before anything is written, so a failing call changes nothing. A
  // call that writes nothing (_assert_async) queues them for the next host read instead, as
  // a compiled graph does and as CUDA reports a device-side assert: it never waits.
  std::vector<runtime::BufferPtr> outputs =
      c.out_types.empty()
          ? run_program(c.program(), args, CheckMode::kDeferred, {}, "an earlier call of " + c.name)
          : run_program(c.program(), args, CheckMode::kNow, c.donations);
  g_eager_ops.add();
  timer.mark(dispatch_profile::kExecute);

  c10::SmallVector<c10::IValue, 4> results;
  size_t next = 0;
  for (int arg : c.list_write_args) {
    std::vector<at::Tensor> targets = ivalues[arg].toTensorVector();
    std::vector<runtime::BufferPtr> values(outputs.begin() + next,
                                          outputs.begin() + next + targets.size());
    next += targets.size();
    write_tensors(targets, values);
  }
  for (size_t j = 0; j < c.return_defined.size(); ++j) {
    if (c.return_list_size[j] >= 0) {
      c10::List<at::Tensor> items;
      for (int k = 0; k < c.return_list_size[j]; ++k, ++next) {
        items.push_back(wrap_buffer(outputs[next], c.out_scalar_types[next]));
      }
      results.emplace_back(std::move(items));
      continue;
    }
    if (!c.return_defined[j]) {
      results.emplace_back(at::Tensor());
      continue;
    }
    runtime::BufferPtr& buf = outputs[next++];
    int arg = c.return_to_arg[j];
    if (arg >= 0) {
      const at::Tensor& target = ivalues[arg].toTensor();
      if (target.sizes() != c10::IntArrayRef(buf->dims())) {
        target.resize_(buf->dims());
        check_resized_out_overlap(schema, c.name, ivalues, target);
      }
      write_tensor(target, buf);
      results.emplace_back(target);
    } else {
      results.emplace_back(wrap_buffer(std::move(buf), c.out_scalar_types[next - 1]));
    }
  }
  for (int arg : c.extra_write_args) {
    write_tensor(ivalues[arg].toTensor(), outputs[next++]);
  }
  torch::jit::drop(*stack, num_args);
  for (auto& r : results) stack->push_back(std::move(r));
  timer.mark(dispatch_profile::kComplete);
}


}  // namespace torchtpu::aten
