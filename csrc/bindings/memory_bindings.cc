// Python glue for the device memory API: the tpu allocator's statistics, in the flat
// "<stat>.<pool>.<metric>" form torch.cuda.memory_stats() returns, and device properties.
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>
#include <optional>

#include "aten/device_runtime.h"
#include "aten/tpu_allocator.h"
#include "aten/tpu_storage.h"
#include "base/metrics.h"
#include "runtime/huge_pages.h"

namespace py = pybind11;
using namespace torchtpu;

namespace {

void put(py::dict& out, const char* name, const c10::CachingAllocator::StatArray& a) {
  const char* pools[] = {"all", "small_pool", "large_pool"};
  for (size_t p = 0; p < a.size(); ++p) {
    std::string prefix = std::string(name) + "." + pools[p] + ".";
    out[py::str(prefix + "current")] = a[p].current;
    out[py::str(prefix + "peak")] = a[p].peak;
    out[py::str(prefix + "allocated")] = a[p].allocated;
    out[py::str(prefix + "freed")] = a[p].freed;
  }
}

py::dict memory_stats(int device) {
  auto s = aten::tpu_device_allocator()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
  py::dict out;
  put(out, "allocation", s.allocation);
  put(out, "active", s.active);
  put(out, "allocated_bytes", s.allocated_bytes);
  put(out, "active_bytes", s.active_bytes);
  put(out, "requested_bytes", s.requested_bytes);
  put(out, "segment", s.segment);
  put(out, "reserved_bytes", s.reserved_bytes);
  put(out, "inactive_split", s.inactive_split);
  put(out, "inactive_split_bytes", s.inactive_split_bytes);
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_ooms"] = s.num_ooms;
  out["num_device_alloc"] = s.num_device_alloc;
  out["num_device_free"] = s.num_device_free;
  return out;
}

py::dict device_properties(int device) {
  runtime::Client& c = aten::client();
  TORCH_CHECK(device >= 0 && device < c.num_devices(), "tpu: no device ", device, " (have ",
              c.num_devices(), " tpu devices)");
  py::dict d;
  d["name"] = c.device_kind(device);
  d["platform"] = c.platform_name();
  auto [free_bytes, total_bytes] =
      aten::tpu_device_allocator()->getMemoryInfo(static_cast<c10::DeviceIndex>(device));
  d["total_memory"] = total_bytes;
  py::dict attrs;
  for (const auto& [k, v] : c.plugin().attributes()) attrs[py::str(k)] = v;
  d["plugin_attributes"] = attrs;
  d["pjrt_api_version"] =
      std::to_string(c.plugin().api_major()) + "." + std::to_string(c.plugin().api_minor());
  return d;
}

// Moves the host memory of the tensors' buffers onto huge pages (runtime/huge_pages.h).
// Only where the device's memory is host memory (a CPU plugin); elsewhere every byte
// counts as skipped. Buffers shared by several tensors count once.
py::dict collapse_huge_pages(const std::vector<at::Tensor>& tensors) {
  int64_t skipped = 0, buffer_bytes = 0;
  const bool host_memory = aten::client().platform_name() == "cpu";
  std::vector<runtime::BufferPtr> buffers;  // held until the kernel is done with them
  std::vector<runtime::HostRange> ranges;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
                "torchtpu.memory.use_huge_pages: expected tpu tensors; got one on ", t.device());
    runtime::BufferPtr b = aten::storage_state(t).buffer();
    if (b == nullptr) continue;  // never written: no memory yet
    if (std::find(buffers.begin(), buffers.end(), b) != buffers.end()) continue;
    buffers.push_back(b);
    if (!host_memory) {
      skipped += b->size_bytes();
      continue;
    }
    auto ready = b->await_ready();
    TORCH_CHECK(ready.ok(), ready.message());
    auto addr = b->host_address();
    if (!addr.ok()) {
      skipped += b->size_bytes();
      continue;
    }
    buffer_bytes += b->size_bytes();
    ranges.push_back({*addr, b->size_bytes()});
  }
  runtime::HugePageCollapse r;
  const int64_t t0 = base::monotonic_ns();
  {
    py::gil_scoped_release no_gil;
    r = runtime::collapse_to_huge_pages(ranges);
  }
  const double seconds = static_cast<double>(base::monotonic_ns() - t0) * 1e-9;
  py::dict out;
  out["buffers"] = ranges.size();
  out["buffer_bytes"] = buffer_bytes;
  out["huge_bytes"] = r.huge_bytes;
  out["refused_bytes"] = r.refused_bytes;
  out["skipped_bytes"] = skipped;
  out["first_refusal"] = r.first_refusal;
  out["seconds"] = seconds;
  return out;
}

}  // namespace

void bind_memory(py::module& m) {
  m.def("memory_stats", &memory_stats);
  m.def("mem_get_info", [](int device) {
    return aten::tpu_device_allocator()->getMemoryInfo(static_cast<c10::DeviceIndex>(device));
  });
  m.def("empty_cache", [] { aten::tpu_device_allocator()->emptyCache(); });
  m.def("reset_peak_memory_stats", [](int device) {
    aten::tpu_device_allocator()->resetPeakStats(static_cast<c10::DeviceIndex>(device));
  });
  m.def("reset_accumulated_memory_stats", [](int device) {
    aten::tpu_device_allocator()->resetAccumulatedStats(static_cast<c10::DeviceIndex>(device));
  });
  m.def("device_properties", &device_properties);
  m.def("collapse_huge_pages", &collapse_huge_pages);
  m.def("huge_page_size", &runtime::huge_page_size);
  // The host address of a tpu tensor's buffer where device memory is host memory (a CPU
  // plugin), else None: for tests and diagnostics that inspect the process's mappings.
  m.def("buffer_host_address", [](const at::Tensor& t) -> std::optional<uintptr_t> {
    if (t.device().type() != c10::DeviceType::PrivateUse1 ||
        aten::client().platform_name() != "cpu") {
      return std::nullopt;
    }
    runtime::BufferPtr b = aten::storage_state(t).buffer();
    if (b == nullptr || !b->await_ready().ok()) return std::nullopt;
    auto addr = b->host_address();
    if (!addr.ok()) return std::nullopt;
    return reinterpret_cast<uintptr_t>(*addr);
  });
}
