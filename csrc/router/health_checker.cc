#include "router/health_checker.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <system_error>
#include <vector>

#include "router/socket_util.h"

namespace torchtpu::router {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

base::StatusOr<std::pair<int, std::string>> http_get(const Endpoint& endpoint,
                                                     const std::string& target, int timeout_ms) {
  // The whole exchange within `timeout_ms`: a replica that trickles bytes fails it too.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  net::io_context io;
  boost::system::error_code ec;
  auto connected = connect_to(io, endpoint, timeout_ms);
  if (!connected.ok()) return connected.status();
  TimedStream socket(**connected, timeout_ms);
  socket.set_deadline(deadline);
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, endpoint.str());
  http::write(socket, req, ec);
  if (ec) return base::unavailable("write failed: " + ec.message());
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16u << 20);
  http::read(socket, buffer, parser, ec);
  if (ec) return base::unavailable("read failed: " + ec.message());
  socket.socket().shutdown(tcp::socket::shutdown_both, ec);
  return std::make_pair(static_cast<int>(parser.get().result_int()), parser.get().body());
}

void HealthChecker::check_one(ReplicaId id) {
  const Endpoint& e = replicas_->config(id).http;
  auto health = http_get(e, "/health", timeout_ms_);
  if (!health.ok()) {
    replicas_->on_health(id, false, {}, health.status().message());
    return;
  }
  if (health->first != 200) {
    replicas_->on_health(id, false, {}, "/health answered " + std::to_string(health->first));
    return;
  }
  auto metrics = http_get(e, "/metrics", timeout_ms_);
  if (!metrics.ok() || metrics->first != 200) {
    replicas_->on_health(id, false, {},
                         "/metrics failed: " + (metrics.ok() ? std::to_string(metrics->first)
                                                             : metrics.status().message()));
    return;
  }
  replicas_->on_health(id, true, parse_vllm_metrics(metrics->second), "");
}

void HealthChecker::check_all() {
  // Concurrently: a replica that takes the whole timeout (its host drops packets) must not
  // hold the others' checks, and so their admission after a failure, behind it.
  std::vector<std::thread> checks;
  for (size_t i = 1; i < replicas_->size(); ++i) {
    try {
      checks.emplace_back([this, i] { check_one(static_cast<ReplicaId>(i)); });
    } catch (const std::system_error&) {
      check_one(static_cast<ReplicaId>(i));  // no thread to spare: in turn
    }
  }
  if (replicas_->size() > 0) check_one(0);
  for (auto& t : checks) t.join();
}

void HealthChecker::start() {
  // A thread per replica, each on its own interval: a replica whose checks take their
  // whole timeout slows no other's.
  for (size_t i = 0; i < replicas_->size(); ++i) {
    threads_.emplace_back([this, i] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stop_; });
        if (stop_) break;
        lock.unlock();
        check_one(static_cast<ReplicaId>(i));
        lock.lock();
      }
    });
  }
}

void HealthChecker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace torchtpu::router
