// Transport: how the data of one collective travels between the ranks of a group.
//
// The tpu c10d backend (backend.{h,cc}) validates a collective's arguments, picks the
// transport of its group and wraps each call in a c10d::Work; a transport only moves and
// reduces data. Two implementations:
//   - in-plugin (in_plugin_transport): every rank of the group is a thread of this process
//     driving its own device of the one PJRT client; a collective is one StableHLO program
//     over those devices, compiled by the plugin and cached like every other executable.
//   - host-staged (host_staged_transport): ranks in other processes on a plugin without a
//     cross-process transport (the XLA CPU plugin); data goes to host memory and through
//     PyTorch's Gloo backend, created from the same store. Counted in the metrics.
//
// Contract. Each call is one rank's part of a collective that every rank of the group
// makes in the same order. It receives this rank's tpu tensors (dense, contiguous, on the
// rank's device) and returns once the outputs are written or enqueued on the device queue
// in program order (reading them waits, as for any tpu tensor). A mismatch between ranks
// (shape, dtype, op) returns kInvalidArgument on every rank, naming the collective, the
// ranks and the shapes; a peer that does not arrive within the group's timeout returns
// kUnavailable naming the missing ranks. A transport's collectives come from one thread
// (its rank's) at a time; its send/recv from their own queues' threads (backend.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

#include "base/status.h"

namespace torchtpu::distributed {

enum class TransportKind { kInPlugin, kHostStaged };

class Transport {
 public:
  virtual ~Transport() = default;

  virtual TransportKind kind() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the reduction of all ranks' `tensor`. PREMUL_SUM
  // carries its factor in `op` (a double or a 0-dim tensor), applied before the sum.
  virtual base::Status all_reduce(at::Tensor& tensor, const c10d::ReduceOp& op) = 0;
  // `output` has size() * input.numel() elements; rank r's input lands at [r*n, (r+1)*n).
  virtual base::Status all_gather(at::Tensor& output, const at::Tensor& input) = 0;
  // `input` has size() * output.numel() elements; rank r gets the reduction of chunk r.
  virtual base::Status reduce_scatter(at::Tensor& output, const at::Tensor& input,
                                      const c10d::ReduceOp& op) = 0;
  // Splits count rows of dim 0 per peer; empty splits mean equal parts.
  virtual base::Status all_to_all(at::Tensor& output, const at::Tensor& input,
                                  const std::vector<int64_t>& output_split_sizes,
                                  const std::vector<int64_t>& input_split_sizes) = 0;
  // In place: every rank ends with `root`'s tensor (root is a rank of this group).
  virtual base::Status broadcast(at::Tensor& tensor, int root) = 0;
  virtual base::Status send(const at::Tensor& tensor, int dst, int tag) = 0;
  virtual base::Status recv(at::Tensor& tensor, int src, int tag) = 0;
  // A recv from whichever rank's send with `tag` comes first; returns that rank.
  virtual base::StatusOr<int> recv_any(at::Tensor& tensor, int tag) = 0;
  virtual base::Status barrier() = 0;
  // Bounds every later wait for peers (c10d's setTimeout).
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
};

}  // namespace torchtpu::distributed
