#include "aten/tpu_streams.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/fused_eager.h"
#include "aten/tpu_guard.h"
#include "aten/tpu_storage.h"
#include "base/metrics.h"
#include "lowering/storage_programs.h"
#include "runtime/device_queue.h"
#include "runtime/event.h"

namespace torchtpu::aten {
namespace {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

struct TpuEvent {
  c10::DeviceIndex device = -1;
  bool timing = false;
  runtime::BufferPtr marker;  // null until recorded
  std::unique_ptr<runtime::Event> ready;
  // Steady-clock ns at which the marker completed; -1 before. Shared with the callback,
  // which may run after the event is destroyed.
  std::shared_ptr<std::atomic<int64_t>> done_ns;
};

thread_local std::map<c10::DeviceIndex, c10::StreamId> t_current;
std::atomic<c10::StreamId> g_next_stream_id{1};  // 0 is the default stream

c10::DeviceIndex index_of(c10::Device d) {
  if (!d.has_index()) return static_cast<c10::DeviceIndex>(current_device_index());
  check_device_index(d.index());
  return d.index();
}

// A one-element program on `device`, enqueued after everything before it.
runtime::BufferPtr enqueue_marker(c10::DeviceIndex device) {
  lowering::TensorType t{base::DType::kF32, {}};
  return run_program(lowering::zeros_module(t), {}, device)[0];
}

bool ready_now(const runtime::Buffer& b) {
  auto ev = b.ready_event();
  TORCH_CHECK(ev.ok(), "tpu: ", ev.status().message());
  auto r = (*ev)->is_ready();
  TORCH_CHECK(r.ok(), "tpu: ", r.status().message());
  return *r;
}

TpuEvent* as_event(void* e) { return static_cast<TpuEvent*>(e); }

}  // namespace

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kTpu, "record_stream: the tensor is on ", self.device(),
              " but the stream is a ", c10::DeviceTypeName(stream.device_type()),
              " stream; pass a tpu stream (torch.tpu.current_stream())");
}

c10::Stream current_stream(c10::Device device) {
  c10::DeviceIndex d = index_of(device);
  auto it = t_current.find(d);
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, d),
                     it == t_current.end() ? 0 : it->second);
}

c10::Stream default_stream(c10::Device device) {
  return c10::Stream(c10::Stream::DEFAULT, c10::Device(kTpu, index_of(device)));
}

c10::Stream new_stream(c10::Device device) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, index_of(device)),
                     g_next_stream_id.fetch_add(1));
}

c10::Stream exchange_stream(c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kTpu, "tpu: expected a tpu stream, got one on ",
              stream.device());
  // A stream rebuilt from made-up numbers (torch.Stream(stream_id=..., device_index=...))
  // names no stream: refused, as CUDA refuses it, instead of becoming current.
  const c10::DeviceIndex d = index_of(stream.device());
  TORCH_CHECK_VALUE(stream.id() >= 0 && stream.id() < g_next_stream_id.load(),
                    "tpu: no stream with id ", stream.id(), " on tpu:", static_cast<int>(d),
                    "; make streams with torch.tpu.Stream() or torch.Stream(device=\"tpu\")");
  c10::Stream old = current_stream(stream.device());
  t_current[d] = stream.id();
  return old;
}

bool query_stream(const c10::Stream& stream) {
  c10::DeviceIndex d = stream.device_index();
  flush_pending(d);  // fused eager: recorded work is work enqueued on the stream
  if (runtime::BufferPtr tail = runtime::queue_tail(d)) return ready_now(*tail);
  // The last work's output is gone (freed while in flight, or nothing ran yet): ask a
  // marker, kept so that the next query finds it as the tail.
  static std::mutex mu;
  static auto* markers = new std::map<c10::DeviceIndex, runtime::BufferPtr>();
  std::lock_guard<std::mutex> lock(mu);
  runtime::BufferPtr& m = (*markers)[d];
  m = enqueue_marker(d);
  return ready_now(*m);
}

void record_event(void** event, const c10::Stream& stream, c10::DeviceIndex device,
                  c10::EventFlag flag) {
  TORCH_CHECK(stream.device_type() == kTpu, "tpu: cannot record a tpu event on a stream of ",
              stream.device());
  TORCH_CHECK(device == -1 || device == stream.device_index(), "tpu: event device index ",
              static_cast<int>(device), " does not match the recording stream's device ",
              static_cast<int>(stream.device_index()));
  if (*event == nullptr) {
    auto* e = new TpuEvent();
    e->device = stream.device_index();
    e->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
    *event = e;
  }
  TpuEvent* e = as_event(*event);
  TORCH_CHECK(e->device == stream.device_index(), "tpu: an event recorded on tpu:",
              static_cast<int>(e->device), " cannot be recorded on tpu:",
              static_cast<int>(stream.device_index()));
  flush_pending(e->device);  // fused eager: the event follows what was recorded before it
  runtime::BufferPtr marker = enqueue_marker(e->device);
  auto ready = marker->ready_event();
  TORCH_CHECK(ready.ok(), "tpu: recording an event: ", ready.status().message());
  std::shared_ptr<std::atomic<int64_t>> done;
  if (e->timing) {
    done = std::make_shared<std::atomic<int64_t>>(-1);
    base::Status s = (*ready)->on_ready([done](const base::Status&) { done->store(base::monotonic_ns()); });
    TORCH_CHECK(s.ok(), "tpu: recording a timing event: ", s.message());
  }
  e->marker = std::move(marker);
  e->ready = std::move(ready).value();
  e->done_ns = std::move(done);
}

bool query_event(void* event) {
  TpuEvent* e = as_event(event);
  if (e == nullptr || e->ready == nullptr) return true;  // never recorded
  auto r = e->ready->is_ready();
  TORCH_CHECK(r.ok(), "tpu: querying an event: ", r.status().message());
  return *r;
}

void synchronize_event(void* event) {
  TpuEvent* e = as_event(event);
  if (e == nullptr || e->ready == nullptr) return;
  base::Status s = e->ready->await();
  TORCH_CHECK(s.ok(), "tpu: waiting for an event: ", s.message());
  flush_data_checks();  // a host wait is where compiled graphs' checks report
}

double elapsed_ms(void* start, void* end) {
  TpuEvent* a = as_event(start);
  TpuEvent* b = as_event(end);
  TORCH_CHECK(a != nullptr && b != nullptr && a->ready && b->ready,
              "tpu: elapsed_time: both events must be recorded first (event.record())");
  TORCH_CHECK(a->timing && b->timing,
              "tpu: elapsed_time: both events must be created with enable_timing=True");
  synchronize_event(start);
  synchronize_event(end);
  // The ready callback may run just after await() returns.
  for (int spins = 0; a->done_ns->load() < 0 || b->done_ns->load() < 0; ++spins) {
    TORCH_CHECK(spins < 100000, "tpu: elapsed_time: the plugin never reported completion");
    std::this_thread::sleep_for(std::chrono::microseconds(10));
  }
  return static_cast<double>(b->done_ns->load() - a->done_ns->load()) / 1e6;
}

void destroy_event(void* event) noexcept { delete as_event(event); }

}  // namespace torchtpu::aten
