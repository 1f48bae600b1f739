// TpuWork: the c10d::Work of one tpu collective.
//
// In-plugin collectives run on the calling thread (the transport returns once the outputs
// are enqueued on their device queue, which orders every later read), so their TpuWork is
// complete when it is created. Host-staged collectives run on their group's
// CollectiveQueue: their TpuWork is pending until the queue calls complete(), which
// finishes the Work (wait() returns, or rethrows the collective's error) and completes
// its future with the outputs, or with the error.
//
// The future holds the output tensors, as DDP's reducer and the comm hooks require. It is
// created without devices: a tpu device has one in-order queue (every stream is that
// queue), so a read of an output is ordered after the collective's writes, and c10's
// per-device bookkeeping would only enqueue an event marker (a program execution).
// Thread safety: complete() once, from any thread; the rest as c10d::Work.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <exception>
#include <memory>
#include <vector>

namespace torchtpu::distributed {

class TpuWork : public c10d::Work {
 public:
  // `completed`: the collective already ran (successfully); otherwise complete() ends it.
  TpuWork(int rank, c10d::OpType op_type, const char* profiling_title,
          std::vector<at::Tensor> outputs, bool completed);

  // Ends a pending work: `error` null for success.
  void complete(std::exception_ptr error);

  // Polls briefly before sleeping (poll_wait.h), then waits as every Work does.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;

  std::vector<at::Tensor> result() override { return outputs_; }
  // A recv from any source: where the sender's rank is set once the recv has run.
  void set_source(std::shared_ptr<const std::atomic<int>> source) { source_ = std::move(source); }
  int sourceRank() const override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFutureResult() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  c10::intrusive_ptr<c10::ivalue::Future> result_future_;
  std::shared_ptr<const std::atomic<int>> source_;
};

}  // namespace torchtpu::distributed
