// TpuWork: the c10d::Work of one tpu collective.
//
// The backend runs a collective on the calling thread (the transport returns once the
// outputs are written or enqueued on their device queue, which orders every later read),
// so a TpuWork is complete when it is created. Its future holds the output tensors, as
// DDP's reducer and the comm hooks require. The future is created without devices: a tpu
// device has one in-order queue (every stream is that queue), so a read of an output is
// already ordered after the collective, and c10's per-device bookkeeping would only
// enqueue an event marker (a program execution) per collective.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <vector>

namespace torchtpu::distributed {

class TpuWork : public c10d::Work {
 public:
  TpuWork(int rank, c10d::OpType op_type, const char* profiling_title,
          std::vector<at::Tensor> outputs);

  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torchtpu::distributed
