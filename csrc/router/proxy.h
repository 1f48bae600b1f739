// Proxy: serves one client connection (HTTP/1.1, keep-alive) on the calling thread, blocking
// (every wait bounded: socket_util.h's TimedStream).
//
// POST /v1/completions and /v1/chat/completions are routed: the prompt is tokenized (the
// injected Tokenizer; none or a failure means load-only routing), the ReplicaSet ranks the
// healthy replicas, and the request goes to the best. A request is retried on the next
// replica when its attempt fails before anything reached the client: the connection or the
// write failed, the replica closed before answering, answered 503 (its engine died), or cut
// the response off before its first body byte (a stream) or before its end (not a stream: its
// body is relayed only once whole). A stream is relayed chunk by chunk as the replica sends
// it, never buffered; if the replica fails mid-stream, the client gets an error event in
// OpenAI's shape and `data: [DONE]`. Other routes are proxied to a healthy replica; GET
// /health and /metrics are the router's own. Upstream connections are kept alive and reused
// (one checked for a close by its replica before it is taken, so a stale one costs no round
// trip). Each served request's time in the router beyond its replica's own is measured
// (RouterMetrics::added_latency).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "router/replica_set.h"
#include "router/router_metrics.h"

namespace torchtpu::router {

// Token ids of a routed request's prompt as the replicas' engine would compute them, or
// nullopt (then the request is routed by load). Called on connection threads, concurrently.
using Tokenizer = std::function<std::optional<std::vector<serve::TokenId>>(
    const std::string& target, const std::string& body)>;

struct ProxyConfig {
  int64_t max_request_bytes = 4 << 20;
  int client_idle_timeout_ms = 120'000;  // a keep-alive connection's wait for a request
  int request_read_timeout_ms = 60'000;   // a request, header and body, from its first byte
  int upstream_timeout_ms = 600'000;  // a generation's longest silence
  int connect_timeout_ms = 2'000;
  int max_attempts = 3;
};

class Proxy {
 public:
  Proxy(ReplicaSet* replicas, RouterMetrics* metrics, Tokenizer tokenizer, ProxyConfig config);
  ~Proxy();

  // Serves requests on `client` until it closes (the caller closes the socket).
  // `idle_since`, when given, holds steady_ms() of when the connection began to wait for a
  // request's first byte, and 0 while it reads or serves one.
  void serve_connection(boost::asio::ip::tcp::socket& client,
                        std::atomic<int64_t>* idle_since = nullptr);

 private:
  struct Exchange;
  using Socket = boost::asio::ip::tcp::socket;
  std::unique_ptr<Socket> acquire(ReplicaId id, bool* pooled, std::string* error);
  void release(ReplicaId id, std::unique_ptr<Socket> socket);

  ReplicaSet* replicas_;
  RouterMetrics* metrics_;
  Tokenizer tokenizer_;
  ProxyConfig config_;
  boost::asio::io_context io_;  // sockets' home; never run (all I/O is blocking)
  std::mutex pool_mu_;
  std::vector<std::vector<std::unique_ptr<Socket>>> idle_;  // per replica
};

}  // namespace torchtpu::router
