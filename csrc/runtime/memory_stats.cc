#include "runtime/memory_stats.h"

#include <malloc.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
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
  info.available_bytes += static_cast<int64_t>(m.fordblks);
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
