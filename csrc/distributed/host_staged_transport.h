// HostStagedTransport: collectives between ranks the plugin cannot connect (processes on
// the XLA CPU plugin). Each call brings this rank's tpu data to host memory (where device
// memory is host memory, a tensor that is its whole buffer is sent from that memory
// itself), exchanges it over the group's own TCP connections (tcp_exchange.h), reduces on
// the host where the collective reduces (host_reduce.h, in rank order, so every rank gets
// the same bits; each peer's contribution as it lands), and hands the result to the
// device without a copy: it is received or reduced into a HostPool chunk that the new
// device buffer aliases. Every call counts
// `num_host_staged_collectives` and the bytes it moves between device and host in
// `host_staged_bytes`.
//
// Every collective is one or two exchange steps; the first carries each rank's signature
// (signature.h) in the header of the message that carries its data, so mismatched shapes,
// dtypes, ops or collectives raise on every rank (each rank receives every rank's
// signature) without a round trip of their own; a payload of an unexpected length is
// dropped by its header's length, so the group stays in step. all_reduce: a payload of at
// most kDirectBytes received per rank goes whole to every peer and each rank reduces it
// all (one step); a larger one is reduce-scattered (rank r reduces part r of every rank's
// data) and the reduced parts all-gathered (two steps, each rank sending 2(n-1)/n of its
// data). TORCHTPU_DIST_CHECK=0 skips the comparison of signatures (a payload of an
// unexpected length still raises, on the ranks that receive one).
//
// send/recv run through PyTorch's Gloo backend (created by Python from the group's store
// and handed in as a c10d::Backend: the torch wheel ships no Gloo headers); a send carries
// its signature ahead of its data.
//
// A failure (a peer that exited, a timeout) returns kUnavailable naming the collective and
// the group's ranks, and the ranks that did not reach it where the store can tell: a rank
// whose collective fails marks that in the group's store (key
// "torchtpu_failed/<collective number>/<rank>") and waits a little (half the timeout, at
// most 5 s) for the others' marks; a peer that exited or is busy elsewhere leaves none.
// Only the first failure waits: the group's later collectives fail at once.
// Only failures touch the store (besides the connections' addresses, once).
//
// Thread safety: collectives one at a time (the group's CollectiveQueue); send, recv and
// recv_any concurrently with them and with each other (the backend's point-to-point
// queues, one per peer and tag).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <utility>
#include <string>

#include "distributed/host_pool.h"
#include "runtime/buffer.h"
#include "distributed/signature.h"
#include "distributed/tcp_exchange.h"
#include "distributed/transport.h"

namespace torchtpu::distributed {

class HostStagedTransport : public Transport {
 public:
  // `store`: the group's store (the TCP connections' addresses travel through it; it
  // names the ranks missing from a failed collective).
  HostStagedTransport(c10::intrusive_ptr<c10d::Backend> gloo, c10::intrusive_ptr<c10d::Store> store,
                      std::vector<int64_t> global_ranks, std::chrono::milliseconds timeout);

  TransportKind kind() const override { return TransportKind::kHostStaged; }
  int rank() const override { return gloo_->getRank(); }
  int size() const override { return gloo_->getSize(); }

  base::Status all_reduce(at::Tensor& tensor, const c10d::ReduceOp& op) override;
  base::Status all_gather(at::Tensor& output, const at::Tensor& input) override;
  base::Status reduce_scatter(at::Tensor& output, const at::Tensor& input,
                              const c10d::ReduceOp& op) override;
  base::Status all_to_all(at::Tensor& output, const at::Tensor& input,
                          const std::vector<int64_t>& output_split_sizes,
                          const std::vector<int64_t>& input_split_sizes) override;
  base::Status broadcast(at::Tensor& tensor, int root) override;
  base::Status send(const at::Tensor& tensor, int dst, int tag) override;
  base::Status recv(at::Tensor& tensor, int src, int tag) override;
  base::StatusOr<int> recv_any(at::Tensor& tensor, int tag) override;
  base::Status barrier() override;
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

 private:
  // Runs one Gloo operation (send or recv) and waits for it; a Gloo exception becomes
  // kUnavailable.
  base::Status run(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& op);
  // recv (from `from`, or from any rank) into `tensor`; returns the sender.
  base::StatusOr<int> receive(at::Tensor& tensor, std::optional<int> from, int tag);
  // The kUnavailable message of a failed collective (collective: named with its number,
  // and with the ranks that did not reach it when `ask_store`) or send/recv.
  std::string failure(const char* what, const std::string& why, bool collective,
                      bool ask_store = true);
  // After a failure of collective number seq_: the global ranks that did not report
  // reaching it, as a clause of the error message (empty when the store cannot tell).
  std::string missing_ranks();
  // One exchange step of collective seq_ (sends/recvs by group rank). The first step
  // (`first`) is checked: signatures (unless TORCHTPU_DIST_CHECK=0), collective numbers,
  // payload lengths; later steps' sizes follow from signatures the first found equal.
  // `landed`: as TcpExchange::step's.
  base::Status step(const CollectiveSignature& s, const std::vector<TcpExchange::Send>& sends,
                    const std::vector<TcpExchange::Recv>& recvs, bool first,
                    const std::function<void(int64_t)>& landed = nullptr);
  // One step in which every peer sends its contribution to `out` (this rank's part of a
  // reduction; `own` is this rank's contribution), reduced into `out` in rank order as it
  // lands.
  base::Status reduce_step(const CollectiveSignature& s, const std::vector<TcpExchange::Send>& sends,
                           at::Tensor& out, const at::Tensor& own, const c10d::ReduceOp& op);
  // Where peer r's part of a reduction lands: for two ranks `out` itself (reduce_parts
  // reads it as the peer's part), else row r of a scratch buffer.
  at::Tensor part_slot(int r, const at::Tensor& out);
  // A host tensor shaped like `like` in a pool chunk, to receive a result into.
  at::Tensor receiving(const at::Tensor& like);
  // `t` copied to the host, into the reused send slot.
  at::Tensor to_host(const at::Tensor& t);
  // Copies tpu tensor `t` into `host` (a contiguous CPU tensor of its shape and dtype).
  void copy_to_host(const at::Tensor& t, at::Tensor& host);
  // `t`'s data on the host, read-only: where device memory is host memory and `t` is its
  // whole buffer, that memory itself (the view holds the buffer); else a copy (to_host).
  at::Tensor host_view(const at::Tensor& t);
  // The host address of `t`'s buffer, once ready, and the buffer, where device memory is
  // host memory and `t` is its whole buffer.
  std::optional<std::pair<const void*, runtime::BufferPtr>> host_memory_of(const at::Tensor& t);
  // `host` (a pool chunk shaped like dst) becomes dst's value, without a copy.
  base::Status to_device(at::Tensor& dst, const at::Tensor& host);
  std::string ranks_text() const;

  c10::intrusive_ptr<c10d::Backend> gloo_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<int64_t> global_ranks_;
  uint64_t seq_ = 0;  // collectives of this group so far (each rank counts the same)
  std::chrono::milliseconds timeout_;
  bool check_signatures_;
  bool host_memory_;  // the plugin's device memory is host memory (the CPU plugin)
  at::Tensor send_slot_;     // uint8, grown on demand
  at::Tensor scratch_slot_;  // uint8: peers' parts of a reduction (groups of 3 or more)
  TcpExchange exchange_;
  std::shared_ptr<HostPool> pool_;
};

}  // namespace torchtpu::distributed
