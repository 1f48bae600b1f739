// Client: RAII owner of a PJRT_Client and its addressable devices.
//
// One Client per process is the normal case (see device_runtime in aten/). Devices are
// indexed 0..num_devices()-1 in the plugin's addressable order.
// Thread safety: all methods may be called from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "runtime/buffer.h"
#include "runtime/executable.h"
#include "runtime/memory_stats.h"
#include "runtime/pjrt_api.h"

struct PJRT_Client;
struct PJRT_Device;
struct PJRT_Client_BufferFromHostBuffer_Args;

namespace torchtpu::runtime {

struct ClientOptions {
  // Devices to create on the CPU plugin (option `cpu_device_count`); ignored elsewhere.
  int cpu_device_count = 1;
};

class Client {
 public:
  static base::StatusOr<std::shared_ptr<Client>> create(std::shared_ptr<const Plugin> plugin,
                                                        const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Plugin& plugin() const { return *plugin_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
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
  std::string platform_name_;
  std::string platform_version_;
};

// The serialized CompileOptionsProto we compile with: one replica, one partition, on
// device `device_index`.
std::string compile_options(int device_index);
// One replica per device (replica r on device_indices[r]), one partition.
std::string compile_options(const std::vector<int>& device_indices);

}  // namespace torchtpu::runtime
