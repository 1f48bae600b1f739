// Device memory accounting in the runtime: bytes of live Buffers per device, and what the
// plugin reports about a device's memory.
//
// Every Buffer adds its size_bytes() when created and removes it when destroyed, so the
// count covers tensors' storages, results in flight and cached scalars alike. PJRT frees
// a destroyed buffer's memory once its pending uses finish; the count drops at destruction.
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torchtpu::runtime {

struct BufferMemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;       // since start or the last reset_peak_buffer_memory
  int64_t allocated_bytes = 0;  // total ever added, since the last accumulated reset
  int64_t freed_bytes = 0;
  int64_t num_buffers = 0;
  int64_t peak_num_buffers = 0;
  int64_t num_allocations = 0;  // buffers ever created, since the last accumulated reset
  int64_t num_frees = 0;
};

BufferMemoryStats buffer_memory_stats(int device_index);
void reset_peak_buffer_memory(int device_index);
void reset_accumulated_buffer_memory(int device_index);

// Called by Buffer only.
void note_buffer_created(int device_index, int64_t bytes);
void note_buffer_destroyed(int device_index, int64_t bytes);

// PJRT_Device_MemoryStats: what the plugin knows of a device's memory. Fields the plugin
// does not set are empty.
struct DeviceMemoryInfo {
  int64_t bytes_in_use = 0;
  std::optional<int64_t> peak_bytes_in_use;
  std::optional<int64_t> bytes_limit;
  std::optional<int64_t> bytes_reserved;
  std::optional<int64_t> num_allocs;
  std::optional<int64_t> largest_alloc_size;
};

// Total and available host memory, bytes, for plugins whose device memory is the host's
// (the CPU plugin): available is the OS's MemAvailable plus what malloc holds freed for
// this process's reuse.
struct HostMemoryInfo {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
  int64_t swap_bytes = 0;  // the swap space's size
};
std::optional<HostMemoryInfo> host_memory_info();

// The memory limit of this process's control group (a container's `--memory`), when one
// is set: the kernel ends a process that passes it whatever the host has free, so the host
// figures above are capped by it. cgroup v2 (memory.max, the smallest over the group and
// its ancestors) and v1 (hierarchical_memory_limit); nullopt when no limit is set or the
// files are absent. `self_cgroup`: /proc/self/cgroup's text; `root`: where the cgroup
// file systems are mounted.
struct CgroupMemory {
  int64_t limit_bytes = 0;
  int64_t available_bytes = 0;  // the limit less what the group uses, its inactive file
                                // cache counted as free (the kernel reclaims it first)
  std::optional<int64_t> swap_bytes;  // swap the group may use; nullopt: not limited
};
std::optional<CgroupMemory> cgroup_memory(const std::string& self_cgroup,
                                          const std::string& root);

// The process's memory mappings (lines of /proc/self/maps) and the kernel's limit on them
// (vm.max_map_count); nullopt where the OS does not say.
std::optional<int64_t> process_map_count();
std::optional<int64_t> max_map_count();

}  // namespace torchtpu::runtime
