// PageAllocator: allocation, reference counts, and the errors for misuse.
#include <gtest/gtest.h>

#include <set>

#include "serve/page_allocator.h"

namespace torchtpu::serve {
namespace {

TEST(ServePageAllocator, HandsOutDistinctPagesUntilEmpty) {
  PageAllocator alloc(4);
  EXPECT_EQ(alloc.num_total_pages(), 4);
  EXPECT_EQ(alloc.num_free_pages(), 4);
  auto first = alloc.allocate(3);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  std::set<PageId> seen(first->begin(), first->end());
  EXPECT_EQ(seen.size(), 3u);
  for (PageId p : *first) {
    EXPECT_GE(p, 0);
    EXPECT_LT(p, 4);
    EXPECT_EQ(alloc.ref_count(p), 1);
  }
  EXPECT_EQ(alloc.num_free_pages(), 1);

  // All or nothing: asking for more than is free takes nothing.
  auto too_many = alloc.allocate(2);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), base::StatusCode::kUnavailable);
  EXPECT_NE(too_many.status().message().find("asked for 2, 1 free of 4"), std::string::npos)
      << too_many.status().message();
  EXPECT_EQ(alloc.num_free_pages(), 1);

  auto last = alloc.allocate(1);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(seen.count((*last)[0]), 0u);
  EXPECT_EQ(alloc.num_free_pages(), 0);
  EXPECT_FALSE(alloc.allocate(1).ok());
  auto none = alloc.allocate(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(ServePageAllocator, PageReturnsToFreeListWhenLastReferenceDrops) {
  PageAllocator alloc(2);
  auto pages = alloc.allocate(1);
  ASSERT_TRUE(pages.ok());
  const PageId p = (*pages)[0];
  ASSERT_TRUE(alloc.incref(p).ok());
  ASSERT_TRUE(alloc.incref(p).ok());
  EXPECT_EQ(alloc.ref_count(p), 3);
  ASSERT_TRUE(alloc.decref(p).ok());
  ASSERT_TRUE(alloc.decref(p).ok());
  EXPECT_EQ(alloc.ref_count(p), 1);
  EXPECT_EQ(alloc.num_free_pages(), 1);  // still held once
  ASSERT_TRUE(alloc.decref(p).ok());
  EXPECT_EQ(alloc.ref_count(p), 0);
  EXPECT_EQ(alloc.num_free_pages(), 2);
  // The freed page can be handed out again.
  auto again = alloc.allocate(2);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(std::set<PageId>(again->begin(), again->end()), (std::set<PageId>{0, 1}));
}

TEST(ServePageAllocator, MisuseIsAnErrorAndChangesNothing) {
  PageAllocator alloc(3);
  base::Status dec_free = alloc.decref(1);
  ASSERT_FALSE(dec_free.ok());
  EXPECT_EQ(dec_free.code(), base::StatusCode::kFailedPrecondition);
  EXPECT_NE(dec_free.message().find("page 1 is free"), std::string::npos) << dec_free.message();
  EXPECT_FALSE(alloc.incref(1).ok());
  EXPECT_EQ(alloc.num_free_pages(), 3);

  base::Status out_of_range = alloc.decref(7);
  ASSERT_FALSE(out_of_range.ok());
  EXPECT_EQ(out_of_range.code(), base::StatusCode::kOutOfRange);
  EXPECT_NE(out_of_range.message().find("[0, 3)"), std::string::npos);
  EXPECT_FALSE(alloc.incref(-1).ok());
  EXPECT_EQ(alloc.ref_count(-1), -1);

  // A double free of a page after its last reference is caught too.
  auto pages = alloc.allocate(1);
  ASSERT_TRUE(pages.ok());
  ASSERT_TRUE(alloc.decref((*pages)[0]).ok());
  EXPECT_FALSE(alloc.decref((*pages)[0]).ok());
  EXPECT_EQ(alloc.num_free_pages(), 3);
  EXPECT_FALSE(alloc.allocate(-1).ok());
}

}  // namespace
}  // namespace torchtpu::serve
