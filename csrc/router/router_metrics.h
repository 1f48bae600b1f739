// RouterMetrics: the router's own Prometheus metrics (torchtpu_router:*), rendered with the
// per-replica figures the ReplicaSet keeps. Counters are atomics; the routing latency keeps
// its last 8192 samples for exact quantiles. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "router/replica_set.h"

namespace torchtpu::router {

class RouterMetrics {
 public:
  std::atomic<int64_t> num_requests{0};        // client requests handled (all routes)
  std::atomic<int64_t> num_routed{0};          // completions / chat completions dispatched
  std::atomic<int64_t> num_retries{0};         // attempts moved to another replica
  std::atomic<int64_t> num_stream_errors{0};   // streams cut by a replica mid-way
  std::atomic<int64_t> num_failed{0};          // requests no replica could serve
  std::atomic<int64_t> num_tokenize_failed{0};  // prompts routed by load only
  std::atomic<int64_t> num_client_disconnects{0};  // clients gone before their response ended

  // Seconds from a request fully read to its upstream request written: what the router
  // adds before a replica sees the request (tokenizing, scoring, connecting).
  void observe_routing_seconds(double seconds);
  // The routing latency's quantile q over the recent samples (0 when none).
  double routing_quantile(double q) const;

  std::string render(const ReplicaSet& replicas) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> samples_;  // ring buffer
  size_t next_ = 0;
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace torchtpu::router
