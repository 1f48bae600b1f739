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
// The score is their weighted sum. rank() returns the candidates best first (ties: fewer
// requests in flight, then the rotation below), so a failed attempt retries on the next.
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
};

struct ScoreWeights {
  double prefix = 3;
  double queue = 1;
  double kv_usage = 1;
};

enum class RoutingMode { kCacheAware, kRoundRobin };

struct RankedReplica {
  ReplicaId replica = 0;
  int32_t matched_blocks = 0;
  double score = 0;
};

class RoutingPolicy {
 public:
  RoutingPolicy(RoutingMode mode, ScoreWeights weights) : mode_(mode), weights_(weights) {}

  // `candidates` and `matched_blocks` are parallel; `num_blocks` is the request's.
  std::vector<RankedReplica> rank(const std::vector<ReplicaLoad>& candidates,
                                  const std::vector<int32_t>& matched_blocks,
                                  int32_t num_blocks);

  RoutingMode mode() const { return mode_; }
  const ScoreWeights& weights() const { return weights_; }

 private:
  RoutingMode mode_;
  ScoreWeights weights_;
  uint64_t rotation_ = 0;
};

// "cache-aware" | "round-robin"; false for anything else.
bool parse_routing_mode(const std::string& name, RoutingMode* mode);

}  // namespace torchtpu::serve
