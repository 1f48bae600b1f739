#include "aten/storage_ops.h"

#include <ATen/native/Resize.h>

#include "aten/storage_bytes.h"
#include "aten/tpu_storage.h"

namespace torchtpu::aten {
namespace {

void check_tpu_storage(const c10::Storage& storage) {
  TORCH_CHECK(storage.device().type() == c10::DeviceType::PrivateUse1,
              "tpu: Tensor.set_ got a storage on ", storage.device(),
              " for a tpu tensor; move it first (storage.to('tpu') or storage.tpu())");
  TORCH_CHECK(find_storage_state(storage.data_ptr()) != nullptr,
              kNoStorageStateMessage);
}

// PyTorch's as_strided argument checks, with its messages (ATen's own helper is not in
// every torch release's headers: torch 2.11 has none).
void check_as_strided_args(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset) {
  TORCH_CHECK(sizes.size() == strides.size(), "mismatch in length of strides and shape");
  for (int64_t s : strides) {
    TORCH_CHECK(s >= 0,
                "as_strided: Negative strides are not supported at the moment, got strides: ",
                strides);
  }
  TORCH_CHECK(offset >= 0, "Tensor: invalid storage offset ", offset);
}

}  // namespace

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                               c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  check_tpu_storage(source);
  int64_t off = offset.expect_int();
  std::vector<int64_t> sizes, strides;
  for (const c10::SymInt& s : size) sizes.push_back(s.expect_int());
  for (const c10::SymInt& s : stride) strides.push_back(s.expect_int());
  // PyTorch's own checks (offset, size/stride lengths, devices), then the metadata.
  at::native::checkSetStorage(self, source, off, c10::IntArrayRef(sizes),
                              stride.data() ? c10::IntArrayRef(strides) : c10::IntArrayRef());
  auto* impl = self.unsafeGetTensorImpl();
  if (stride.data() != nullptr) {
    check_as_strided_args(sizes, strides, off);
    impl->set_sizes_and_strides(sizes, strides, off);
  } else {
    impl->set_storage_offset(off);
    impl->set_sizes_contiguous(sizes);
  }
  // Like the CPU's set_: a storage too small for the view grows (zero-filled here).
  int64_t numel = 1, extent = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    numel *= sizes[i];
    if (sizes[i] > 0) extent += (sizes[i] - 1) * impl->strides()[i];
  }
  if (numel > 0) {
    int64_t needed = (off + extent + 1) * static_cast<int64_t>(self.element_size());
    if (needed > static_cast<int64_t>(self.storage().nbytes())) {
      resize_storage_bytes(self.storage().unsafeGetStorageImpl(), needed);
    }
  }
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  int64_t item = static_cast<int64_t>(self.element_size());
  int64_t n = static_cast<int64_t>(source.nbytes()) / item;
  TORCH_CHECK(static_cast<int64_t>(source.nbytes()) % item == 0,
              "tpu: Tensor.set_: a storage of ", source.nbytes(), " bytes does not hold whole ",
              self.scalar_type(), " elements of ", item, " bytes");
  std::vector<c10::SymInt> size{c10::SymInt(n)};
  return set_storage_offset(self, std::move(source), c10::SymInt(0), size, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(self.dtype() == source.dtype(), "Could not set tensor of type ", source.dtype(),
              " to a tensor of type ", self.dtype());
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return set_storage_offset(self, source.storage(), source.sym_storage_offset(),
                            source.sym_sizes(), source.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, tpu_allocator(), /*resizable=*/true);
  std::vector<c10::SymInt> size{c10::SymInt(0)};
  return set_storage_offset(self, std::move(storage), c10::SymInt(0), size, {});
}

}  // namespace torchtpu::aten
