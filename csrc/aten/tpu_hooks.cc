// PrivateUse1 hooks: what PyTorch asks of an out-of-tree device (generators, device of a
// pointer, availability).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include "aten/device_runtime.h"
#include "aten/storage_bytes.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_guard.h"
#include "aten/tpu_storage.h"

namespace torchtpu::aten {
namespace {

// What `pin_memory()` gets for tpu: ordinary host memory, with a warning once. PJRT copies
// host data itself when a tensor moves to the device (a staging copy on accelerators, a
// plain copy on the CPU plugin), so page-locked memory would not make transfers faster or
// asynchronous; saying so beats a silent no-op.
class UnpinnedHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_WARN_ONCE(
        "tpu: pin_memory() does not apply to the tpu device: PJRT stages host-to-device "
        "copies itself, so pinned host memory would not speed them up or make them "
        "asynchronous. The tensor was copied into ordinary host memory (is_pinned() is "
        "False); drop pin_memory=True to save that copy.");
    return c10::GetCPUAllocator()->allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return c10::GetCPUAllocator()->raw_deleter(); }
  void copy_data(void* dst, const void* src, std::size_t n) const override {
    c10::GetCPUAllocator()->copy_data(dst, src, n);
  }
};

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_or_zero() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_device_index() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<TpuGeneratorImpl>(index < 0 ? current_device_index() : index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    auto* state = static_cast<StorageState*>(data);
    return at::Device(c10::DeviceType::PrivateUse1, state ? state->device_index : 0);
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count_or_zero());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override { set_current_device_index(d); }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(current_device_index());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = getCurrentDevice();
    set_current_device_index(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    static UnpinnedHostAllocator* allocator = new UnpinnedHostAllocator();
    return allocator;
  }
  bool isPinnedPtr(const void*) const override { return false; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage.unsafeGetStorageImpl(), static_cast<int64_t>(nbytes));
  }
};

}  // namespace

void register_hooks() {
  static TpuHooks* hooks = new TpuHooks();
  at::RegisterPrivateUse1HooksInterface(hooks);
}

}  // namespace torchtpu::aten
