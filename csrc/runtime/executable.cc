#include "runtime/executable.h"

#include "base/metrics.h"
#include "runtime/device_queue.h"
#include "runtime/element_type.h"
#include "runtime/execution_trace.h"
#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {

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

namespace {

base::StatusOr<BufferPtr> wrap_output(const std::shared_ptr<const Plugin>& plugin,
                                      PJRT_Buffer* raw, int device_index) {
  const PJRT_Api* api = plugin->api();
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
  return std::make_shared<Buffer>(plugin, raw, *dtype,
                                   std::vector<int64_t>(dims.dims, dims.dims + dims.num_dims),
                                   device_index);
}

}  // namespace

base::StatusOr<std::vector<BufferPtr>> Executable::execute(
    const std::vector<const Buffer*>& args, const std::vector<bool>& donate) const {
  if (num_replicas() != 1) {
    return base::invalid_argument("runtime: a program replicated over " +
                                  std::to_string(num_replicas()) +
                                  " devices runs through execute_replicated");
  }
  TORCHTPU_ASSIGN_OR_RETURN(auto outputs, run({args}, donate));
  return std::move(outputs[0]);
}

base::StatusOr<std::vector<std::vector<BufferPtr>>> Executable::execute_replicated(
    const std::vector<std::vector<const Buffer*>>& args, const std::vector<bool>& donate) const {
  if (static_cast<int>(args.size()) != num_replicas()) {
    return base::invalid_argument("runtime: a program replicated over " +
                                  std::to_string(num_replicas()) + " devices got " +
                                  std::to_string(args.size()) + " argument lists");
  }
  return run(args, donate);
}

base::StatusOr<std::vector<std::vector<BufferPtr>>> Executable::run(
    const std::vector<std::vector<const Buffer*>>& args, const std::vector<bool>& donate) const {
  const size_t num_args = args[0].size();
  for (size_t r = 0; r < args.size(); ++r) {
    if (args[r].size() != num_args) {
      return base::invalid_argument("runtime: replica " + std::to_string(r) + " got " +
                                    std::to_string(args[r].size()) + " arguments, replica 0 " +
                                    std::to_string(num_args));
    }
    for (const Buffer* b : args[r]) {
      if (b->device_index() != device_indices_[r]) {
        return base::invalid_argument(
            "runtime: an argument lives on device " + std::to_string(b->device_index()) +
            " but the program runs on device " + std::to_string(device_indices_[r]) +
            "; move tensors to one device first");
      }
    }
  }
  std::vector<std::vector<PJRT_Buffer*>> raw_args(args.size());
  std::vector<PJRT_Buffer* const*> arg_lists;
  std::vector<std::vector<PJRT_Buffer*>> outputs(args.size(),
                                                 std::vector<PJRT_Buffer*>(num_outputs_, nullptr));
  std::vector<PJRT_Buffer**> output_lists;
  for (size_t r = 0; r < args.size(); ++r) {
    for (const Buffer* b : args[r]) raw_args[r].push_back(b->raw());
    arg_lists.push_back(raw_args[r].data());
    output_lists.push_back(outputs[r].data());
  }

  std::vector<int64_t> keep;  // parameters that must not be donated
  for (size_t i = 0; i < num_args; ++i) {
    if (i >= donate.size() || !donate[i]) keep.push_back(static_cast<int64_t>(i));
  }
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = keep.data();
  options.num_non_donatable_input_indices = keep.size();
  PJRT_LoadedExecutable_Execute_Args exec{};
  exec.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  exec.executable = raw_;
  exec.options = &options;
  exec.argument_lists = arg_lists.data();
  exec.num_devices = args.size();
  exec.num_args = num_args;
  exec.output_lists = output_lists.data();
  TORCHTPU_RETURN_IF_ERROR(consume_error(
      plugin_->api(), plugin_->api()->PJRT_LoadedExecutable_Execute(&exec),
      "PJRT_LoadedExecutable_Execute"));
  base::counter_add("num_executions");

  std::vector<std::vector<BufferPtr>> result(args.size());
  base::Status first_error;
  for (size_t r = 0; r < args.size(); ++r) {
    for (PJRT_Buffer* raw : outputs[r]) {
      base::StatusOr<BufferPtr> b = wrap_output(plugin_, raw, device_indices_[r]);
      if (b.ok()) {
        result[r].push_back(std::move(b).value());
      } else if (first_error.ok()) {
        first_error = b.status();
      }
    }
  }
  if (!first_error.ok()) return first_error;
  for (size_t r = 0; r < args.size(); ++r) {
    if (result[r].empty()) continue;
    note_enqueued(device_indices_[r], result[r].back(), /*replicated=*/args.size() > 1);
    if (trace::enabled()) {
      int64_t bytes = 0;
      for (const Buffer* b : args[r]) bytes += b->size_bytes();
      for (const BufferPtr& b : result[r]) bytes += b->size_bytes();
      trace::record(trace::Kind::kProgram, device_indices_[r], bytes, *result[r].back());
    }
  }
  return result;
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
