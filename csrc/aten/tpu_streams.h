// Streams and events on tpu: PyTorch's semantics on one in-order queue per device.
//
// Every stream of a device maps onto the device's single queue, which PJRT plugins run in
// order (the property synchronize() relies on too). Work on two streams therefore never
// overlaps, and a wait of one stream on another's event is already satisfied when the
// waiting stream's next work runs: `block` enqueues nothing. That is a legal schedule of
// CUDA's semantics (streams *may* overlap), so code written for streams runs unchanged:
// stream ids, the thread-local current stream per device, query, synchronize and events.
//
// An event records by enqueueing a marker (a one-element program): it is complete when
// the marker's output is, i.e. once everything enqueued before it has finished. With
// timing (EventFlag::BACKEND_DEFAULT, `enable_timing=True`) the marker's completion is
// timestamped by the plugin's ready callback (steady clock), so elapsed_time measures the
// device's progress, not the host's enqueue times. PJRT's C API has no device clock; the
// callback's latency (microseconds) bounds the error.
// Thread safety: streams are per thread; an event may be queried from any thread but not
// recorded concurrently, as in PyTorch.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace torchtpu::aten {

c10::Stream current_stream(c10::Device device);
c10::Stream default_stream(c10::Device device);
c10::Stream new_stream(c10::Device device);
// Makes `stream` current for its device on this thread; returns the previous one.
c10::Stream exchange_stream(c10::Stream stream);
// True when everything enqueued on the stream's device so far has finished (never blocks).
bool query_stream(const c10::Stream& stream);
// Tensor.record_stream: nothing to record, as work on any stream of the device is ordered
// before later work and a buffer is released only after the work using it; raises for a
// stream of another device type.
void record_stream(at::Tensor& self, c10::Stream stream);

void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device,
                  c10::EventFlag flag);
bool query_event(void* event);
void synchronize_event(void* event);
// Milliseconds between two recorded timing events' completions (waits for both).
double elapsed_ms(void* start, void* end);
void destroy_event(void* event) noexcept;

}  // namespace torchtpu::aten
