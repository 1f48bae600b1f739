#include "aten/host_transfer.h"

#include <ATen/ATen.h>
#include <c10/util/TypeCast.h>

#include <cstring>
#include <unordered_map>
#include <mutex>

#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/status_error.h"
#include "aten/tpu_storage.h"
#include "base/check.h"

namespace torchtpu::aten {

namespace {

struct ScalarKey {
  int dtype;
  int device;
  uint64_t bits[2];  // the value in its dtype (16 bytes hold complex128)
  bool operator==(const ScalarKey& o) const {
    return dtype == o.dtype && device == o.device && bits[0] == o.bits[0] && bits[1] == o.bits[1];
  }
};
struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    uint64_t h = k.bits[0] * 0x9e3779b97f4a7c15ull ^ k.bits[1];
    return static_cast<size_t>(h ^ (static_cast<uint64_t>(k.dtype) << 48) ^
                               (static_cast<uint64_t>(k.device) << 40));
  }
};
std::mutex g_scalar_mu;
auto* const g_scalar_cache =
    new std::unordered_map<ScalarKey, runtime::BufferPtr, ScalarKeyHash>();  // outlives statics

runtime::BufferPtr cached_scalar(const ScalarKey& key, const void* data, base::DType dtype,
                                 int device) {
  {
    std::lock_guard<std::mutex> lock(g_scalar_mu);
    auto it = g_scalar_cache->find(key);
    if (it != g_scalar_cache->end()) return it->second;
  }
  auto b = client().buffer_from_host(data, dtype, {}, device);
  if (!b.ok()) raise_status(b.status(), device);
  std::lock_guard<std::mutex> lock(g_scalar_mu);
  // Bounded: scalars that are data would churn.
  if (g_scalar_cache->size() > 4096) g_scalar_cache->clear();
  g_scalar_cache->emplace(key, *b);
  return *b;
}

// `s` in dtype `T`, written into `out`: `checked` as the CPU's fill_ converts it (an
// out-of-range value raises PyTorch's overflow error), else as TensorIterator casts a
// wrapped number (static_cast: 1000 as uint8 is 232, 1e300 as float inf).
template <typename T>
void convert_scalar(const c10::Scalar& s, bool checked, uint64_t* out) {
  T v;
  if (checked) {
    v = s.to<T>();
  } else if (s.isComplex()) {
    v = c10::convert<T>(s.toComplexDouble());
  } else if (s.isFloatingPoint()) {
    v = c10::convert<T>(s.toDouble());
  } else if (s.isBoolean()) {
    v = c10::convert<T>(s.toBool());
  } else if (s.type() == c10::ScalarType::UInt64) {
    v = c10::convert<T>(s.toUInt64());
  } else {
    v = c10::convert<T>(s.toLong());
  }
  std::memcpy(out, &v, sizeof v);
}

}  // namespace

void clear_scalar_cache() {
  std::lock_guard<std::mutex> lock(g_scalar_mu);
  g_scalar_cache->clear();
}

runtime::BufferPtr scalar_to_buffer(const c10::Scalar& s, base::DType dtype, int device,
                                    bool checked) {
  TORCH_CHECK(!s.isComplex() || base::is_complex(dtype), "tpu: internal error: a complex "
              "scalar was asked for as ", base::dtype_name(dtype));
  ScalarKey key{static_cast<int>(dtype), device, {0, 0}};
  switch (dtype) {
    case base::DType::kBool: convert_scalar<bool>(s, checked, key.bits); break;
    case base::DType::kI8: convert_scalar<int8_t>(s, checked, key.bits); break;
    case base::DType::kU8: convert_scalar<uint8_t>(s, checked, key.bits); break;
    case base::DType::kI16: convert_scalar<int16_t>(s, checked, key.bits); break;
    case base::DType::kI32: convert_scalar<int32_t>(s, checked, key.bits); break;
    case base::DType::kI64: convert_scalar<int64_t>(s, checked, key.bits); break;
    case base::DType::kU16: convert_scalar<uint16_t>(s, checked, key.bits); break;
    case base::DType::kU32: convert_scalar<uint32_t>(s, checked, key.bits); break;
    case base::DType::kU64: convert_scalar<uint64_t>(s, checked, key.bits); break;
    case base::DType::kF16: convert_scalar<c10::Half>(s, checked, key.bits); break;
    case base::DType::kBF16: convert_scalar<c10::BFloat16>(s, checked, key.bits); break;
    case base::DType::kF32: convert_scalar<float>(s, checked, key.bits); break;
    case base::DType::kF64: convert_scalar<double>(s, checked, key.bits); break;
    case base::DType::kC64: convert_scalar<c10::complex<float>>(s, checked, key.bits); break;
    case base::DType::kC128: convert_scalar<c10::complex<double>>(s, checked, key.bits); break;
    default:
      // Other dtypes through a CPU 0-d tensor, so the rounding is exactly PyTorch's.
      return host_scalar_to_buffer(
          at::scalar_tensor(s, at::TensorOptions().dtype(to_scalar_type(dtype))), device);
  }
  return cached_scalar(key, key.bits, dtype, device);
}

runtime::BufferPtr host_scalar_to_buffer(const at::Tensor& host, int device) {
  base::DType dtype = to_dtype(host.scalar_type());
  ScalarKey key{static_cast<int>(dtype), device, {0, 0}};
  std::memcpy(key.bits, host.data_ptr(), host.element_size());
  return cached_scalar(key, key.bits, dtype, device);
}

runtime::BufferPtr cpu_to_buffer(const at::Tensor& cpu, int device) {
  at::Tensor c = cpu.contiguous();
  std::vector<int64_t> dims(c.sizes().begin(), c.sizes().end());
  auto b = client().buffer_from_host(c.data_ptr(), to_dtype(c.scalar_type()), dims, device);
  if (!b.ok()) raise_status(b.status(), device);
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
