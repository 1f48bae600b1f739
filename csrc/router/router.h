// Router: the torchtpu router service. An HTTP server (one thread per client connection,
// blocking I/O; see proxy.h for what each request does) in front of N engine replicas, with
// a health checker thread and a KV event subscriber thread feeding the ReplicaSet.
//
// Lifecycle: create() -> bind() -> run() (blocks until stop(), or SIGINT/SIGTERM when asked
// to handle them) -> returns once every connection thread has ended and been joined (their
// sockets are shut down first, so a stream in progress ends at once; one still blocked
// writing to a replica 10 s later is detached). stop() is thread-safe and idempotent.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "router/event_subscriber.h"
#include "router/health_checker.h"
#include "router/proxy.h"
#include "router/replica_set.h"
#include "router/router_metrics.h"

namespace torchtpu::router {

struct RouterConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (see Router::port())
  std::vector<ReplicaConfig> replicas;
  RoutingConfig routing;
  ProxyConfig proxy;
  int health_interval_ms = 500;
  int health_timeout_ms = 2000;
  int replay_timeout_ms = 2000;
  int max_connections = 1024;  // served at once; one idle >= 1 s makes room for a new one
};

class Router {
 public:
  static base::StatusOr<std::unique_ptr<Router>> create(RouterConfig config, Tokenizer tokenizer);
  ~Router();

  base::Status bind();
  uint16_t port() const { return port_; }
  void run(bool handle_signals);
  void stop();

  const ReplicaSet& replicas() const { return replicas_; }
  const RouterMetrics& metrics() const { return metrics_; }

 private:
  Router(RouterConfig config, Tokenizer tokenizer);
  void accept_next();
  void serve(boost::asio::ip::tcp::socket socket);
  void join_ended_connections();  // conn_mu_ held

  RouterConfig config_;
  ReplicaSet replicas_;
  RouterMetrics metrics_;
  Proxy proxy_;
  HealthChecker health_;
  EventSubscriber events_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  // A client connection: its socket's descriptor (open while it is in conns_: its thread
  // closes it only after taking it out) and since when it waits for a request (steady
  // clock milliseconds; 0 while it reads or serves one).
  struct Connection {
    int fd = -1;
    std::shared_ptr<std::atomic<int64_t>> idle_since;
    bool evicted = false;  // shut down to make room; its thread is ending
  };
  // At the connection limit: shuts down the connection that has waited for a request the
  // longest (kept-alive or never used), if it has waited kMinEvictableIdleMs at least (a
  // kept-alive client is not cut off between two requests), so idle sockets never lock
  // clients out. False when none has.
  bool evict_idle_connection();  // conn_mu_ held
  static constexpr int64_t kMinEvictableIdleMs = 1000;

  std::mutex conn_mu_;
  std::condition_variable conn_done_;
  std::map<uint64_t, Connection> conns_;  // by connection number, oldest first
  // Each connection's thread, by connection number, and the numbers of those whose work
  // has ended (joined at the next connection and at the end of run(), so no thread
  // outlives the router and none piles up).
  std::map<uint64_t, std::thread> conn_threads_;
  std::vector<uint64_t> conn_ended_;
  uint64_t next_conn_ = 0;
};

}  // namespace torchtpu::router
