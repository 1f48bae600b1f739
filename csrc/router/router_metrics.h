// RouterMetrics: the router's own Prometheus metrics (torchtpu_router:*), rendered with the
// per-replica figures the ReplicaSet keeps. Counters are atomics; each latency keeps its last
// 8192 samples for exact quantiles. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "router/replica_set.h"

namespace torchtpu::router {

// A Prometheus summary over the most recent samples (quantiles 0.5, 0.9, 0.99) with the
// all-time sum and count. Thread-safe.
class LatencySummary {
 public:
  void observe(double seconds);
  // The quantile q over the recent samples (0 when none).
  double quantile(double q) const;
  void render(std::string& out, const char* name, const char* help) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> samples_;  // ring buffer
  size_t next_ = 0;
  int64_t count_ = 0;
  double sum_ = 0;
};

class RouterMetrics {
 public:
  std::atomic<int64_t> num_requests{0};        // client requests handled (all routes)
  std::atomic<int64_t> num_routed{0};          // completions / chat completions dispatched
  std::atomic<int64_t> num_retries{0};         // attempts moved to another replica
  std::atomic<int64_t> num_stream_errors{0};   // streams cut by a replica mid-way
  std::atomic<int64_t> num_failed{0};          // requests no replica could serve
  std::atomic<int64_t> num_tokenize_failed{0};  // prompts routed by load only
  std::atomic<int64_t> num_client_disconnects{0};  // clients gone before their response ended
  std::atomic<int64_t> num_upstream_connects{0};   // upstream connections opened
  std::atomic<int64_t> num_stale_upstreams{0};     // kept-alive ones found closed by the replica
  std::atomic<int64_t> num_connections_evicted{0};  // idle clients shut at the connection limit
  std::atomic<int64_t> num_connections_refused{0};  // new clients refused: none idle to evict

  // Seconds from a proxied request fully read to its upstream request written: what the
  // router adds before a replica sees the request (tokenizing, scoring, connecting).
  LatencySummary routing_latency;
  // Seconds the prompt's tokenizer callback took (its share of routing_latency, with any
  // wait for Python's GIL).
  LatencySummary tokenize_latency;
  // Seconds a served request spent in the router beyond its replica's own time: from the
  // request read to the response's last byte written to the client, less the time from the
  // serving attempt's upstream request written to its response's last byte read. What the
  // router costs a client end to end (routing, failed attempts, relaying). Not in it: how
  // long the kernel held a request before the router's thread was scheduled to read it (on
  // a saturated host, milliseconds), and likewise for the replica's response, which lands
  // in the replica's share; the router sees only when its reads return.
  LatencySummary added_latency;

  std::string render(const ReplicaSet& replicas) const;
};

}  // namespace torchtpu::router
