#include "runtime/compile_cache.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "base/hash.h"
#include "base/metrics.h"

namespace torchtpu::runtime {

namespace {

// XLA_FLAGS changes what the compiler emits (e.g. whether dots use XNNPACK), so an
// executable compiled under other flags must not be reused.
uint64_t identity_hash_of(const Client& client) {
  const char* flags = std::getenv("XLA_FLAGS");
  uint64_t h = base::fnv1a(client.platform_name(), base::fnv1a(client.plugin().identity()));
  return flags != nullptr && *flags != '\0' ? base::fnv1a(flags, h) : h;
}

void dump_module(uint64_t key, const std::string& module_text) {
  const char* dir = std::getenv("TORCHTPU_DUMP_DIR");
  if (dir == nullptr || *dir == '\0') return;
  // The first module of a process may come before anything else made the directory.
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  char name[64];
  std::snprintf(name, sizeof(name), "/module_%016llx.mlir", static_cast<unsigned long long>(key));
  std::ofstream out(std::string(dir) + name);
  out << module_text;
  if (!out) {
    std::fprintf(stderr, "torchtpu: could not write %s%s (TORCHTPU_DUMP_DIR): check that the "
                 "directory is writable\n", dir, name);
  }
}

}  // namespace

CompileCache::CompileCache(std::shared_ptr<Client> client, size_t memory_capacity,
                           uint64_t disk_max_bytes)
    : CompileCache(client, default_disk_cache_dir(), memory_capacity, disk_max_bytes) {}

CompileCache::CompileCache(std::shared_ptr<Client> client, const std::string& disk_root,
                           size_t memory_capacity, uint64_t disk_max_bytes)
    : client_(std::move(client)),
      identity_hash_(identity_hash_of(*client_)),
      disk_(disk_root, identity_hash_, disk_max_bytes),
      entries_(memory_capacity) {}

uint64_t CompileCache::key_of(const std::string& module_text, int device_index) const {
  return key_of(module_text, std::vector<int>{device_index});
}

uint64_t CompileCache::key_of(const std::string& module_text,
                              const std::vector<int>& device_indices) const {
  return base::fnv1a(module_text,
                     base::fnv1a(client_->compile_options_for(device_indices), identity_hash_));
}

size_t CompileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void CompileCache::shrink_to(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t dropped = entries_.shrink_to(n);
  if (dropped > 0) base::counter_add("num_compile_cache_evictions", static_cast<int64_t>(dropped));
}

void CompileCache::add_holder(std::function<void(size_t)> shrink) {
  std::lock_guard<std::mutex> lock(holders_mu_);
  holders_.push_back(std::move(shrink));
}

void CompileCache::shrink_all_to(size_t n) {
  std::vector<std::function<void(size_t)>> holders;
  {
    std::lock_guard<std::mutex> lock(holders_mu_);
    holders = holders_;
  }
  for (const auto& shrink : holders) shrink(n);
  shrink_to(n);
}

base::StatusOr<ExecutablePtr> CompileCache::compile_and_store(
    uint64_t key, const std::string& module_text, const std::vector<int>& device_indices) {
  dump_module(key, module_text);
  TORCHTPU_ASSIGN_OR_RETURN(ExecutablePtr exe, client_->compile(module_text, device_indices));
  if (disk_.enabled()) {
    base::StatusOr<std::string> bytes = exe->serialize();
    if (bytes.ok()) {
      disk_.store(key, *bytes);
    } else {
      disk_.report_write_failure(key, bytes.status().message());
    }
  }
  return exe;
}

base::StatusOr<ExecutablePtr> CompileCache::get_or_compile(const std::string& module_text,
                                                           int device_index) {
  return get_or_compile(module_text, std::vector<int>{device_index});
}

base::StatusOr<ExecutablePtr> CompileCache::get_or_compile(const std::string& module_text,
                                                           const std::vector<int>& device_indices) {
  uint64_t key = key_of(module_text, device_indices);
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (Entry* hit = entries_.find(key)) {
      base::counter_add("num_compile_cache_hits_memory");
      ExecutablePtr exe = hit->exe;
      // Its disk entry is marked used too, now and then: another process's trim would
      // otherwise take a program this one runs all day for the least recently used.
      int64_t now = base::monotonic_ns();
      if (now - hit->disk_touched_ns > kDiskTouchIntervalNs) {
        hit->disk_touched_ns = now;
        lock.unlock();
        disk_.touch(key);
      }
      return exe;
    }
  }
  ExecutablePtr exe;
  // An out-of-range device can have no entry; let compile() report it.
  bool devices_exist = true;
  for (int d : device_indices) devices_exist &= d >= 0 && d < client_->num_devices();
  if (devices_exist) {
    if (std::optional<std::string> bytes = disk_.load(key)) {
      base::StatusOr<ExecutablePtr> loaded = client_->deserialize(*bytes, device_indices);
      if (loaded.ok()) {
        base::counter_add("num_compile_cache_hits_disk");
        exe = std::move(loaded).value();
      } else {
        disk_.discard(key, "plugin cannot load it: " + loaded.status().message());
      }
    }
  }
  if (exe == nullptr) {
    TORCHTPU_ASSIGN_OR_RETURN(exe, compile_and_store(key, module_text, device_indices));
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Loaded or stored: its disk entry was just marked used.
  auto [kept, dropped] = entries_.insert(key, Entry{std::move(exe), base::monotonic_ns()});
  if (dropped > 0) base::counter_add("num_compile_cache_evictions", static_cast<int64_t>(dropped));
  return kept->exe;
}

}  // namespace torchtpu::runtime
