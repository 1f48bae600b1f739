#include "router/health_checker.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace torchtpu::router {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

void set_socket_timeouts(tcp::socket& socket, int timeout_ms) {
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

base::StatusOr<std::pair<int, std::string>> http_get(const Endpoint& endpoint,
                                                     const std::string& target, int timeout_ms) {
  net::io_context io;
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec);
  if (ec) return base::unavailable("cannot resolve " + endpoint.host + ": " + ec.message());
  tcp::socket socket(io);
  net::connect(socket, results, ec);
  if (ec) return base::unavailable("cannot connect: " + ec.message());
  set_socket_timeouts(socket, timeout_ms);
  http::request<http::empty_body> req(http::verb::get, target, 11);
  req.set(http::field::host, endpoint.str());
  http::write(socket, req, ec);
  if (ec) return base::unavailable("write failed: " + ec.message());
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(16u << 20);
  http::read(socket, buffer, parser, ec);
  if (ec) return base::unavailable("read failed: " + ec.message());
  socket.shutdown(tcp::socket::shutdown_both, ec);
  return std::make_pair(static_cast<int>(parser.get().result_int()), parser.get().body());
}

void HealthChecker::check_all() {
  for (size_t i = 0; i < replicas_->size(); ++i) {
    const ReplicaId id = static_cast<ReplicaId>(i);
    const Endpoint& e = replicas_->config(id).http;
    auto health = http_get(e, "/health", timeout_ms_);
    if (!health.ok()) {
      replicas_->on_health(id, false, {}, health.status().message());
      continue;
    }
    if (health->first != 200) {
      replicas_->on_health(id, false, {}, "/health answered " + std::to_string(health->first));
      continue;
    }
    auto metrics = http_get(e, "/metrics", timeout_ms_);
    if (!metrics.ok() || metrics->first != 200) {
      replicas_->on_health(id, false, {},
                           "/metrics failed: " + (metrics.ok() ? std::to_string(metrics->first)
                                                               : metrics.status().message()));
      continue;
    }
    replicas_->on_health(id, true, parse_vllm_metrics(metrics->second), "");
  }
}

void HealthChecker::start() {
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      check_all();
      lock.lock();
      wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stop_; });
    }
  });
}

void HealthChecker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace torchtpu::router
