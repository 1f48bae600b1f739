// HealthChecker: a thread per replica that, every `interval_ms`, asks it for GET /health and
// GET /metrics (each exchange, connect included, within `timeout_ms`) and reports to the
// ReplicaSet: healthy with its load, or unhealthy with the reason. start() / stop() once
// each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "router/replica_set.h"

namespace torchtpu::router {

// GET `target` from `endpoint` on a fresh connection, the whole exchange within `timeout_ms`
// (name resolution aside); the status and body, or an error.
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
  std::vector<std::thread> threads_;  // one per replica
};

}  // namespace torchtpu::router
