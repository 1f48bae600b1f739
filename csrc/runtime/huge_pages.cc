#include "runtime/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>

#include "base/metrics.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1 (older headers lack it; older kernels answer EINVAL)
#endif

namespace torchtpu::runtime {
namespace {

// The [start, end) of the mapping holding `addr` (from /proc/self/maps), or {0, 0}.
std::pair<uintptr_t, uintptr_t> mapping_of(uintptr_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2) continue;
    if (addr >= lo && addr < hi) return {lo, hi};
  }
  return {0, 0};
}

std::string errno_name(int e) {
  switch (e) {
    case EINVAL: return "EINVAL";
    case ENOMEM: return "ENOMEM";
    case EAGAIN: return "EAGAIN";
    case EPERM: return "EPERM";
    case EFAULT: return "EFAULT";
    case EBUSY: return "EBUSY";
    default: return "errno " + std::to_string(e);
  }
}

}  // namespace

int64_t huge_page_size() {
  static const int64_t size = [] {
    std::ifstream f("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    int64_t v = 0;
    if (f >> v && v > 0 && (v & (v - 1)) == 0) return v;
    return int64_t{2} << 20;
  }();
  return size;
}

HugePageCollapse collapse_to_huge_pages(const std::vector<HostRange>& ranges) {
  static const base::Counter collapsed("huge_page_collapsed_bytes");
  static const base::Counter refused("huge_page_refused_bytes");
  HugePageCollapse out;
  const uintptr_t h = static_cast<uintptr_t>(huge_page_size());
  // Each huge page the ranges touch, once, with the mapping that holds its range.
  std::map<uintptr_t, std::pair<uintptr_t, uintptr_t>> pages;
  for (const HostRange& r : ranges) {
    if (r.addr == nullptr || r.bytes <= 0) continue;
    const uintptr_t a = reinterpret_cast<uintptr_t>(r.addr);
    const uintptr_t lo = a & ~(h - 1);
    const uintptr_t hi = (a + static_cast<uintptr_t>(r.bytes) + h - 1) & ~(h - 1);
    std::pair<uintptr_t, uintptr_t> mapping{0, 0};
    for (uintptr_t p = lo; p < hi; p += h) {
      if (pages.count(p)) continue;
      if (mapping.second == 0) mapping = mapping_of(a);
      pages.emplace(p, mapping);
    }
  }
  auto refuse = [&](const std::string& why) {
    out.refused_bytes += static_cast<int64_t>(h);
    if (out.first_refusal.empty()) out.first_refusal = why;
    base::keyed_counter_add("huge_page_refusals", why);
  };
  for (const auto& [p, mapping] : pages) {
    if (p < mapping.first || p + h > mapping.second) {
      // The kernel would skip a range crossing the mapping's edge and still answer 0.
      refuse("outside_mapping");
      continue;
    }
    int rc = madvise(reinterpret_cast<void*>(p), h, MADV_COLLAPSE);
    if (rc != 0 && errno == EAGAIN) {  // transient (a page locked or off the LRU): once more
      rc = madvise(reinterpret_cast<void*>(p), h, MADV_COLLAPSE);
    }
    if (rc == 0) {
      out.huge_bytes += static_cast<int64_t>(h);
    } else {
      refuse(errno_name(errno));
    }
  }
  collapsed.add(out.huge_bytes);
  refused.add(out.refused_bytes);
  return out;
}

}  // namespace torchtpu::runtime
