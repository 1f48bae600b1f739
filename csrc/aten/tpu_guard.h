// Current-device bookkeeping and the DeviceGuard implementation for `tpu`.
// The current device is thread-local, like CUDA's. Streams and events: tpu_streams.h.
#pragma once

#include <c10/core/Device.h>

namespace torchtpu::aten {

int current_device_index();
void set_current_device_index(int index);
// Raises for an index that names no tpu device (why, when there is no device at all).
void check_device_index(int index);
// Blocks until all work enqueued on `index` so far is done.
void synchronize_device(int index);

}  // namespace torchtpu::aten
