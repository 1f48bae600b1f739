#include "aten/host_transfer.h"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/tpu_storage.h"
#include "base/check.h"

namespace torchtpu::aten {

namespace {

using ScalarKey = std::tuple<int, int, uint64_t, uint64_t>;  // dtype, device, bits (16 bytes)
std::mutex g_scalar_mu;
std::map<ScalarKey, runtime::BufferPtr>* const g_scalar_cache =
    new std::map<ScalarKey, runtime::BufferPtr>();  // buffers may outlive statics

}  // namespace

void clear_scalar_cache() {
  std::lock_guard<std::mutex> lock(g_scalar_mu);
  g_scalar_cache->clear();
}

runtime::BufferPtr scalar_to_buffer(const c10::Scalar& s, base::DType dtype, int device) {
  // Convert through a CPU 0-d tensor so the rounding is exactly PyTorch's.
  TORCH_CHECK(!s.isComplex() || base::is_complex(dtype), "tpu: internal error: a complex "
              "scalar was asked for as ", base::dtype_name(dtype));
  return host_scalar_to_buffer(
      at::scalar_tensor(s, at::TensorOptions().dtype(to_scalar_type(dtype))), device);
}

runtime::BufferPtr host_scalar_to_buffer(const at::Tensor& host, int device) {
  base::DType dtype = to_dtype(host.scalar_type());
  uint64_t bits[2] = {0, 0};
  std::memcpy(bits, host.data_ptr(), host.element_size());
  ScalarKey key{static_cast<int>(dtype), device, bits[0], bits[1]};
  {
    std::lock_guard<std::mutex> lock(g_scalar_mu);
    auto it = g_scalar_cache->find(key);
    if (it != g_scalar_cache->end()) return it->second;
  }
  runtime::BufferPtr b = cpu_to_buffer(host, device);
  std::lock_guard<std::mutex> lock(g_scalar_mu);
  // Bounded: scalars that are data would churn.
  if (g_scalar_cache->size() > 4096) g_scalar_cache->clear();
  g_scalar_cache->emplace(key, b);
  return b;
}

runtime::BufferPtr cpu_to_buffer(const at::Tensor& cpu, int device) {
  at::Tensor c = cpu.contiguous();
  std::vector<int64_t> dims(c.sizes().begin(), c.sizes().end());
  auto b = client().buffer_from_host(c.data_ptr(), to_dtype(c.scalar_type()), dims, device);
  TORCH_CHECK(b.ok(), b.status().message());
  return *b;
}

at::Tensor buffer_to_cpu(const runtime::Buffer& buffer) {
  flush_data_checks();  // a host read is where queued checks of compiled graphs report
  at::Tensor out = at::empty(buffer.dims(), at::TensorOptions().dtype(to_scalar_type(buffer.dtype())));
  auto status = buffer.to_host(out.data_ptr(), out.nbytes());
  TORCH_CHECK(status.ok(), status.message());
  return out;
}

void buffer_into_cpu(const runtime::Buffer& buffer, const at::Tensor& dst) {
  TORCHTPU_CHECK(dst.is_cpu() && dst.is_contiguous() &&
                 dst.scalar_type() == to_scalar_type(buffer.dtype()) &&
                     dst.numel() == buffer.num_elements(),
                 "buffer_into_cpu: the destination does not match the buffer");
  flush_data_checks();
  auto status = buffer.to_host(dst.data_ptr(), dst.nbytes());
  TORCH_CHECK(status.ok(), status.message());
}

}  // namespace torchtpu::aten
