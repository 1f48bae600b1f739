#include "router/router.h"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/beast/core/string.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <system_error>
#include <thread>

#include "router/socket_util.h"

namespace torchtpu::router {

namespace net = boost::asio;
using tcp = net::ip::tcp;


base::StatusOr<std::unique_ptr<Router>> Router::create(RouterConfig config, Tokenizer tokenizer) {
  if (config.replicas.empty()) {
    return base::invalid_argument("router: no replicas; give at least one --replica URL");
  }
  for (size_t i = 0; i < config.replicas.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const Endpoint& a = config.replicas[i].http;
      const Endpoint& b = config.replicas[j].http;
      if (a.port == b.port && boost::beast::iequals(a.host, b.host)) {  // names: ASCII
        return base::invalid_argument("router: replica " + a.str() + " is given twice (--replica " +
                                      std::to_string(j + 1) + " and " + std::to_string(i + 1) +
                                      "); give each replica once");
      }
    }
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
  auto address = net::ip::make_address(config_.host, ec);
  if (ec) {  // a name (localhost): its first address
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(config_.host, std::to_string(config_.port), ec);
    if (ec || results.empty()) {
      return base::invalid_argument("router: bad --host '" + config_.host + "': " +
                                    (ec ? ec.message() : "no address") +
                                    " (give an IP address or a name that resolves)");
    }
    // IPv4 first (localhost is often ::1 first, and clients of 127.0.0.1 would be refused).
    address = results.begin()->endpoint().address();
    for (const auto& r : results) {
      if (r.endpoint().address().is_v4()) {
        address = r.endpoint().address();
        break;
      }
    }
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
  std::lock_guard<std::mutex> lock(conn_mu_);
  join_ended_connections();
  const auto live = std::count_if(conns_.begin(), conns_.end(),
                                  [](const auto& c) { return !c.second.evicted; });
  if (live >= config_.max_connections && !evict_idle_connection()) {
    boost::system::error_code ec;
    socket.close(ec);  // none idle 1 s to make room: the client sees the connection refused
    metrics_.num_connections_refused++;
    return;
  }
  // Idle from its accept (its thread may start later on a busy host) until its first byte.
  Connection conn{socket.native_handle(), std::make_shared<std::atomic<int64_t>>(steady_ms())};
  const uint64_t id = next_conn_++;
  std::thread t;
  try {
    t = std::thread([this, id, idle_since = conn.idle_since, s = std::move(socket)]() mutable {
      proxy_.serve_connection(s, idle_since.get());
      std::lock_guard<std::mutex> lock(conn_mu_);
      // Closed once out of conns_: the router shuts down only open sockets (a closed
      // descriptor's number may already be the next accepted connection's).
      conns_.erase(id);
      boost::system::error_code ec;
      s.close(ec);
      conn_ended_.push_back(id);
      conn_done_.notify_all();
    });
  } catch (const std::system_error& e) {
    // No thread to serve it (the system's thread limit): refused (the socket, moved into
    // the thread's function, closed with it), the router stays up.
    std::fprintf(stderr, "torchtpu router: cannot start a connection thread: %s\n", e.what());
    return;
  }
  conns_.emplace(id, std::move(conn));
  conn_threads_.emplace(id, std::move(t));
}

bool Router::evict_idle_connection() {
  const int64_t now = steady_ms();
  Connection* longest = nullptr;
  int64_t longest_since = now - kMinEvictableIdleMs + 1;
  for (auto& [id, c] : conns_) {
    const int64_t since = c.idle_since->load();
    if (c.evicted || since == 0 || since >= longest_since) continue;
    longest = &c;
    longest_since = since;
  }
  if (longest == nullptr) return false;
  ::shutdown(longest->fd, SHUT_RDWR);  // its wait for a request ends; its thread closes it
  longest->evicted = true;
  metrics_.num_connections_evicted++;
  return true;
}

void Router::join_ended_connections() {
  // An ended thread only releases conn_mu_ and returns: joining it does not wait on us.
  for (uint64_t id : conn_ended_) {
    auto it = conn_threads_.find(id);
    if (it == conn_threads_.end()) continue;
    it->second.join();
    conn_threads_.erase(it);
  }
  conn_ended_.clear();
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
  for (const auto& [id, c] : conns_) ::shutdown(c.fd, SHUT_RDWR);
  conn_done_.wait_for(lock, std::chrono::seconds(10), [this] { return conns_.empty(); });
  join_ended_connections();
  if (!conn_threads_.empty()) {
    // Still writing to a replica that does not read after 10 s: left running rather than
    // waited for without bound (the process is exiting).
    std::fprintf(stderr, "torchtpu router: %zu connections did not end within 10 s of stop\n",
                 conn_threads_.size());
    for (auto& [id, t] : conn_threads_) t.detach();
    conn_threads_.clear();
  }
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
