#include "router/socket_util.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>

#include <algorithm>

namespace torchtpu::router {

namespace net = boost::asio;
using tcp = net::ip::tcp;

bool connect_with_timeout(tcp::socket& socket, const tcp::endpoint& ep, int timeout_ms,
                          boost::system::error_code& ec) {
  socket.open(ep.protocol(), ec);
  if (ec) return false;
  socket.non_blocking(true, ec);
  if (ec) return false;
  // POSIX connect, not Asio's: its blocking connect waits for an in-progress connect with
  // no limit, whatever the socket's mode.
  // A signal during connect leaves it in progress, as EINPROGRESS does.
  const int rc = ::connect(socket.native_handle(), ep.data(), static_cast<socklen_t>(ep.size()));
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) {
    ec = boost::system::error_code(errno, boost::system::system_category());
    return false;
  }
  if (rc != 0) {
    if (!wait_ready(socket.native_handle(), POLLOUT, timeout_ms, std::nullopt, ec)) return false;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ec = boost::system::error_code(err, boost::system::system_category());
      return false;
    }
  }
  socket.set_option(tcp::no_delay(true), ec);
  return !ec;
}

base::StatusOr<std::unique_ptr<tcp::socket>> connect_to(net::io_context& io,
                                                        const Endpoint& endpoint,
                                                        int connect_timeout_ms) {
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec);
  if (ec) return base::unavailable("cannot resolve " + endpoint.host + ": " + ec.message());
  for (const auto& r : results) {
    auto s = std::make_unique<tcp::socket>(io);
    if (connect_with_timeout(*s, r.endpoint(), connect_timeout_ms, ec)) return s;
  }
  return base::unavailable("cannot connect to " + endpoint.str() + ": " + ec.message());
}

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool wait_ready(int fd, short events, int timeout_ms,
                const std::optional<std::chrono::steady_clock::time_point>& deadline,
                boost::system::error_code& ec) {
  using Clock = std::chrono::steady_clock;
  const auto until = [&] {
    auto t = Clock::now() + std::chrono::milliseconds(timeout_ms);
    return deadline ? std::min(t, *deadline) : t;
  }();
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) break;
    pollfd pfd{fd, events, 0};
    const int n = ::poll(&pfd, 1, static_cast<int>(left));
    if (n > 0) return true;  // ready, or an error the next call reports
    if (n < 0 && errno != EINTR) {
      ec = boost::system::error_code(errno, boost::system::system_category());
      return false;
    }
  }
  ec = net::error::timed_out;
  return false;
}

}  // namespace torchtpu::router
