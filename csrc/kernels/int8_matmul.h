// Weight-only int8 matrix product (w8a16-style: f32 activations, int8 weights), as a host
// kernel for the XLA CPU plugin.
//
// A decode step multiplies a few activation rows by every weight of the model, so it is
// bound by reading the weights. In StableHLO an int8 weight must first be converted to a
// full f32 copy (written, then read again by the matmul); this kernel reads the int8 bytes
// once and converts them in registers, so a step reads a quarter of the bytes f32 weights
// take. The serving runner calls it for every row count (decodes and prefill chunks
// alike): the kernel runs every tile of rows over one packed block while the block is in
// cache, so each call still reads the weights from memory once, and for many rows it
// measured no slower than XLA's blocked matmul on a dequantized copy (which writes and
// reads a full f32 copy of the weight per call).
//
// The weights are packed for the kernel, once, when a model is quantized: the output
// channels in blocks of kInt8PackedBlock (64), block b holding channels [64 b, 64 b + 64)
// as K rows of 64 bytes (one cache line each), the blocks one after another. A block's
// weights are then one contiguous range, which the kernel reads front to back at the
// bandwidth of a streaming read; in the unpacked [K, N] layout each row of a block is one
// line at a stride of N bytes, which the hardware prefetcher loses (a third of the
// bandwidth, less for a wide head). Channels past N in the last block are zero padding.
//
// Shapes (row-major): x f32[M, K], w s8[ceil(N / 64), K, 64] packed from an unpacked
// wk[K, N] (a column per output channel, the layout the f32 weights have) as
// w[b, k, i] = wk[k, 64 b + i], scale f32[N]; out f32[M, N] with
// out[m, n] = scale[n] * sum_k x[m, k] * wk[k, n].
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/parallel_for.h"
#include "kernels/xla_ffi.h"

namespace torchtpu::kernels {

// Output channels per packed block, and the blocks that N channels take.
inline constexpr int64_t kInt8PackedBlock = 64;
inline constexpr int64_t int8_packed_blocks(int64_t n) {
  return (n + kInt8PackedBlock - 1) / kInt8PackedBlock;
}

// The instruction sets the kernel has code for; kBest is the widest this CPU runs.
enum class Int8Isa { kBest, kAvx512, kAvx2, kPortable };
bool int8_isa_supported(Int8Isa isa);

// Computes `out`; output channels are independent: `parallel_for` spreads blocks of them over
// threads (empty: one after another on this thread). The result does not depend on how the
// blocks are spread. `isa` (tests) must be supported.
// `w` is packed (above), int8_packed_blocks(n) * k * 64 bytes.
void int8_matmul(int64_t m, int64_t k, int64_t n, const float* x, const int8_t* w,
                 const float* scale, float* out, const ParallelFor& parallel_for = {},
                 Int8Isa isa = Int8Isa::kBest);

// The custom-call target name and its typed-FFI handler. Operands: x, w, scale; result: out.
inline constexpr char kInt8MatmulTarget[] = "torchtpu_int8_matmul";
extern "C" XLA_FFI_Error* torchtpu_int8_matmul_ffi(XLA_FFI_CallFrame* frame);

}  // namespace torchtpu::kernels
