// CompileCache: module text -> loaded executable, in memory.
//
// Key: hash of module text + compile options (which name the device) + plugin identity. A hit counts
// `num_compile_cache_hits_memory`; a miss compiles (counted by Client) and, when
// TORCHTPU_DUMP_DIR is set, writes the module text to <dir>/module_<hash>.mlir.
// Entries are never evicted (executables are small next to their buffers; the set of
// eager op signatures in a program is bounded).
// Thread safety: get_or_compile may be called from any thread; two threads missing on the
// same key may both compile, and the first insert wins.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "runtime/client.h"

namespace torchtpu::runtime {

class CompileCache {
 public:
  explicit CompileCache(std::shared_ptr<Client> client);

  base::StatusOr<ExecutablePtr> get_or_compile(const std::string& module_text, int device_index);
  size_t size() const;
  uint64_t key_of(const std::string& module_text, int device_index) const;

 private:
  std::shared_ptr<Client> client_;
  uint64_t identity_hash_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, ExecutablePtr> entries_;
};

}  // namespace torchtpu::runtime
