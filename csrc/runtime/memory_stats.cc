#include "runtime/memory_stats.h"

#include <malloc.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <string>

namespace torchtpu::runtime {
namespace {

std::mutex& mu() {
  static auto* m = new std::mutex();
  return *m;
}

// Lives for the process: buffers may be destroyed during static destruction.
std::map<int, BufferMemoryStats>& stats() {
  static auto* s = new std::map<int, BufferMemoryStats>();
  return *s;
}

}  // namespace

void note_buffer_created(int device_index, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu());
  BufferMemoryStats& s = stats()[device_index];
  s.current_bytes += bytes;
  s.peak_bytes = std::max(s.peak_bytes, s.current_bytes);
  s.allocated_bytes += bytes;
  s.num_buffers += 1;
  s.peak_num_buffers = std::max(s.peak_num_buffers, s.num_buffers);
  s.num_allocations += 1;
}

void note_buffer_destroyed(int device_index, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu());
  BufferMemoryStats& s = stats()[device_index];
  s.current_bytes -= bytes;
  s.freed_bytes += bytes;
  s.num_buffers -= 1;
  s.num_frees += 1;
}

BufferMemoryStats buffer_memory_stats(int device_index) {
  std::lock_guard<std::mutex> lock(mu());
  auto it = stats().find(device_index);
  return it == stats().end() ? BufferMemoryStats{} : it->second;
}

void reset_peak_buffer_memory(int device_index) {
  std::lock_guard<std::mutex> lock(mu());
  BufferMemoryStats& s = stats()[device_index];
  s.peak_bytes = s.current_bytes;
  s.peak_num_buffers = s.num_buffers;
}

void reset_accumulated_buffer_memory(int device_index) {
  std::lock_guard<std::mutex> lock(mu());
  BufferMemoryStats& s = stats()[device_index];
  s.allocated_bytes = s.freed_bytes = 0;
  s.num_allocations = s.num_frees = 0;
}

namespace {

// The first whitespace-separated number in file `path`; nullopt when absent or not a
// number ("max" is cgroup v2's "no limit").
std::optional<int64_t> read_number(const std::string& path) {
  std::ifstream f(path);
  int64_t v = 0;
  if (f >> v) return v;
  return std::nullopt;
}

// The value of `key` in a memory.stat file (lines "key value").
std::optional<int64_t> stat_value(const std::string& dir, const std::string& key) {
  std::ifstream f(dir + "/memory.stat");
  std::string k;
  int64_t v = 0;
  while (f >> k >> v) {
    if (k == key) return v;
  }
  return std::nullopt;
}

// cgroup v1 writes "no limit" as LONG_MAX rounded down to a page.
bool unlimited(int64_t v) { return v >= (int64_t{1} << 62); }

void take(std::optional<CgroupMemory>& best, const CgroupMemory& level) {
  if (!best) {
    best = level;
    return;
  }
  best->limit_bytes = std::min(best->limit_bytes, level.limit_bytes);
  best->available_bytes = std::min(best->available_bytes, level.available_bytes);
  if (level.swap_bytes) {
    best->swap_bytes = best->swap_bytes ? std::min(*best->swap_bytes, *level.swap_bytes)
                                        : *level.swap_bytes;
  }
}

// A group's figures: its limit, and the limit less what it uses, its inactive file cache
// counted free (the kernel reclaims it first).
CgroupMemory level_of(int64_t limit, int64_t used, int64_t cache) {
  CgroupMemory level;
  level.limit_bytes = limit;
  level.available_bytes = std::clamp<int64_t>(limit - used + cache, 0, limit);
  return level;
}

// The parent of group path `rel` ("/a/b" -> "/a" -> ""; "" is the top).
std::string parent_of(const std::string& rel) {
  size_t slash = rel.find_last_of('/');
  return slash == 0 || slash == std::string::npos ? std::string() : rel.substr(0, slash);
}

// cgroup v2: memory.max of the group and each ancestor up to `root`.
void cgroup_v2(const std::string& path, const std::string& root,
               std::optional<CgroupMemory>& best) {
  for (std::string rel = path == "/" ? std::string() : path;; rel = parent_of(rel)) {
    std::string dir = root + rel;
    if (auto limit = read_number(dir + "/memory.max")) {
      CgroupMemory level = level_of(*limit, read_number(dir + "/memory.current").value_or(0),
                                    stat_value(dir, "inactive_file").value_or(0));
      level.swap_bytes = read_number(dir + "/memory.swap.max");
      take(best, level);
    }
    if (rel.empty()) break;
  }
}

// cgroup v1: the limit of the group and of each ancestor under the controller's mount
// (a limit set higher up counts what the groups beside this one use too), and the
// group's hierarchical limit (ancestors above the mount included). Inside a container
// without a cgroup namespace the group's path names the host's hierarchy while the
// controller's mount is the container's own group: then the mount itself is read.
void cgroup_v1(const std::string& path, const std::string& root,
               std::optional<CgroupMemory>& best) {
  std::string mount = root + "/memory";
  std::string rel = path == "/" ? std::string() : path;
  if (!read_number(mount + rel + "/memory.usage_in_bytes")) rel.clear();
  auto used_in = [](const std::string& dir) {
    return read_number(dir + "/memory.usage_in_bytes").value_or(0);
  };
  auto cache_in = [](const std::string& dir) {
    return stat_value(dir, "total_inactive_file").value_or(0);
  };
  for (std::string up = rel;; up = parent_of(up)) {
    std::string at = mount + up;
    auto own = read_number(at + "/memory.limit_in_bytes");
    if (own && !unlimited(*own)) take(best, level_of(*own, used_in(at), cache_in(at)));
    if (up.empty()) break;
  }
  std::string dir = mount + rel;
  auto limit = stat_value(dir, "hierarchical_memory_limit");
  if (!limit) limit = read_number(dir + "/memory.limit_in_bytes");
  if (!limit || unlimited(*limit)) return;
  CgroupMemory level = level_of(*limit, used_in(dir), cache_in(dir));
  auto memsw = stat_value(dir, "hierarchical_memsw_limit");
  if (memsw && !unlimited(*memsw)) level.swap_bytes = std::max<int64_t>(0, *memsw - *limit);
  take(best, level);
}

}  // namespace

std::optional<CgroupMemory> cgroup_memory(const std::string& self_cgroup,
                                          const std::string& root) {
  std::optional<CgroupMemory> best;
  std::istringstream lines(self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"; v2's unified hierarchy is "0::path".
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path.empty() || path[0] != '/') continue;
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      cgroup_v2(path, root, best);
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name == "memory") cgroup_v1(path, root, best);
    }
  }
  return best;
}

std::optional<HostMemoryInfo> host_memory_info() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return std::nullopt;
  HostMemoryInfo info;
  info.total_bytes = static_cast<int64_t>(pages) * page_size;
  // MemAvailable counts reclaimable caches, as `free` does; _SC_AVPHYS_PAGES does not.
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  bool available = false;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") {
      info.available_bytes = kb * 1024;
      available = true;
    } else if (key == "SwapTotal:") {
      info.swap_bytes = kb * 1024;
    }
  }
  if (!available) {
    long avail = sysconf(_SC_AVPHYS_PAGES);
    info.available_bytes = avail > 0 ? static_cast<int64_t>(avail) * page_size : 0;
  }
  // Freed memory malloc keeps for this process's reuse (runtime/host_malloc.h retains it):
  // free for this process's next allocations, though the OS counts it as used.
  struct mallinfo2 m = mallinfo2();
  int64_t kept = static_cast<int64_t>(m.fordblks);
  info.available_bytes += kept;
  // A container's limit caps both: past it the kernel ends the process.
  std::ifstream self("/proc/self/cgroup");
  std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  if (auto group = cgroup_memory(text, "/sys/fs/cgroup")) {
    info.total_bytes = std::min(info.total_bytes, group->limit_bytes);
    info.available_bytes = std::min(info.available_bytes, group->available_bytes + kept);
    if (group->swap_bytes) info.swap_bytes = std::min(info.swap_bytes, *group->swap_bytes);
  }
  return info;
}

std::optional<int64_t> process_map_count() {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  int64_t lines = 0;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) {
    for (const char* p = buf; (p = static_cast<const char*>(memchr(p, '\n', buf + n - p)));
         ++p) {
      ++lines;
    }
  }
  close(fd);
  return lines;
}

std::optional<int64_t> max_map_count() {
  std::ifstream f("/proc/sys/vm/max_map_count");
  int64_t v = 0;
  if (f >> v && v > 0) return v;
  return std::nullopt;
}

}  // namespace torchtpu::runtime
