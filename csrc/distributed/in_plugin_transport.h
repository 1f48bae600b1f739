// InPluginTransport: the ranks of a group are threads of this process, each driving its
// own tpu device of the one PJRT client; every collective is one StableHLO program
// (lowering/collectives.h) compiled replicated over the ranks' devices (replica r on rank
// r's device), cached like every other executable (memory and disk tiers, keyed by the
// module text, which names op, dtype and shape, and by the device list, which names the
// group), and enqueued on all of them in one PJRT execution.
//
// The ranks meet in a Rendezvous (rendezvous.h) shared by every transport created with
// the same group key; the k-th call of each rank makes up the k-th collective. The last
// rank to arrive compares the programs (a mismatch fails on every rank with each rank's
// collective, dtype and shape), compiles and enqueues; every rank then writes its output
// into its tensor. Outputs are enqueued, not awaited (reading them waits); but a program is
// enqueued only once the collective program before it in this process (any group) has
// finished, since the CPU plugin can abort with several in flight (see the .cc).
//   - all_to_all with uneven splits: the ranks first exchange their splits, pad every
//     chunk to the largest split of the group (tpu ops on the rank's own device), run the
//     even all_to_all, and keep each received chunk's true rows.
//   - send/recv: a collective_permute over the two ranks' devices, met in a rendezvous of
//     that (source, destination, tag) pair; the receiver's tensor is its operand on the
//     receiving side.
//   - barrier: a pure rendezvous, then the wait for this rank's device queue.
// In place all_reduce donates the tensor's buffer to its program (the result takes its
// memory: no allocation, no copy) when every rank's buffer is held only by its tensor.
// Counters: num_in_plugin_collectives, in_plugin_collective_bytes (this rank's input),
// num_in_plugin_donations.
// Thread safety: collectives come from one thread at a time (its rank's, transport.h);
// send/recv from their (direction, peer, tag) queue's thread (backend.h), beside them.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "distributed/rendezvous.h"
#include "distributed/transport.h"

namespace torchtpu::distributed {

class InPluginTransport final : public Transport {
 public:
  // Joins group `group_key` (every rank passes the same key, e.g. the process group's
  // name) as `rank` of `size`, on tpu device `device_index`. `global_ranks` name the
  // ranks in messages (empty: the group ranks). `timeout` bounds each wait for peers.
  static base::StatusOr<std::unique_ptr<InPluginTransport>> create(
      const std::string& group_key, int rank, int size, int device_index,
      std::vector<int64_t> global_ranks, std::chrono::milliseconds timeout);
  ~InPluginTransport() override;

  TransportKind kind() const override { return TransportKind::kInPlugin; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device_index() const { return device_index_; }

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
  // Unimplemented: a send here meets its recv in a rendezvous of the two ranks it names.
  base::StatusOr<int> recv_any(at::Tensor& tensor, int tag) override;
  base::Status barrier() override;
  void set_timeout(std::chrono::milliseconds timeout) override {
    timeout_ms_.store(timeout.count());
  }

  // A whole program over the group (a compiled graph whose collectives span it): every rank
  // calls this as its next collective with its own `args` (on its device) and the same
  // module text; replica r runs on rank r's device. Returns this rank's results, enqueued.
  // Counted as num_replicated_graph_executions.
  base::StatusOr<std::vector<runtime::BufferPtr>> run_program(
      const std::string& module, const std::string& description,
      std::vector<runtime::BufferPtr> args);
  // Every rank's `meta`, in rank order; every rank calls this as its next collective.
  // `what` names the exchange in messages and must be the same on every rank.
  base::StatusOr<std::vector<std::vector<int64_t>>> exchange_meta(const std::string& what,
                                                                  std::vector<int64_t> meta);

 private:
  InPluginTransport(std::shared_ptr<Rendezvous> group, std::string group_key, int rank,
                    int size, int device_index, std::vector<int64_t> global_ranks,
                    std::chrono::milliseconds timeout);
  // Checks that `t` is a dense tensor on this rank's device.
  base::Status check_tensor(const char* collective, const char* what, const at::Tensor& t) const;
  // Runs `module` (one replica per rank, `args` this rank's operands) through `group`, in
  // which this rank is `rank`, and returns this rank's results.
  base::StatusOr<std::vector<runtime::BufferPtr>> run(Rendezvous& group, int rank, uint64_t seq,
                                                      const std::string& collective,
                                                      const std::string& module,
                                                      const std::string& description,
                                                      std::vector<runtime::BufferPtr> args,
                                                      Donor donor = {});
  // run() of a module with one result.
  base::StatusOr<runtime::BufferPtr> run_one(Rendezvous& group, int rank, uint64_t seq,
                                             const std::string& collective,
                                             const std::string& module,
                                             const std::string& description,
                                             std::vector<runtime::BufferPtr> args,
                                             Donor donor = {});
  base::Status point_to_point(at::Tensor& tensor, int peer, int tag, bool sending);
  base::Status even_all_to_all(at::Tensor& output, const at::Tensor& input);

  std::shared_ptr<Rendezvous> group_;
  const std::string group_key_;
  const int rank_;
  const int size_;
  const int device_index_;
  const std::vector<int64_t> global_ranks_;
  // Read by send/recv on their queues' threads while the rank's thread may set it.
  std::atomic<int64_t> timeout_ms_;
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load());
  }
  uint64_t next_seq_ = 0;
  // (source, destination, tag) -> the next message's number and its rendezvous.
  struct Channel {
    std::shared_ptr<Rendezvous> rendezvous;
    int local_rank = 0;
    uint64_t next_seq = 0;
  };
  std::mutex channels_mu_;
  std::map<std::tuple<int, int, int>, Channel> channels_;
};

}  // namespace torchtpu::distributed
