// Routing policy: scores the replicas for one request and ranks them (llm-d's scheduler
// shape: scorers combined with weights, then a picker).
//
// Scorers, each in [0, 1] over the candidates (healthy replicas):
// - prefix affinity: the longest consecutive prefix of the request's blocks the replica
//   holds (PrefixIndex::matched_blocks), over the request's number of blocks;
// - queue depth: llm-d's queue scorer, (max - q) / (max - min) over the candidates (1 for
//   all when they are equal), where q is the larger of the router's own requests in flight
//   to the replica and the replica's scraped waiting + running requests;
// - KV usage: 1 - the replica's scraped vllm:kv_cache_usage_perc.
// The score is their weighted sum.
//
// Before scoring, an optional load filter (llm-d's filter -> score -> pick): a candidate
// whose queue exceeds the least-loaded candidate's by more than `spill_threshold` requests
// is only a fallback, provided a candidate within the bound has KV room for the prompt (free
// blocks for the blocks it does not hold); when none has, nothing spills, and those
// without room rank behind the best-scored replica. Without it the prefix score (worth up to `prefix` where the queue
// scorer is worth at most `queue`) sends every request of a group to the one replica
// holding its prompt however long its queue grows. With it, a group whose replica is
// overloaded spills to the least-loaded replicas, which then hold its prompt too (their
// routed entries), so a hot prefix spreads over several replicas. Off by default: a spill
// recomputes the prompt, and once two replicas hold a group the queue scorer splits it
// between them. When the caches are full (each group's prompt fits on one replica, not on
// all) a spill would evict another group's prompt and its misses would feed more spills;
// the KV room condition withholds those. It pays when one prefix is hotter than one
// replica can serve.
//
// rank() returns the candidates best first: those within the load bound by score, then the
// others by score (ties: fewer requests in flight, then the rotation below), so a failed
// attempt retries on the next.
// kRoundRobin ignores the scores and rotates over the healthy replicas (the baseline the
// router's benchmark compares against). Stateless apart from the rotation; not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "serve/prefix_index.h"

namespace torchtpu::serve {

struct ReplicaLoad {
  ReplicaId replica = 0;
  int32_t num_in_flight = 0;  // router's own requests sent and not finished
  int32_t num_waiting = 0;    // scraped vllm:num_requests_waiting
  int32_t num_running = 0;    // scraped vllm:num_requests_running
  double kv_cache_usage = 0;  // scraped vllm:kv_cache_usage_perc, in [0, 1]
  // KV blocks it can fill without evicting cached ones (its vllm:cache_config_info
  // num_gpu_blocks less the blocks the index says it holds); negative: unknown.
  int64_t free_blocks = -1;
};

struct ScoreWeights {
  double prefix = 3;
  double queue = 1;
  double kv_usage = 1;
};

struct LoadFilter {
  // A candidate whose queue exceeds the least-loaded one's by more than this many requests
  // is ranked after the others; negative: no filter (prefix affinity regardless of load).
  int32_t spill_threshold = -1;
};

enum class RoutingMode { kCacheAware, kRoundRobin };

struct RankedReplica {
  ReplicaId replica = 0;
  int32_t matched_blocks = 0;
  double score = 0;
  bool over_load_bound = false;  // ranked after the others by the load filter
};

class RoutingPolicy {
 public:
  RoutingPolicy(RoutingMode mode, ScoreWeights weights, LoadFilter filter = {})
      : mode_(mode), weights_(weights), filter_(filter) {}

  // `candidates` and `matched_blocks` are parallel; `num_blocks` is the request's.
  std::vector<RankedReplica> rank(const std::vector<ReplicaLoad>& candidates,
                                  const std::vector<int32_t>& matched_blocks,
                                  int32_t num_blocks);

  RoutingMode mode() const { return mode_; }
  const ScoreWeights& weights() const { return weights_; }
  const LoadFilter& filter() const { return filter_; }
  // Requests whose best-scored replica the load filter put behind another.
  int64_t num_spills() const { return num_spills_; }
  // Requests whose best-scored replica was over the load bound but stayed first because no
  // replica within the bound had KV room for the prompt.
  int64_t num_spills_withheld() const { return num_spills_withheld_; }

 private:
  RoutingMode mode_;
  ScoreWeights weights_;
  LoadFilter filter_;
  uint64_t rotation_ = 0;
  int64_t num_spills_ = 0;
  int64_t num_spills_withheld_ = 0;
};

// "cache-aware" | "round-robin"; false for anything else.
bool parse_routing_mode(const std::string& name, RoutingMode* mode);

}  // namespace torchtpu::serve
