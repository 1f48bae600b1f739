#include "router/proxy.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cerrno>
#include <chrono>
#include <limits>
#include <optional>

#include "router/http_util.h"
#include "router/socket_util.h"

namespace torchtpu::router {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Request = http::request<http::string_body>;
using Clock = std::chrono::steady_clock;

namespace {

// Names the replica that served a response (llm-d's gateway names its pick in
// x-gateway-destination-endpoint on the upstream request; this is the client's view of it).
constexpr const char* kReplicaHeader = "x-torchtpu-replica";

// The target's path: without its query string ("/v1/completions?x=1" is routed like
// "/v1/completions", as the replica serves it).
std::string_view path_of(beast::string_view target) {
  const std::string_view t(target.data(), target.size());
  return t.substr(0, t.find('?'));
}

bool is_routed(const Request& req) {
  const std::string_view path = path_of(req.target());
  return req.method() == http::verb::post &&
         (path == "/v1/completions" || path == "/v1/chat/completions");
}

bool hop_by_hop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::keep_alive:
    case http::field::transfer_encoding:
    case http::field::te:
    case http::field::upgrade:
    case http::field::host:
    case http::field::content_length:
    case http::field::expect:  // answered by the router itself
    case http::field::proxy_authorization:
    case http::field::proxy_connection:
      return true;
    default:
      return false;
  }
}

// Whether a Connection header of `h` lists `name`: such a header is for the next hop only
// (RFC 9110 7.6.1), never passed on.
bool named_by_connection(const http::fields& h, beast::string_view name) {
  for (const auto& f : h) {
    if (f.name() != http::field::connection) continue;
    for (const auto& token : http::token_list{f.value()}) {
      if (beast::iequals(token, name)) return true;
    }
  }
  return false;
}

// The replica's end-to-end response headers (Location, Allow, ...), for the client; the
// router sets the framing and its own header itself. A Location on the replica's own
// origin (a redirect the replica built from the Host the router sent it) becomes a path,
// which the client resolves against the router (RFC 9110 10.2.2).
template <class Message>
void copy_end_to_end(const http::fields& from, Message& to, const std::string& replica) {
  const std::string origin = "http://" + replica;
  for (const auto& f : from) {
    if (hop_by_hop(f.name()) || beast::iequals(f.name_string(), kReplicaHeader) ||
        named_by_connection(from, f.name_string())) {
      continue;
    }
    beast::string_view value = f.value();
    if (f.name() == http::field::location && value.starts_with(origin) &&
        (value.size() == origin.size() || value[origin.size()] == '/')) {
      value.remove_prefix(origin.size());
      if (value.empty()) value = "/";
    }
    to.insert(f.name_string(), value);
  }
}

// Whether a kept-alive connection with no request on it is still usable. A replica closes
// idle connections after its keep-alive timeout (uvicorn's default: 5 s); the close shows as
// end of stream here, and any byte at all is out of place on an idle HTTP/1.1 connection.
// Finding it now costs one poll; finding it after writing the request would cost a round
// trip and a reconnect on the request's time.
bool idle_connection_open(tcp::socket& socket) {
  pollfd pfd{socket.native_handle(), POLLIN | POLLRDHUP, 0};
  return ::poll(&pfd, 1, 0) == 0;
}

enum class Wait { kReady, kClientGone, kTimeout };

// Blocks until the replica has bytes to read, the client hangs up (then the caller drops the
// upstream connection, which is how a replica learns to abort the request: it stops
// generating for a client that left), or `timeout_ms` passes. A client that half-closes its
// side after sending its request counts as gone, as it does for nginx and vLLM's server.
Wait wait_upstream(TimedStream& upstream, TimedStream& client, int timeout_ms) {
  pollfd fds[2] = {{upstream.native_handle(), POLLIN, 0},
                   {client.native_handle(), POLLRDHUP, 0}};
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                            Clock::now());
    if (left.count() <= 0) return Wait::kTimeout;
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Wait::kReady;  // let the read report the error
    if (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return Wait::kClientGone;
    if (fds[0].revents != 0) return Wait::kReady;
  }
}

// Closes a client connection so that the client reads our last response even when it is
// still sending (a refused oversized body, a header past the limit): closing with unread
// bytes would send a reset, which can discard the response before the client reads it (a
// client that writes its whole body before reading, as Python's http.client, requests and
// httpx do, sees a broken pipe instead of our 413). So: our side ends, then what the client
// still sends is read and dropped until it closes too, or sends nothing for 2 s, for at most
// 30 s in all (web servers' lingering close: nginx's lingering_timeout and lingering_time).
void lingering_close(TimedStream& client) {
  boost::system::error_code ec;
  client.socket().shutdown(tcp::socket::shutdown_send, ec);
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  char sink[65536];
  while (!ec) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd pfd{client.native_handle(), POLLIN, 0};
    if (left <= 0 || ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 2000))) <= 0) {
      break;
    }
    const ssize_t n = ::recv(client.native_handle(), sink, sizeof sink, MSG_DONTWAIT);
    if (n <= 0) break;
  }
  client.socket().close(ec);
}

template <class Body>
bool write_response(TimedStream& client, http::response<Body>& res) {
  boost::system::error_code ec;
  res.prepare_payload();
  http::write(client, res, ec);
  return !ec;
}

// The answer to a HEAD request: the header a GET would get (its Content-Length
// included) and no body (RFC 9110 9.3.2).
bool write_head_only(TimedStream& client, http::response<http::empty_body>& res) {
  boost::system::error_code ec;
  http::response_serializer<http::empty_body> sr(res);
  http::write_header(client, sr, ec);
  return !ec;
}

bool write_json(TimedStream& client, int status, std::string body, bool keep_alive,
                const char* content_type = "application/json", bool head = false) {
  if (head) {
    http::response<http::empty_body> res(static_cast<http::status>(status), 11);
    res.set(http::field::content_type, content_type);
    res.content_length(body.size());
    res.keep_alive(keep_alive);
    return write_head_only(client, res);
  }
  http::response<http::string_body> res(static_cast<http::status>(status), 11);
  res.set(http::field::content_type, content_type);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  return write_response(client, res);
}

bool write_chunk(TimedStream& client, net::const_buffer data) {
  boost::system::error_code ec;
  net::write(client, http::make_chunk(data), ec);
  return !ec;
}

}  // namespace

Proxy::Proxy(ReplicaSet* replicas, RouterMetrics* metrics, Tokenizer tokenizer, ProxyConfig config)
    : replicas_(replicas),
      metrics_(metrics),
      tokenizer_(std::move(tokenizer)),
      config_(config),
      idle_(replicas->size()) {}

Proxy::~Proxy() = default;

std::unique_ptr<Proxy::Socket> Proxy::acquire(ReplicaId id, bool* pooled, std::string* error) {
  while (true) {
    std::unique_ptr<Socket> s;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      auto& idle = idle_[id];
      if (idle.empty()) break;
      s = std::move(idle.back());
      idle.pop_back();
    }
    if (idle_connection_open(*s)) {
      *pooled = true;
      return s;
    }
    metrics_->num_stale_upstreams++;  // closed by the replica meanwhile: dropped here
  }
  *pooled = false;
  metrics_->num_upstream_connects++;
  auto s = connect_to(io_, replicas_->config(id).http, config_.connect_timeout_ms);
  if (!s.ok()) {
    *error = s.status().message();
    return nullptr;
  }
  return std::move(*s);
}

void Proxy::release(ReplicaId id, std::unique_ptr<Socket> socket) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (idle_[id].size() < 64) idle_[id].push_back(std::move(socket));
}

// One attempt of one request on one replica.
struct Proxy::Exchange {
  enum class Outcome { kDone, kRetry, kClientGone };
  Proxy* proxy;
  TimedStream& client;
  const Request& req;
  bool keep_alive;
  Clock::time_point read_at;  // the client's request fully read
  // The last attempt's upstream request written and its response's latest bytes read: the
  // replica's own share of the request's time (RouterMetrics::added_latency is the rest).
  Clock::time_point written_at;
  Clock::time_point upstream_read_at;
  std::string failure;        // why the last attempt failed (for the final error)
  int failure_status = 502;
  std::string failure_body;   // a replica's own error body to pass on, when it had one
  bool routing_observed = false;
  bool client_gone = false;  // hung up while the replica was working on its request
  // The response's body ended by closing the connection (a stream to an HTTP/1.0 client,
  // which has no chunked encoding): the connection serves no further request.
  bool close_after = false;

  // Waits for the replica's next bytes unless `buffer` already holds some; false (with `ec`
  // set) when the client hangs up meanwhile or the replica stays silent too long.
  bool upstream_readable(TimedStream& upstream, const beast::flat_buffer& buffer,
                         boost::system::error_code& ec) {
    if (buffer.size() > 0) return true;
    switch (wait_upstream(upstream, client, proxy->config_.upstream_timeout_ms)) {
      case Wait::kReady:
        return true;
      case Wait::kClientGone:
        client_gone = true;
        ec = net::error::connection_aborted;
        return false;
      case Wait::kTimeout:
        ec = net::error::timed_out;
        return false;
    }
    return true;
  }

  Outcome attempt(ReplicaId id) {
    ReplicaSet& replicas = *proxy->replicas_;
    bool pooled = false;
    std::string error;
    auto upstream_socket = proxy->acquire(id, &pooled, &error);
    if (!upstream_socket) return fail(id, error);
    std::optional<TimedStream> upstream;
    upstream.emplace(*upstream_socket, proxy->config_.upstream_timeout_ms);

    Request out;
    out.method_string(req.method_string());  // an extension method too, as the client sent it
    out.target(req.target());
    out.version(11);
    for (const auto& f : req) {  // repeated fields (Cookie, ...) each passed on
      if (!hop_by_hop(f.name()) && !named_by_connection(req, f.name_string())) {
        out.insert(f.name_string(), f.value());
      }
    }
    out.set(http::field::host, replicas.config(id).http.str());
    out.keep_alive(true);
    out.body() = req.body();
    out.prepare_payload();

    boost::system::error_code ec;
    beast::flat_buffer buffer;
    std::optional<http::response_parser<http::buffer_body>> parser;
    for (int tries = 0;; ++tries) {
      parser.emplace();
      // Not boost::none: Boost 1.74 compares a Content-Length against an empty limit as
      // "over the limit".
      parser->body_limit(std::numeric_limits<std::uint64_t>::max());
      // A response to HEAD has no body whatever its Content-Length says.
      parser->skip(req.method() == http::verb::head);
      buffer.clear();
      http::write(*upstream, out, ec);
      if (!ec) {
        written_at = Clock::now();
        if (!routing_observed) {
          routing_observed = true;
          proxy->metrics_->routing_latency.observe(
              std::chrono::duration<double>(written_at - read_at).count());
        }
        if (upstream_readable(*upstream, buffer, ec)) {
          http::read_header(*upstream, buffer, *parser, ec);
          upstream_read_at = Clock::now();
        }
      }
      if (client_gone) return Outcome::kClientGone;  // drops the upstream: the replica aborts
      if (!ec) break;
      // A kept-alive connection the replica closed meanwhile: once more on a fresh one.
      if (pooled && tries == 0) {
        upstream.reset();
        upstream_socket = proxy->acquire(id, &pooled, &error);
        while (upstream_socket && pooled) upstream_socket = proxy->acquire(id, &pooled, &error);
        if (!upstream_socket) return fail(id, error);
        upstream.emplace(*upstream_socket, proxy->config_.upstream_timeout_ms);
        continue;
      }
      return fail(id, "no response: " + ec.message());
    }

    // Informational responses (103 Early Hints, an unasked 100 Continue) come before the
    // final one: the client gets the final one (as vLLM's own server answers it directly).
    while (parser->get().result_int() / 100 == 1 &&
           parser->get().result() != http::status::switching_protocols) {
      parser.emplace();
      parser->body_limit(std::numeric_limits<std::uint64_t>::max());
      parser->skip(req.method() == http::verb::head);
      if (upstream_readable(*upstream, buffer, ec)) http::read_header(*upstream, buffer, *parser, ec);
      if (client_gone) return Outcome::kClientGone;
      if (ec) return fail(id, "no final response after an informational one: " + ec.message());
    }
    const auto& head = parser->get();
    const int status = static_cast<int>(head.result_int());
    const beast::string_view content_type = head[http::field::content_type];
    // Media types are case-insensitive (RFC 9110 8.3.1).
    const bool stream = content_type.size() >= 17 &&
                        beast::iequals(content_type.substr(0, 17), "text/event-stream");
    char chunk[16384];
    auto read_some = [&](size_t* n) {
      parser->get().body().data = chunk;
      parser->get().body().size = sizeof chunk;
      if (!upstream_readable(*upstream, buffer, ec)) return false;
      http::read_some(*upstream, buffer, *parser, ec);
      upstream_read_at = Clock::now();
      if (ec == http::error::need_buffer) ec = {};
      *n = sizeof chunk - parser->get().body().size;
      return !ec;
    };

    if (!stream) {
      std::string body;
      size_t n = 0;
      while (!parser->is_done()) {
        if (!read_some(&n)) {
          return client_gone ? Outcome::kClientGone : fail(id, "response cut off: " + ec.message());
        }
        body.append(chunk, n);
      }
      if (status == 503) {  // the replica's engine died: another one may serve it
        failure_status = 503;
        failure_body = body;
        return fail(id, "it answered 503");
      }
      if (parser->keep_alive()) proxy->release(id, std::move(upstream_socket));
      if (req.method() == http::verb::head) {
        http::response<http::empty_body> res(static_cast<http::status>(status), 11);
        copy_end_to_end(head, res, replicas.config(id).http.str());
        if (head.has_content_length()) {
          res.set(http::field::content_length, head[http::field::content_length]);
        }
        res.set(kReplicaHeader, replicas.config(id).http.str());
        res.keep_alive(keep_alive);
        return write_head_only(client, res) ? Outcome::kDone : Outcome::kClientGone;
      }
      http::response<http::string_body> res(static_cast<http::status>(status), 11);
      copy_end_to_end(head, res, replicas.config(id).http.str());
      res.set(kReplicaHeader, replicas.config(id).http.str());
      res.keep_alive(keep_alive);
      res.body() = std::move(body);
      return write_response(client, res) ? Outcome::kDone : Outcome::kClientGone;
    }

    // A stream: the header goes to the client with the first body bytes, so an attempt
    // that fails before them can still move to another replica.
    size_t n = 0;
    while (n == 0 && !parser->is_done()) {
      if (!read_some(&n)) {
        return client_gone ? Outcome::kClientGone
                           : fail(id, "stream ended before its first event: " + ec.message());
      }
    }
    // HTTP/1.0 knows no chunked encoding (RFC 9112 7.1): its stream is the raw bytes, ended
    // by closing the connection.
    const bool chunked = req.version() >= 11;
    close_after = !chunked;
    auto write_body = [&](net::const_buffer data) {
      if (chunked) return write_chunk(client, data);
      net::write(client, data, ec);
      return !ec;
    };
    http::response<http::empty_body> res(static_cast<http::status>(status), 11);
    copy_end_to_end(head, res, replicas.config(id).http.str());
    res.set(http::field::cache_control, "no-cache");
    res.set(kReplicaHeader, replicas.config(id).http.str());
    res.keep_alive(keep_alive && chunked);
    res.chunked(chunked);
    http::response_serializer<http::empty_body> sr(res);
    http::write_header(client, sr, ec);
    if (ec) return Outcome::kClientGone;
    while (true) {
      if (n > 0 && !write_body(net::buffer(chunk, n))) return Outcome::kClientGone;
      if (parser->is_done()) break;
      if (!read_some(&n)) {
        if (client_gone) return Outcome::kClientGone;
        // The replica failed mid-stream: too late to retry; the client hears why.
        proxy->metrics_->num_stream_errors++;
        replicas.on_upstream_error(id, "stream cut off: " + ec.message());
        const std::string event =
            "data: " + error_body(502, "torchtpu router: the replica serving this stream (" +
                                           replicas.config(id).http.str() + ") failed mid-way (" +
                                           ec.message() + "); retry the request") +
            "\n\ndata: [DONE]\n\n";
        if (!write_body(net::buffer(event))) return Outcome::kClientGone;
        break;
      }
    }
    if (chunked) {
      net::write(client, http::make_chunk_last(), ec);
      if (ec) return Outcome::kClientGone;
    }
    if (parser->is_done() && parser->keep_alive()) proxy->release(id, std::move(upstream_socket));
    return Outcome::kDone;
  }

  Outcome fail(ReplicaId id, const std::string& why) {
    failure = proxy->replicas_->config(id).http.str() + ": " + why;
    proxy->replicas_->on_upstream_error(id, why);
    return Outcome::kRetry;
  }
};

void Proxy::serve_connection(tcp::socket& client_socket, std::atomic<int64_t>* idle_since) {
  boost::system::error_code ec;
  client_socket.set_option(tcp::no_delay(true), ec);
  client_socket.non_blocking(true, ec);
  TimedStream client(client_socket, config_.client_idle_timeout_ms);
  beast::flat_buffer buffer;
  while (true) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(static_cast<uint64_t>(config_.max_request_bytes));
    parser.header_limit(64 * 1024);
    // A request's first byte may come after the keep-alive idle time; from then on the
    // whole request, header and body, must arrive within request_read_timeout_ms, so a
    // client that sends a byte now and then holds its connection thread only that long.
    if (buffer.size() == 0) {
      if (idle_since != nullptr) idle_since->store(steady_ms());
      const bool ready = wait_ready(client.native_handle(), POLLIN,
                                    config_.client_idle_timeout_ms, std::nullopt, ec);
      if (idle_since != nullptr) idle_since->store(0);
      if (!ready) break;
    }
    client.set_deadline(Clock::now() + std::chrono::milliseconds(config_.request_read_timeout_ms));
    // The header first: a client that sent `Expect: 100-continue` waits for our word before
    // its body (RFC 9110 10.1.1); one whose Content-Length is over the limit hears 413 now.
    http::read_header(client, buffer, parser, ec);
    if (!ec && !parser.is_done()) {
      const auto expect = parser.get()[http::field::expect];
      if (beast::iequals(expect, "100-continue")) {
        net::write(client, net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")), ec);
        if (ec) break;
      } else if (!expect.empty()) {
        write_json(client, 417,
                   error_body(417, "unsupported Expect: '" + std::string(expect) +
                                       "' (only 100-continue is)"),
                   false);
        break;
      }
      http::read(client, buffer, parser, ec);
    }
    client.set_deadline(std::nullopt);
    if (ec == http::error::body_limit) {
      write_json(client, 413,
                 error_body(413, "the request body exceeds the router's limit of " +
                                     std::to_string(config_.max_request_bytes) + " bytes"),
                 false);
      break;
    }
    if (ec == http::error::header_limit) {
      write_json(client, 431, error_body(431, "the request header exceeds the router's limit "
                                              "of 65536 bytes"),
                 false);
      break;
    }
    if (ec == net::error::timed_out && parser.got_some()) {
      write_json(client, 408,
                 error_body(408, "the request did not arrive whole within " +
                                     std::to_string(config_.request_read_timeout_ms) +
                                     " ms of its first byte (--request-timeout)"),
                 false);
      break;
    }
    if (ec == http::error::end_of_stream || ec == net::error::connection_reset ||
        ec == net::error::eof || ec == net::error::would_block || ec == net::error::timed_out) {
      break;
    }
    if (ec) {
      write_json(client, 400, error_body(400, "malformed HTTP request: " + ec.message()), false);
      break;
    }
    const Clock::time_point read_at = Clock::now();
    Request req = parser.release();
    const bool keep_alive = req.keep_alive();
    metrics_->num_requests++;

    const bool head_request = req.method() == http::verb::head;
    const bool get_or_head = req.method() == http::verb::get || head_request;
    if (get_or_head && path_of(req.target()) == "/health") {
      const bool ok = replicas_->any_healthy();
      if (!write_json(client, ok ? 200 : 503,
                      ok ? "{}" : error_body(503, "torchtpu router: no healthy replica"),
                      keep_alive, "application/json", head_request)) {
        break;
      }
      if (!keep_alive) break;
      continue;
    }
    if (get_or_head && path_of(req.target()) == "/metrics") {
      if (!write_json(client, 200, metrics_->render(*replicas_), keep_alive,
                      "text/plain; version=0.0.4; charset=utf-8", head_request)) {
        break;
      }
      if (!keep_alive) break;
      continue;
    }

    std::optional<std::vector<serve::TokenId>> tokens;
    const bool routed = is_routed(req);
    if (routed && tokenizer_) {
      tokens = tokenizer_(std::string(path_of(req.target())), req.body());
      metrics_->tokenize_latency.observe(
          std::chrono::duration<double>(Clock::now() - read_at).count());
      if (!tokens) metrics_->num_tokenize_failed++;
    }
    const RouteDecision decision = replicas_->route(tokens ? &*tokens : nullptr, steady_ms());
    Exchange ex{this, client, req, keep_alive, read_at};
    Exchange::Outcome outcome = Exchange::Outcome::kRetry;
    int attempts = 0;
    for (const serve::RankedReplica& r : decision.ranked) {
      if (attempts == config_.max_attempts) break;
      if (attempts++ > 0) metrics_->num_retries++;
      if (routed) metrics_->num_routed++;
      replicas_->on_dispatch(r.replica, decision, r.matched_blocks, steady_ms());
      outcome = ex.attempt(r.replica);
      replicas_->on_done(r.replica);
      if (outcome != Exchange::Outcome::kRetry) break;
    }
    if (outcome == Exchange::Outcome::kDone) {
      metrics_->added_latency.observe(
          std::chrono::duration<double>((Clock::now() - read_at) -
                                        (ex.upstream_read_at - ex.written_at))
              .count());
    }
    if (outcome == Exchange::Outcome::kClientGone) {
      // Counted here, whichever way it showed: a hang-up while waiting on the replica, or
      // a write to the client that failed (a stream's usual way).
      metrics_->num_client_disconnects++;
      break;
    }
    if (outcome == Exchange::Outcome::kRetry) {
      metrics_->num_failed++;
      std::string body = ex.failure_body;
      if (body.empty()) {
        body = error_body(
            decision.ranked.empty() ? 503 : ex.failure_status,
            decision.ranked.empty()
                ? "torchtpu router: no healthy replica; retry once one is up"
                : "torchtpu router: no replica could serve this request (" +
                      std::to_string(attempts) + " tried; last: " + ex.failure + ")");
      }
      if (!write_json(client, decision.ranked.empty() ? 503 : ex.failure_status, body,
                      keep_alive, "application/json", head_request)) {
        break;
      }
    }
    if (!keep_alive || ex.close_after) break;
  }
  lingering_close(client);
}

}  // namespace torchtpu::router
