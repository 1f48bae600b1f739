// TcpExchange: the sockets between the ranks of one host-staged group, and the step every
// host-staged collective is made of.
//
// One TCP connection per pair of ranks (a full mesh), made at the group's first collective:
// each rank listens on an ephemeral port of this host's address (its host name's, else the
// loopback), publishes "address:port" under "torchtpu_tcp/<rank>" in the group's store,
// connects to every lower rank and accepts every higher one (a connection opens with the
// connecting rank's number).
//
// A step sends one message to every peer and receives one from every peer, all at once
// (non-blocking sockets under poll(), so two ranks sending large payloads to each other
// never wait on each other's buffers). A message is a fixed header (the collective's
// number in the group, the sender's encoded signature (signature.h), the payload's length)
// followed by the payload. A payload of the length the receiver expects lands where it
// says; any other is read and dropped by the header's length, so the streams stay in step
// and the caller can refuse the collective (a size mismatch is an error, never an abort).
// Waits poll before they sleep (poll_wait.h).
//
// Failures: a peer that closes its connection, sends something other than a message, or
// does not complete its message within the timeout fails the step (the message names the
// peers); the streams may then be out of step, so every later step fails at once, naming
// the first failure.
//
// Thread safety: one thread at a time (the group's CollectiveQueue).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "distributed/signature.h"

namespace torchtpu::distributed {

class TcpExchange {
 public:
  struct Header {
    uint64_t magic = 0;
    uint64_t seq = 0;         // the collective's number in the group
    int64_t bytes = 0;        // the payload's length
    int64_t signature[kSignatureLength] = {};
  };
  // What this rank sends to one peer, and where that peer's payload goes (`bytes`: the
  // length this rank expects). Entries of this rank are not used.
  struct Send {
    const void* data = nullptr;
    int64_t bytes = 0;
  };
  struct Recv {
    void* data = nullptr;
    int64_t bytes = 0;
  };
  // A peer's message: its header, and whether its payload had the expected length (and
  // was written to Recv::data).
  struct Received {
    Header header;
    bool landed = false;
  };

  // `store`: the group's; `global_ranks` name the peers in messages.
  TcpExchange(c10::intrusive_ptr<c10d::Store> store, int rank, std::vector<int64_t> global_ranks);
  ~TcpExchange();
  TcpExchange(const TcpExchange&) = delete;
  TcpExchange& operator=(const TcpExchange&) = delete;

  // One step of collective `seq`: OK with every peer's message in `received` (indexed by
  // group rank), or kUnavailable whose message says what failed (no more than the facts
  // about the peers: the caller names the collective). `landed`, when given, is called
  // during the step with a growing byte count: every peer's payload has landed (has the
  // expected length and is written) up to at least that many bytes, so the caller can
  // work on them while the rest arrives (it is called at least kLandedStepBytes apart, and
  // once more when every payload has landed).
  static constexpr int64_t kLandedStepBytes = int64_t{256} << 10;
  base::Status step(uint64_t seq, const std::vector<int64_t>& signature,
                    const std::vector<Send>& sends, const std::vector<Recv>& recvs,
                    std::chrono::milliseconds timeout, std::vector<Received>* received,
                    const std::function<void(int64_t)>& landed = nullptr);
  // Whether an earlier step failed (every step now fails at once).
  bool broken() const { return !broken_.empty(); }

 private:
  int size() const { return static_cast<int>(global_ranks_.size()); }
  base::Status connect(std::chrono::steady_clock::time_point deadline);
  base::Status fail(std::string why);
  void close_all();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  std::vector<int64_t> global_ranks_;
  std::vector<int> fds_;  // by group rank; -1 for this rank
  bool connected_ = false;
  std::string broken_;          // the first failure; non-empty: every step fails
  std::vector<char> drain_;     // where payloads of an unexpected length are read to
};

}  // namespace torchtpu::distributed
