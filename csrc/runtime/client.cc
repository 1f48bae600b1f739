#include "runtime/client.h"

#include <chrono>

#include "base/metrics.h"
#include "runtime/device_queue.h"
#include "runtime/element_type.h"
#include "runtime/event.h"
#include "runtime/execution_trace.h"
#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {

namespace {

// Protobuf wire format, just what CompileOptionsProto needs: varints and
// length-delimited fields.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_int_field(std::string& out, int field, uint64_t v) {
  put_varint(out, static_cast<uint64_t>(field) << 3);
  put_varint(out, v);
}
void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace

namespace {

// CompileOptionsProto{executable_build_options (3): ExecutableBuildOptionsProto{
//   device_ordinal (1), num_replicas (4): N, num_partitions (5): 1,
//   device_assignment (9): DeviceAssignmentProto{replica_count (1): N,
//     computation_count (2): 1, computation_devices (3): {replica_device_ids (1): [...]}}}}.
// An empty options string makes XLA abort (num_replicas=0). Replica r runs on device id
// device_ids[r]; device_ordinal -1 lets the plugin take the local device from them.
std::string build_compile_options(const std::vector<int>& device_ids, int64_t device_ordinal) {
  std::string replica_ids;  // packed repeated int64
  for (int d : device_ids) put_varint(replica_ids, static_cast<uint64_t>(d));
  std::string computation_device;
  put_bytes_field(computation_device, 1, replica_ids);
  std::string assignment;
  put_int_field(assignment, 1, device_ids.size());
  put_int_field(assignment, 2, 1);
  put_bytes_field(assignment, 3, computation_device);
  std::string build;
  put_int_field(build, 1, static_cast<uint64_t>(device_ordinal));
  put_int_field(build, 4, device_ids.size());
  put_int_field(build, 5, 1);
  put_bytes_field(build, 9, assignment);
  std::string options;
  put_bytes_field(options, 3, build);
  return options;
}

}  // namespace

std::string compile_options(const std::vector<int>& device_indices) {
  // The CPU plugin's (and any single-process client's) device ids are its device indices.
  return build_compile_options(device_indices, device_indices.empty() ? 0 : device_indices[0]);
}

std::string compile_options(int device_index) {
  return compile_options(std::vector<int>{device_index});
}

std::string compile_options_by_id(const std::vector<int>& device_ids) {
  return build_compile_options(device_ids, -1);
}

std::string Client::compile_options_for(const std::vector<int>& device_indices) const {
  if (!multi_process_) return compile_options(device_indices);
  std::vector<int> ids;
  ids.reserve(device_indices.size());
  for (int d : device_indices) ids.push_back(device_ids_.at(d));
  return compile_options_by_id(ids);
}

base::StatusOr<MultiProcessPlan> plan_multi_process(const ClientOptions& options) {
  MultiProcessPlan plan;
  if (!options.multi_process.has_value() ||
      options.multi_process_support == MultiProcessSupport::kNone) {
    return plan;
  }
  const MultiProcessConfig& config = *options.multi_process;
  TORCHTPU_RETURN_IF_ERROR(validate(config));
  plan.store_callbacks = true;
  if (options.multi_process_support == MultiProcessSupport::kStoreAndNodeOptions) {
    plan.options.push_back({"node_id", {config.node_id}, false});
    plan.options.push_back({"num_nodes", {config.num_nodes}, false});
    if (!config.local_device_ids.empty()) {
      plan.options.push_back({"visible_devices", config.local_device_ids, true});
    }
  }
  return plan;
}

base::StatusOr<std::shared_ptr<Client>> Client::create(std::shared_ptr<const Plugin> plugin,
                                                       const ClientOptions& options) {
  const PJRT_Api* api = plugin->api();
  TORCHTPU_ASSIGN_OR_RETURN(MultiProcessPlan plan, plan_multi_process(options));
  // `cpu_device_count` is an option of the XLA CPU plugins only; the others reject options
  // they do not know, by name (xla-cpu-pjrt ignores them instead: the registry says which
  // plugins act on `asynchronous`, and only those are sent it). Which kind a plugin is
  // shows in its answer, not in its file name: a rejection of this option means "not a
  // CPU plugin", and the client is created without it and `asynchronous` (and gets the
  // devices the plugin has); a CPU plugin that rejects `asynchronous` alone gets the rest.
  // The multi-process options follow them.
  static const char kCpuDeviceCount[] = "cpu_device_count";
  // A one-value create option; the caller sets its value.
  auto scalar_option = [](const char* name, size_t name_size, PJRT_NamedValue_Type type) {
    PJRT_NamedValue v{};
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = name;
    v.name_size = name_size;
    v.type = type;
    v.value_size = 1;
    return v;
  };
  std::vector<PJRT_NamedValue> named;
  named.push_back(
      scalar_option(kCpuDeviceCount, sizeof(kCpuDeviceCount) - 1, PJRT_NamedValue_kInt64));
  named.back().int64_value = options.cpu_device_count;
  static const char kAsynchronous[] = "asynchronous";
  if (options.cpu_asynchronous.has_value()) {
    named.push_back(
        scalar_option(kAsynchronous, sizeof(kAsynchronous) - 1, PJRT_NamedValue_kBool));
    named.back().bool_value = *options.cpu_asynchronous;
  }
  size_t cpu_options = named.size();  // those only the CPU plugins take
  for (const MultiProcessPlan::Option& o : plan.options) {
    PJRT_NamedValue v{};
    v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    v.name = o.name.data();
    v.name_size = o.name.size();
    if (o.is_list) {
      v.type = PJRT_NamedValue_kInt64List;
      v.int64_array_value = o.values.data();
      v.value_size = o.values.size();
    } else {
      v.type = PJRT_NamedValue_kInt64;
      v.int64_value = o.values.front();
      v.value_size = 1;
    }
    named.push_back(v);
  }
  // The GPU allocator's options (runtime/gpu_allocator.h), for a GPU platform only.
  static const char kPreallocate[] = "preallocate";
  static const char kMemoryFraction[] = "memory_fraction";
  const GpuAllocatorOptions& gpu = options.gpu_allocator;
  if (options.gpu_platform && gpu.preallocate.has_value()) {
    named.push_back(scalar_option(kPreallocate, sizeof(kPreallocate) - 1, PJRT_NamedValue_kBool));
    named.back().bool_value = *gpu.preallocate;
  }
  if (options.gpu_platform && gpu.memory_fraction.has_value()) {
    named.push_back(
        scalar_option(kMemoryFraction, sizeof(kMemoryFraction) - 1, PJRT_NamedValue_kFloat));
    named.back().float_value = static_cast<float>(*gpu.memory_fraction);
  }
  std::shared_ptr<KeyValueStore> store =
      plan.store_callbacks ? options.multi_process->store : nullptr;
  auto fill = [&](PJRT_Client_Create_Args& a, size_t first_option) {
    a = PJRT_Client_Create_Args{};
    a.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
    a.create_options = named.size() > first_option ? named.data() + first_option : nullptr;
    a.num_options = named.size() - first_option;
    if (store != nullptr) {
      // A plugin built against an older header reads only the fields it knows (its
      // struct_size): one without kv_try_get_callback ignores it.
      a.kv_get_callback = &kv_get_callback;
      a.kv_get_user_arg = store.get();
      a.kv_put_callback = &kv_put_callback;
      a.kv_put_user_arg = store.get();
      a.kv_try_get_callback = &kv_try_get_callback;
      a.kv_try_get_user_arg = store.get();
    }
  };
  PJRT_Client_Create_Args args;
  fill(args, 0);
  base::Status created =
      consume_error(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");
  auto rejected = [&](const char* name) {
    return !created.ok() && created.message().find(name) != std::string::npos;
  };
  if (cpu_options > 1 && rejected(kAsynchronous)) {  // a CPU plugin without the option
    named.erase(named.begin() + 1);
    --cpu_options;
    fill(args, 0);
    created = consume_error(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");
  }
  std::optional<bool> asynchronous = cpu_options > 1 ? options.cpu_asynchronous : std::nullopt;
  if (rejected(kCpuDeviceCount)) {
    asynchronous.reset();
    fill(args, cpu_options);
    created = consume_error(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");
  }
  if (!created.ok() && store != nullptr) {
    const MultiProcessConfig& config = *options.multi_process;
    return base::Status(created.code(),
                        created.message() + " (creating a client over " +
                            std::to_string(config.num_nodes) + " processes as process " +
                            std::to_string(config.node_id) +
                            ": every process must create its client with the same store "
                            "and process count)");
  }
  TORCHTPU_RETURN_IF_ERROR(created);

  auto client = std::shared_ptr<Client>(new Client());
  client->plugin_ = std::move(plugin);
  client->raw_ = args.client;
  client->multi_process_ = store != nullptr;
  client->cpu_asynchronous_ = asynchronous;
  client->kv_store_ = std::move(store);

  PJRT_Client_AddressableDevices_Args devs{};
  devs.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  devs.client = client->raw_;
  TORCHTPU_RETURN_IF_ERROR(consume_error(api, api->PJRT_Client_AddressableDevices(&devs),
                                         "PJRT_Client_AddressableDevices"));
  client->devices_.assign(devs.addressable_devices,
                          devs.addressable_devices + devs.num_addressable_devices);
  if (client->devices_.empty()) {
    return base::unavailable("runtime: PJRT plugin " + client->plugin_->path() +
                             " reports no addressable devices");
  }
  for (PJRT_Device* device : client->devices_) {
    PJRT_Device_GetDescription_Args d{};
    d.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
    d.device = device;
    TORCHTPU_RETURN_IF_ERROR(consume_error(api, api->PJRT_Device_GetDescription(&d),
                                           "PJRT_Device_GetDescription"));
    PJRT_DeviceDescription_Id_Args id{};
    id.struct_size = PJRT_DeviceDescription_Id_Args_STRUCT_SIZE;
    id.device_description = d.device_description;
    TORCHTPU_RETURN_IF_ERROR(
        consume_error(api, api->PJRT_DeviceDescription_Id(&id), "PJRT_DeviceDescription_Id"));
    client->device_ids_.push_back(id.id);
  }
  PJRT_Client_Devices_Args all{};
  all.struct_size = PJRT_Client_Devices_Args_STRUCT_SIZE;
  all.client = client->raw_;
  TORCHTPU_RETURN_IF_ERROR(
      consume_error(api, api->PJRT_Client_Devices(&all), "PJRT_Client_Devices"));
  client->num_global_devices_ = static_cast<int>(all.num_devices);

  PJRT_Client_PlatformName_Args pn{};
  pn.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  pn.client = client->raw_;
  TORCHTPU_RETURN_IF_ERROR(
      consume_error(api, api->PJRT_Client_PlatformName(&pn), "PJRT_Client_PlatformName"));
  client->platform_name_.assign(pn.platform_name, pn.platform_name_size);

  PJRT_Client_PlatformVersion_Args pv{};
  pv.struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE;
  pv.client = client->raw_;
  TORCHTPU_RETURN_IF_ERROR(consume_error(api, api->PJRT_Client_PlatformVersion(&pv),
                                         "PJRT_Client_PlatformVersion"));
  client->platform_version_.assign(pv.platform_version, pv.platform_version_size);
  return client;
}

Client::~Client() {
  PJRT_Client_Destroy_Args args{};
  args.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE;
  args.client = raw_;
  (void)consume_error(plugin_->api(), plugin_->api()->PJRT_Client_Destroy(&args), "PJRT_Client_Destroy");
}

std::string Client::device_kind(int index) const {
  const PJRT_Api* api = plugin_->api();
  PJRT_Device_GetDescription_Args d{};
  d.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  d.device = devices_.at(index);
  if (!consume_error(api, api->PJRT_Device_GetDescription(&d), "GetDescription").ok()) return "?";
  PJRT_DeviceDescription_Kind_Args k{};
  k.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
  k.device_description = d.device_description;
  if (!consume_error(api, api->PJRT_DeviceDescription_Kind(&k), "DeviceKind").ok()) return "?";
  return std::string(k.device_kind, k.device_kind_size);
}

base::StatusOr<DeviceMemoryInfo> Client::device_memory(int index) const {
  if (index < 0 || index >= num_devices()) {
    return base::invalid_argument("runtime: no device " + std::to_string(index) + " (have " +
                                  std::to_string(num_devices()) + ")");
  }
  const PJRT_Api* api = plugin_->api();
  if (api->PJRT_Device_MemoryStats == nullptr) {
    return base::unimplemented("runtime: the plugin has no PJRT_Device_MemoryStats");
  }
  PJRT_Device_MemoryStats_Args args{};
  args.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
  args.device = devices_[index];
  TORCHTPU_RETURN_IF_ERROR(
      consume_error(api, api->PJRT_Device_MemoryStats(&args), "PJRT_Device_MemoryStats"));
  DeviceMemoryInfo info;
  info.bytes_in_use = args.bytes_in_use;
  if (args.peak_bytes_in_use_is_set) info.peak_bytes_in_use = args.peak_bytes_in_use;
  if (args.bytes_limit_is_set) info.bytes_limit = args.bytes_limit;
  if (args.bytes_reserved_is_set) info.bytes_reserved = args.bytes_reserved;
  if (args.num_allocs_is_set) info.num_allocs = args.num_allocs;
  if (args.largest_alloc_size_is_set) info.largest_alloc_size = args.largest_alloc_size;
  return info;
}

base::Status Client::from_host_buffer(const void* data, base::DType dtype,
                                      const std::vector<int64_t>& dims, int device_index,
                                      int semantics,
                                      PJRT_Client_BufferFromHostBuffer_Args* out) const {
  if (device_index < 0 || device_index >= num_devices()) {
    return base::out_of_range("runtime: device index " + std::to_string(device_index) +
                              " out of range (have " + std::to_string(num_devices()) +
                              " devices)");
  }
  const PJRT_Api* api = plugin_->api();
  PJRT_Client_BufferFromHostBuffer_Args& args = *out;
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = raw_;
  args.data = data;
  args.type = to_pjrt_type(dtype);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = static_cast<PJRT_HostBufferSemantics>(semantics);
  args.device = devices_[device_index];
  return consume_error(api, api->PJRT_Client_BufferFromHostBuffer(&args),
                       "PJRT_Client_BufferFromHostBuffer");
}

base::StatusOr<BufferPtr> Client::buffer_from_host(const void* data, base::DType dtype,
                                                   const std::vector<int64_t>& dims,
                                                   int device_index) const {
  PJRT_Client_BufferFromHostBuffer_Args args{};
  int64_t enqueue_ns = trace::enabled() ? trace::now_ns() : 0;
  base::Status status = from_host_buffer(data, dtype, dims, device_index,
                                         PJRT_HostBufferSemantics_kImmutableOnlyDuringCall, &args);
  if (!status.ok() && base::is_complex(dtype)) {
    // A plugin without complex support (libtpu has no complex128): say which.
    return base::Status(status.code(),
                        "runtime: the " + platform_name_ + " plugin (" + plugin_->path() +
                            ") cannot hold " + base::dtype_name(dtype) + " buffers: " +
                            status.message() + "; use a dtype this plugin supports (complex64 "
                            "where it has it) or run the complex part on the CPU");
  }
  TORCHTPU_RETURN_IF_ERROR(status);
  // With kImmutableOnlyDuringCall the host data has been consumed already; the event
  // only needs releasing.
  Event done(plugin_, args.done_with_host_buffer);
  auto buffer = std::make_shared<Buffer>(plugin_, args.buffer, dtype, dims, device_index);
  note_enqueued(device_index, buffer);
  trace::record(trace::Kind::kHostToDevice, device_index, buffer->size_bytes(), *buffer,
                enqueue_ns);
  base::counter_add("num_transfers_to_device");
  base::counter_add("transfer_to_device_bytes", buffer->size_bytes());
  return buffer;
}

base::StatusOr<BufferPtr> Client::buffer_from_host_zero_copy(
    const void* data, base::DType dtype, const std::vector<int64_t>& dims, int device_index,
    std::function<void()> release) const {
  PJRT_Client_BufferFromHostBuffer_Args args{};
  int64_t enqueue_ns = trace::enabled() ? trace::now_ns() : 0;
  base::Status status = from_host_buffer(data, dtype, dims, device_index,
                                         PJRT_HostBufferSemantics_kImmutableZeroCopy, &args);
  if (!status.ok()) {
    release();
    return status;
  }
  auto buffer = std::make_shared<Buffer>(plugin_, args.buffer, dtype, dims, device_index);
  if (args.done_with_host_buffer == nullptr) {
    release();  // the plugin says nothing more about the host data: it copied it
  } else {
    // The event lives until its callback has run (the callback owns it).
    auto done = std::make_shared<Event>(plugin_, args.done_with_host_buffer);
    auto once = std::make_shared<std::function<void()>>(std::move(release));
    base::Status registered = done->on_ready([done, once](const base::Status&) mutable {
      (*once)();
      done.reset();
    });
    if (!registered.ok()) {
      // No callback will come: free the buffer and wait until the host data is no longer
      // read, so it is never released early.
      buffer.reset();
      (void)done->await();  // its own error changes nothing: registering failed first
      (*once)();
      return registered;
    }
  }
  note_enqueued(device_index, buffer);
  trace::record(trace::Kind::kHostToDevice, device_index, buffer->size_bytes(), *buffer,
                enqueue_ns);
  base::counter_add("num_transfers_to_device");
  base::counter_add("transfer_to_device_bytes", buffer->size_bytes());
  return buffer;
}

base::Status Client::check_replica_devices(const std::vector<int>& device_indices) const {
  if (device_indices.empty()) {
    return base::invalid_argument("runtime: a program needs at least one device");
  }
  for (size_t i = 0; i < device_indices.size(); ++i) {
    int d = device_indices[i];
    if (d < 0 || d >= num_devices()) {
      return base::out_of_range("runtime: device index " + std::to_string(d) +
                                " out of range (have " + std::to_string(num_devices()) +
                                " devices)");
    }
    for (size_t j = 0; j < i; ++j) {
      if (device_indices[j] == d) {
        return base::invalid_argument("runtime: device " + std::to_string(d) +
                                      " appears twice in a program's replicas; each replica "
                                      "needs its own device");
      }
    }
  }
  return base::Status::ok_status();
}

base::StatusOr<ExecutablePtr> Client::compile(const std::string& module_text,
                                              int device_index) const {
  return compile(module_text, std::vector<int>{device_index});
}

base::StatusOr<ExecutablePtr> Client::compile(const std::string& module_text,
                                              const std::vector<int>& device_indices) const {
  TORCHTPU_RETURN_IF_ERROR(check_replica_devices(device_indices));
  const PJRT_Api* api = plugin_->api();
  static const char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(module_text.data());
  program.code_size = module_text.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  std::string options = compile_options_for(device_indices);
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = raw_;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  auto start = std::chrono::steady_clock::now();
  base::Status status = consume_error(api, api->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  if (!status.ok() && module_text.find("complex<") != std::string::npos) {
    return base::Status(status.code(),
                        status.message() + " (the program has complex values: the " +
                            platform_name_ + " plugin (" + plugin_->path() +
                            ") may lack complex support for them)");
  }
  TORCHTPU_RETURN_IF_ERROR(status);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - start)
                .count();
  base::counter_add("num_compiles");
  base::counter_add("compile_time_us", us);
  return std::make_shared<Executable>(plugin_, args.executable, device_indices);
}

base::StatusOr<ExecutablePtr> Client::deserialize(const std::string& bytes,
                                                  int device_index) const {
  return deserialize(bytes, std::vector<int>{device_index});
}

base::StatusOr<ExecutablePtr> Client::deserialize(const std::string& bytes,
                                                  const std::vector<int>& device_indices) const {
  TORCHTPU_RETURN_IF_ERROR(check_replica_devices(device_indices));
  const PJRT_Api* api = plugin_->api();
  PJRT_Executable_DeserializeAndLoad_Args args{};
  args.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  args.client = raw_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  TORCHTPU_RETURN_IF_ERROR(consume_error(api, api->PJRT_Executable_DeserializeAndLoad(&args),
                                         "PJRT_Executable_DeserializeAndLoad"));
  return std::make_shared<Executable>(plugin_, args.loaded_executable, device_indices);
}

}  // namespace torchtpu::runtime
