// TpuBackend: the c10d::Backend behind torch.distributed's "tpu" backend.
//
// It validates each collective's tpu tensors (device, layout, contiguity, dtypes, sizes;
// a ValueError on the calling thread otherwise) and maps the c10d API (lists, coalesced
// forms, gather/scatter, reduce) onto the Transport's few primitives. The transport of the
// group is chosen by Python when the group is created (python/torchtpu/distributed.py)
// and owned here.
//   - in-plugin: the collective runs on the calling thread (its program is enqueued on the
//     devices) and the returned TpuWork is complete.
//   - host-staged: the collective runs on the group's CollectiveQueue, in issue order, and
//     the returned TpuWork completes when its data is back on the device (or with its
//     error): the caller goes on meanwhile, so DDP's gradient buckets are exchanged while
//     the backward pass continues.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "distributed/arguments.h"
#include "distributed/collective_queue.h"
#include "distributed/transport.h"
#include "distributed/work.h"

namespace torchtpu::distributed {

class InPluginTransport;

class TpuBackend : public c10d::Backend {
 public:
  // The order of one tag's point-to-point recvs on a host-staged group (backend.cc).
  struct RecvOrder;

  // `store`: the group's own (the groups split out of it keep their keys under it).
  TpuBackend(std::unique_ptr<Transport> transport, std::vector<int64_t> global_ranks,
             std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store);
  // Cancels the queued collectives not yet started (their works fail). A collective still
  // running finishes on its own: the queue's thread is joined only when idle, since the
  // destructor may run with Python's lock held (a process group freed from Python) that
  // Gloo's flight recorder takes on that thread.
  ~TpuBackend() override;

  const std::string getBackendName() const override { return "tpu"; }
  TransportKind transport_kind() const { return transport_->kind(); }
  // Reaches the transport: every later wait for peers (collectives issued after this call)
  // is bounded by `timeout`.
  void setTimeout(std::chrono::milliseconds timeout) override;
  // The in-plugin transport, or null when the group stages through the host.
  InPluginTransport* in_plugin();

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Splitting (torch.distributed.split_group, and DeviceMesh under a default group bound
  // to a device): a new group of `ranks` (this group's ranks; sorted on its members) made
  // by the group factory the Python layer sets, as the backend's creator makes any group;
  // null on a rank outside `ranks`. Its keys live under this group's store and the split's
  // number (every rank of this group calls split, members or not, and in the same order,
  // as torch requires of split_group), not under the store given: that one is prefixed by
  // a name torch derives from how many groups each process made, which differs between
  // ranks after a split that left some of them out.
  using GroupFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
      const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
      const std::vector<int64_t>& global_ranks, std::chrono::milliseconds timeout)>;
  static void set_group_factory(GroupFactory factory);
  bool supportsSplitting() const override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // Sequence numbers are not tracked (each transport orders its own collectives).
  void setSequenceNumberForGroup() override {}

 private:
  // The transport calls of one c10d call, its tensors captured by value.
  using Body = std::function<base::Status(Transport&)>;
  // Runs `body` now or on the queue (`queue`, else the group's), then `dense`'s copies
  // back, and returns its Work over `outputs`.
  c10::intrusive_ptr<TpuWork> launch(c10d::OpType type, const char* title,
                                        std::vector<at::Tensor> outputs, DenseArgs dense,
                                        Body body, CollectiveQueue* queue = nullptr);
  void check_all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input);
  void check_all_gather_base(const at::Tensor& output, const at::Tensor& input);
  void check_reduce_scatter_base(const at::Tensor& output, const at::Tensor& input,
                                 const c10d::ReduceOp& op);
  // all_gather into a list of per-rank outputs, through one flat buffer.
  static base::Status all_gather_list(Transport& transport, std::vector<at::Tensor>& outputs,
                                      const at::Tensor& input);

  // Shared with the queue's tasks, which may outlive the backend (see ~TpuBackend).
  std::shared_ptr<Transport> transport_;
  std::vector<int64_t> global_ranks_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::atomic<int64_t> splits_{0};
  // Host-staged groups only: in-plugin collectives run on the calling thread. Point-to-point
  // operations of both transports have queues of their own, one per (direction, peer,
  // tag): a send waits until its peer receives (on the calling thread, a send on each rank
  // before their recvs waited for each other until the timeout), so on the group's queue
  // it held back the recv or collective its peer was waiting for (isend then irecv on both
  // ranks hung), and on one queue for all sends a send of tag 5 held back the send of tag 6
  // its peer received first. Within a key they stay in order, as they must: a message is
  // a header then its data, matched by Gloo per (peer, tag) in posting order. A recv from
  // any source has the key (any, tag); RecvOrder keeps it in posting order with its tag's
  // other recvs. A queue is handed out with a reference (its use count keeps it from being
  // ended before the task is enqueued); past kMaxP2pQueues, idle unreferenced queues end.
  std::shared_ptr<CollectiveQueue> p2p_queue(bool send, int peer, int tag);
  std::shared_ptr<RecvOrder> recv_order(int tag);
  void trim_p2p_locked();
  static constexpr size_t kMaxP2pQueues = 8;
  std::unique_ptr<CollectiveQueue> queue_;
  std::mutex p2p_mu_;
  std::map<std::tuple<bool, int, int>, std::shared_ptr<CollectiveQueue>> p2p_queues_;
  std::map<int, std::shared_ptr<RecvOrder>> recv_orders_;
};

}  // namespace torchtpu::distributed
