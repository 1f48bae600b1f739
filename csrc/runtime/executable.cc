#include "runtime/executable.h"

#include "base/metrics.h"
#include "runtime/device_queue.h"
#include "runtime/element_type.h"
#include "runtime/execution_trace.h"
#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {

Executable::Executable(std::shared_ptr<const Plugin> plugin, PJRT_LoadedExecutable* raw,
                       int device_index)
    : plugin_(std::move(plugin)), raw_(raw), device_index_(device_index) {
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
  for (const Buffer* b : args) {
    if (b->device_index() != device_index_) {
      return base::invalid_argument(
          "runtime: an argument lives on device " + std::to_string(b->device_index()) +
          " but the program runs on device " + std::to_string(device_index_) +
          "; move tensors to one device first");
    }
  }
  std::vector<PJRT_Buffer*> raw_args;
  raw_args.reserve(args.size());
  for (const Buffer* b : args) raw_args.push_back(b->raw());
  PJRT_Buffer* const* arg_list = raw_args.data();
  std::vector<PJRT_Buffer*> outputs(num_outputs_, nullptr);
  PJRT_Buffer** output_list = outputs.data();

  std::vector<int64_t> keep;  // parameters that must not be donated
  for (size_t i = 0; i < args.size(); ++i) {
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
  exec.argument_lists = &arg_list;
  exec.num_devices = 1;
  exec.num_args = raw_args.size();
  exec.output_lists = &output_list;
  TORCHTPU_RETURN_IF_ERROR(consume_error(
      plugin_->api(), plugin_->api()->PJRT_LoadedExecutable_Execute(&exec),
      "PJRT_LoadedExecutable_Execute"));
  base::counter_add("num_executions");

  std::vector<BufferPtr> result;
  result.reserve(outputs.size());
  base::Status first_error;
  for (PJRT_Buffer* raw : outputs) {
    base::StatusOr<BufferPtr> b = wrap_output(plugin_, raw, device_index_);
    if (b.ok()) {
      result.push_back(std::move(b).value());
    } else if (first_error.ok()) {
      first_error = b.status();
    }
  }
  if (!first_error.ok()) return first_error;
  if (!result.empty()) {
    note_enqueued(device_index_, result.back());
    if (trace::enabled()) {
      int64_t bytes = 0;
      for (const Buffer* b : args) bytes += b->size_bytes();
      for (const BufferPtr& b : result) bytes += b->size_bytes();
      trace::record(trace::Kind::kProgram, device_index_, bytes, *result.back());
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
