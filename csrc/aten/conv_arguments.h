// The argument checks PyTorch's convolution makes before it picks a kernel.
//
// aten::convolution is claimed for tpu (its lowering is one stablehlo.convolution), which
// skips at::_convolution, where the CPU and CUDA check the parameters and the shapes; the
// meta kernel checks only some of them, with other messages. Without these, a negative
// padding cropped the input and a zero dilation failed inside the lowering.
#pragma once

#include <ATen/core/ivalue.h>

namespace torchtpu::aten {

// Raises PyTorch's error for convolution(input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups) arguments the CPU refuses, in the CPU's order.
void check_convolution_like_cpu(c10::ArrayRef<c10::IValue> args);

}  // namespace torchtpu::aten
