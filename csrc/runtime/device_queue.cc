#include "runtime/device_queue.h"

#include <map>
#include <mutex>

namespace torchtpu::runtime {
namespace {

struct Tails {
  std::mutex mu;
  std::map<int, std::weak_ptr<Buffer>> last;
  std::map<int, std::weak_ptr<Buffer>> last_replicated;
};

Tails& tails() {
  static auto* t = new Tails();  // buffers may be created during static destruction
  return *t;
}

}  // namespace

void note_enqueued(int device_index, const BufferPtr& output, bool replicated) {
  std::lock_guard<std::mutex> lock(tails().mu);
  tails().last[device_index] = output;
  if (replicated) tails().last_replicated[device_index] = output;
}

BufferPtr last_replicated_output(int device_index) {
  std::lock_guard<std::mutex> lock(tails().mu);
  auto it = tails().last_replicated.find(device_index);
  return it == tails().last_replicated.end() ? nullptr : it->second.lock();
}

BufferPtr queue_tail(int device_index) {
  std::lock_guard<std::mutex> lock(tails().mu);
  auto it = tails().last.find(device_index);
  return it == tails().last.end() ? nullptr : it->second.lock();
}

}  // namespace torchtpu::runtime
