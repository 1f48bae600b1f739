#include "runtime/device_queue.h"

#include <mutex>
#include <vector>

namespace torchtpu::runtime {
namespace {

struct Tails {
  std::mutex mu;
  std::vector<std::weak_ptr<Buffer>> last;  // by device index
  std::vector<std::weak_ptr<Buffer>> last_replicated;
};

Tails& tails() {
  static auto* t = new Tails();  // buffers may be created during static destruction
  return *t;
}

std::weak_ptr<Buffer>& slot(std::vector<std::weak_ptr<Buffer>>& v, int device_index) {
  if (static_cast<size_t>(device_index) >= v.size()) v.resize(device_index + 1);
  return v[device_index];
}

BufferPtr lookup(const std::vector<std::weak_ptr<Buffer>>& v, int device_index) {
  if (device_index < 0 || static_cast<size_t>(device_index) >= v.size()) return nullptr;
  return v[device_index].lock();
}

}  // namespace

void note_enqueued(int device_index, const BufferPtr& output, bool replicated) {
  if (device_index < 0) return;
  std::lock_guard<std::mutex> lock(tails().mu);
  slot(tails().last, device_index) = output;
  if (replicated) slot(tails().last_replicated, device_index) = output;
}

BufferPtr last_replicated_output(int device_index) {
  std::lock_guard<std::mutex> lock(tails().mu);
  return lookup(tails().last_replicated, device_index);
}

void forget_tail(const Buffer* buffer) {
  std::lock_guard<std::mutex> lock(tails().mu);
  for (auto* v : {&tails().last, &tails().last_replicated}) {
    for (std::weak_ptr<Buffer>& w : *v) {
      if (BufferPtr b = w.lock(); b.get() == buffer) w.reset();
    }
  }
}

BufferPtr queue_tail(int device_index) {
  std::lock_guard<std::mutex> lock(tails().mu);
  return lookup(tails().last, device_index);
}

}  // namespace torchtpu::runtime
