// The tail of each device's queue: the last buffer an execution or a host transfer
// produced there. Plugins run a device's single-device work in order, so that buffer is
// ready exactly when everything enqueued on the device before it has finished; streams
// and events (aten/tpu_streams.h) ask it without enqueuing anything. Replicated programs
// (over several devices) are the exception on the CPU plugin: their last output is kept
// apart for synchronize().
// Thread safety: every function may be called from any thread.
#pragma once

#include "runtime/buffer.h"

namespace torchtpu::runtime {

// Called by Executable::execute and Client::buffer_from_host with one of their outputs;
// `replicated` for an output of a program run over several devices at once.
void note_enqueued(int device_index, const BufferPtr& output, bool replicated = false);
// The last buffer enqueued on the device; null when there was none or it has since been
// destroyed (the queue keeps no buffer alive).
BufferPtr queue_tail(int device_index);
// The last output of a replicated program on the device, or null. The CPU plugin does not
// order a replicated program with the device's later single-device work (a marker enqueued
// after it was seen to finish first), so waiting for the device waits for this too.
BufferPtr last_replicated_output(int device_index);
// Forgets `buffer` as a tail (queries then ask a marker): called before a program is given
// the buffer (donation), so no thread takes it from the queue and waits on a buffer that
// is gone. The caller checks that nothing else holds the buffer after this call.
void forget_tail(const Buffer* buffer);

}  // namespace torchtpu::runtime
