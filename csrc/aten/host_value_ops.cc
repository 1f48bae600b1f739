// Kernels of ops that return a host value rather than a tensor, or a tensor whose size is
// a value of the data, so they cannot be one lowered program: they combine lowered ops and
// read the answer back (like .item()).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>

#include "base/metrics.h"

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

// torch.bincount: the number of bins is max(input) + 1 (or minlength), a value of the data,
// so the input's min and max are read back first (one host round-trip, counted, as CUDA
// syncs for it too); the counts are then one lowered index_add. Dtypes and errors are the
// CPU kernel's: int64 counts, float32 sums of float32 weights, float64 for other weights.
at::Tensor tpu_bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights_opt,
                        int64_t minlength) {
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  if (!c10::isIntegralType(self.scalar_type(), /*includeBool=*/false)) {
    // The CPU kernel's dtype error (it is defined for integer inputs only).
    std::optional<at::Tensor> w = weights_opt ? std::optional<at::Tensor>(weights_opt->cpu())
                                              : std::nullopt;
    return at::bincount(self.cpu(), w, minlength).to(self.device());
  }
  if (self.dim() == 1 && self.numel() == 0) {
    return at::zeros({minlength}, self.options().dtype(at::kLong));
  }
  bool has_weights = weights_opt.has_value() && weights_opt->defined();
  base::keyed_counter_add("host_roundtrip_ops", "aten::bincount");
  base::counter_add("num_host_roundtrips");
  int64_t lo = -1, hi = 0;
  if (self.dim() == 1) {
    at::Tensor range = at::stack({self.min(), self.max()}).to(at::kLong).cpu();
    lo = range[0].item<int64_t>();
    hi = range[1].item<int64_t>();
  }
  TORCH_CHECK(self.dim() == 1 && lo >= 0,
              "bincount only supports 1-d non-negative integral inputs.");
  if (has_weights) {
    const at::Tensor& w = *weights_opt;
    TORCH_CHECK(w.dim() == 1 && w.size(0) == self.size(0),
                "weights should be 1-d and have the same length as input");
  }
  int64_t nbins = std::max(hi + 1, minlength);
  // index_add takes int32/int64 indices; the CPU kernel counts any integer dtype.
  at::Tensor index = self.scalar_type() == at::kInt ? self : self.to(at::kLong);
  if (!has_weights) {
    at::Tensor ones = at::ones({self.size(0)}, self.options().dtype(at::kLong));
    return at::zeros({nbins}, ones.options()).index_add_(0, index, ones);
  }
  at::ScalarType out = weights_opt->scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor w = weights_opt->to(out);
  return at::zeros({nbins}, w.options()).index_add_(0, index, w);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("equal", tpu_equal);
  m.impl("bincount", tpu_bincount);
}

}  // namespace
}  // namespace torchtpu::aten
