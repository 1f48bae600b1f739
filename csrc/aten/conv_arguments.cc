#include "aten/conv_arguments.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace torchtpu::aten {
namespace {

// A per-dimension parameter: one value stands for every spatial dim.
std::vector<int64_t> expand_param(const c10::IValue& v, const char* name, int64_t dims) {
  std::vector<int64_t> p = v.toIntVector();
  if (p.size() == 1) return std::vector<int64_t>(dims, p[0]);
  TORCH_CHECK(static_cast<int64_t>(p.size()) == dims, "expected ", name,
              " to be a single integer value or a list of ", dims,
              " values to match the convolution dimensions, but got ", name, "=",
              c10::IntArrayRef(p));
  return p;
}

bool any_below(const std::vector<int64_t>& p, int64_t floor) {
  for (int64_t v : p) {
    if (v < floor) return true;
  }
  return false;
}

// The CPU kernels' check of a kernel with an empty spatial dim (an empty input takes
// PyTorch's empty path before any kernel, so it is not checked).
void check_kernel_size(const at::Tensor& input, c10::IntArrayRef k) {
  if (input.numel() == 0 || std::find(k.begin(), k.end(), 0) == k.end()) return;
  constexpr const char* kWhat = "kernel size should be greater than zero, but got";
  if (k.size() == 3) TORCH_CHECK(false, kWhat, ": ", k[0], " x ", k[1], " x ", k[2], " (TxHxW)");
  if (k.size() == 2) TORCH_CHECK(false, kWhat, " kernel_height: ", k[0], " kernel_width: ", k[1]);
  if (k.size() == 1) TORCH_CHECK(false, kWhat, " kernel_height: 1 kernel_width: ", k[0]);
  TORCH_CHECK(false, kWhat, ": ", k);
}

// The CPU's transposed kernels' check: each output_padding below its stride or its
// dilation (a 1-d convolution runs as a 2-d one of height 1, and says so).
void check_output_padding(std::vector<int64_t> output_padding, std::vector<int64_t> stride,
                          std::vector<int64_t> dilation) {
  bool ok = true;
  for (size_t i = 0; i < output_padding.size(); ++i) {
    ok = ok && (output_padding[i] < stride[i] || output_padding[i] < dilation[i]);
  }
  if (ok) return;
  if (output_padding.size() == 1) {
    output_padding.insert(output_padding.begin(), 0);
    stride.insert(stride.begin(), 1);
    dilation.insert(dilation.begin(), 1);
  }
  static const char* const kNames[] = {"depth", "height", "width"};
  size_t n = output_padding.size();
  std::ostringstream got;
  auto list = [&](const char* what, const std::vector<int64_t>& v) {
    for (size_t i = 0; i < n; ++i) {
      std::string dim = n <= 3 ? kNames[3 - n + i] : std::to_string(i);
      got << " " << what << "_" << dim << ": " << v[i];
    }
  };
  list("output_padding", output_padding);
  list("stride", stride);
  list("dilation", dilation);
  TORCH_CHECK(false, "output padding must be smaller than either stride or dilation, but got",
              got.str());
}

}  // namespace

void check_convolution_like_cpu(c10::ArrayRef<c10::IValue> args) {
  if (args.size() < 9 || !args[0].isTensor() || !args[1].isTensor()) return;
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor& weight = args[1].toTensor();
  at::Tensor bias = args[2].isTensor() ? args[2].toTensor() : at::Tensor();
  bool transposed = args[6].toBool();
  int64_t groups = args[8].toInt();
  int64_t dims = weight.dim() - 2;
  TORCH_CHECK(dims > 0, "weight should have at least three dimensions");
  TORCH_CHECK(groups > 0, "non-positive groups is not supported");
  std::vector<int64_t> stride = expand_param(args[3], "stride", dims);
  std::vector<int64_t> padding = expand_param(args[4], "padding", dims);
  std::vector<int64_t> dilation = expand_param(args[5], "dilation", dims);
  std::vector<int64_t> output_padding = expand_param(args[7], "output_padding", dims);

  TORCH_CHECK(!any_below(padding, 0), "negative padding is not supported");
  TORCH_CHECK(!any_below(output_padding, 0), "negative output_padding is not supported");
  TORCH_CHECK(!any_below(stride, 1), "non-positive stride is not supported");
  TORCH_CHECK(!any_below(dilation, 1), "dilation should be greater than zero, but got ",
              c10::IntArrayRef(dilation));

  c10::IntArrayRef w = weight.sizes();
  TORCH_CHECK(weight.dim() == input.dim(), "Expected ", weight.dim(), "-dimensional input for ",
              weight.dim(), "-dimensional weight ", w, ", but got ", input.dim(),
              "-dimensional input of size ", input.sizes(), " instead");
  TORCH_CHECK(w[0] >= groups, "Given groups=", groups, ", expected weight to be at least ",
              groups, " at dimension 0, but got weight of size ", w, " instead");
  // PyTorch's message puts the sizes in a second pair of brackets here.
  TORCH_CHECK(w[0] % groups == 0, "Given groups=", groups,
              ", expected weight to be divisible by ", groups,
              " at dimension 0, but got weight of size [", w, "] instead");
  if (transposed) {
    TORCH_CHECK(input.size(1) == w[0], "Given transposed=", transposed, ", weight of size ", w,
                ", expected input", input.sizes(), " to have ", w[0], " channels, but got ",
                input.size(1), " channels instead");
    TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w[1] * groups),
                "Given transposed=", transposed, ", weight of size ", w,
                ", expected bias to be 1-dimensional with ", w[1] * groups, " elements",
                ", but got bias of size ", bias.sizes(), " instead");
    check_kernel_size(input, w.slice(2));
    // (An empty input takes PyTorch's empty path before the kernel that checks it.)
    if (input.numel() > 0) check_output_padding(output_padding, stride, dilation);
    return;
  }
  TORCH_CHECK(input.size(1) == w[1] * groups, "Given groups=", groups, ", weight of size ", w,
              ", expected input", input.sizes(), " to have ", w[1] * groups,
              " channels, but got ", input.size(1), " channels instead");
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == w[0]),
              "Given weight of size ", w, ", expected bias to be 1-dimensional with ", w[0],
              " elements", ", but got bias of size ", bias.sizes(), " instead");
  std::ostringstream padded, kernel;
  bool fits = true;
  for (int64_t i = 0; i < dims; ++i) {
    int64_t in = input.size(i + 2) + 2 * padding[i];
    int64_t k = dilation[i] * (w[i + 2] - 1) + 1;
    fits = fits && in >= k;
    padded << (i > 0 ? " x " : "") << in;
    kernel << (i > 0 ? " x " : "") << k;
  }
  TORCH_CHECK(fits, "Calculated padded input size per channel: (", padded.str(),
              "). Kernel size: (", kernel.str(),
              "). Kernel size can't be greater than actual input size");
  check_kernel_size(input, w.slice(2));
}

}  // namespace torchtpu::aten
