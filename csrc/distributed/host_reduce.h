// Reductions that host-staged collectives compute on the host: what Gloo lacks (AVG,
// PREMUL_SUM) around Gloo's own, and whole reductions of payloads gathered from every rank.
// Thread safety: pure functions of their arguments.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

namespace torchtpu::distributed {

// What Gloo computes for `op` (AVG and PREMUL_SUM become SUM; the rest is done here).
c10d::ReduceOp gloo_op(const c10d::ReduceOp& op);
// PREMUL_SUM: multiplies this rank's contribution by the op's factor (else nothing).
void premultiply(at::Tensor& host, const c10d::ReduceOp& op);
// AVG: divides the sum by the group's size (integer division truncates).
void average(at::Tensor& host, const c10d::ReduceOp& op, int size);
// out = a (op) b, elementwise, for the reduce ops Gloo computes (gloo_op's result); `out`
// may be `a`.
void combine(at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
             const c10d::ReduceOp& op);

// out = parts(0) (op) parts(1) (op) ..., in rank order, so every rank gets the same bits.
template <typename Part>
void reduce_parts(at::Tensor& out, int n, const Part& parts, const c10d::ReduceOp& op) {
  if (n == 1) {
    out.copy_(parts(0));
    return;
  }
  combine(out, parts(0), parts(1), op);
  for (int r = 2; r < n; ++r) combine(out, out, parts(r), op);
}

}  // namespace torchtpu::distributed
