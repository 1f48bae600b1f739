// Weight-only int8 matrix product (w8a16-style: f32 activations, int8 weights), as a host
// kernel for the XLA CPU plugin.
//
// A decode step multiplies a few activation rows by every weight of the model, so it is
// bound by reading the weights. In StableHLO an int8 weight must first be converted to a
// full f32 copy (written, then read again by the matmul); this kernel reads the int8 bytes
// once and converts them in registers, so a step reads a quarter of the bytes f32 weights
// take. For many rows XLA's blocked matmul on a dequantized copy is faster (the copy is
// paid once for all rows), which is why callers use the kernel only for few rows.
//
// Shapes (row-major): x f32[M, K], w s8[K, N] (a column per output channel, the layout the
// f32 weights have), scale f32[N]; out f32[M, N] with
// out[m, n] = scale[n] * sum_k x[m, k] * w[k, n].
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/paged_attention.h"  // ParallelFor
#include "kernels/xla_ffi.h"

namespace torchtpu::kernels {

// The instruction sets the kernel has code for; kBest is the widest this CPU runs.
enum class Int8Isa { kBest, kAvx512, kAvx2, kPortable };
bool int8_isa_supported(Int8Isa isa);

// Computes `out`; output channels are independent: `parallel_for` spreads blocks of them over
// threads (empty: one after another on this thread). The result does not depend on how the
// blocks are spread. `isa` (tests) must be supported.
void int8_matmul(int64_t m, int64_t k, int64_t n, const float* x, const int8_t* w,
                 const float* scale, float* out, const ParallelFor& parallel_for = {},
                 Int8Isa isa = Int8Isa::kBest);

// The custom-call target name and its typed-FFI handler. Operands: x, w, scale; result: out.
inline constexpr char kInt8MatmulTarget[] = "torchtpu_int8_matmul";
extern "C" XLA_FFI_Error* torchtpu_int8_matmul_ffi(XLA_FFI_CallFrame* frame);

}  // namespace torchtpu::kernels
