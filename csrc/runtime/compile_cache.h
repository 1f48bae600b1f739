// CompileCache: module text -> loaded executable, in memory and on disk.
//
// Key: hash of module text + compile options (which name the device, or every device of
// a replicated program) + plugin identity
// (path, API version, `xla_version`, ...) + platform name. Lookup order:
//   1. memory: counts `num_compile_cache_hits_memory`;
//   2. disk (see disk_cache.h): the entry is deserialized by the plugin, counts
//      `num_compile_cache_hits_disk`, and joins the memory tier;
//   3. compile (counted by Client); when TORCHTPU_DUMP_DIR is set the module text goes to
//      <dir>/module_<key>.mlir; the serialized executable is written to disk
//      (`num_disk_cache_writes`).
// A corrupt or unloadable disk entry is logged, counted (`num_disk_cache_corrupt`),
// deleted and recompiled; a failed disk write is counted
// (`num_disk_cache_write_failures`). Neither fails get_or_compile.
// The memory tier holds at most `memory_capacity` executables and drops the least
// recently used one to make room (`num_compile_cache_evictions`): each loaded executable
// costs the process memory maps, and a workload that makes a new program per shape would
// otherwise exhaust them. The disk tier is bounded in bytes (TORCHTPU_CACHE_MAX_SIZE; the
// least recently used entries go, see disk_cache.h).
// Thread safety: get_or_compile may be called from any thread; two threads missing on the
// same key may both compile (and both write the same disk entry), and the first insert wins.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/lru_map.h"
#include "base/status.h"
#include "runtime/client.h"
#include "runtime/disk_cache.h"

namespace torchtpu::runtime {

class CompileCache {
 public:
  // Disk tier at default_disk_cache_dir() (TORCHTPU_CACHE_DIR and friends).
  static constexpr size_t kDefaultMemoryCapacity = 4096;

  explicit CompileCache(std::shared_ptr<Client> client,
                        size_t memory_capacity = kDefaultMemoryCapacity,
                        uint64_t disk_max_bytes = kDefaultDiskCacheMaxBytes);
  // Disk tier under `disk_root` ("" disables it), its entries bounded by `disk_max_bytes`
  // (0: no bound).
  CompileCache(std::shared_ptr<Client> client, const std::string& disk_root,
               size_t memory_capacity = kDefaultMemoryCapacity,
               uint64_t disk_max_bytes = kDefaultDiskCacheMaxBytes);

  base::StatusOr<ExecutablePtr> get_or_compile(const std::string& module_text, int device_index);
  // A program replicated over `device_indices` (Client::compile's replicated form); the
  // key names every device, so each group of devices has its own entry.
  base::StatusOr<ExecutablePtr> get_or_compile(const std::string& module_text,
                                               const std::vector<int>& device_indices);
  // Number of executables in the memory tier.
  size_t size() const;
  // Drops least recently used executables until at most `n` are held here.
  void shrink_to(size_t n);
  // Caches built over this one (a program per op signature, per fused graph, per view)
  // keep executables alive too: each registers how it shrinks, and shrink_all_to shrinks
  // them with this one, so that dropping executables frees them (their memory maps).
  void add_holder(std::function<void(size_t)> shrink);
  // This cache and every holder keep at most `n` entries each.
  void shrink_all_to(size_t n);
  size_t capacity() const { return entries_.capacity(); }
  uint64_t key_of(const std::string& module_text, int device_index) const;
  uint64_t key_of(const std::string& module_text, const std::vector<int>& device_indices) const;
  const DiskCache& disk_cache() const { return disk_; }

 private:
  // Compiles and writes the result to the disk tier.
  base::StatusOr<ExecutablePtr> compile_and_store(uint64_t key, const std::string& module_text,
                                                  const std::vector<int>& device_indices);

  std::shared_ptr<Client> client_;
  uint64_t identity_hash_;
  DiskCache disk_;
  mutable std::mutex mu_;
  // A memory hit marks the entry's disk entry used again once kDiskTouchIntervalNs passed
  // since it was last marked (monotonic ns).
  struct Entry {
    ExecutablePtr exe;
    int64_t disk_touched_ns = 0;
  };
  static constexpr int64_t kDiskTouchIntervalNs = int64_t{300} * 1000 * 1000 * 1000;
  base::LruMap<uint64_t, Entry> entries_;
  std::mutex holders_mu_;  // never held while a holder shrinks (holders take their locks)
  std::vector<std::function<void(size_t)>> holders_;
};

}  // namespace torchtpu::runtime
