// RadixCache: matching by token ids at page granularity, node splits, LRU eviction that never
// touches pages a request still holds.
#include <gtest/gtest.h>

#include <numeric>

#include "serve/radix_cache.h"

namespace torchtpu::serve {
namespace {

constexpr int32_t kPageSize = 4;

std::vector<TokenId> iota_tokens(int32_t n, TokenId first = 100) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Plays a request: allocates pages for `tokens`, inserts them, then (unless told to keep
// them) drops the request's own references so the tree holds the only ones.
struct Fixture {
  explicit Fixture(int32_t num_pages = 16, RadixCache::PageHasher hasher = nullptr)
      : alloc(num_pages), cache(kPageSize, &alloc, std::move(hasher)) {}

  std::vector<PageId> compute(const std::vector<TokenId>& tokens, bool keep = false) {
    auto pages = alloc.allocate((static_cast<int32_t>(tokens.size()) + kPageSize - 1) / kPageSize);
    EXPECT_TRUE(pages.ok()) << pages.status().to_string();
    cache.insert(tokens, static_cast<int32_t>(tokens.size()), *pages);
    if (!keep) release(*pages);
    return *pages;
  }
  void release(const std::vector<PageId>& pages) {
    for (PageId p : pages) EXPECT_TRUE(alloc.decref(p).ok());
  }

  PageAllocator alloc;
  RadixCache cache;
};

TEST(ServeRadixCache, EmptyTreeMatchesNothing) {
  Fixture f;
  PrefixMatch m = f.cache.match(iota_tokens(9));
  EXPECT_EQ(m.num_tokens, 0);
  EXPECT_TRUE(m.pages.empty());
  EXPECT_EQ(f.cache.num_nodes(), 0);
}

TEST(ServeRadixCache, CachesOnlyFullPagesAndMatchesRoundedDown) {
  Fixture f;
  const auto tokens = iota_tokens(10);  // 2 full pages + 2 tokens
  auto pages = f.alloc.allocate(3);
  ASSERT_TRUE(pages.ok());
  EXPECT_EQ(f.cache.insert(tokens, 10, *pages), 2);
  EXPECT_EQ(f.cache.num_cached_pages(), 2);
  EXPECT_EQ(f.alloc.ref_count((*pages)[0]), 2);  // request + tree
  EXPECT_EQ(f.alloc.ref_count((*pages)[1]), 2);
  EXPECT_EQ(f.alloc.ref_count((*pages)[2]), 1);  // partial page: not cached

  PrefixMatch m = f.cache.match(tokens);
  EXPECT_EQ(m.num_tokens, 8);
  EXPECT_EQ(m.pages, (std::vector<PageId>{(*pages)[0], (*pages)[1]}));
  // A longer query with the same prefix still matches the cached pages only.
  auto longer = iota_tokens(30);
  EXPECT_EQ(f.cache.match(longer).num_tokens, 8);
  // max_tokens caps the match, rounded down to pages.
  EXPECT_EQ(f.cache.match(tokens, 7).num_tokens, 4);
  EXPECT_EQ(f.cache.match(tokens, 3).num_tokens, 0);
  // Matching takes no references.
  EXPECT_EQ(f.alloc.ref_count((*pages)[0]), 2);
  f.release(*pages);
}

TEST(ServeRadixCache, MatchStopsAtFirstPageThatDiffers) {
  Fixture f;
  const auto tokens = iota_tokens(12);
  f.compute(tokens);
  auto query = tokens;
  query[6] = 1;  // inside the second page
  EXPECT_EQ(f.cache.match(query).num_tokens, 4);
  query = tokens;
  query[0] = 1;
  EXPECT_EQ(f.cache.match(query).num_tokens, 0);
  query = tokens;
  query[11] = 1;  // last token of the last page
  EXPECT_EQ(f.cache.match(query).num_tokens, 8);
}

TEST(ServeRadixCache, InsertSplitsNodeWhereSequencesDiverge) {
  Fixture f;
  const auto a = iota_tokens(12);
  auto b = a;
  b[5] = 7;  // shares page 0 only
  const auto pages_a = f.compute(a);
  EXPECT_EQ(f.cache.num_nodes(), 1);
  auto pages_b = f.alloc.allocate(3);
  ASSERT_TRUE(pages_b.ok());
  // Page 0 is already cached (the tree keeps its own copy); pages 1 and 2 are adopted.
  EXPECT_EQ(f.cache.insert(b, 12, *pages_b), 2);
  EXPECT_EQ(f.cache.num_nodes(), 3);  // shared page 0, then a's and b's tails
  EXPECT_EQ(f.cache.num_cached_pages(), 5);
  EXPECT_EQ(f.alloc.ref_count((*pages_b)[0]), 1);  // b's duplicate of page 0 stays b's
  f.release(*pages_b);

  PrefixMatch ma = f.cache.match(a);
  EXPECT_EQ(ma.num_tokens, 12);
  EXPECT_EQ(ma.pages, pages_a);
  PrefixMatch mb = f.cache.match(b);
  EXPECT_EQ(mb.num_tokens, 12);
  EXPECT_EQ(mb.pages, (std::vector<PageId>{pages_a[0], (*pages_b)[1], (*pages_b)[2]}));

  // Inserting a shorter prefix splits at its end and adopts nothing.
  EXPECT_EQ(f.cache.insert(a, 4, pages_a), 0);
  EXPECT_EQ(f.cache.num_nodes(), 3);
  auto c = a;
  c[9] = 3;  // shares pages 0 and 1 with a: splits a's tail node
  f.compute(c);
  EXPECT_EQ(f.cache.num_nodes(), 5);
  EXPECT_EQ(f.cache.match(c).num_tokens, 12);
  EXPECT_EQ(f.cache.match(a).pages, pages_a);
}

TEST(ServeRadixCache, CollidingHashesNeverShareAPage) {
  // Every page hashes to the same bucket: only the token comparison tells them apart.
  Fixture f(16, [](const TokenId*, int32_t) { return uint64_t{42}; });
  const auto a = iota_tokens(8, 0);
  const auto b = iota_tokens(8, 50);
  auto c = a;
  c[7] = 999;
  const auto pages_a = f.compute(a);
  const auto pages_b = f.compute(b);
  EXPECT_EQ(f.cache.match(a).pages, pages_a);
  EXPECT_EQ(f.cache.match(b).pages, pages_b);
  PrefixMatch mc = f.cache.match(c);
  EXPECT_EQ(mc.num_tokens, 4);
  EXPECT_EQ(mc.pages, (std::vector<PageId>{pages_a[0]}));
  EXPECT_EQ(f.cache.match(iota_tokens(8, 20)).num_tokens, 0);
  // Eviction finds the right child in a shared bucket as well.
  EXPECT_EQ(f.cache.evict(16), 4);
  EXPECT_EQ(f.alloc.num_free_pages(), 16);
}

TEST(ServeRadixCache, EvictsLeastRecentlyUsedFirst) {
  Fixture f;
  const auto a = iota_tokens(8, 0);
  const auto b = iota_tokens(8, 50);
  const auto c = iota_tokens(8, 200);
  const auto pages_a = f.compute(a);
  f.compute(b);
  f.compute(c);
  f.cache.match(a);  // a is now the most recent, b the least
  EXPECT_EQ(f.cache.num_evictable_pages(), 6);
  EXPECT_EQ(f.cache.evict(2), 2);
  EXPECT_EQ(f.cache.match(b).num_tokens, 0);
  EXPECT_EQ(f.cache.match(c).num_tokens, 8);  // c is now the most recent
  EXPECT_EQ(f.cache.evict(3), 3);             // a whole, then c's tail page
  EXPECT_EQ(f.cache.match(a).num_tokens, 0);
  EXPECT_EQ(f.cache.match(c).num_tokens, 4);
  EXPECT_EQ(f.alloc.num_free_pages(), 15);
}

TEST(ServeRadixCache, EvictsLeavesBeforeTheirSharedPrefix) {
  Fixture f;
  const auto a = iota_tokens(12, 0);
  auto b = a;
  b[10] = 1;  // shares pages 0 and 1
  f.compute(a);
  f.compute(b);
  EXPECT_EQ(f.cache.num_cached_pages(), 4);
  EXPECT_EQ(f.cache.evict(2), 2);  // both tails go before the shared pages
  EXPECT_EQ(f.cache.match(a).num_tokens, 8);
  EXPECT_EQ(f.cache.match(b).num_tokens, 8);
  EXPECT_EQ(f.cache.num_nodes(), 1);
  EXPECT_EQ(f.cache.evict(1), 1);
  EXPECT_EQ(f.cache.match(a).num_tokens, 4);
}

TEST(ServeRadixCache, PagesARequestHoldsAreNeverEvicted) {
  Fixture f;
  const auto a = iota_tokens(12, 0);
  const auto b = iota_tokens(8, 50);
  const auto pages_a = f.compute(a, /*keep=*/true);  // a request still runs on them
  f.compute(b);
  EXPECT_EQ(f.cache.num_evictable_pages(), 2);
  EXPECT_EQ(f.cache.evict(100), 2);  // only b's
  EXPECT_EQ(f.cache.match(a).num_tokens, 12);
  EXPECT_EQ(f.cache.num_cached_pages(), 3);

  // A request that matched only page 0 of a: the tail pages become evictable.
  f.release(pages_a);
  ASSERT_TRUE(f.alloc.incref(pages_a[0]).ok());
  EXPECT_EQ(f.cache.num_evictable_pages(), 2);
  EXPECT_EQ(f.cache.reset(), 2);
  EXPECT_EQ(f.cache.match(a).pages, (std::vector<PageId>{pages_a[0]}));
  ASSERT_TRUE(f.alloc.decref(pages_a[0]).ok());
  EXPECT_EQ(f.cache.reset(), 1);
  EXPECT_EQ(f.cache.num_cached_pages(), 0);
  EXPECT_EQ(f.cache.num_nodes(), 0);
  EXPECT_EQ(f.alloc.num_free_pages(), 16);
}

TEST(ServeRadixCache, DestructionReturnsTheTreesReferences) {
  PageAllocator alloc(8);
  {
    RadixCache cache(kPageSize, &alloc);
    auto pages = alloc.allocate(2);
    ASSERT_TRUE(pages.ok());
    cache.insert(iota_tokens(8), 8, *pages);
    for (PageId p : *pages) ASSERT_TRUE(alloc.decref(p).ok());
    EXPECT_EQ(alloc.num_free_pages(), 6);
  }
  EXPECT_EQ(alloc.num_free_pages(), 8);
}

}  // namespace
}  // namespace torchtpu::serve
