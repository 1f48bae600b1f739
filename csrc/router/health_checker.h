// HealthChecker: one thread that, every `interval_ms`, asks each replica for GET /health and
// GET /metrics (connect, write and each read bounded by `timeout_ms`; the replicas checked
// concurrently) and reports to the ReplicaSet: healthy with its load, or unhealthy with the
// reason. start() / stop() once each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "router/replica_set.h"

namespace torchtpu::router {

// GET `target` from `endpoint` on a fresh connection (connect, write and each read bounded by
// `timeout_ms`); the status and body, or an error.
base::StatusOr<std::pair<int, std::string>> http_get(const Endpoint& endpoint,
                                                     const std::string& target, int timeout_ms);

class HealthChecker {
 public:
  HealthChecker(ReplicaSet* replicas, int interval_ms, int timeout_ms)
      : replicas_(replicas), interval_ms_(interval_ms), timeout_ms_(timeout_ms) {}
  ~HealthChecker() { stop(); }

  void start();
  void stop();
  void check_all();  // one round, on the caller's thread (and one thread per other replica)

 private:
  void check_one(ReplicaId id);
  ReplicaSet* replicas_;
  int interval_ms_;
  int timeout_ms_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace torchtpu::router
