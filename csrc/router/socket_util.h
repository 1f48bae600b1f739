// Blocking socket I/O of the router, each step bounded in time: a replica that is gone (or
// whose host drops packets, or that accepts and never answers) must not hold a request or a
// health check for long, nor a client that sends a byte now and then hold its thread.
#pragma once

#include <poll.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "router/http_util.h"

namespace torchtpu::router {

// Connects `socket` to `ep`, giving up after `timeout_ms` (a connect left to the kernel
// retries its SYN for about two minutes); `ec` says why not.
bool connect_with_timeout(boost::asio::ip::tcp::socket& socket,
                          const boost::asio::ip::tcp::endpoint& ep, int timeout_ms,
                          boost::system::error_code& ec);

// A connection to `endpoint` (each address it resolves to, tried in turn, each attempt
// bounded by `connect_timeout_ms`), with TCP_NODELAY, in non-blocking mode (for
// TimedStream); or why not.
base::StatusOr<std::unique_ptr<boost::asio::ip::tcp::socket>> connect_to(
    boost::asio::io_context& io, const Endpoint& endpoint, int connect_timeout_ms);

// Milliseconds of the steady clock (routing ages, connections' idle times).
int64_t steady_ms();

// Waits until `fd` is ready for `events` (POLLIN, POLLOUT), for at most `timeout_ms` and
// not past `deadline` (when set); false with `ec` = timed_out when it is not.
bool wait_ready(int fd, short events, int timeout_ms,
                const std::optional<std::chrono::steady_clock::time_point>& deadline,
                boost::system::error_code& ec);

// A socket in non-blocking mode read and written as a blocking stream (Beast's and Asio's
// SyncReadStream and SyncWriteStream) whose every wait for the socket is bounded: by
// `timeout_ms` (a silence), and by a deadline when one is set (a whole request). A wait
// that runs out fails the operation with `timed_out`. (SO_RCVTIMEO bounds nothing here:
// on EAGAIN Asio's blocking calls poll the socket without a limit.)
class TimedStream {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;

  TimedStream(boost::asio::ip::tcp::socket& socket, int timeout_ms)
      : socket_(socket), timeout_ms_(timeout_ms) {}

  boost::asio::ip::tcp::socket& socket() { return socket_; }
  int native_handle() { return socket_.native_handle(); }
  executor_type get_executor() { return socket_.get_executor(); }
  void set_deadline(std::optional<std::chrono::steady_clock::time_point> deadline) {
    deadline_ = deadline;
  }

  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, boost::system::error_code& ec) {
    return when_ready(POLLIN, ec, [&] { return socket_.read_some(buffers, ec); });
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, boost::system::error_code& ec) {
    return when_ready(POLLOUT, ec, [&] { return socket_.write_some(buffers, ec); });
  }
  template <class MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    return or_throw([&](boost::system::error_code& ec) { return read_some(buffers, ec); });
  }
  template <class ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    return or_throw([&](boost::system::error_code& ec) { return write_some(buffers, ec); });
  }

 private:
  // `io` (a non-blocking read or write) again each time the socket is ready, until it does
  // not would-block; fails with `timed_out` when the wait runs out.
  template <class Io>
  size_t when_ready(short events, boost::system::error_code& ec, Io io) {
    while (true) {
      const size_t n = io();
      if (ec != boost::asio::error::would_block && ec != boost::asio::error::try_again) return n;
      if (!wait_ready(native_handle(), events, timeout_ms_, deadline_, ec)) return 0;
    }
  }
  template <class Io>
  static size_t or_throw(Io io) {
    boost::system::error_code ec;
    const size_t n = io(ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  boost::asio::ip::tcp::socket& socket_;
  int timeout_ms_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

}  // namespace torchtpu::router
