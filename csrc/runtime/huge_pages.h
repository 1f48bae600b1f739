// Huge pages for long-lived host memory: on a CPU plugin the device's buffers are host
// memory from glibc's heap (runtime/host_malloc.h), backed by 4 KiB pages unless the kernel
// is asked otherwise (transparent huge pages in `madvise` mode, the common default, never
// give the heap huge pages by themselves). A step that streams hundreds of MiB of weights
// reads them markedly faster from 2 MiB pages (fewer TLB misses, longer hardware prefetch
// runs), so whoever holds large buffers for the process's life (a serving engine's weights)
// can ask for them to be moved onto huge pages once, after they are written.
//
// collapse_to_huge_pages does that with madvise(MADV_COLLAPSE) (Linux 6.1+; synchronous, it
// copies each 2 MiB range into a fresh huge page; it works in `madvise` mode, where the
// kernel gives no huge page unasked, and refuses MADV_NOHUGEPAGE regions). The ranges are the huge pages
// the buffers touch, rounded out to huge page boundaries (a buffer smaller than a huge page
// still gets one; its neighbours' bytes move along, unchanged), skipping those that cross
// the edge of the mapping holding the buffer. What the kernel refuses (an older kernel:
// EINVAL; no free huge page: ENOMEM, EAGAIN) is counted, never an error: the memory stays
// as it was, correct, only slower to stream.
//
// Counters (torchtpu.debug.metrics): huge_page_collapsed_bytes, huge_page_refused_bytes;
// keyed family huge_page_refusals (by errno name, or "outside_mapping").
// Thread safety: may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torchtpu::runtime {

struct HugePageCollapse {
  int64_t huge_bytes = 0;     // bytes of the rounded-out range now on huge pages
  int64_t refused_bytes = 0;  // bytes of it the kernel refused or that crossed a mapping's edge
  std::string first_refusal;  // errno name of the first refusal ("" when none)
};

// The transparent huge page size (PMD size, from sysfs; 2 MiB when sysfs does not say).
int64_t huge_page_size();

struct HostRange {
  const void* addr;
  int64_t bytes;
};

// Moves the huge pages that the ranges touch onto huge pages (see above), each huge page
// once however many ranges touch it.
HugePageCollapse collapse_to_huge_pages(const std::vector<HostRange>& ranges);

}  // namespace torchtpu::runtime
