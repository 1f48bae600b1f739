// Client: RAII owner of a PJRT_Client and its addressable devices.
//
// One Client per process is the normal case (see device_runtime in aten/). Devices are
// indexed 0..num_devices()-1 in the plugin's addressable order.
// Thread safety: all methods may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "runtime/buffer.h"
#include "runtime/executable.h"
#include "runtime/gpu_allocator.h"
#include "runtime/kv_store.h"
#include "runtime/memory_stats.h"
#include "runtime/pjrt_api.h"
#include "runtime/plugin_registry.h"

struct PJRT_Client;
struct PJRT_Device;
struct PJRT_Client_BufferFromHostBuffer_Args;

namespace torchtpu::runtime {

struct ClientOptions {
  // Devices to create on the CPU plugin (option `cpu_device_count`); ignored elsewhere.
  int cpu_device_count = 1;
  // On the CPU plugin (option `asynchronous`): programs handed to the plugin's worker
  // threads, the caller going on meanwhile (true), or run on the calling thread, which
  // returns once they ran (false: no hand-off between threads per program). Unset: the
  // plugin's default (asynchronous). A CPU plugin that does not know the option runs
  // without it.
  std::optional<bool> cpu_asynchronous;
  // A client over the devices of several processes (runtime/kv_store.h). Used only as far
  // as `multi_process_support` (what the plugin's registry entry says it takes) allows:
  // with kNone (the CPU plugins, a plugin given by path) the plugin gets neither the store
  // callbacks nor the node options, and the client is the usual single-process one.
  std::optional<MultiProcessConfig> multi_process;
  MultiProcessSupport multi_process_support = MultiProcessSupport::kNone;
  // The GPU allocator's create options (runtime/gpu_allocator.h); sent only when
  // `gpu_platform` (the plugin's registry platform is a GPU): other plugins reject them.
  GpuAllocatorOptions gpu_allocator;
  bool gpu_platform = false;
};

// What PJRT_Client_Create receives for `options` besides `cpu_device_count`: whether the
// key-value store callbacks go along, and the int64 (list) create options, in order. The one
// place that applies the rule above; create() builds its arguments from it.
struct MultiProcessPlan {
  struct Option {
    std::string name;
    std::vector<int64_t> values;  // one value unless is_list
    bool is_list = false;         // PJRT_NamedValue_kInt64List, else kInt64
  };
  bool store_callbacks = false;
  std::vector<Option> options;
};
base::StatusOr<MultiProcessPlan> plan_multi_process(const ClientOptions& options);

class Client {
 public:
  static base::StatusOr<std::shared_ptr<Client>> create(std::shared_ptr<const Plugin> plugin,
                                                        const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  // Whether the plugin was given a key-value store to form a client with other processes.
  bool multi_process() const { return multi_process_; }
  // ClientOptions::cpu_asynchronous as the plugin took it (nullopt: not sent, or refused).
  std::optional<bool> cpu_asynchronous() const { return cpu_asynchronous_; }
  // Devices of the whole client (every process's, for a multi-process client); addressable
  // ones are num_devices() of them.
  int num_global_devices() const { return num_global_devices_; }
  // The plugin's id of addressable device `index` (its id in the global device list, what
  // a device assignment names; equal to the index on a single-process client).
  int device_id(int index) const { return device_ids_.at(index); }
  // The serialized CompileOptionsProto for a program on `device_indices` (see
  // compile_options below), in the plugin's device ids.
  std::string compile_options_for(const std::vector<int>& device_indices) const;
  // "cpu", "cuda", "tpu", ...: the plugin's platform name.
  const std::string& platform_name() const { return platform_name_; }
  // The plugin's own version string for its platform (PJRT_Client_PlatformVersion).
  const std::string& platform_version() const { return platform_version_; }
  // Kind of device `index` as the plugin describes it (e.g. "cpu", "NVIDIA H200").
  std::string device_kind(int index) const;
  // The plugin's memory statistics for device `index` (PJRT_Device_MemoryStats); an
  // Unimplemented status where the plugin has none (the CPU plugin).
  base::StatusOr<DeviceMemoryInfo> device_memory(int index) const;

  // Copies `data` (dense, row-major, `dims`) into a new buffer on device `device_index`.
  // The host memory may be released as soon as this returns.
  base::StatusOr<BufferPtr> buffer_from_host(const void* data, base::DType dtype,
                                             const std::vector<int64_t>& dims,
                                             int device_index) const;
  // A buffer over `data` without a copy where the plugin can alias host memory (the CPU
  // plugin does for 64-byte aligned data); a plugin that cannot copies it instead. The
  // caller keeps `data` alive and unchanged until `release` runs: once the plugin no
  // longer reads it (the buffer and every buffer that took over its memory are freed, or
  // right after the copy). `release` runs exactly once, on a plugin thread or before this
  // returns, also when this fails; it must not block.
  base::StatusOr<BufferPtr> buffer_from_host_zero_copy(const void* data, base::DType dtype,
                                                       const std::vector<int64_t>& dims,
                                                       int device_index,
                                                       std::function<void()> release) const;
  // Compiles StableHLO text (program format "mlir") for device `device_index` (an
  // executable runs on the device it was compiled for). Errors carry the plugin's message.
  base::StatusOr<ExecutablePtr> compile(const std::string& module_text, int device_index) const;
  // Compiles a program replicated over `device_indices` (replica r on device
  // device_indices[r], distinct devices): one program whose collectives
  // (stablehlo.all_reduce, ...) run across those devices; replica ids in the module's
  // replica_groups are positions in this list. Run it with Executable::execute_replicated.
  base::StatusOr<ExecutablePtr> compile(const std::string& module_text,
                                        const std::vector<int>& device_indices) const;
  // Loads bytes produced by Executable::serialize() with the same plugin build.
  base::StatusOr<ExecutablePtr> deserialize(const std::string& bytes, int device_index) const;
  base::StatusOr<ExecutablePtr> deserialize(const std::string& bytes,
                                            const std::vector<int>& device_indices) const;

 private:
  base::Status check_replica_devices(const std::vector<int>& device_indices) const;
  // One PJRT_Client_BufferFromHostBuffer call with `semantics` (a PJRT_HostBufferSemantics)
  // on a checked device; the caller reads the buffer and done event from `args`.
  base::Status from_host_buffer(const void* data, base::DType dtype,
                                const std::vector<int64_t>& dims, int device_index,
                                int semantics, PJRT_Client_BufferFromHostBuffer_Args* args) const;

  Client() = default;
  std::shared_ptr<const Plugin> plugin_;
  PJRT_Client* raw_ = nullptr;
  std::vector<PJRT_Device*> devices_;
  std::vector<int> device_ids_;
  int num_global_devices_ = 0;
  bool multi_process_ = false;
  std::optional<bool> cpu_asynchronous_;
  // The store the plugin's callbacks call (their user_arg); held for the client's life.
  std::shared_ptr<KeyValueStore> kv_store_;
  std::string platform_name_;
  std::string platform_version_;
};

// The serialized CompileOptionsProto we compile with: one replica, one partition, on
// device `device_index`.
std::string compile_options(int device_index);
// One replica per device (replica r on device_indices[r]), one partition.
std::string compile_options(const std::vector<int>& device_indices);
// The same over the plugin's device ids, with no device ordinal: the plugin takes its local
// device from the assignment (what a multi-process client needs, whose ids are global).
std::string compile_options_by_id(const std::vector<int>& device_ids);

}  // namespace torchtpu::runtime
