#include "router/replica_set.h"

#include <algorithm>
#include <cstdio>

namespace torchtpu::router {

ReplicaSet::ReplicaSet(std::vector<ReplicaConfig> replicas, RoutingConfig config)
    : configs_(std::move(replicas)),
      config_(config),
      index_(config.index),
      policy_(config.mode, config.weights, config.filter),
      states_(configs_.size()),
      block_size_(config.block_size) {
  for (size_t i = 0; i < states_.size(); ++i) {
    states_[i].stream = std::make_unique<serve::KvEventStream>(static_cast<ReplicaId>(i), &index_);
  }
}

bool ReplicaSet::events_enabled() const {
  for (const auto& c : configs_) {
    if (!c.events_endpoint.empty()) return true;
  }
  return false;
}

RouteDecision ReplicaSet::route(const std::vector<serve::TokenId>* tokens, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  RouteDecision d;
  if (tokens != nullptr && block_size_ > 0 && config_.mode == serve::RoutingMode::kCacheAware) {
    d.hashes = serve::block_hashes(*tokens, block_size_);
  }
  std::vector<serve::ReplicaLoad> loads;
  std::vector<ReplicaId> ids;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    if (!s.healthy) continue;
    serve::ReplicaLoad load;
    load.replica = static_cast<ReplicaId>(i);
    load.num_in_flight = s.num_in_flight;
    load.num_waiting = s.metrics.num_waiting > 0 ? static_cast<int32_t>(s.metrics.num_waiting) : 0;
    load.num_running = s.metrics.num_running > 0 ? static_cast<int32_t>(s.metrics.num_running) : 0;
    load.kv_cache_usage = s.metrics.kv_cache_usage > 0 ? s.metrics.kv_cache_usage : 0;
    if (s.metrics.num_gpu_blocks > 0) {
      // Routed entries mostly repeat confirmed ones (they outlive the confirmation by the
      // TTL), so the larger of the two stands for what the replica holds.
      const int64_t held = std::max(index_.num_confirmed_blocks(load.replica),
                                    index_.num_routed_blocks(load.replica));
      load.free_blocks = std::max<int64_t>(0, s.metrics.num_gpu_blocks - held);
    }
    loads.push_back(load);
    ids.push_back(load.replica);
  }
  const std::vector<int32_t> matched = d.hashes.empty()
                                           ? std::vector<int32_t>(ids.size(), 0)
                                           : index_.matched_blocks(d.hashes, ids, now_ms);
  d.ranked = policy_.rank(loads, matched, static_cast<int32_t>(d.hashes.size()));
  return d;
}

void ReplicaSet::on_dispatch(ReplicaId id, const RouteDecision& decision, int32_t matched_blocks,
                             int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = states_[id];
  ++s.num_in_flight;
  ++s.num_requests;
  num_query_blocks_ += static_cast<int64_t>(decision.hashes.size());
  num_hit_blocks_ += matched_blocks;
  if (!decision.hashes.empty()) index_.record_routed(id, decision.hashes, now_ms);
}

void ReplicaSet::on_done(ReplicaId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (states_[id].num_in_flight > 0) --states_[id].num_in_flight;
}

void ReplicaSet::drain(ReplicaId id) {
  states_[id].healthy = false;
  states_[id].stream->reset();  // clears the index entries of both sources
}

void ReplicaSet::on_upstream_error(ReplicaId id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++states_[id].num_upstream_errors;
  if (states_[id].healthy) {
    std::fprintf(stderr, "torchtpu router: replica %s failed a request (%s); drained until its "
                 "health check passes again\n", configs_[id].http.str().c_str(), why.c_str());
    drain(id);
  }
}

void ReplicaSet::on_health(ReplicaId id, bool ok, const ScrapedMetrics& metrics,
                           const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  State& s = states_[id];
  if (!ok) {
    if (s.healthy) {
      std::fprintf(stderr, "torchtpu router: replica %s is unhealthy (%s); drained\n",
                   configs_[id].http.str().c_str(), why.c_str());
      drain(id);
    }
    return;
  }
  s.metrics = metrics;
  if (block_size_ <= 0 && metrics.block_size > 0) {
    block_size_ = static_cast<int32_t>(metrics.block_size);
  }
  if (!events_enabled() && metrics.num_gpu_blocks > 0) {
    // Approximate mode: the routing history stands for the cache, as large as the replica's.
    index_.set_routed_capacity(id, metrics.num_gpu_blocks);
  }
  if (!s.healthy) {
    std::fprintf(stderr, "torchtpu router: replica %s is healthy; admitted\n",
                 configs_[id].http.str().c_str());
    s.healthy = true;
  }
}

bool ReplicaSet::any_healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const State& s : states_) {
    if (s.healthy) return true;
  }
  return false;
}

std::optional<uint64_t> ReplicaSet::on_live_batch(ReplicaId id, uint64_t seq, DecodedBatch batch) {
  std::lock_guard<std::mutex> lock(mu_);
  return states_[id].stream->on_live(seq, batch.ts, std::move(batch.events));
}

void ReplicaSet::on_replayed_batch(ReplicaId id, uint64_t seq, DecodedBatch batch) {
  std::lock_guard<std::mutex> lock(mu_);
  states_[id].stream->on_replayed(seq, batch.ts, std::move(batch.events));
}

void ReplicaSet::finish_replay(ReplicaId id) {
  std::lock_guard<std::mutex> lock(mu_);
  states_[id].stream->finish_replay();
}

void ReplicaSet::on_undecodable_batch(ReplicaId id, uint64_t seq, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++states_[id].num_decode_errors;
  std::fprintf(stderr, "torchtpu router: replica %s: KV event batch %llu dropped: %s\n",
               configs_[id].http.str().c_str(), static_cast<unsigned long long>(seq), why.c_str());
  states_[id].stream->skip_undecodable(seq);
}

std::vector<ReplicaStatus> ReplicaSet::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReplicaStatus> out;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_[i];
    ReplicaStatus r;
    r.id = static_cast<ReplicaId>(i);
    r.name = configs_[i].http.str();
    r.healthy = s.healthy;
    r.num_in_flight = s.num_in_flight;
    r.num_requests = s.num_requests;
    r.num_upstream_errors = s.num_upstream_errors;
    r.num_confirmed_blocks = index_.num_confirmed_blocks(r.id);
    r.num_routed_blocks = index_.num_routed_blocks(r.id);
    r.num_event_batches = s.stream->num_batches_applied();
    r.num_event_gaps = s.stream->num_gaps();
    r.num_event_resyncs = s.stream->num_resyncs();
    r.num_replayed_batches = s.stream->num_replayed_batches();
    r.num_event_decode_errors = s.num_decode_errors;
    out.push_back(r);
  }
  return out;
}

int64_t ReplicaSet::num_query_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_query_blocks_;
}

int64_t ReplicaSet::num_hit_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_hit_blocks_;
}

int64_t ReplicaSet::num_spills() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_.num_spills();
}

int64_t ReplicaSet::num_spills_withheld() const {
  std::lock_guard<std::mutex> lock(mu_);
  return policy_.num_spills_withheld();
}

int32_t ReplicaSet::block_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return block_size_;
}

}  // namespace torchtpu::router
