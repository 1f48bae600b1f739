// runtime/huge_pages: collapsing anonymous memory onto huge pages keeps its bytes, counts
// every huge page the ranges touch once (collapsed or refused), and refuses, without a
// system call, pages that cross the edge of the mapping.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "base/metrics.h"
#include "runtime/huge_pages.h"

namespace torchtpu::runtime {
namespace {

// An anonymous mapping of `pages` huge pages starting on a huge page boundary, filled.
struct Mapping {
  explicit Mapping(int64_t pages) : h(huge_page_size()), bytes(pages * h) {
    raw = mmap(nullptr, bytes + h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(raw, MAP_FAILED);
    auto a = reinterpret_cast<uintptr_t>(raw);
    base = reinterpret_cast<uint8_t*>((a + h - 1) / h * h);
    for (int64_t i = 0; i < bytes; ++i) base[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  }
  ~Mapping() { munmap(raw, bytes + h); }
  bool intact() const {
    for (int64_t i = 0; i < bytes; ++i) {
      if (base[i] != static_cast<uint8_t>(i * 7 + i / 4096)) return false;
    }
    return true;
  }
  int64_t h, bytes;
  void* raw = nullptr;
  uint8_t* base = nullptr;
};

TEST(HugePages, CollapsesEachTouchedPageOnceAndKeepsTheBytes) {
  Mapping m(3);
  const int64_t h = m.h;
  base::reset_metrics();
  // Two ranges inside page 0 and one spanning pages 1-2: three pages, each once.
  HugePageCollapse r = collapse_to_huge_pages(
      {{m.base + 100, 1000}, {m.base + 5000, 64}, {m.base + h + 10, h}});
  EXPECT_EQ(r.huge_bytes + r.refused_bytes, 3 * h);
  EXPECT_EQ(base::counter_value("huge_page_collapsed_bytes"), r.huge_bytes);
  EXPECT_EQ(base::counter_value("huge_page_refused_bytes"), r.refused_bytes);
  EXPECT_EQ(r.first_refusal.empty(), r.refused_bytes == 0);
  EXPECT_TRUE(m.intact());
  if (r.huge_bytes == 0) GTEST_SKIP() << "the kernel refused MADV_COLLAPSE: " << r.first_refusal;
}

TEST(HugePages, PagesCrossingTheMappingsEdgeAreRefusedAndCounted) {
  const int64_t h = huge_page_size();
  // A mapping that starts in the middle of a huge page: its first page crosses the edge.
  void* raw = mmap(nullptr, 3 * h, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(raw, MAP_FAILED);
  auto a = reinterpret_cast<uintptr_t>(raw);
  auto* start = reinterpret_cast<uint8_t*>((a + h - 1) / h * h + h / 2);
  ASSERT_EQ(munmap(raw, start - static_cast<uint8_t*>(raw)), 0);  // mapping begins at `start`
  std::memset(start, 1, 64);
  base::reset_metrics();
  HugePageCollapse r = collapse_to_huge_pages({{start, 64}});
  EXPECT_EQ(r.huge_bytes, 0);
  EXPECT_EQ(r.refused_bytes, h);
  EXPECT_EQ(r.first_refusal, "outside_mapping");
  EXPECT_EQ(base::keyed_counters_snapshot()["huge_page_refusals"]["outside_mapping"], 1);
  EXPECT_EQ(start[63], 1);
  munmap(start, static_cast<uint8_t*>(raw) + 3 * h - start);
}

TEST(HugePages, EmptyRangesAskForNothing) {
  HugePageCollapse r = collapse_to_huge_pages({{nullptr, 100}, {&r, 0}});
  EXPECT_EQ(r.huge_bytes + r.refused_bytes, 0);
}

}  // namespace
}  // namespace torchtpu::runtime
