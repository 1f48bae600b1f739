// ReplicaSet: the engine replicas behind the router and everything it knows about them:
// health, the router's own requests in flight, the load each last reported (/metrics), and
// the prefix index fed by their KV event streams (or by the router's own routing history
// in approximate mode). Every method is thread-safe (one mutex; each call is short).
//
// Health: a replica starts unhealthy and is admitted by its first good health check. One
// failed check, or a request that could not reach it, marks it unhealthy and drains it:
// its index entries and event stream are forgotten, so nothing is routed there for a prefix
// it may no longer hold. A later good check re-admits it (its events start over, from the
// AllBlocksCleared its new publisher sends first).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "router/http_util.h"
#include "router/kv_event_decoder.h"
#include "serve/kv_event_stream.h"
#include "serve/prefix_index.h"
#include "serve/routing_policy.h"

namespace torchtpu::router {

using serve::ReplicaId;

struct ReplicaConfig {
  Endpoint http;
  std::string events_endpoint;  // ZMQ SUB connects here; empty: no events (approximate)
  std::string replay_endpoint;  // ZMQ DEALER for replays; empty: gaps resync instead
};

struct RoutingConfig {
  serve::RoutingMode mode = serve::RoutingMode::kCacheAware;
  serve::ScoreWeights weights;
  serve::LoadFilter filter;
  serve::PrefixIndexConfig index;
  int32_t block_size = 0;  // 0: learned from the replicas' vllm:cache_config_info
};

struct RouteDecision {
  std::vector<serve::RankedReplica> ranked;  // healthy replicas, best first
  std::vector<serve::BlockHash> hashes;      // the prompt's blocks (none without tokens)
};

struct ReplicaStatus {
  ReplicaId id = 0;
  std::string name;  // host:port
  bool healthy = false;
  int32_t num_in_flight = 0;
  int64_t num_requests = 0;  // dispatched to it
  int64_t num_upstream_errors = 0;
  int64_t num_confirmed_blocks = 0;
  int64_t num_routed_blocks = 0;
  int64_t num_event_batches = 0;
  int64_t num_event_gaps = 0;
  int64_t num_event_resyncs = 0;
  int64_t num_replayed_batches = 0;
  int64_t num_event_decode_errors = 0;
};

class ReplicaSet {
 public:
  ReplicaSet(std::vector<ReplicaConfig> replicas, RoutingConfig config);

  size_t size() const { return configs_.size(); }
  const ReplicaConfig& config(ReplicaId id) const { return configs_[id]; }
  bool events_enabled() const;

  // Ranks the healthy replicas for a prompt (`tokens` null: unknown, load only).
  RouteDecision route(const std::vector<serve::TokenId>* tokens, int64_t now_ms);
  // The request goes to `id` (recorded in the routing history and the hit counters).
  void on_dispatch(ReplicaId id, const RouteDecision& decision, int32_t matched_blocks,
                   int64_t now_ms);
  void on_done(ReplicaId id);
  // A request could not reach `id` (connect, write, or read failed before any response).
  void on_upstream_error(ReplicaId id, const std::string& why);

  // Health checks.
  void on_health(ReplicaId id, bool ok, const ScrapedMetrics& metrics, const std::string& why);
  bool any_healthy() const;

  // KV event batches (the event subscriber's thread). nullopt, or the sequence to replay from.
  std::optional<uint64_t> on_live_batch(ReplicaId id, uint64_t seq, DecodedBatch batch);
  void on_replayed_batch(ReplicaId id, uint64_t seq, DecodedBatch batch);
  void finish_replay(ReplicaId id);
  void on_undecodable_batch(ReplicaId id, uint64_t seq, const std::string& why);

  std::vector<ReplicaStatus> status() const;
  // Prompt blocks looked up / found on the chosen replica, over all dispatched requests.
  int64_t num_query_blocks() const;
  int64_t num_hit_blocks() const;
  int32_t block_size() const;
  int64_t num_spills() const;
  int64_t num_spills_withheld() const;

 private:
  struct State {
    bool healthy = false;
    int32_t num_in_flight = 0;
    int64_t num_requests = 0;
    int64_t num_upstream_errors = 0;
    int64_t num_decode_errors = 0;
    ScrapedMetrics metrics;
    std::unique_ptr<serve::KvEventStream> stream;
  };
  void drain(ReplicaId id);  // mutex held

  const std::vector<ReplicaConfig> configs_;
  const RoutingConfig config_;
  mutable std::mutex mu_;
  serve::PrefixIndex index_;
  serve::RoutingPolicy policy_;
  std::vector<State> states_;
  int32_t block_size_ = 0;
  int64_t num_query_blocks_ = 0;
  int64_t num_hit_blocks_ = 0;
};

}  // namespace torchtpu::router
