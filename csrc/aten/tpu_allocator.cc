#include "aten/tpu_allocator.h"

#include <c10/util/Exception.h>

#include <map>
#include <mutex>

#include "aten/device_runtime.h"
#include "aten/host_transfer.h"
#include "aten/tpu_guard.h"
#include "aten/tpu_storage.h"
#include "runtime/memory_stats.h"

namespace torchtpu::aten {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr int64_t kSmallPoolMaxBytes = 1 << 20;  // PyTorch's split: < 1 MiB is "small"

size_t pool_of(int64_t nbytes) {
  return static_cast<size_t>(nbytes < kSmallPoolMaxBytes ? StatType::SMALL_POOL
                                                         : StatType::LARGE_POOL);
}

struct StorageStats {
  StatArray allocation;  // number of storages
  StatArray bytes;       // their byte counts
  int64_t num_ooms = 0;  // out-of-memory errors raised (reset with the accumulated stats)
};

struct Registry {
  std::mutex mu;
  std::map<int, StorageStats> devices;
};

Registry& registry() {
  static auto* r = new Registry();  // storages may be freed during static destruction
  return *r;
}

void add(StatArray& a, size_t pool, int64_t n) {
  auto agg = static_cast<size_t>(StatType::AGGREGATE);
  if (n >= 0) {
    a[agg].increase(n);
    a[pool].increase(n);
  } else {
    a[agg].decrease(-n);
    a[pool].decrease(-n);
  }
}

Stat reserved_stat(const runtime::BufferMemoryStats& b, bool count) {
  Stat s;
  s.current = count ? b.num_buffers : b.current_bytes;
  s.peak = count ? b.peak_num_buffers : b.peak_bytes;
  s.allocated = count ? b.num_allocations : b.allocated_bytes;
  s.freed = count ? b.num_frees : b.freed_bytes;
  return s;
}

void check_device(c10::DeviceIndex device) {
  int n = device_count_or_zero();
  TORCH_CHECK(device >= 0 && device < n, "tpu: no device ", static_cast<int>(device),
              " for memory statistics (have ", n, " tpu devices)");
}

class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    // torch.UntypedStorage(-1) arrives as 2^64 - 1, as it does at the CPU's allocator.
    TORCH_CHECK(static_cast<int64_t>(nbytes) >= 0, "tpu: cannot allocate a storage of ",
                static_cast<int64_t>(nbytes), " bytes: a size must not be negative");
    // Refused now, as CUDA's allocator would, not at the first write (a storage's buffer
    // is made when it is first written or read).
    check_results_fit(current_device_index(), static_cast<int64_t>(nbytes), false,
                      "a new storage takes");
    return new_storage_data_ptr(current_device_index(), static_cast<int64_t>(nbytes));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu: storage bytes cannot be copied directly; use Tensor.copy_()");
  }

  bool initialized() override { return true; }  // nothing to set up before first use

  // Frees what torchtpu caches on the device: the 0-d buffers kept for scalar arguments.
  void emptyCache(c10::MempoolId_t) override { clear_scalar_cache(); }

  // One in-order queue per device, and PJRT keeps a buffer alive until its pending uses
  // finish: there is no cross-stream reuse to guard against.
  void recordStream(const c10::DataPtr&, c10::Stream) override {}

  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device(device);
    DeviceStats out;
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      const StorageStats& s = registry().devices[device];
      out.allocation = s.allocation;
      out.active = s.allocation;
      out.allocated_bytes = s.bytes;
      out.active_bytes = s.bytes;
      out.requested_bytes = s.bytes;
      out.num_ooms = s.num_ooms;
    }
    runtime::BufferMemoryStats b = runtime::buffer_memory_stats(device);
    auto agg = static_cast<size_t>(StatType::AGGREGATE);
    out.segment[agg] = reserved_stat(b, /*count=*/true);
    out.reserved_bytes[agg] = reserved_stat(b, /*count=*/false);
    out.num_device_alloc = b.num_allocations;
    out.num_device_free = b.num_frees;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    for_each_stat(device, [](Stat& st) { st.reset_accumulated(); });
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      registry().devices[device].num_ooms = 0;
    }
    runtime::reset_accumulated_buffer_memory(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    for_each_stat(device, [](Stat& st) { st.reset_peak(); });
    runtime::reset_peak_buffer_memory(device);
  }

  // (free, total) bytes (device_memory: the plugin's figures, or the host's).
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device(device);
    auto m = device_memory(device);
    TORCH_CHECK_NOT_IMPLEMENTED(m.ok(), "tpu: mem_get_info: ", m.status().message(),
                                "; use torch.tpu.memory_reserved() for what torchtpu holds");
    return {static_cast<size_t>(m->free_bytes), static_cast<size_t>(m->total_bytes)};
  }

 private:
  // Applies `f` to every storage statistic of `device` (counts and bytes, every pool).
  template <typename F>
  void for_each_stat(c10::DeviceIndex device, F f) {
    check_device(device);
    std::lock_guard<std::mutex> lock(registry().mu);
    StorageStats& s = registry().devices[device];
    for (auto* a : {&s.allocation, &s.bytes}) {
      for (Stat& st : *a) f(st);
    }
  }
};

TpuAllocator g_allocator;
// c10::GetAllocator(PrivateUse1): what torch.UntypedStorage(n, device="tpu"), other
// device-generic allocations and torch.accelerator's memory API use.
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace

c10::DeviceAllocator* tpu_device_allocator() { return &g_allocator; }

namespace {

// The storage bytes of a device now. Called with the registry's lock held.
size_t current_bytes(const StorageStats& s) {
  return static_cast<size_t>(s.bytes[static_cast<size_t>(StatType::AGGREGATE)].current);
}

// Reports `delta` bytes at `storage` to the profiler when it profiles memory, with the
// device's totals after the change (outside the registry's lock: the reserved bytes are
// the runtime's).
void report_to_profiler(const void* storage, int device_index, int64_t delta,
                        size_t allocated) {
  if (delta == 0 || !c10::memoryProfilingEnabled()) return;
  c10::reportMemoryUsageToProfiler(
      const_cast<void*>(storage), delta, allocated,
      static_cast<size_t>(runtime::buffer_memory_stats(device_index).current_bytes),
      c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_index)));
}

}  // namespace

void note_storage_allocated(const void* storage, int device_index, int64_t nbytes) {
  size_t allocated;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    StorageStats& s = registry().devices[device_index];
    add(s.allocation, pool_of(nbytes), 1);
    add(s.bytes, pool_of(nbytes), nbytes);
    allocated = current_bytes(s);
  }
  report_to_profiler(storage, device_index, nbytes, allocated);
}

void note_storage_resized(const void* storage, int device_index, int64_t old_nbytes,
                          int64_t new_nbytes) {
  size_t allocated;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    StorageStats& s = registry().devices[device_index];
    size_t old_pool = pool_of(old_nbytes), new_pool = pool_of(new_nbytes);
    if (old_pool == new_pool) {
      add(s.bytes, new_pool, new_nbytes - old_nbytes);
    } else {
      add(s.allocation, old_pool, -1);
      add(s.bytes, old_pool, -old_nbytes);
      add(s.allocation, new_pool, 1);
      add(s.bytes, new_pool, new_nbytes);
    }
    allocated = current_bytes(s);
  }
  report_to_profiler(storage, device_index, new_nbytes - old_nbytes, allocated);
}

void note_storage_freed(const void* storage, int device_index, int64_t nbytes) {
  size_t allocated;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    StorageStats& s = registry().devices[device_index];
    add(s.allocation, pool_of(nbytes), -1);
    add(s.bytes, pool_of(nbytes), -nbytes);
    allocated = current_bytes(s);
  }
  report_to_profiler(storage, device_index, -nbytes, allocated);
}

void note_out_of_memory(int device_index) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().devices[device_index].num_ooms++;
}

}  // namespace torchtpu::aten
