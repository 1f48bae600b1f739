#include "distributed/host_reduce.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "base/check.h"

namespace torchtpu::distributed {

c10d::ReduceOp gloo_op(const c10d::ReduceOp& op) {
  if (op.op_ == c10d::ReduceOp::AVG || op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  return op;
}

void premultiply(at::Tensor& host, const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  if (s == nullptr) return;  // the backend checks that PREMUL_SUM carries a factor
  if (s->tensor_factor.defined()) {
    host.mul_(s->tensor_factor.to(at::kCPU));
  } else {
    host.mul_(s->double_factor);
  }
}

void average(at::Tensor& host, const c10d::ReduceOp& op, int size) {
  if (op.op_ != c10d::ReduceOp::AVG) return;
  if (at::isIntegralType(host.scalar_type(), /*includeBool=*/false)) {
    host.div_(size, "trunc");
  } else {
    host.div_(size);
  }
}

void combine(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
             const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: at::add_out(out, a, b); break;
    case c10d::ReduceOp::PRODUCT: at::mul_out(out, a, b); break;
    // Gloo's std::min / std::max keep `a` unless the comparison picks `b`, so a NaN wins only
    // from `a`: the carried path must give the same answer as Gloo's exchange.
    case c10d::ReduceOp::MIN: out.copy_(at::where(at::lt(b, a), b, a)); break;
    case c10d::ReduceOp::MAX: out.copy_(at::where(at::lt(a, b), b, a)); break;
    case c10d::ReduceOp::BAND: at::bitwise_and_out(out, a, b); break;
    case c10d::ReduceOp::BOR: at::bitwise_or_out(out, a, b); break;
    case c10d::ReduceOp::BXOR: at::bitwise_xor_out(out, a, b); break;
    default: TORCHTPU_CHECK(false, "combine: a reduce op check_reduce_op does not accept");
  }
}

}  // namespace torchtpu::distributed
