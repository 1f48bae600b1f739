// The tail of each device's queue: the last buffer an execution or a host transfer
// produced there. Plugins run a device's work in order, so that buffer is ready exactly
// when everything enqueued on the device before it has finished; streams and events
// (aten/tpu_streams.h) ask it without enqueuing anything.
// Thread safety: both functions may be called from any thread.
#pragma once

#include "runtime/buffer.h"

namespace torchtpu::runtime {

// Called by Executable::execute and Client::buffer_from_host with one of their outputs.
void note_enqueued(int device_index, const BufferPtr& output);
// The last buffer enqueued on the device; null when there was none or it has since been
// destroyed (the queue keeps no buffer alive).
BufferPtr queue_tail(int device_index);

}  // namespace torchtpu::runtime
