#include "distributed/tcp_exchange.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include "distributed/poll_wait.h"

namespace torchtpu::distributed {

namespace {

constexpr uint64_t kMessageMagic = 0x74707554637045ull;  // a TcpExchange message
constexpr uint32_t kHelloMagic = 0x74707548u;             // a connection's first word
constexpr int64_t kHeaderBytes = sizeof(TcpExchange::Header);
constexpr size_t kDrainBytes = size_t{1} << 20;

using Clock = std::chrono::steady_clock;

std::string errno_text() { return std::strerror(errno); }

// Milliseconds until `deadline`, rounded up, at least 0.
int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// A listening socket on this host's address (its host name's, else the loopback), and
// the address as peers reach it.
base::StatusOr<std::pair<int, std::string>> listen_here(int backlog) {
  std::vector<std::string> candidates;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(name, nullptr, &hints, &found) == 0) {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        char text[INET_ADDRSTRLEN] = {};
        auto* in = reinterpret_cast<sockaddr_in*>(a->ai_addr);
        if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text))) candidates.push_back(text);
      }
      freeaddrinfo(found);
    }
  }
  candidates.push_back("127.0.0.1");
  std::string tried;
  for (const std::string& host : candidates) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return base::unavailable("cannot create a socket: " + errno_text());
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 && ::listen(fd, backlog) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      return std::make_pair(fd, host + ":" + std::to_string(ntohs(a.sin_port)));
    }
    tried += (tried.empty() ? "" : ", ") + host + " (" + errno_text() + ")";
    ::close(fd);
  }
  return base::unavailable("cannot listen on any address of this host: " + tried);
}

// Reads or writes exactly `n` bytes of a blocking socket before `deadline`.
base::Status exactly(int fd, void* buf, size_t n, bool write, Clock::time_point deadline,
                     const std::string& peer) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    int r = ::poll(&pfd, 1, remaining_ms(deadline));
    if (r == 0) return base::unavailable(peer + " did not complete the connection within the timeout");
    if (r < 0 && errno == EINTR) continue;
    ssize_t k = write ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k == 0 && !write) return base::unavailable(peer + " closed its connection");
    if (k < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return base::unavailable("the connection with " + peer + " failed: " + errno_text());
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return base::Status::ok_status();
}

}  // namespace

TcpExchange::TcpExchange(c10::intrusive_ptr<c10d::Store> store, int rank,
                         std::vector<int64_t> global_ranks)
    : store_(std::move(store)),
      rank_(rank),
      global_ranks_(std::move(global_ranks)),
      fds_(global_ranks_.size(), -1) {}

TcpExchange::~TcpExchange() { close_all(); }

void TcpExchange::close_all() {
  for (int& fd : fds_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

base::Status TcpExchange::fail(std::string why) {
  broken_ = why;
  close_all();
  return base::unavailable(std::move(why));
}

base::Status TcpExchange::connect(Clock::time_point deadline) {
  auto peer = [&](int r) { return "global rank " + std::to_string(global_ranks_[r]); };
  if (store_ == nullptr) return fail("the group has no store to exchange addresses through");
  auto listening = listen_here(size());
  if (!listening.ok()) return fail(listening.status().message());
  int lfd = listening->first;
  struct CloseOnExit {
    int fd;
    ~CloseOnExit() { ::close(fd); }
  } closer{lfd};
  // The group's store is its making's own (the creator keys each making of a group apart,
  // python/torchtpu/distributed.py), so no address a group made earlier left is read.
  auto key = [](int r) { return "torchtpu_tcp/" + std::to_string(r); };
  try {
    const std::string& me = listening->second;
    store_->set(key(rank_), std::vector<uint8_t>(me.begin(), me.end()));
  } catch (const std::exception& e) {
    return fail(std::string("the group's store refused this rank's address: ") + e.what());
  }
  // Connect to every lower rank (its listening socket takes the connection even before it
  // accepts), then accept every higher one.
  for (int r = 0; r < rank_; ++r) {
    std::string where;
    try {
      store_->wait({key(r)}, std::chrono::milliseconds(std::max(1, remaining_ms(deadline))));
      std::vector<uint8_t> v = store_->get(key(r));
      where.assign(v.begin(), v.end());
    } catch (const std::exception&) {
      return fail(peer(r) + " did not publish its address within the timeout");
    }
    size_t colon = where.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    if (colon == std::string::npos ||
        inet_pton(AF_INET, where.substr(0, colon).c_str(), &a.sin_addr) != 1) {
      return fail(peer(r) + " published '" + where + "', which is no address");
    }
    a.sin_port = htons(static_cast<uint16_t>(std::stoi(where.substr(colon + 1))));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      std::string why = errno_text();
      if (fd >= 0) ::close(fd);
      return fail("cannot connect to " + peer(r) + " at " + where + ": " + why);
    }
    fds_[r] = fd;
    uint32_t hello[2] = {kHelloMagic, static_cast<uint32_t>(rank_)};
    TORCHTPU_RETURN_IF_ERROR(exactly(fd, hello, sizeof(hello), true, deadline, peer(r)));
  }
  for (int accepted = rank_ + 1; accepted < size(); ++accepted) {
    pollfd pfd{lfd, POLLIN, 0};
    int ready = ::poll(&pfd, 1, remaining_ms(deadline));
    if (ready < 0 && errno == EINTR) {
      --accepted;
      continue;
    }
    if (ready <= 0) {
      std::ostringstream o;
      o << "global ranks [";
      bool first = true;
      for (int r = rank_ + 1; r < size(); ++r) {
        if (fds_[r] < 0) o << (first ? "" : ", ") << global_ranks_[r], first = false;
      }
      o << "] did not connect to this rank within the timeout";
      return fail(o.str());
    }
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return fail("accepting a peer's connection failed: " + errno_text());
    uint32_t hello[2] = {0, 0};
    base::Status s = exactly(fd, hello, sizeof(hello), false, deadline, "a connecting peer");
    if (!s.ok()) {
      ::close(fd);
      return fail(s.message());
    }
    int r = static_cast<int>(hello[1]);
    if (hello[0] != kHelloMagic || r <= rank_ || r >= size() || fds_[r] >= 0) {
      ::close(fd);
      return fail("a connection to this rank's port did not come from a higher rank of the group");
    }
    fds_[r] = fd;
  }
  int one = 1;
  for (int fd : fds_) {
    if (fd < 0) continue;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  connected_ = true;
  return base::Status::ok_status();
}

base::Status TcpExchange::step(uint64_t seq, const std::vector<int64_t>& signature,
                               const std::vector<Send>& sends, const std::vector<Recv>& recvs,
                               std::chrono::milliseconds timeout,
                               std::vector<Received>* received,
                               const std::function<void(int64_t)>& landed) {
  const int n = size();
  received->assign(n, Received{});
  if (n == 1) return base::Status::ok_status();
  if (!broken_.empty()) {
    return base::unavailable("an earlier collective of this group failed (" + broken_ +
                             "), so its connections are closed");
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  if (!connected_) TORCHTPU_RETURN_IF_ERROR(connect(deadline));
  auto peer = [&](int r) { return "global rank " + std::to_string(global_ranks_[r]); };

  struct Out {
    Header h;
    int64_t off = 0;
    bool done = false;
  };
  struct In {
    int64_t hoff = 0;
    int64_t got = 0;
    bool done = false;
  };
  std::vector<Out> outs(n);
  std::vector<In> ins(n);
  int pending = 0;
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    Header& h = outs[p].h;
    h.magic = kMessageMagic;
    h.seq = seq;
    h.bytes = sends[p].bytes;
    std::copy_n(signature.begin(), kSignatureLength, h.signature);
    pending += 2;
  }
  if (drain_.empty()) drain_.resize(kDrainBytes);

  // Moves peer p's message in both directions as far as the socket allows.
  auto progress = [&](int p) -> base::Status {
    int fd = fds_[p];
    Out& o = outs[p];
    const int64_t total = kHeaderBytes + sends[p].bytes;
    while (!o.done) {
      iovec iov[2];
      int cnt = 0;
      const char* data = static_cast<const char*>(sends[p].data);
      if (o.off < kHeaderBytes) {
        iov[cnt++] = {reinterpret_cast<char*>(&o.h) + o.off, static_cast<size_t>(kHeaderBytes - o.off)};
        if (sends[p].bytes > 0) iov[cnt++] = {const_cast<char*>(data), static_cast<size_t>(sends[p].bytes)};
      } else {
        iov[cnt++] = {const_cast<char*>(data) + (o.off - kHeaderBytes), static_cast<size_t>(total - o.off)};
      }
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = cnt;
      ssize_t k = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return fail("sending to " + peer(p) + " failed (" + errno_text() + ")");
      }
      o.off += k;
      if (o.off == total) o.done = true, --pending;
    }
    In& in = ins[p];
    Header& h = (*received)[p].header;
    while (!in.done) {
      char* dst;
      size_t want;
      bool header = in.hoff < kHeaderBytes;
      if (header) {
        dst = reinterpret_cast<char*>(&h) + in.hoff;
        want = static_cast<size_t>(kHeaderBytes - in.hoff);
      } else if ((*received)[p].landed) {
        dst = static_cast<char*>(recvs[p].data) + in.got;
        want = static_cast<size_t>(h.bytes - in.got);
      } else {
        dst = drain_.data();
        want = static_cast<size_t>(std::min<int64_t>(h.bytes - in.got, drain_.size()));
      }
      ssize_t k = want == 0 ? 0 : ::recv(fd, dst, want, MSG_DONTWAIT);
      if (want > 0 && k == 0) {
        return fail(peer(p) + " closed its connection (its process exited?)");
      }
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return fail("receiving from " + peer(p) + " failed (" + errno_text() + ")");
      }
      if (header) {
        in.hoff += k;
        if (in.hoff < kHeaderBytes) continue;
        if (h.magic != kMessageMagic || h.bytes < 0) {
          return fail(peer(p) + " sent something other than a collective's message");
        }
        (*received)[p].landed = h.bytes == recvs[p].bytes;
      } else {
        in.got += k;
      }
      if (in.got == h.bytes) in.done = true, --pending;
    }
    return base::Status::ok_status();
  };

  // The bytes landed from every peer so far, and the count `landed` last saw.
  int64_t reported = 0;
  auto report = [&] {
    if (!landed) return;
    int64_t least = -1, expected = -1;
    for (int p = 0; p < n; ++p) {
      if (p == rank_) continue;
      const bool header = ins[p].hoff == kHeaderBytes;
      if (!header || !(*received)[p].landed) return;
      least = least < 0 ? ins[p].got : std::min(least, ins[p].got);
      expected = expected < 0 ? recvs[p].bytes : std::min(expected, recvs[p].bytes);
    }
    if (least > reported && (least - reported >= kLandedStepBytes || least == expected)) {
      reported = least;
      landed(least);
    }
  };

  std::vector<pollfd> pfds;
  std::vector<int> who;
  while (true) {
    for (int p = 0; p < n; ++p) {
      if (p != rank_ && (!outs[p].done || !ins[p].done)) TORCHTPU_RETURN_IF_ERROR(progress(p));
    }
    report();
    if (pending == 0) return base::Status::ok_status();
    pfds.clear();
    who.clear();
    for (int p = 0; p < n; ++p) {
      if (p == rank_ || (outs[p].done && ins[p].done)) continue;
      short events = static_cast<short>((outs[p].done ? 0 : POLLOUT) | (ins[p].done ? 0 : POLLIN));
      pfds.push_back({fds_[p], events, 0});
      who.push_back(p);
    }
    auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
    bool ready = left.count() > 0 &&
                 poll_until([&] { return ::poll(pfds.data(), pfds.size(), 0) != 0; }, left);
    if (!ready) {
      int r = ::poll(pfds.data(), pfds.size(), remaining_ms(deadline));
      if (r < 0 && errno != EINTR) return fail(std::string("poll failed: ") + errno_text());
      if (r == 0 && Clock::now() >= deadline) {
        std::ostringstream o;
        o << "global ranks [";
        for (size_t i = 0; i < who.size(); ++i) o << (i ? ", " : "") << global_ranks_[who[i]];
        o << "] did not complete their part of the exchange within the timeout";
        return fail(o.str());
      }
    }
  }
}

}  // namespace torchtpu::distributed
