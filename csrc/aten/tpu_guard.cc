#include "aten/tpu_guard.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>

#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/fused_eager.h"
#include "aten/tpu_storage.h"
#include "aten/tpu_streams.h"
#include "lowering/storage_programs.h"
#include "runtime/device_queue.h"

namespace torchtpu::aten {
namespace {

thread_local int t_current_device = 0;

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, t_current_device);
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "tpu: expected a tpu device, got ", d);
    set_current_device_index(d.has_index() ? d.index() : 0);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    t_current_device = d.has_index() ? d.index() : 0;
  }
  // Streams and events: aten/tpu_streams.h (one in-order queue per device).
  c10::Stream getStream(c10::Device d) const override { return current_stream(d); }
  c10::Stream getDefaultStream(c10::Device d) const override { return default_stream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    return new_stream(d);
  }
  c10::Stream getNewStream(c10::Device d, int) const override { return new_stream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return exchange_stream(s); }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_or_zero());
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device,
              const c10::EventFlag flag) const override {
    record_event(event, stream, device, flag);
  }
  // One in-order queue: work enqueued after this call already runs after the event.
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override { return query_event(event); }
  void synchronizeEvent(void* event) const override { synchronize_event(event); }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    return elapsed_ms(start, end);
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    destroy_event(event);
  }
  // The dtypes a tpu tensor can hold (torch.accelerator.get_device_capability).
  c10::DeviceCapability getDeviceCapability(c10::Device) const override {
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    static_assert(static_cast<int>(c10::NumScalarTypes) <= 64);
    for (int i = 0; i < static_cast<int>(c10::NumScalarTypes); ++i) {
      std::optional<base::DType> t = maybe_dtype(static_cast<c10::ScalarType>(i));
      if (t && platform_holds(*t)) {
        cap.capability_data.capability_bits |= uint64_t{1} << i;
      }
    }
    return cap;
  }
  bool queryStream(const c10::Stream& s) const override { return query_stream(s); }
  void synchronizeStream(const c10::Stream& s) const override {
    synchronize_device(s.device_index());
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_device(index);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace

void check_device_index(int index) {
  // Stream lookups pass here: the count, fixed once the device started, is asked once.
  static std::atomic<int> known_count{0};
  int n = known_count.load(std::memory_order_relaxed);
  if (index >= 0 && index < n) return;
  n = device_count_or_zero();
  if (n == 0) client();  // no device at all: raises why (plugin, environment)
  known_count.store(n, std::memory_order_relaxed);
  TORCH_CHECK(index >= 0 && index < n, "tpu: invalid device index ", index, " (have ", n,
              " tpu devices; set TORCHTPU_NUM_DEVICES for more on the CPU plugin)");
}

int current_device_index() { return t_current_device; }

void set_current_device_index(int index) {
  check_device_index(index);
  t_current_device = index;
}

void synchronize_device(int index) {
  // PJRT executes in order per device: a trivial program enqueued now completes after
  // everything enqueued before it.
  check_device_index(index);
  flush_pending(index);  // fused eager: what was recorded runs now
  // A replicated program (an in-plugin collective) is not ordered with the marker.
  if (runtime::BufferPtr r = runtime::last_replicated_output(index)) {
    base::Status s = r->await_ready();
    TORCH_CHECK(s.ok(), s.message());
  }
  lowering::TensorType t{base::DType::kF32, {}};
  auto out = run_program(lowering::zeros_module(t), {}, index)[0];
  auto status = out->await_ready();
  TORCH_CHECK(status.ok(), status.message());
  flush_data_checks();
}

}  // namespace torchtpu::aten
