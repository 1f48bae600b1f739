// Kernels of ops that return a host value rather than a tensor, or a tensor whose size is
// a value of the data, so they cannot be one lowered program: they combine lowered ops and
// read the answer back (like .item()).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>

#include "base/metrics.h"

namespace torchtpu::aten {
namespace {

// torch.equal: same sizes and elements (NaN equals nothing; tensors of two dtypes compare
// their values promoted, as the CPU kernel does), with the CPU kernel's device check.
bool tpu_equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Cannot compare two tensors on different devices. "
              "Got: ", self.device(), " and ", other.device());
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

// repeat_interleave.Tensor(repeats, output_size?): index i repeated repeats[i] times, the
// CPU kernel's checks and dtype. The length is the repeats' sum: without output_size it
// and the smallest repeat are read back together (one counted round-trip, as CUDA syncs
// for it too); with it nothing is read, and the CPU's two checks (no negative repeat, the
// sum equals output_size) become asserts raised at the next host read. Position j of the
// result is the number of running sums <= j (searchsorted, right).
at::Tensor tpu_repeat_interleave(const at::Tensor& repeats, std::optional<int64_t> output_size) {
  // The CPU kernel dispatches on the index dtypes before its own checks.
  TORCH_CHECK_NOT_IMPLEMENTED(
      repeats.scalar_type() == at::kLong || repeats.scalar_type() == at::kInt,
      "\"repeat_interleave_cpu\" not implemented for '", repeats.scalar_type(), "'");
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  if (repeats.size(0) == 0) return at::empty_like(repeats, at::MemoryFormat::Contiguous);
  at::Tensor cumsum = repeats.cumsum(0, at::kLong);
  at::Tensor total_t = cumsum[-1];
  int64_t total = 0;
  if (output_size.has_value()) {
    total = *output_size;
    at::_assert_async(repeats.min().ge(0), "repeats can not be negative");
    at::_assert_async(total_t.eq(total), "allocated size does not match required size");
  } else {
    base::keyed_counter_add("host_roundtrip_ops", "aten::repeat_interleave");
    base::counter_add("num_host_roundtrips");
    at::Tensor read = at::stack({total_t, repeats.min().to(at::kLong)}).cpu();
    total = read[0].item<int64_t>();
    TORCH_CHECK(read[1].item<int64_t>() >= 0, "repeats can not be negative");
  }
  at::Tensor positions = at::arange(total, cumsum.options());
  return at::searchsorted(cumsum, positions, /*out_int32=*/false, /*right=*/true)
      .to(repeats.scalar_type());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("equal", tpu_equal);
  m.impl("bincount", tpu_bincount);
  m.impl("repeat_interleave.Tensor", tpu_repeat_interleave);
}

}  // namespace
}  // namespace torchtpu::aten
