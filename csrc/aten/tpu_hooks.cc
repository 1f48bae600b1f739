// PrivateUse1 hooks: what PyTorch asks of an out-of-tree device (generators, device of a
// pointer, availability).
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <mutex>
#include <unordered_set>

#include "aten/device_runtime.h"
#include "aten/storage_bytes.h"
#include "aten/tpu_generator.h"
#include "aten/tpu_guard.h"
#include "aten/tpu_storage.h"

namespace torchtpu::aten {
namespace {

// What `pin_memory()` gets for tpu: ordinary host memory, recorded as this device's pinned
// memory so that is_pinned() is true of it. PJRT copies host data itself when a tensor moves
// to the device (a staging copy on accelerators, a plain copy on the CPU plugin), so
// page-locking would not make transfers faster; but PyTorch code that pins memory for a
// PrivateUse1 device asserts the result is pinned (DDP's reducer with
// find_unused_parameters or static_graph), and a copy from it is synchronous here anyway.
class HostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DataPtr host = c10::GetCPUAllocator()->allocate(nbytes);
    void* data = host.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.insert(data);
    }
    return {data, new c10::DataPtr(std::move(host)), &release, c10::Device(c10::kCPU)};
  }
  void copy_data(void* dst, const void* src, std::size_t n) const override {
    std::memcpy(dst, src, n);
  }
  bool owns(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.count(p) > 0;
  }
  static HostAllocator& instance() {
    static HostAllocator* a = new HostAllocator();  // lives for the process, like its blocks
    return *a;
  }

 private:
  static void release(void* ctx) {
    auto* host = static_cast<c10::DataPtr*>(ctx);
    {
      std::lock_guard<std::mutex> lock(instance().mu_);
      instance().live_.erase(host->get());
    }
    delete host;
  }

  mutable std::mutex mu_;
  std::unordered_set<const void*> live_;
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
  at::Allocator* getPinnedMemoryAllocator() const override { return &HostAllocator::instance(); }
  bool isPinnedPtr(const void* p) const override { return HostAllocator::instance().owns(p); }
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
