// The device memory allocator of the GPU plugins (JAX's CUDA/ROCm PJRT plugins): XLA's BFC
// allocator, which by default takes 75% of the GPU's memory when the client starts. That
// suits one process per GPU; a second process on the same GPU (a test's subprocess, JAX
// beside torchtpu, two replicas) then finds too little left. Two environment variables
// become the plugin's create options, as JAX's XLA_PYTHON_CLIENT_PREALLOCATE and
// XLA_PYTHON_CLIENT_MEM_FRACTION do for JAX:
//
//   TORCHTPU_GPU_PREALLOCATE       1/true (take the fraction at start) or 0/false (grow on
//                                  demand); unset: the plugin's default (preallocate)
//   TORCHTPU_GPU_MEMORY_FRACTION   the share of the GPU's memory the allocator may use,
//                                  0 < f <= 1; unset: the plugin's default (0.75)
//
// They go only to plugins whose registry platform is a GPU (Client::create); CPU and TPU
// plugins never see them.
#pragma once

#include <optional>

#include "base/status.h"

namespace torchtpu::runtime {

struct GpuAllocatorOptions {
  std::optional<bool> preallocate;       // create option "preallocate"
  std::optional<double> memory_fraction;  // create option "memory_fraction"
};

// The options the environment asks for; invalid_argument naming the variable, its value
// and what it accepts when a value is not one.
base::StatusOr<GpuAllocatorOptions> gpu_allocator_options_from_env();

}  // namespace torchtpu::runtime
