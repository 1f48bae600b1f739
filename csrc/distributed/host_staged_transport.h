// HostStagedTransport: collectives between ranks the plugin cannot connect (processes on
// the XLA CPU plugin). Each call copies this rank's tpu data to host memory, runs the
// same collective through PyTorch's Gloo backend (created by Python from the group's
// store and handed in as a c10d::Backend: the torch wheel ships no Gloo headers), and
// hands the result to the device without a copy: it is received into a HostPool chunk
// that the new device buffer aliases (an all_reduce reduces in place in the chunk its data
// was copied into, so it costs one copy). Every call counts `num_host_staged_collectives`
// and the bytes it moves between device and host in `host_staged_bytes`.
//
// Before moving data, every collective exchanges the ranks' signatures (signature.h) in a
// Gloo all_gather, so mismatched shapes, dtypes or ops raise on every rank instead of
// hanging. Where the data fits the exchange's agreed payload room (see inline_capacity_)
// it travels in the same all_gather and is reduced or gathered on the host; otherwise the
// exchange runs while the data is copied to the host, and Gloo's collective follows.
// TORCHTPU_DIST_CHECK=0 turns it off. Waits for Gloo poll before they sleep (poll_wait.h).
// A Gloo error (a peer that exited, a timeout) returns kUnavailable naming the collective
// and the group's ranks, and the ranks that did not reach it where the store can tell: a rank whose collective
// fails marks that in the group's store (key "torchtpu_failed/<collective number>/<rank>")
// and waits a little (half the timeout, at most 5 s) for the others' marks; a peer that
// exited or is busy elsewhere leaves none. Only failures touch the store.
//
// Thread safety: one thread at a time (the group's CollectiveQueue).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>
#include <string>

#include "distributed/host_pool.h"
#include "distributed/signature.h"
#include "distributed/transport.h"

namespace torchtpu::distributed {

class HostStagedTransport : public Transport {
 public:
  // `store`: the group's store (may be null: missing ranks are then not named).
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
  base::Status barrier() override;
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

 private:
  // Runs one Gloo operation and waits for it; a Gloo exception becomes kUnavailable (which
  // names the missing ranks of a `collective`, not of a send or recv). start() and
  // finish() are its two halves.
  base::Status run(const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& op,
                   bool collective = true);
  base::StatusOr<c10::intrusive_ptr<c10d::Work>> start(
      const char* what, const std::function<c10::intrusive_ptr<c10d::Work>()>& op,
      bool collective = true);
  base::Status finish(const char* what, const c10::intrusive_ptr<c10d::Work>& work,
                      bool collective = true);
  std::string failure(const char* what, const std::exception& e, bool collective);
  // After a failure of collective number seq_: the global ranks that did not report
  // reaching it, as a clause of the error message (empty when the store cannot tell).
  std::string missing_ranks();
  // The signature exchange, in two halves (the data is copied to the host in between when
  // it does not travel with it). Each rank all_gathers a fixed-size block: its header
  // (the signature) and room for inline_capacity_ bytes of payload. A
  // collective whose payload fits (fits()) writes it there first (outgoing_payload()) and
  // needs no second exchange: the signature check then costs no round trip of its own.
  struct Exchange {
    const char* what = "";
    c10::intrusive_ptr<c10d::Work> work;  // null when checks are off
    bool carried = false;                 // the payloads travelled with the headers
    at::Tensor all;                       // uint8 [size * block], rank r's block at r * block
    int64_t block = 0;
    // Rank r's payload, as a tensor shaped like `like`.
    at::Tensor payload(int r, const at::Tensor& like) const;
  };
  bool fits(int64_t payload_bytes) const;
  at::Tensor header_slot();
  // Where this rank's payload goes before start_exchange(..., carried=true).
  at::Tensor outgoing_payload(const at::Tensor& like);
  base::StatusOr<Exchange> start_exchange(const CollectiveSignature& s, bool carried);
  base::Status finish_exchange(const Exchange& x);
  base::Status check(const CollectiveSignature& s);
  // A host tensor shaped like `like` in a pool chunk, to receive a result into.
  at::Tensor receiving(const at::Tensor& like);
  // `t` copied to the host: into the reused send slot (Gloo only reads it), or into a pool
  // chunk when it will also hold the result (`as_result`).
  at::Tensor to_host(const at::Tensor& t, bool as_result = false);
  // Copies tpu tensor `t` into `host` (a contiguous CPU tensor of its shape and dtype).
  void copy_to_host(const at::Tensor& t, at::Tensor& host);
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
  at::Tensor send_slot_;  // uint8, grown on demand
  // The payload room of every rank's exchange block: fixed for the group (no failure or
  // sequence of sizes can make ranks disagree on the block they all_gather), 64 KB for two
  // ranks and less in larger groups (payload_room() in the .cc): a rank receives at most
  // 64 KB of payload per check, which costs Gloo's all_gather about what a bare header
  // does, while every collective that fits saves a second Gloo round trip.
  const int64_t inline_capacity_;
  at::Tensor header_slot_;    // uint8: this rank's header and payload
  at::Tensor gathered_slot_;  // uint8: every rank's
  std::shared_ptr<HostPool> pool_;
};

}  // namespace torchtpu::distributed
