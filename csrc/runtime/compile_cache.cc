#include "runtime/compile_cache.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "base/hash.h"
#include "base/metrics.h"

namespace torchtpu::runtime {

CompileCache::CompileCache(std::shared_ptr<Client> client) : client_(std::move(client)) {
  identity_hash_ = base::fnv1a(client_->plugin().identity());
}

uint64_t CompileCache::key_of(const std::string& module_text, int device_index) const {
  return base::fnv1a(module_text, base::fnv1a(compile_options(device_index), identity_hash_));
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

namespace {

void dump_module(uint64_t key, const std::string& module_text) {
  const char* dir = std::getenv("TORCHTPU_DUMP_DIR");
  if (dir == nullptr || *dir == '\0') return;
  char name[64];
  std::snprintf(name, sizeof(name), "/module_%016llx.mlir", static_cast<unsigned long long>(key));
  std::ofstream out(std::string(dir) + name);
  out << module_text;
}

}  // namespace

base::StatusOr<ExecutablePtr> CompileCache::get_or_compile(const std::string& module_text,
                                                           int device_index) {
  uint64_t key = key_of(module_text, device_index);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      base::counter_add("num_compile_cache_hits_memory");
      return it->second;
    }
  }
  dump_module(key, module_text);
  TORCHTPU_ASSIGN_OR_RETURN(ExecutablePtr exe, client_->compile(module_text, device_index));
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.emplace(key, std::move(exe)).first->second;
}

}  // namespace torchtpu::runtime
