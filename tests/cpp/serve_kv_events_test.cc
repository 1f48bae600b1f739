// The radix cache's KV events (kv_event.h): what it stores and evicts, with vLLM's chained
// block hashes, and the scheduler's stream of them.
#include <gtest/gtest.h>

#include <numeric>

#include "serve/radix_cache.h"
#include "serve/scheduler.h"

namespace torchtpu::serve {
namespace {

constexpr int32_t kPageSize = 4;

std::vector<TokenId> iota_tokens(int32_t n, TokenId first = 100) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(ServeBlockHash, ChainsOverWholePrefixes) {
  const auto a = iota_tokens(12);
  auto b = a;
  b[1] = 7;  // differs in page 0 only
  const auto ha = block_hashes(a, kPageSize);
  const auto hb = block_hashes(b, kPageSize);
  ASSERT_EQ(ha.size(), 3u);
  EXPECT_EQ(ha[0], block_hash(kRootBlockHash, a.data(), kPageSize));
  EXPECT_EQ(ha[1], block_hash(ha[0], a.data() + 4, kPageSize));
  // Same tokens in pages 1 and 2, different prefix: different hashes.
  for (int i = 0; i < 3; ++i) EXPECT_NE(ha[i], hb[i]);
  EXPECT_EQ(block_hashes(iota_tokens(11), kPageSize).size(), 2u);  // partial page: no hash
  EXPECT_EQ(block_hashes(a, kPageSize, 1).size(), 1u);
  // Stable across builds: the router and any other process compute the same values.
  EXPECT_EQ(block_hash(kRootBlockHash, nullptr, 0), block_hash(kRootBlockHash, nullptr, 0));
}

struct Fixture {
  Fixture() : alloc(16), cache(kPageSize, &alloc) { cache.set_event_sink(&events); }
  std::vector<PageId> compute(const std::vector<TokenId>& tokens) {
    auto pages = alloc.allocate(static_cast<int32_t>(tokens.size()) / kPageSize);
    EXPECT_TRUE(pages.ok());
    cache.insert(tokens, static_cast<int32_t>(tokens.size()), *pages);
    for (PageId p : *pages) EXPECT_TRUE(alloc.decref(p).ok());
    return *pages;
  }
  std::vector<KvEvent> events;
  PageAllocator alloc;
  RadixCache cache;
};

TEST(ServeKvEvents, StoresReportHashesParentAndTokens) {
  Fixture f;
  const auto a = iota_tokens(8);
  f.compute(a);
  ASSERT_EQ(f.events.size(), 1u);
  const KvEvent& first = f.events[0];
  EXPECT_EQ(first.kind, KvEventKind::kBlockStored);
  EXPECT_EQ(first.block_hashes, block_hashes(a, kPageSize));
  EXPECT_FALSE(first.parent_block_hash.has_value());
  EXPECT_EQ(first.token_ids, a);
  EXPECT_EQ(first.block_size, kPageSize);

  // Shares page 0 with `a`: the split reports nothing, the new pages name page 0 as parent.
  auto b = iota_tokens(12);
  b[5] = 1;
  f.compute(b);
  ASSERT_EQ(f.events.size(), 2u);
  const KvEvent& second = f.events[1];
  const auto hb = block_hashes(b, kPageSize);
  EXPECT_EQ(second.block_hashes, (std::vector<BlockHash>{hb[1], hb[2]}));
  ASSERT_TRUE(second.parent_block_hash.has_value());
  EXPECT_EQ(*second.parent_block_hash, hb[0]);
  EXPECT_EQ(second.token_ids, std::vector<TokenId>(b.begin() + 4, b.end()));

  // Inserting what is cached already stores nothing.
  f.compute(a);
  EXPECT_EQ(f.events.size(), 2u);
}

TEST(ServeKvEvents, EvictionsReportTheRemovedPagesTailFirst) {
  Fixture f;
  const auto a = iota_tokens(12);
  f.compute(a);
  f.events.clear();
  EXPECT_EQ(f.cache.evict(2), 2);
  ASSERT_EQ(f.events.size(), 1u);
  const auto ha = block_hashes(a, kPageSize);
  EXPECT_EQ(f.events[0].kind, KvEventKind::kBlockRemoved);
  EXPECT_EQ(f.events[0].block_hashes, (std::vector<BlockHash>{ha[2], ha[1]}));
  EXPECT_EQ(f.cache.evict(0), 0);
  EXPECT_EQ(f.events.size(), 1u);  // nothing freed, nothing reported
  f.cache.reset();
  ASSERT_EQ(f.events.size(), 2u);
  EXPECT_EQ(f.events[1].block_hashes, (std::vector<BlockHash>{ha[0]}));
}

TEST(ServeKvEvents, SchedulerStreamStartsWithAClearAndFollowsTheCache) {
  SchedulerConfig config;
  config.num_pages = 8;
  config.page_size = kPageSize;
  config.max_num_batched_tokens = 64;
  config.max_model_len = 32;
  auto s = Scheduler::create(config);
  ASSERT_TRUE(s.ok());
  Scheduler& sched = **s;
  EXPECT_TRUE(sched.take_kv_events().empty());  // off until enabled
  sched.enable_kv_events();
  const auto prompt = iota_tokens(10);
  ASSERT_TRUE(sched.add_request("r", prompt, 1, {}, false).ok());
  auto out = sched.schedule();
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(sched.update({{"r", 5}}).ok());
  auto events = sched.take_kv_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, KvEventKind::kAllBlocksCleared);
  EXPECT_EQ(events[1].kind, KvEventKind::kBlockStored);
  EXPECT_EQ(events[1].block_hashes, block_hashes(prompt, kPageSize));
  EXPECT_TRUE(sched.take_kv_events().empty());  // handed over once
  sched.reset_prefix_cache();
  events = sched.take_kv_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvEventKind::kBlockRemoved);
  EXPECT_EQ(events[0].block_hashes.size(), 2u);
}

}  // namespace
}  // namespace torchtpu::serve
