#include "kernels/int8_matmul.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ffi_handler.h"

namespace torchtpu::kernels {
namespace {

constexpr int kLanes = 8;
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
using UnalignedVec = float __attribute__((vector_size(kLanes * sizeof(float)), aligned(4)));
using Bytes = int8_t __attribute__((vector_size(kLanes), aligned(1)));

// Output channels per work item, and per pass over the rows: kOuts weight rows are
// converted to f32 once (into L1) and then multiply every activation row, kRows rows at a
// time, so kOuts * kRows sums accumulate in registers.
constexpr int64_t kBlock = 32;
constexpr int kOuts = 4;
constexpr int kRows = 2;

inline float sum_lanes(Vec v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// On x86-64, built twice, for x86-64-v3 (AVX2, FMA) and for the baseline; the loader picks
// what the CPU runs.
#if defined(__x86_64__)
#define TORCHTPU_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TORCHTPU_CPU_CLONES
#endif

// Output channels [n0, n1) for every row.
TORCHTPU_CPU_CLONES
void output_block(int64_t m, int64_t k, int64_t n0, int64_t n1, const float* x,
                  const int8_t* w, const float* scale, float* out, int64_t n) {
  thread_local std::vector<float> converted;
  converted.resize(static_cast<size_t>(kOuts * k));
  const int64_t vec_k = k / kLanes * kLanes;
  for (int64_t c0 = n0; c0 < n1; c0 += kOuts) {
    const int64_t outs = std::min<int64_t>(kOuts, n1 - c0);
    float* wf[kOuts];
    for (int i = 0; i < kOuts; ++i) {
      // A short group repeats its last channel (computed, not stored).
      const int8_t* row = w + (c0 + std::min<int64_t>(i, outs - 1)) * k;
      wf[i] = converted.data() + i * k;
      for (int64_t j = 0; j < vec_k; j += kLanes) {
        Vec v = __builtin_convertvector(*reinterpret_cast<const Bytes*>(row + j), Vec);
        std::memcpy(wf[i] + j, &v, sizeof v);
      }
      for (int64_t j = vec_k; j < k; ++j) wf[i][j] = row[j];
    }
    for (int64_t r0 = 0; r0 < m; r0 += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, m - r0);
      const float* xr[kRows];
      for (int r = 0; r < kRows; ++r) xr[r] = x + (r0 + std::min<int64_t>(r, rows - 1)) * k;
      Vec acc[kRows][kOuts] = {};
      for (int64_t j = 0; j < vec_k; j += kLanes) {
        Vec wv[kOuts];
        for (int i = 0; i < kOuts; ++i) wv[i] = *reinterpret_cast<const UnalignedVec*>(wf[i] + j);
        for (int r = 0; r < kRows; ++r) {
          const Vec xv = *reinterpret_cast<const UnalignedVec*>(xr[r] + j);
          for (int i = 0; i < kOuts; ++i) acc[r][i] += xv * wv[i];
        }
      }
      for (int r = 0; r < rows; ++r) {
        for (int i = 0; i < outs; ++i) {
          float s = sum_lanes(acc[r][i]);
          for (int64_t j = vec_k; j < k; ++j) s += xr[r][j] * wf[i][j];
          out[(r0 + r) * n + c0 + i] = s * scale[c0 + i];
        }
      }
    }
  }
}

}  // namespace

void int8_matmul(int64_t m, int64_t k, int64_t n, const float* x, const int8_t* w,
                 const float* scale, float* out, const ParallelFor& parallel_for) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  auto body = [&](int64_t b) {
    output_block(m, k, b * kBlock, std::min(n, (b + 1) * kBlock), x, w, scale, out, n);
  };
  if (parallel_for) {
    parallel_for(blocks, body);
  } else {
    for (int64_t b = 0; b < blocks; ++b) body(b);
  }
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
                  w->dtype == XLA_FFI_DataType_S8 && w->rank == 2 &&
                  scale->dtype == XLA_FFI_DataType_F32 && scale->rank == 1 &&
                  out->dtype == XLA_FFI_DataType_F32 && out->rank == 2 &&
                  w->dims[1] == x->dims[1] && scale->dims[0] == w->dims[0] &&
                  out->dims[0] == x->dims[0] && out->dims[1] == w->dims[0];
  if (!ok) {
    return ffi::error(frame, std::string(what) + ": expected x f32[M,K], w s8[N,K], scale "
                      "f32[N] and out f32[M,N]; got x " + ffi::describe(x) + ", w " +
                      ffi::describe(w) + ", scale " + ffi::describe(scale) + ", out " +
                      ffi::describe(out));
  }
  int8_matmul(x->dims[0], x->dims[1], w->dims[0], static_cast<const float*>(x->data),
              static_cast<const int8_t*>(w->data), static_cast<const float*>(scale->data),
              static_cast<float*>(out->data),
              [frame](int64_t count, const std::function<void(int64_t)>& body) {
                ffi::parallel_for(frame, count, body);
              });
  return nullptr;
}

}  // namespace torchtpu::kernels
