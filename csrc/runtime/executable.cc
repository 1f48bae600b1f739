#include "runtime/executable.h"

#include <memory>

#include "base/metrics.h"
#include "runtime/device_queue.h"
#include "runtime/element_type.h"
#include "runtime/execution_trace.h"
#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {
namespace {
const base::Counter g_executions("num_executions");
}  // namespace

Executable::Executable(std::shared_ptr<const Plugin> plugin, PJRT_LoadedExecutable* raw,
                       int device_index)
    : Executable(std::move(plugin), raw, std::vector<int>{device_index}) {}

Executable::Executable(std::shared_ptr<const Plugin> plugin, PJRT_LoadedExecutable* raw,
                       std::vector<int> device_indices)
    : plugin_(std::move(plugin)), raw_(raw), device_indices_(std::move(device_indices)) {
  const PJRT_Api* api = plugin_->api();
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = raw_;
  if (consume_error(api, api->PJRT_LoadedExecutable_GetExecutable(&get), "GetExecutable").ok()) {
    PJRT_Executable_NumOutputs_Args n{};
    n.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
    n.executable = get.executable;
    if (consume_error(api, api->PJRT_Executable_NumOutputs(&n), "NumOutputs").ok()) {
      num_outputs_ = n.num_outputs;
    }
    read_output_types(api, get.executable);
    PJRT_Executable_Destroy_Args d{};
    d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    d.executable = get.executable;
    (void)consume_error(api, api->PJRT_Executable_Destroy(&d), "PJRT_Executable_Destroy");
  }
}

Executable::~Executable() {
  PJRT_LoadedExecutable_Destroy_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  args.executable = raw_;
  (void)consume_error(plugin_->api(), plugin_->api()->PJRT_LoadedExecutable_Destroy(&args),
                "PJRT_LoadedExecutable_Destroy");
}

base::StatusOr<BufferPtr> Executable::wrap_output(PJRT_Buffer* raw, size_t k,
                                                   int device_index) const {
  if (k < output_dtypes_.size()) {
    auto buffer =
        std::make_shared<Buffer>(plugin_, raw, output_dtypes_[k], output_dims_[k], device_index);
    buffer->set_wait_history(waits_);
    return buffer;
  }
  const PJRT_Api* api = plugin_->api();
  PJRT_Buffer_ElementType_Args et{};
  et.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
  et.buffer = raw;
  base::Status s = consume_error(api, api->PJRT_Buffer_ElementType(&et), "PJRT_Buffer_ElementType");
  PJRT_Buffer_Dimensions_Args dims{};
  dims.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  dims.buffer = raw;
  if (s.ok()) s = consume_error(api, api->PJRT_Buffer_Dimensions(&dims), "PJRT_Buffer_Dimensions");
  base::StatusOr<base::DType> dtype = s.ok() ? from_pjrt_type(et.type) : base::StatusOr<base::DType>(s);
  if (!dtype.ok()) {
    PJRT_Buffer_Destroy_Args d{};
    d.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
    d.buffer = raw;
    (void)consume_error(api, api->PJRT_Buffer_Destroy(&d), "PJRT_Buffer_Destroy");
    return dtype.status();
  }
  auto buffer = std::make_shared<Buffer>(
      plugin_, raw, *dtype, std::vector<int64_t>(dims.dims, dims.dims + dims.num_dims),
      device_index);
  buffer->set_wait_history(waits_);
  return buffer;
}

base::StatusOr<std::vector<BufferPtr>> Executable::execute(
    const std::vector<const Buffer*>& args, const std::vector<bool>& donate) const {
  if (donate.empty()) return execute(args.data(), args.size(), nullptr);
  std::unique_ptr<bool[]> flags(new bool[args.size()]);
  for (size_t i = 0; i < args.size(); ++i) flags[i] = i < donate.size() && donate[i];
  return execute(args.data(), args.size(), flags.get());
}

base::StatusOr<std::vector<BufferPtr>> Executable::execute(const Buffer* const* args,
                                                           size_t num_args,
                                                           const bool* donate) const {
  if (num_replicas() != 1) {
    return base::invalid_argument("runtime: a program replicated over " +
                                  std::to_string(num_replicas()) +
                                  " devices runs through execute_replicated");
  }
  std::vector<BufferPtr> outputs;
  TORCHTPU_RETURN_IF_ERROR(run(&args, num_args, donate, &outputs));
  return outputs;
}

base::StatusOr<std::vector<std::vector<BufferPtr>>> Executable::execute_replicated(
    const std::vector<std::vector<const Buffer*>>& args, const std::vector<bool>& donate) const {
  if (static_cast<int>(args.size()) != num_replicas()) {
    return base::invalid_argument("runtime: a program replicated over " +
                                  std::to_string(num_replicas()) + " devices got " +
                                  std::to_string(args.size()) + " argument lists");
  }
  const size_t num_args = args[0].size();
  std::vector<const Buffer* const*> lists;
  for (size_t r = 0; r < args.size(); ++r) {
    if (args[r].size() != num_args) {
      return base::invalid_argument("runtime: replica " + std::to_string(r) + " got " +
                                    std::to_string(args[r].size()) + " arguments, replica 0 " +
                                    std::to_string(num_args));
    }
    lists.push_back(args[r].data());
  }
  std::unique_ptr<bool[]> flags;
  if (!donate.empty()) {
    flags.reset(new bool[num_args]);
    for (size_t i = 0; i < num_args; ++i) flags[i] = i < donate.size() && donate[i];
  }
  std::vector<std::vector<BufferPtr>> outputs(args.size());
  TORCHTPU_RETURN_IF_ERROR(run(lists.data(), num_args, flags.get(), outputs.data()));
  return outputs;
}

void Executable::read_output_types(const PJRT_Api* api, PJRT_Executable* executable) {
  PJRT_Executable_OutputElementTypes_Args types{};
  types.struct_size = PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE;
  types.executable = executable;
  if (!consume_error(api, api->PJRT_Executable_OutputElementTypes(&types), "OutputElementTypes")
           .ok() ||
      types.num_output_types != num_outputs_) {
    return;
  }
  PJRT_Executable_OutputDimensions_Args dims{};
  dims.struct_size = PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE;
  dims.executable = executable;
  if (!consume_error(api, api->PJRT_Executable_OutputDimensions(&dims), "OutputDimensions")
           .ok() ||
      dims.num_outputs != num_outputs_) {
    return;
  }
  std::vector<base::DType> dtypes;
  std::vector<std::shared_ptr<const std::vector<int64_t>>> shapes;
  const int64_t* next = dims.dims;
  for (size_t k = 0; k < num_outputs_; ++k) {
    base::StatusOr<base::DType> dtype = from_pjrt_type(types.output_types[k]);
    if (!dtype.ok()) return;
    dtypes.push_back(*dtype);
    shapes.push_back(std::make_shared<const std::vector<int64_t>>(next, next + dims.dim_sizes[k]));
    next += dims.dim_sizes[k];
  }
  int64_t bytes = 0;
  for (size_t k = 0; k < num_outputs_; ++k) {
    int64_t n = base::dtype_size_bytes(dtypes[k]);
    for (int64_t d : *shapes[k]) n *= d;
    bytes += n;
  }
  output_bytes_ = bytes;
  output_dtypes_ = std::move(dtypes);
  output_dims_ = std::move(shapes);
}

base::Status Executable::run(const Buffer* const* const* args, size_t num_args,
                             const bool* donate, std::vector<BufferPtr>* outputs) const {
  const size_t replicas = device_indices_.size();
  for (size_t r = 0; r < replicas; ++r) {
    for (size_t i = 0; i < num_args; ++i) {
      if (args[r][i]->device_index() != device_indices_[r]) {
        return base::invalid_argument(
            "runtime: an argument lives on device " + std::to_string(args[r][i]->device_index()) +
            " but the program runs on device " + std::to_string(device_indices_[r]) +
            "; move tensors to one device first");
      }
    }
  }
  // One flat array each for the arguments and outputs of every replica, with the
  // per-replica list pointers PJRT takes; small calls (every eager op) stay on the stack.
  constexpr size_t kInline = 16;
  PJRT_Buffer* arg_inline[kInline];
  PJRT_Buffer* out_inline[kInline];
  PJRT_Buffer* const* arg_list_inline[kInline];
  PJRT_Buffer** out_list_inline[kInline];
  int64_t keep_inline[kInline];
  std::vector<PJRT_Buffer*> arg_heap, out_heap;
  std::vector<PJRT_Buffer* const*> arg_list_heap;
  std::vector<PJRT_Buffer**> out_list_heap;
  std::vector<int64_t> keep_heap;
  auto pick = [](auto* inline_array, auto& heap, size_t n) {
    if (n <= kInline) return inline_array;
    heap.resize(n);
    return heap.data();
  };
  PJRT_Buffer** raw_args = pick(arg_inline, arg_heap, replicas * num_args);
  PJRT_Buffer** raw_outs = pick(out_inline, out_heap, replicas * num_outputs_);
  PJRT_Buffer* const** arg_lists = pick(arg_list_inline, arg_list_heap, replicas);
  PJRT_Buffer*** out_lists = pick(out_list_inline, out_list_heap, replicas);
  for (size_t r = 0; r < replicas; ++r) {
    for (size_t i = 0; i < num_args; ++i) raw_args[r * num_args + i] = args[r][i]->raw();
    for (size_t k = 0; k < num_outputs_; ++k) raw_outs[r * num_outputs_ + k] = nullptr;
    arg_lists[r] = raw_args + r * num_args;
    out_lists[r] = raw_outs + r * num_outputs_;
  }
  // Parameters that must not be donated: all but those `donate` names.
  int64_t* keep = pick(keep_inline, keep_heap, num_args);
  size_t num_keep = 0;
  for (size_t i = 0; i < num_args; ++i) {
    if (donate == nullptr || !donate[i]) keep[num_keep++] = static_cast<int64_t>(i);
  }
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = keep;
  options.num_non_donatable_input_indices = num_keep;
  PJRT_LoadedExecutable_Execute_Args exec{};
  exec.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  exec.executable = raw_;
  exec.options = &options;
  exec.argument_lists = arg_lists;
  exec.num_devices = replicas;
  exec.num_args = num_args;
  exec.output_lists = out_lists;
  int64_t enqueue_ns = trace::enabled() ? trace::now_ns() : 0;
  TORCHTPU_RETURN_IF_ERROR(consume_error(
      plugin_->api(), plugin_->api()->PJRT_LoadedExecutable_Execute(&exec),
      "PJRT_LoadedExecutable_Execute"));
  g_executions.add();

  base::Status first_error;
  for (size_t r = 0; r < replicas; ++r) {
    outputs[r].reserve(num_outputs_);
    for (size_t k = 0; k < num_outputs_; ++k) {
      base::StatusOr<BufferPtr> b = wrap_output(out_lists[r][k], k, device_indices_[r]);
      if (b.ok()) {
        outputs[r].push_back(std::move(b).value());
      } else if (first_error.ok()) {
        first_error = b.status();
      }
    }
  }
  if (!first_error.ok()) return first_error;
  for (size_t r = 0; r < replicas; ++r) {
    if (outputs[r].empty()) continue;
    note_enqueued(device_indices_[r], outputs[r].back(), /*replicated=*/replicas > 1);
    if (trace::enabled()) {
      int64_t bytes = 0;
      for (size_t i = 0; i < num_args; ++i) bytes += args[r][i]->size_bytes();
      for (const BufferPtr& b : outputs[r]) bytes += b->size_bytes();
      trace::record(trace::Kind::kProgram, device_indices_[r], bytes, *outputs[r].back(),
                    enqueue_ns);
    }
  }
  return base::Status();
}

base::StatusOr<std::string> Executable::serialize() const {
  const PJRT_Api* api = plugin_->api();
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = raw_;
  TORCHTPU_RETURN_IF_ERROR(
      consume_error(api, api->PJRT_LoadedExecutable_GetExecutable(&get), "GetExecutable"));
  PJRT_Executable_Serialize_Args ser{};
  ser.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  ser.executable = get.executable;
  base::Status s = consume_error(api, api->PJRT_Executable_Serialize(&ser), "PJRT_Executable_Serialize");
  std::string bytes;
  if (s.ok()) {
    bytes.assign(ser.serialized_bytes, ser.serialized_bytes_size);
    ser.serialized_executable_deleter(ser.serialized_executable);
  }
  PJRT_Executable_Destroy_Args d{};
  d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  d.executable = get.executable;
  (void)consume_error(api, api->PJRT_Executable_Destroy(&d), "PJRT_Executable_Destroy");
  if (!s.ok()) return s;
  return bytes;
}

}  // namespace torchtpu::runtime
