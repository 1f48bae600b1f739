// A runtime Status reaching the user as the exception PyTorch raises for its kind.
#pragma once

#include "base/status.h"

namespace torchtpu::aten {

// Raises `status` (not ok): torch.OutOfMemoryError when the plugin ran out of memory
// (RESOURCE_EXHAUSTED), what code that retries with smaller batches catches; RuntimeError
// otherwise. An out-of-memory error is counted in `device`'s memory statistics
// (torch.tpu.memory_stats()["num_ooms"]).
[[noreturn]] void raise_status(const base::Status& status, int device);

}  // namespace torchtpu::aten
