// EventSubscriber: one thread that reads every replica's KV event stream (ZMQ SUB, vLLM's
// three frames) into the ReplicaSet, and asks a replica's replay socket (ZMQ DEALER to its
// ROUTER) for the batches it missed. A replay waits at most `replay_timeout_ms`; a
// malformed message is logged and counted, never fatal. ZMQ reconnects to a replica that
// restarts on its own. start() / stop() once each.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "router/replica_set.h"

namespace torchtpu::router {

class EventSubscriber {
 public:
  EventSubscriber(ReplicaSet* replicas, int replay_timeout_ms = 2000)
      : replicas_(replicas), replay_timeout_ms_(replay_timeout_ms) {}
  ~EventSubscriber() { stop(); }

  void start();
  void stop();

 private:
  void run();

  ReplicaSet* replicas_;
  int replay_timeout_ms_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace torchtpu::router
