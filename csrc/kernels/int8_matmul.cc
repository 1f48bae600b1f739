#include "kernels/int8_matmul.h"

#include <algorithm>
#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <string>
#include <vector>

#include "kernels/ffi_handler.h"

namespace torchtpu::kernels {
namespace {

// The weights are packed (see int8_matmul.h): block b holds output channels
// [64 b, 64 b + 64) as K rows of 64 bytes, one cache line each, one after another. A work
// item is whole blocks, for every row of x and all of K, so it reads one contiguous range of
// the weights. Within a block, each k converts the 64 weights of its row once (in
// registers) and multiplies them by R rows of x at once (x[r, k] broadcast), so 64 * R sums
// accumulate in registers with no horizontal sums, and a weight byte is converted once per
// R rows (once in all for a decode step's few rows). Vector code is written with
// intrinsics: GCC turns a vector-extension int8 -> float conversion into one scalar
// conversion per element.
constexpr int64_t kBlock = kInt8PackedBlock;
// A block is read front to back; a software prefetch this many rows (cache lines, 1 KiB)
// ahead keeps the next lines in flight across page ends, where the hardware prefetcher
// stops (a quarter more bandwidth than without it, in a microbenchmark).
constexpr int64_t kPrefetchRows = 16;
constexpr int64_t kMinItemMacs = 256 * 1024;

// The portable path, and the columns of a last, partial block (its padding is not read).
void block_scalar(int64_t m, int64_t k, int64_t n0, int64_t n1, const float* x,
                  const int8_t* w, const float* scale, float* out, int64_t n) {
  const int8_t* wb = w + (n0 / kBlock) * k * kBlock;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = n0; c < n1; ++c) {
      const int8_t* col = wb + (c - n0);
      float s = 0.0f;
      for (int64_t j = 0; j < k; ++j) s += x[r * k + j] * static_cast<float>(col[j * kBlock]);
      out[r * n + c] = s * scale[c];
    }
  }
}

#if defined(__x86_64__)
// Rows [r0, r0 + R) times V vectors of L columns from c0; `col` is the first of them in
// their block's first row.
#define TORCHTPU_INT8_TILE(NAME, TARGET, VEC, L, ZERO, LOAD_W, BCAST, FMA, MUL, LOADU, STOREU) \
  template <int R, int V>                                                                     \
  __attribute__((target(TARGET), always_inline)) inline void NAME(                            \
      int64_t k, int64_t n, int64_t r0, int64_t c0, const float* x, const int8_t* col,        \
      const float* scale, float* out) {                                                       \
    VEC acc[R][V];                                                                            \
    for (int r = 0; r < R; ++r)                                                               \
      for (int v = 0; v < V; ++v) acc[r][v] = ZERO;                                           \
    const float* xr = x + r0 * k;                                                             \
    for (int64_t j = 0; j < k; ++j, col += kBlock) {                                          \
      __builtin_prefetch(col + kPrefetchRows * kBlock);                                       \
      VEC wv[V];                                                                              \
      for (int v = 0; v < V; ++v) wv[v] = LOAD_W(col + v * L);                                \
      for (int r = 0; r < R; ++r) {                                                           \
        const VEC xb = BCAST(xr[r * k + j]);                                                  \
        for (int v = 0; v < V; ++v) acc[r][v] = FMA(xb, wv[v], acc[r][v]);                    \
      }                                                                                       \
    }                                                                                         \
    for (int v = 0; v < V; ++v) {                                                             \
      const VEC sv = LOADU(scale + c0 + v * L);                                               \
      for (int r = 0; r < R; ++r) STOREU(out + (r0 + r) * n + c0 + v * L, MUL(acc[r][v], sv)); \
    }                                                                                         \
  }

__attribute__((target("avx2,fma"))) inline __m256 load_w8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
TORCHTPU_INT8_TILE(tile_avx2, "avx2,fma", __m256, 8, _mm256_setzero_ps(), load_w8,
                   _mm256_set1_ps, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_loadu_ps,
                   _mm256_storeu_ps)

// GCC 12 reports the AVX-512 intrinsics' own placeholder operands as maybe uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) inline __m512 load_w16(const int8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
TORCHTPU_INT8_TILE(tile_avx512, "avx512f", __m512, 16, _mm512_setzero_ps(), load_w16,
                   _mm512_set1_ps, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_loadu_ps,
                   _mm512_storeu_ps)
#undef TORCHTPU_INT8_TILE

// Tiles that fit the registers: AVX2's 16 hold 2 rows x 4 vectors of 8 columns (8 sums, 4
// weight vectors, a broadcast), so a block is two tiles of 32 columns (the second reads
// the block's lines again, from the cache); AVX-512's 32 hold 4 rows x 4 vectors of 16 (a
// whole block).
__attribute__((target("avx2,fma"))) void block_avx2(int64_t m, int64_t k, int64_t n0,
                                                     int64_t n1, const float* x,
                                                     const int8_t* w, const float* scale,
                                                     float* out, int64_t n) {
  if (n1 - n0 < kBlock) return block_scalar(m, k, n0, n1, x, w, scale, out, n);
  const int8_t* wb = w + (n0 / kBlock) * k * kBlock;
  for (int64_t c0 = n0; c0 < n1; c0 += 32) {
    const int8_t* col = wb + (c0 - n0);
    int64_t r0 = 0;
    for (; r0 + 2 <= m; r0 += 2) tile_avx2<2, 4>(k, n, r0, c0, x, col, scale, out);
    if (r0 < m) tile_avx2<1, 4>(k, n, r0, c0, x, col, scale, out);
  }
}

__attribute__((target("avx512f"))) void block_avx512(int64_t m, int64_t k, int64_t n0,
                                                     int64_t n1, const float* x,
                                                     const int8_t* w, const float* scale,
                                                     float* out, int64_t n) {
  if (n1 - n0 < kBlock) return block_scalar(m, k, n0, n1, x, w, scale, out, n);
  const int8_t* wb = w + (n0 / kBlock) * k * kBlock;
  int64_t r0 = 0;
  for (; r0 + 4 <= m; r0 += 4) tile_avx512<4, 4>(k, n, r0, n0, x, wb, scale, out);
  for (; r0 + 2 <= m; r0 += 2) tile_avx512<2, 4>(k, n, r0, n0, x, wb, scale, out);
  if (r0 < m) tile_avx512<1, 4>(k, n, r0, n0, x, wb, scale, out);
}
#pragma GCC diagnostic pop
#endif

using BlockFn = void (*)(int64_t, int64_t, int64_t, int64_t, const float*, const int8_t*,
                         const float*, float*, int64_t);

BlockFn block_for(Int8Isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case Int8Isa::kAvx512: return block_avx512;
    case Int8Isa::kAvx2: return block_avx2;
#endif
    case Int8Isa::kPortable: return block_scalar;
    default: break;
  }
  for (Int8Isa best : {Int8Isa::kAvx512, Int8Isa::kAvx2}) {
    if (int8_isa_supported(best)) return block_for(best);
  }
  return block_scalar;
}

}  // namespace

bool int8_isa_supported(Int8Isa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (isa == Int8Isa::kAvx512) return __builtin_cpu_supports("avx512f");
  if (isa == Int8Isa::kAvx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  if (isa == Int8Isa::kAvx512 || isa == Int8Isa::kAvx2) return false;
#endif
  return true;
}

void int8_matmul(int64_t m, int64_t k, int64_t n, const float* x, const int8_t* w,
                 const float* scale, float* out, const ParallelFor& parallel_for, Int8Isa isa) {
  static const BlockFn best = block_for(Int8Isa::kBest);
  const BlockFn block = isa == Int8Isa::kBest ? best : block_for(isa);
  // A work item is at least kMinItemMacs multiply-adds: waking a pool thread costs tens
  // of microseconds, about what a decode step's smaller projections take in all. The
  // blocks are dealt evenly (9 blocks in 2 items: 5 and 4, not 7 and 2).
  const int64_t blocks = int8_packed_blocks(n);
  const int64_t min_blocks =
      std::max<int64_t>(1, kMinItemMacs / std::max<int64_t>(1, m * k * kBlock));
  const int64_t items = std::max<int64_t>(1, blocks / min_blocks);
  auto body = [&](int64_t i) {
    for (int64_t b = blocks * i / items; b < blocks * (i + 1) / items; ++b) {
      block(m, k, b * kBlock, std::min(n, (b + 1) * kBlock), x, w, scale, out, n);
    }
  };
  for_each_item(parallel_for, items, body);
}

extern "C" XLA_FFI_Error* torchtpu_int8_matmul_ffi(XLA_FFI_CallFrame* frame) {
  if (ffi::answer_metadata(frame)) return nullptr;
  const char* what = "torchtpu_int8_matmul";
  const XLA_FFI_Buffer *x = ffi::arg(frame, 0), *w = ffi::arg(frame, 1),
                       *scale = ffi::arg(frame, 2);
  const XLA_FFI_Buffer* out = ffi::ret(frame, 0);
  if (!x || !w || !scale || !out) {
    return ffi::error(frame, std::string(what) + ": expected 3 buffer operands and 1 result");
  }
  const bool ok = x->dtype == XLA_FFI_DataType_F32 && x->rank == 2 &&
                  w->dtype == XLA_FFI_DataType_S8 && w->rank == 3 &&
                  scale->dtype == XLA_FFI_DataType_F32 && scale->rank == 1 &&
                  out->dtype == XLA_FFI_DataType_F32 && out->rank == 2 &&
                  w->dims[0] == int8_packed_blocks(scale->dims[0]) &&
                  w->dims[1] == x->dims[1] && w->dims[2] == kBlock &&
                  out->dims[0] == x->dims[0] && out->dims[1] == scale->dims[0];
  if (!ok) {
    return ffi::error(frame, std::string(what) + ": expected x f32[M,K], w s8[ceil(N/64),K,64] "
                      "(packed), scale f32[N] and out f32[M,N]; got x " + ffi::describe(x) +
                      ", w " + ffi::describe(w) + ", scale " + ffi::describe(scale) +
                      ", out " + ffi::describe(out));
  }
  int8_matmul(x->dims[0], x->dims[1], scale->dims[0], static_cast<const float*>(x->data),
              static_cast<const int8_t*>(w->data), static_cast<const float*>(scale->data),
              static_cast<float*>(out->data), ffi::pool_parallel_for(frame));
  return nullptr;
}

}  // namespace torchtpu::kernels
