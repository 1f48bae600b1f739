#include "distributed/work.h"

#include <ATen/core/ivalue.h>

namespace torchtpu::distributed {


TpuWork::TpuWork(int rank, c10d::OpType op_type, const char* profiling_title,
                 std::vector<at::Tensor> outputs)
    : c10d::Work(rank, op_type, profiling_title), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()));
  future_->markCompleted(c10::IValue(outputs_));
  finish();
}

bool TpuWork::wait(std::chrono::milliseconds /*timeout*/) {
  // The outputs are on their device queue; ops on them are ordered after the collective.
  future_->wait();
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> TpuWork::getFutureResult() {
  auto f = c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get());
  f->markCompleted(c10::IValue(static_cast<int64_t>(c10d::WorkResult::SUCCESS)));
  return f;
}

}  // namespace torchtpu::distributed
