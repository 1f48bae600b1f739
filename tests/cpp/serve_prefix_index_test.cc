// The router's core without any I/O: the prefix index, one replica's event stream applied to
// it in sequence order (stores, removals, clears, gaps filled by replay or not, restarts),
// and the scorers and picker.
#include <gtest/gtest.h>

#include <numeric>

#include "serve/kv_event_stream.h"
#include "serve/prefix_index.h"
#include "serve/routing_policy.h"

namespace torchtpu::serve {
namespace {

constexpr int32_t kPage = 4;

std::vector<TokenId> tokens(int32_t n, TokenId first = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// The blocks [from, to) of a prompt, as a replica would store them.
KvEvent stored(const std::vector<BlockHash>& h, size_t from, size_t to) {
  std::optional<BlockHash> parent;
  if (from > 0) parent = h[from - 1];
  return KvEvent::stored({h.begin() + from, h.begin() + to}, parent, {}, kPage);
}

TEST(ServePrefixIndex, LongestConsecutivePrefixPerReplica) {
  PrefixIndex index;
  const auto h = block_hashes(tokens(24), kPage);  // 6 blocks
  index.store(0, {h[0], h[1], h[2], h[3]});
  index.store(1, {h[0], h[1], h[2], h[3], h[4], h[5]});
  index.store(2, {h[1], h[2], h[3]});  // no first block: matches nothing
  index.remove(1, {h[2]});             // a hole: the prefix stops before it
  EXPECT_EQ(index.matched_blocks(h, {0, 1, 2, 3}, 0), (std::vector<int32_t>{4, 2, 0, 0}));
  EXPECT_EQ(index.num_confirmed_blocks(1), 5);
  index.clear(0);
  EXPECT_EQ(index.matched_blocks(h, {0, 1}, 0), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(index.num_confirmed_blocks(0), 0);
  index.store(1, {h[0]});  // idempotent
  EXPECT_EQ(index.num_confirmed_blocks(1), 5);
}

TEST(ServePrefixIndex, RoutedEntriesExpireAndAreBoundedPerReplica) {
  PrefixIndex index({/*routed_ttl_ms=*/1000, /*routed_capacity_blocks=*/4});
  const auto a = block_hashes(tokens(12), kPage);       // 3 blocks
  const auto b = block_hashes(tokens(12, 100), kPage);  // 3 other blocks
  index.record_routed(0, a, /*now_ms=*/0);
  EXPECT_EQ(index.matched_blocks(a, {0, 1}, 999), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(index.matched_blocks(a, {0}, 1000), (std::vector<int32_t>{0}));  // expired
  index.record_routed(0, a, 2000);
  index.record_routed(0, b, 2001);  // capacity 4: a's tail goes first
  EXPECT_EQ(index.num_routed_blocks(0), 4);
  EXPECT_EQ(index.matched_blocks(b, {0}, 2002), (std::vector<int32_t>{3}));
  EXPECT_EQ(index.matched_blocks(a, {0}, 2002), (std::vector<int32_t>{1}));
  // A confirmed entry needs no TTL; a removal drops both sources.
  index.store(0, {a[0]});
  EXPECT_EQ(index.matched_blocks(a, {0}, 100000), (std::vector<int32_t>{1}));
  index.remove(0, {b[0]});
  EXPECT_EQ(index.matched_blocks(b, {0}, 2002), (std::vector<int32_t>{0}));
}

TEST(ServeKvEventStream, AppliesStoresRemovalsAndClearsInOrder) {
  PrefixIndex index;
  KvEventStream stream(7, &index);
  const auto h = block_hashes(tokens(16), kPage);
  EXPECT_FALSE(stream.on_live(0, 1.0, {KvEvent::cleared(), stored(h, 0, 2)}));
  EXPECT_FALSE(stream.on_live(1, 1.1, {stored(h, 2, 4)}));
  EXPECT_EQ(index.matched_blocks(h, {7}, 0)[0], 4);
  EXPECT_FALSE(stream.on_live(2, 1.2, {KvEvent::removed({h[3], h[2]})}));
  EXPECT_EQ(index.matched_blocks(h, {7}, 0)[0], 2);
  EXPECT_FALSE(stream.on_live(3, 1.3, {KvEvent::cleared()}));
  EXPECT_EQ(index.matched_blocks(h, {7}, 0)[0], 0);
  EXPECT_EQ(stream.num_batches_applied(), 4);
  EXPECT_EQ(stream.next_seq(), 4u);
  EXPECT_FALSE(stream.on_live(2, 1.2, {stored(h, 0, 4)}));  // an old batch: dropped
  EXPECT_EQ(index.matched_blocks(h, {7}, 0)[0], 0);
  EXPECT_EQ(stream.num_gaps(), 0);
}

TEST(ServeKvEventStream, AGapIsFilledByReplay) {
  PrefixIndex index;
  KvEventStream stream(0, &index);
  const auto h = block_hashes(tokens(16), kPage);
  EXPECT_FALSE(stream.on_live(0, 1.0, {stored(h, 0, 1)}));
  // Batch 1 was lost; 2 arrives.
  auto missing = stream.on_live(2, 1.2, {stored(h, 2, 3)});
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(*missing, 1u);
  EXPECT_TRUE(stream.replaying());
  EXPECT_EQ(index.matched_blocks(h, {0}, 0)[0], 1);  // nothing past the gap yet
  EXPECT_FALSE(stream.on_live(3, 1.3, {stored(h, 3, 4)}));  // held too
  // The replay brings 1, 2 and 3 (2 and 3 again); each is applied once.
  stream.on_replayed(1, 1.1, {stored(h, 1, 2)});
  stream.on_replayed(2, 1.2, {stored(h, 2, 3)});
  stream.on_replayed(3, 1.3, {stored(h, 3, 4)});
  stream.finish_replay();
  EXPECT_FALSE(stream.replaying());
  EXPECT_EQ(index.matched_blocks(h, {0}, 0)[0], 4);
  EXPECT_EQ(stream.next_seq(), 4u);
  EXPECT_EQ(stream.num_gaps(), 1);
  EXPECT_EQ(stream.num_replayed_batches(), 3);
  EXPECT_EQ(stream.num_resyncs(), 0);
  EXPECT_EQ(stream.num_batches_applied(), 4);
}

TEST(ServeKvEventStream, AGapReplayCannotFillClearsTheReplica) {
  PrefixIndex index;
  KvEventStream stream(0, &index);
  const auto h = block_hashes(tokens(16), kPage);
  const auto other = block_hashes(tokens(8, 500), kPage);
  EXPECT_FALSE(stream.on_live(0, 1.0, {stored(other, 0, 2)}));
  ASSERT_TRUE(stream.on_live(5, 1.5, {stored(h, 0, 2)}).has_value());
  // The publisher's buffer starts at 4: batch 1..3 are gone, 4 cannot be applied either.
  stream.on_replayed(4, 1.4, {KvEvent::removed({other[1]})});
  stream.finish_replay();
  EXPECT_EQ(stream.num_resyncs(), 1);
  // What the index knew may be stale (batches 1..4 unseen): forgotten; batch 5 applied.
  EXPECT_EQ(index.matched_blocks(other, {0}, 0)[0], 0);
  EXPECT_EQ(index.matched_blocks(h, {0}, 0)[0], 2);
  EXPECT_EQ(stream.next_seq(), 6u);
}

TEST(ServeKvEventStream, ALateJoinerAsksForTheWholeStream) {
  PrefixIndex index;
  KvEventStream stream(0, &index);
  const auto h = block_hashes(tokens(8), kPage);
  auto missing = stream.on_live(3, 1.3, {stored(h, 1, 2)});
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(*missing, 0u);
  for (uint64_t s = 0; s < 3; ++s) {
    stream.on_replayed(s, 1.0 + s / 10.0, s == 0 ? std::vector<KvEvent>{stored(h, 0, 1)}
                                                 : std::vector<KvEvent>{});
  }
  stream.finish_replay();
  EXPECT_EQ(index.matched_blocks(h, {0}, 0)[0], 2);
  EXPECT_EQ(stream.num_resyncs(), 0);
}

TEST(ServeKvEventStream, ARestartedPublisherStartsOver) {
  PrefixIndex index;
  KvEventStream stream(0, &index);
  const auto h = block_hashes(tokens(8), kPage);
  const auto g = block_hashes(tokens(8, 50), kPage);
  for (uint64_t s = 0; s < 5; ++s) stream.on_live(s, 10.0 + s, {stored(h, 0, 2)});
  // The replica restarted: its publisher counts from 0 again, with newer timestamps.
  EXPECT_FALSE(stream.on_live(0, 100.0, {KvEvent::cleared(), stored(g, 0, 1)}));
  EXPECT_EQ(stream.num_restarts(), 1);
  EXPECT_EQ(index.matched_blocks(h, {0}, 0)[0], 0);
  EXPECT_EQ(index.matched_blocks(g, {0}, 0)[0], 1);
  // Its first batches were missed: a restart seen mid-stream asks for a replay from 0.
  for (uint64_t s = 1; s < 4; ++s) stream.on_live(s, 100.0 + s, {});
  auto missing = stream.on_live(1, 200.0, {});
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(*missing, 0u);
  EXPECT_EQ(index.matched_blocks(g, {0}, 0)[0], 0);
  stream.reset();
  EXPECT_EQ(stream.next_seq(), 0u);
  EXPECT_FALSE(stream.replaying());
}

TEST(ServeRoutingPolicy, PrefixAffinityBeatsASmallLoadDifference) {
  RoutingPolicy policy(RoutingMode::kCacheAware, {});
  std::vector<ReplicaLoad> loads = {{0, 3, 0, 3, 0.5}, {1, 2, 0, 2, 0.4}, {2, 2, 0, 2, 0.4}};
  auto ranked = policy.rank(loads, {8, 0, 2}, 10);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].replica, 0);
  EXPECT_EQ(ranked[0].matched_blocks, 8);
  EXPECT_EQ(ranked[1].replica, 2);  // some prefix beats none at equal load
  EXPECT_EQ(ranked[2].replica, 1);
  // weights: prefix 3*0.8 + queue 1*0 + kv 1*0.5
  EXPECT_DOUBLE_EQ(ranked[0].score, 2.4 + 0.5);
}

TEST(ServeRoutingPolicy, LoadDecidesWithoutAPrefixAndTiesRotate) {
  RoutingPolicy policy(RoutingMode::kCacheAware, {});
  std::vector<ReplicaLoad> loads = {{0, 5, 0, 0, 0}, {1, 0, 0, 0, 0}, {2, 0, 4, 4, 0}};
  EXPECT_EQ(policy.rank(loads, {0, 0, 0}, 4)[0].replica, 1);
  // Scraped waiting + running counts when it exceeds the router's own in-flight count.
  EXPECT_EQ(policy.rank(loads, {0, 0, 0}, 4)[2].replica, 2);
  std::vector<ReplicaLoad> idle = {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {2, 0, 0, 0, 0}};
  std::vector<ReplicaId> firsts;
  for (int i = 0; i < 3; ++i) firsts.push_back(policy.rank(idle, {0, 0, 0}, 0)[0].replica);
  std::sort(firsts.begin(), firsts.end());
  EXPECT_EQ(firsts, (std::vector<ReplicaId>{0, 1, 2}));
}

TEST(ServeRoutingPolicy, AnOverloadedPrefixHolderSpillsToTheLeastLoaded) {
  RoutingPolicy policy(RoutingMode::kCacheAware, {}, {/*spill_threshold=*/4});
  // Replica 0 holds the whole prompt but has 6 more requests than replica 2: past the bound.
  std::vector<ReplicaLoad> loads = {{0, 8, 0, 0, 0.5}, {1, 5, 0, 0, 0}, {2, 2, 0, 0, 0}};
  auto ranked = policy.rank(loads, {10, 0, 0}, 10);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].replica, 2);
  EXPECT_FALSE(ranked[0].over_load_bound);
  EXPECT_EQ(ranked[1].replica, 1);  // 3 more than the least: within the bound
  EXPECT_EQ(ranked[2].replica, 0);  // the holder stays a fallback for retries
  EXPECT_TRUE(ranked[2].over_load_bound);
  EXPECT_EQ(ranked[2].matched_blocks, 10);
  EXPECT_EQ(policy.num_spills(), 1);

  // At exactly the threshold the prefix still wins, and that is no spill.
  loads[0].num_in_flight = 6;
  EXPECT_EQ(policy.rank(loads, {10, 0, 0}, 10)[0].replica, 0);
  EXPECT_EQ(policy.num_spills(), 1);

  // The scraped queue (waiting + running) counts when it is the larger.
  loads[0] = {0, 1, 4, 3, 0};
  EXPECT_EQ(policy.rank(loads, {10, 0, 0}, 10)[0].replica, 2);
  EXPECT_EQ(policy.num_spills(), 2);
}

TEST(ServeRoutingPolicy, ASpillNeedsKvRoomForThePromptOnItsNewReplica) {
  RoutingPolicy policy(RoutingMode::kCacheAware, {}, {/*spill_threshold=*/2});
  // Replica 0 holds the prompt's 10 blocks and is over the bound; 1 and 2 are within it.
  std::vector<ReplicaLoad> loads = {{0, 6, 0, 0, 0.5, 0}, {1, 0, 0, 0, 0, 9}, {2, 1, 0, 0, 0, 30}};
  // Replica 1 (least loaded) would have to evict to compute 10 blocks; replica 2 has room.
  auto ranked = policy.rank(loads, {10, 0, 0}, 10);
  ASSERT_EQ(ranked.size(), 3u);
  EXPECT_EQ(ranked[0].replica, 2);
  EXPECT_FALSE(ranked[0].over_load_bound);
  EXPECT_EQ(ranked[1].replica, 0);  // then the holder, before evicting on replica 1
  EXPECT_EQ(ranked[2].replica, 1);
  EXPECT_TRUE(ranked[2].over_load_bound);
  EXPECT_EQ(policy.num_spills(), 1);
  EXPECT_EQ(policy.num_spills_withheld(), 0);

  // A replica holding part of the prompt needs room only for the rest.
  loads[1].free_blocks = 8;
  EXPECT_EQ(policy.rank(loads, {10, 2, 0}, 10)[0].replica, 1);
  EXPECT_EQ(policy.num_spills(), 2);

  // No replica within the bound has room (full caches): nothing spills, the holder keeps it.
  loads[1].free_blocks = 0;
  loads[2].free_blocks = 3;
  ranked = policy.rank(loads, {10, 0, 0}, 10);
  EXPECT_EQ(ranked[0].replica, 0);
  EXPECT_FALSE(ranked[0].over_load_bound);
  EXPECT_EQ(policy.num_spills(), 2);
  EXPECT_EQ(policy.num_spills_withheld(), 1);

  // Unknown capacity (no num_gpu_blocks scraped) counts as room.
  loads[1].free_blocks = -1;
  EXPECT_EQ(policy.rank(loads, {10, 0, 0}, 10)[0].replica, 1);
  EXPECT_EQ(policy.num_spills(), 3);
  EXPECT_EQ(policy.num_spills_withheld(), 1);
}

TEST(ServeRoutingPolicy, ASpilledGroupSpreadsOverItsHoldersByLoad) {
  RoutingPolicy policy(RoutingMode::kCacheAware, {}, {/*spill_threshold=*/4});
  // After a spill both replicas hold the prompt: the prefix ties, the queue decides, and a
  // third replica without it is not picked while a holder is within the bound.
  std::vector<ReplicaLoad> loads = {{0, 5, 0, 0, 0}, {1, 3, 0, 0, 0}, {2, 1, 0, 0, 0}};
  auto ranked = policy.rank(loads, {10, 10, 0}, 10);
  EXPECT_EQ(ranked[0].replica, 1);
  EXPECT_EQ(ranked[1].replica, 0);
  EXPECT_EQ(ranked[2].replica, 2);
  EXPECT_EQ(policy.num_spills(), 0);
  // A partial prefix on a lightly loaded replica beats none on an idle one within the bound.
  loads = {{0, 4, 0, 0, 0}, {1, 0, 0, 0, 0}};
  EXPECT_EQ(policy.rank(loads, {6, 0}, 10)[0].replica, 0);
}

TEST(ServeRoutingPolicy, ANegativeThresholdKeepsPrefixAffinityRegardlessOfLoad) {
  RoutingPolicy policy(RoutingMode::kCacheAware, {}, {/*spill_threshold=*/-1});
  std::vector<ReplicaLoad> loads = {{0, 40, 0, 0, 0}, {1, 0, 0, 0, 0}};
  auto ranked = policy.rank(loads, {10, 0}, 10);
  EXPECT_EQ(ranked[0].replica, 0);
  EXPECT_FALSE(ranked[0].over_load_bound);
  EXPECT_EQ(policy.num_spills(), 0);
  // And that is the default.
  RoutingPolicy by_default(RoutingMode::kCacheAware, {});
  EXPECT_LT(by_default.filter().spill_threshold, 0);
  EXPECT_EQ(by_default.rank(loads, {10, 0}, 10)[0].replica, 0);
}

TEST(ServeRoutingPolicy, RoundRobinIgnoresTheLoadFilter) {
  RoutingPolicy policy(RoutingMode::kRoundRobin, {}, {/*spill_threshold=*/0});
  std::vector<ReplicaLoad> loads = {{0, 9, 0, 0, 0}, {1, 0, 0, 0, 0}};
  EXPECT_EQ(policy.rank(loads, {0, 0}, 0)[0].replica, 0);
  EXPECT_EQ(policy.rank(loads, {0, 0}, 0)[0].replica, 1);
  EXPECT_EQ(policy.num_spills(), 0);
}

TEST(ServeRoutingPolicy, RoundRobinRotatesAndIgnoresTheIndex) {
  RoutingPolicy policy(RoutingMode::kRoundRobin, {});
  std::vector<ReplicaLoad> loads = {{4, 9, 0, 0, 0.9}, {5, 0, 0, 0, 0}};
  EXPECT_EQ(policy.rank(loads, {9, 0}, 9)[0].replica, 4);
  EXPECT_EQ(policy.rank(loads, {9, 0}, 9)[0].replica, 5);
  EXPECT_EQ(policy.rank(loads, {9, 0}, 9)[0].replica, 4);
  RoutingMode mode;
  EXPECT_TRUE(parse_routing_mode("round-robin", &mode));
  EXPECT_EQ(mode, RoutingMode::kRoundRobin);
  EXPECT_FALSE(parse_routing_mode("random", &mode));
}

}  // namespace
}  // namespace torchtpu::serve
