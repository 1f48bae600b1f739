// PrivateUse1 hooks: what PyTorch asks of an out-of-tree device (generators, device of a
// pointer, availability).
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

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
// It is also the device type's at::HostAllocator (torch.accelerator.empty_host_cache and
// host memory stats reach it; with none registered they dereferenced null): nothing is
// cached, so emptying the cache frees nothing, and a block's stream use needs no event.
class HostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    c10::DataPtr host = c10::GetCPUAllocator()->allocate(nbytes);
    void* data = host.get();
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[data] = nbytes;
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(nbytes);
      stats_.allocations.increase(1);
      stats_.allocated_bytes.increase(nbytes);
      ++stats_.num_host_alloc;
    }
    return {data, new c10::DataPtr(std::move(host)), &release, c10::Device(c10::kCPU)};
  }
  void copy_data(void* dst, const void* src, std::size_t n) const override {
    std::memcpy(dst, src, n);
  }
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    return true;
  }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (c10::CachingAllocator::Stat* s : stats()) s->reset_accumulated();
    stats_.num_host_alloc = stats_.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (c10::CachingAllocator::Stat* s : stats()) s->reset_peak();
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
  std::vector<c10::CachingAllocator::Stat*> stats() {
    return {&stats_.active_requests, &stats_.active_bytes, &stats_.allocations,
            &stats_.allocated_bytes};
  }
  static void release(void* ctx) {
    auto* host = static_cast<c10::DataPtr*>(ctx);
    {
      HostAllocator& a = instance();
      std::lock_guard<std::mutex> lock(a.mu_);
      auto it = a.live_.find(host->get());
      if (it != a.live_.end()) {
        a.stats_.active_requests.decrease(1);
        a.stats_.active_bytes.decrease(it->second);
        a.stats_.allocations.decrease(1);
        a.stats_.allocated_bytes.decrease(it->second);
        ++a.stats_.num_host_free;
        a.live_.erase(it);
      }
    }
    delete host;
  }

  mutable std::mutex mu_;
  std::unordered_map<const void*, size_t> live_;  // block -> its size
  at::HostStats stats_;
};

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_or_zero() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index < 0 ? current_device_index() : index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index >= 0) check_device_index(index);
    return at::make_generator<TpuGeneratorImpl>(index < 0 ? current_device_index() : index);
  }
  // A tensor made over a pointer (at::from_blob, DLPack import): the pointer must be a tpu
  // storage's own data pointer. One inside a storage (a DLPack export of a view with a
  // storage offset) would alias part of another storage, which tpu storages cannot.
  at::Device getDeviceFromPtr(void* data) const override {
    if (data == nullptr) return at::Device(c10::DeviceType::PrivateUse1, current_device_index());
    StorageState* state = live_storage_state(data);
    TORCH_CHECK(state != nullptr,
                "tpu: cannot make a tensor over this pointer: it is not the data pointer of a "
                "live tpu storage (a DLPack export of a view with a storage offset points inside "
                "its storage, which a tpu tensor cannot alias); export a tensor whose "
                "storage_offset() is 0, e.g. view.clone()");
    return at::Device(c10::DeviceType::PrivateUse1, state->device_index);
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
  at::setHostAllocator(c10::DeviceType::PrivateUse1, &HostAllocator::instance());
}

}  // namespace torchtpu::aten
