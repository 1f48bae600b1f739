#include "aten/status_error.h"

#include <c10/util/Exception.h>

#include "aten/tpu_allocator.h"

namespace torchtpu::aten {

void raise_status(const base::Status& status, int device) {
  if (status.code() == base::StatusCode::kResourceExhausted) {
    note_out_of_memory(device);
    C10_THROW_ERROR(OutOfMemoryError,
                    status.message() + " (the tpu device is out of memory: free tensors, use "
                                       "smaller batches, or call torch.tpu.empty_cache())");
  }
  TORCH_CHECK(false, status.message());
}

}  // namespace torchtpu::aten
