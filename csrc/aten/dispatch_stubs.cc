// DispatchStub entries for tpu. A few composite kernels PyTorch runs for every backend
// (not through the dispatcher) call a DispatchStub for the device type of their tensors,
// which has no entry for PrivateUse1 unless the backend registers one: without it the call
// fails with PyTorch's internal assert "DispatchStub: missing kernel for tpu". Each entry
// here computes the stub's result with tpu ops, in the precision of the CPU's kernel.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/UnaryOps.h>

namespace torchtpu::aten {
namespace {

// torch.kaiser_window: output(0) = i0(beta * sqrt(|1 - ((a - alpha) / alpha)^2|)) / i0(beta)
// over input(0) = arange(window_length), alpha = (window_length - 1) / 2, in the output's
// opmath type (float32 for 16-bit floats), as kaiser_window_kernel on the CPU.
void kaiser_window(at::TensorIteratorBase& iter, const int64_t window_length, const double beta) {
  const at::Tensor& out = iter.output(0);
  at::ScalarType opmath = at::toOpMathType(out.scalar_type());
  at::Tensor a = iter.input(0).to(opmath);
  const double alpha = static_cast<double>(window_length - 1) / 2.0;
  at::Tensor ratio = at::pow(at::div(at::sub(a, alpha), alpha), 2.0);
  at::Tensor arg = at::mul(at::sqrt(at::abs(at::rsub(ratio, 1.0))), beta);
  at::Tensor denominator = at::i0(at::scalar_tensor(beta, a.options()));
  out.copy_(at::div(at::i0(arg), denominator));
}

}  // namespace
}  // namespace torchtpu::aten

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(kaiser_window_stub, &torchtpu::aten::kaiser_window)
}  // namespace at::native
