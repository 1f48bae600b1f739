// How host kernels spread independent items of work over threads.
#pragma once

#include <cstdint>
#include <functional>

namespace torchtpu::kernels {

// Runs body(i) for every i in [0, n), possibly in parallel, returning when all are done.
using ParallelFor = std::function<void(int64_t n, const std::function<void(int64_t)>& body)>;

// body(i) for every i in [0, n): through `parallel_for` when there is one and more than
// one item, else one after another on this thread.
inline void for_each_item(const ParallelFor& parallel_for, int64_t n,
                          const std::function<void(int64_t)>& body) {
  if (parallel_for && n > 1) {
    parallel_for(n, body);
    return;
  }
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace torchtpu::kernels
