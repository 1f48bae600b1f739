#include "serve/page_allocator.h"

#include <string>

namespace torchtpu::serve {

PageAllocator::PageAllocator(int32_t num_pages) : ref_counts_(num_pages > 0 ? num_pages : 0, 0) {
  free_pages_.reserve(ref_counts_.size());
  // Pushed in reverse so the first allocations hand out pages 0, 1, 2, ...
  for (int32_t p = num_total_pages() - 1; p >= 0; --p) free_pages_.push_back(p);
}

base::StatusOr<std::vector<PageId>> PageAllocator::allocate(int32_t num_pages) {
  if (num_pages < 0) {
    return base::invalid_argument("serve: page allocation: negative page count " +
                                  std::to_string(num_pages));
  }
  if (num_pages > num_free_pages()) {
    return base::unavailable("serve: page allocation: out of KV pages (asked for " +
                             std::to_string(num_pages) + ", " + std::to_string(num_free_pages()) +
                             " free of " + std::to_string(num_total_pages()) + ")");
  }
  std::vector<PageId> pages(free_pages_.end() - num_pages, free_pages_.end());
  free_pages_.resize(free_pages_.size() - num_pages);
  for (PageId p : pages) ref_counts_[p] = 1;
  return pages;
}

base::Status PageAllocator::check_allocated(PageId page, const char* op) const {
  if (page < 0 || page >= num_total_pages()) {
    return base::out_of_range(std::string("serve: page ") + op + ": page id " +
                              std::to_string(page) + " out of range [0, " +
                              std::to_string(num_total_pages()) + ")");
  }
  if (ref_counts_[page] == 0) {
    return base::failed_precondition(std::string("serve: page ") + op + ": page " +
                                     std::to_string(page) +
                                     " is free (reference count 0); only an allocated page has "
                                     "references to add or drop");
  }
  return base::Status::ok_status();
}

base::Status PageAllocator::incref(PageId page) {
  TORCHTPU_RETURN_IF_ERROR(check_allocated(page, "incref"));
  ++ref_counts_[page];
  return base::Status::ok_status();
}

base::Status PageAllocator::decref(PageId page) {
  TORCHTPU_RETURN_IF_ERROR(check_allocated(page, "decref"));
  if (--ref_counts_[page] == 0) free_pages_.push_back(page);
  return base::Status::ok_status();
}

int32_t PageAllocator::ref_count(PageId page) const {
  if (page < 0 || page >= num_total_pages()) return -1;
  return ref_counts_[page];
}

}  // namespace torchtpu::serve
