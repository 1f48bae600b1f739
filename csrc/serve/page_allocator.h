// PageAllocator: the pool of KV pages and their reference counts.
//
// A page is `page_size` token slots of KV cache; the pool has `num_pages` pages with ids
// [0, num_pages). Every holder of a page (a request's page table, the radix cache) owns one
// reference. A page is free exactly when its count is 0; the last decref returns it to the
// free list. Not thread-safe: the scheduler that owns it is single-threaded.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace torchtpu::serve {

using PageId = int32_t;

class PageAllocator {
 public:
  explicit PageAllocator(int32_t num_pages);

  // Takes `num_pages` free pages, each with reference count 1. All or nothing: when fewer
  // are free, nothing is taken and the error says how many were asked for and free.
  base::StatusOr<std::vector<PageId>> allocate(int32_t num_pages);

  // One more holder of an allocated page. Error for a free or out-of-range page.
  base::Status incref(PageId page);
  // One holder fewer; at 0 the page is free again. Error for a free or out-of-range page.
  base::Status decref(PageId page);

  int32_t ref_count(PageId page) const;  // 0 for a free page; -1 for an out-of-range id
  int32_t num_free_pages() const { return static_cast<int32_t>(free_pages_.size()); }
  int32_t num_total_pages() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_used_pages() const { return num_total_pages() - num_free_pages(); }

 private:
  base::Status check_allocated(PageId page, const char* op) const;

  std::vector<int32_t> ref_counts_;
  // A stack: the most recently freed page is reused first (its slots are likely still warm).
  std::vector<PageId> free_pages_;
};

}  // namespace torchtpu::serve
