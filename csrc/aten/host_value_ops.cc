// Kernels of ops that return a host value rather than a tensor, so they cannot be one
// lowered program: they combine lowered ops and read the answer back (like .item()).
#include <ATen/ATen.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

// torch.equal: same sizes and elements (NaN equals nothing), with the CPU kernel's checks.
bool tpu_equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. "
              "Got: ", self.device(), " and ", other.device());
  TORCH_CHECK(self.dtype() == other.dtype(), "Expected object of scalar type ", self.dtype(),
              " but got scalar type ", other.dtype(), " for argument 'other'");
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { m.impl("equal", tpu_equal); }

}  // namespace
}  // namespace torchtpu::aten
