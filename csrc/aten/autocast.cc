// Autocast (torch.autocast("tpu", dtype=torch.bfloat16 / torch.float16)).
//
// PyTorch registers autocast kernels for its own device keys only; a PrivateUse1 backend
// registers its own under AutocastPrivateUse1. We reuse PyTorch's accelerator op lists
// (the ones CUDA, XPU, MPS and MTIA share, exported by ATen/autocast_mode.h for this
// purpose): matmuls, convolutions and linear layers run in the autocast dtype; reductions,
// softmax, norms, losses and the range-sensitive pointwise functions run in float32;
// ops mixing dtypes (addcmul, index_put, ...) run in the widest input dtype. The casts are
// ordinary tpu ops, so autocast adds no fallback. The Python side (torch.tpu's
// get_amp_supported_dtype) tells torch.autocast which dtypes the device accepts.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/headeronly/version.h>
#include <torch/library.h>

namespace torchtpu::aten {
namespace {

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&,
                                       const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\nMany models use a sigmoid layer right before the binary cross entropy "
              "layer. In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss. "
              "binary_cross_entropy_with_logits and BCEWithLogits are safe to autocast.");
}

}  // namespace

// Every op without an autocast rule passes straight through to the tpu kernel.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// PyTorch's op-list macros spell the signatures with unqualified ATen names. Torch 2.11's
// list (a GPU image's torch, which scripts/gpu_check.sh builds against) names DimnameList,
// which 2.13 no longer has.
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
using at::DimnameList;
#endif
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TORCHTPU_AUTOCAST_LOW_PRECISION_FP(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TORCHTPU_AUTOCAST_LOW_PRECISION_FP)
#undef TORCHTPU_AUTOCAST_LOW_PRECISION_FP

#define TORCHTPU_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TORCHTPU_AUTOCAST_FP32)
#undef TORCHTPU_AUTOCAST_FP32

#define TORCHTPU_AUTOCAST_FP32_SET_OPT_DTYPE(...) \
  KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCHTPU_AUTOCAST_FP32_SET_OPT_DTYPE)
#undef TORCHTPU_AUTOCAST_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define TORCHTPU_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TORCHTPU_AUTOCAST_PROMOTE)
#undef TORCHTPU_AUTOCAST_PROMOTE

  // As on CUDA: binary_cross_entropy is unsafe in 16 bits; the error says to use
  // binary_cross_entropy_with_logits (which autocasts to float32).
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN((&binary_cross_entropy_banned)));
}

}  // namespace torchtpu::aten
