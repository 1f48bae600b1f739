// HostPool: host memory that host-staged collectives receive into and hand to the device
// without a copy.
//
// A chunk taken here holds a collective's result; the device buffer made over it aliases
// it (runtime::Client::buffer_from_host_zero_copy), and the chunk comes back when the
// plugin frees that buffer. Reusing chunks spares the page faults of fresh memory (the
// cost of a plain host->device transfer of a large tensor was mostly those: the plugin
// allocates and writes a new buffer every time), and aliasing spares the copy.
// Lifetime: shared by the transport and every chunk in use (a chunk may come back after
// the transport is gone). Thread safety: all methods, from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace torchtpu::distributed {

class HostPool : public std::enable_shared_from_this<HostPool> {
 public:
  // A uint8 CPU tensor of exactly `bytes` (64-byte aligned), over a free chunk of that
  // size when there is one.
  at::Tensor take(int64_t bytes);
  // Makes the chunk under `storage` (of a tensor from take()) available again; beyond
  // kMaxFreeBytes of free chunks it is freed instead.
  void give_back(c10::Storage storage);

  int64_t free_bytes() const;

  // Free chunks kept at most (1 GiB): a step's collectives reuse their sizes.
  static constexpr int64_t kMaxFreeBytes = int64_t{1} << 30;

 private:
  mutable std::mutex mu_;
  std::map<int64_t, std::vector<c10::Storage>> free_;  // by size in bytes
  int64_t free_bytes_ = 0;
};

}  // namespace torchtpu::distributed
