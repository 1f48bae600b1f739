#include "distributed/work.h"

#include <ATen/core/ivalue.h>

#include "distributed/poll_wait.h"

namespace torchtpu::distributed {

TpuWork::TpuWork(int rank, c10d::OpType op_type, const char* profiling_title,
                 std::vector<at::Tensor> outputs, bool completed)
    : c10d::Work(rank, op_type, profiling_title), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()));
  result_future_ = c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get());
  if (completed) complete(nullptr);
}

void TpuWork::complete(std::exception_ptr error) {
  // The Work first, so a wait() woken by a future callback sees it finished.
  finish(error);
  if (error) {
    result_future_->markCompleted(
        c10::IValue(static_cast<int64_t>(c10d::WorkResult::COMM_ERROR)));
    future_->setError(error);
  } else {
    result_future_->markCompleted(c10::IValue(static_cast<int64_t>(c10d::WorkResult::SUCCESS)));
    future_->markCompleted(c10::IValue(outputs_));
  }
}

bool TpuWork::wait(std::chrono::milliseconds timeout) {
  // Polling never outlasts a caller's timeout (kNoTimeout: none).
  auto limit = timeout == kNoTimeout ? std::chrono::microseconds::max()
                                     : std::chrono::microseconds(timeout);
  if (!isCompleted()) poll_until([this] { return isCompleted(); }, limit);
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> TpuWork::getFutureResult() { return result_future_; }

int TpuWork::sourceRank() const {
  return source_ != nullptr ? source_->load() : c10d::Work::sourceRank();
}

}  // namespace torchtpu::distributed
