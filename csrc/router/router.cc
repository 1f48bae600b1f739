#include "router/router.h"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

namespace torchtpu::router {

namespace net = boost::asio;
using tcp = net::ip::tcp;

base::StatusOr<std::unique_ptr<Router>> Router::create(RouterConfig config, Tokenizer tokenizer) {
  if (config.replicas.empty()) {
    return base::invalid_argument("router: no replicas; give at least one --replica URL");
  }
  if (config.health_interval_ms <= 0 || config.health_timeout_ms <= 0) {
    return base::invalid_argument("router: health check interval and timeout must be positive");
  }
  return std::unique_ptr<Router>(new Router(std::move(config), std::move(tokenizer)));
}

Router::Router(RouterConfig config, Tokenizer tokenizer)
    : config_(std::move(config)),
      replicas_(config_.replicas, config_.routing),
      proxy_(&replicas_, &metrics_, std::move(tokenizer), config_.proxy),
      health_(&replicas_, config_.health_interval_ms, config_.health_timeout_ms),
      events_(&replicas_, config_.replay_timeout_ms),
      acceptor_(io_) {}

Router::~Router() { stop(); }

base::Status Router::bind() {
  boost::system::error_code ec;
  const auto address = net::ip::make_address(config_.host, ec);
  if (ec) {
    return base::invalid_argument("router: bad --host '" + config_.host + "': " + ec.message());
  }
  const tcp::endpoint ep(address, config_.port);
  acceptor_.open(ep.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(ep, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return base::unavailable("router: cannot listen on " + config_.host + ":" +
                             std::to_string(config_.port) + ": " + ec.message() +
                             "; pick another --port");
  }
  port_ = acceptor_.local_endpoint().port();
  return base::Status::ok_status();
}

void Router::accept_next() {
  acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (ec) {
      if (!stopping_ && ec != net::error::operation_aborted) {
        std::fprintf(stderr, "torchtpu router: accept failed: %s\n", ec.message().c_str());
        accept_next();
      }
      return;
    }
    serve(std::move(socket));
    accept_next();
  });
}

void Router::serve(tcp::socket socket) {
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    if (static_cast<int>(conn_fds_.size()) >= config_.max_connections) {
      boost::system::error_code ec;
      socket.close(ec);  // over the limit: the client sees the connection refused
      return;
    }
    conn_fds_.insert(socket.native_handle());
  }
  std::thread([this, s = std::move(socket)]() mutable {
    const int fd = s.native_handle();
    proxy_.serve_connection(std::move(s));
    std::lock_guard<std::mutex> lock(conn_mu_);
    conn_fds_.erase(fd);
    conn_done_.notify_all();
  }).detach();
}

void Router::run(bool handle_signals) {
  health_.check_all();  // admit the replicas that are up before the first request
  health_.start();
  events_.start();
  net::signal_set signals(io_);
  if (handle_signals) {
    signals.add(SIGINT);
    signals.add(SIGTERM);
    signals.async_wait([this](boost::system::error_code ec, int) {
      if (!ec) stop();
    });
  }
  accept_next();
  io_.run();
  // Connection threads end once their sockets are shut down (a stream in progress ends).
  std::unique_lock<std::mutex> lock(conn_mu_);
  for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
  conn_done_.wait_for(lock, std::chrono::seconds(10), [this] { return conn_fds_.empty(); });
  lock.unlock();
  health_.stop();
  events_.stop();
}

void Router::stop() {
  if (stopping_.exchange(true)) return;
  net::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    io_.stop();
  });
}

}  // namespace torchtpu::router
