// float32 matrix products as a call of the host GEMM kernel (kernels/gemm.h) instead of
// stablehlo.dot_general, where the running plugin took that kernel.
//
// Off until the device runtime turns it on (a CPU plugin that registered `torchtpu_gemm`
// with a BLAS behind it); other platforms, and every product it does not cover, keep
// dot_general. Covered: f32 operands whose batch dims lead both operands in the same order,
// with one contracting and one free dim each (mm, bmm, matmul, linear, addmm and baddbmm's
// products), M, N and K at least 16 (fewer: a product bound by memory that XLA streams as
// fast), at least 2^20 multiply-adds in all (less does not pay for the call), and M, N,
// K within a BLAS int. An operand that is a transpose of
// its last two dims is read in place (the kernel's trans flags) instead of copied.
#pragma once

#include <optional>

#include "lowering/hlo_builder.h"

namespace torchtpu::lowering {

void set_host_gemm(bool on);
bool host_gemm();

// Whether 16-bit float products widen their operands to f32 (a CPU plugin: the device
// runtime turns it on). XLA's CPU runtime has no dot for bf16 x bf16 = f32 in every program
// (its DotThunk refuses it where the operands come from other ops: padded graphs' masked
// operands), while f32 operands are exact (every bf16 and f16 value is an f32 value) and
// accumulate in f32 as before; large ones then take the host GEMM too. Accelerators keep
// 16-bit operands, which their matrix units want.
void set_widen_half_products(bool on);
bool widen_half_products();

// The product as a host GEMM call, result dims [batch..., lhs free, rhs free] (dot_general's
// order); nullopt when the kernel is off or the product is not one it covers.
std::optional<Value> host_gemm_product(Builder& b, Value lhs, Value rhs, const Dims& lhs_batch,
                                       const Dims& rhs_batch, const Dims& lhs_contract,
                                       const Dims& rhs_contract);

}  // namespace torchtpu::lowering
