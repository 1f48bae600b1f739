#include "distributed/host_pool.h"

#include <ATen/ATen.h>

namespace torchtpu::distributed {

at::Tensor HostPool::take(int64_t bytes) {
  at::Tensor chunk = at::empty({0}, at::TensorOptions().dtype(at::kByte));
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(bytes);
    if (it != free_.end() && !it->second.empty()) {
      c10::Storage storage = std::move(it->second.back());
      it->second.pop_back();
      free_bytes_ -= bytes;
      return chunk.set_(storage, 0, {bytes}, {1});
    }
  }
  // PyTorch's CPU allocator aligns to 64 bytes, which the CPU plugin needs to alias it.
  return at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
}

void HostPool::give_back(c10::Storage storage) {
  int64_t bytes = static_cast<int64_t>(storage.nbytes());
  std::lock_guard<std::mutex> lock(mu_);
  if (free_bytes_ + bytes > kMaxFreeBytes) return;  // `storage` is freed on return
  free_[bytes].push_back(std::move(storage));
  free_bytes_ += bytes;
}

int64_t HostPool::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

}  // namespace torchtpu::distributed
