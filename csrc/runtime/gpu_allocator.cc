#include "runtime/gpu_allocator.h"

#include <cmath>
#include <cstdlib>
#include <string>

namespace torchtpu::runtime {
namespace {

constexpr char kPreallocate[] = "TORCHTPU_GPU_PREALLOCATE";
constexpr char kFraction[] = "TORCHTPU_GPU_MEMORY_FRACTION";

}  // namespace

base::StatusOr<GpuAllocatorOptions> gpu_allocator_options_from_env() {
  GpuAllocatorOptions out;
  if (const char* v = std::getenv(kPreallocate); v != nullptr && *v != '\0') {
    std::string s(v);
    if (s == "1" || s == "true") {
      out.preallocate = true;
    } else if (s == "0" || s == "false") {
      out.preallocate = false;
    } else {
      return base::invalid_argument(std::string("tpu: ") + kPreallocate + "='" + s +
                                    "' is not a switch (expected 1/true: take the GPU memory "
                                    "share when the device starts, or 0/false: grow on demand)");
    }
  }
  if (const char* v = std::getenv(kFraction); v != nullptr && *v != '\0') {
    char* end = nullptr;
    double f = std::strtod(v, &end);
    if (end == v || *end != '\0' || !std::isfinite(f) || f <= 0.0 || f > 1.0) {
      return base::invalid_argument(std::string("tpu: ") + kFraction + "='" + v +
                                    "' is not a share of the GPU's memory (expected a number "
                                    "with 0 < f <= 1, e.g. 0.5; the plugin's default is 0.75)");
    }
    out.memory_fraction = f;
  }
  return out;
}

}  // namespace torchtpu::runtime
