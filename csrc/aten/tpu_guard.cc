#include "aten/tpu_guard.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/tpu_storage.h"
#include "lowering/storage_programs.h"

namespace torchtpu::aten {
namespace {

thread_local int t_current_device = 0;

void check_index(int index) {
  int n = device_count_or_zero();
  if (n == 0) client();  // no device at all: raises why (plugin, environment)
  TORCH_CHECK(index >= 0 && index < n, "tpu: invalid device index ", index, " (have ", n,
              " tpu devices; set TORCHTPU_NUM_DEVICES for more on the CPU plugin)");
}

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
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_or_zero());
  }
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void synchronizeDevice(const c10::DeviceIndex index) const override {
    synchronize_device(index);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

}  // namespace

int current_device_index() { return t_current_device; }

void set_current_device_index(int index) {
  check_index(index);
  t_current_device = index;
}

void synchronize_device(int index) {
  // PJRT executes in order per device: a trivial program enqueued now completes after
  // everything enqueued before it.
  check_index(index);
  lowering::TensorType t{base::DType::kF32, {}};
  auto out = run_program(lowering::zeros_module(t), {}, index)[0];
  auto status = out->await_ready();
  TORCH_CHECK(status.ok(), status.message());
  flush_data_checks();
}

}  // namespace torchtpu::aten
