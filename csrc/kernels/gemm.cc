#include "kernels/gemm.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>

#include "kernels/ffi_handler.h"

namespace torchtpu::kernels {
namespace {

// A part is at least this many multiply-adds (waking a pool thread costs about what a
// 64x64x64 product takes), and a split dim keeps at least kMinSlice rows or columns per
// part (a BLAS's blocking loses its rate on thinner slices).
constexpr double kMinPartMacs = 512 * 1024;
constexpr int64_t kMinSlice = 32;

std::atomic<SgemmFn> g_sgemm{nullptr};
std::atomic<LocalThreadsFn> g_local_threads{nullptr};

// Rows [r0, r1) and columns [c0, c1) of c for batch `bi`, in one sgemm. The row-major
// product c = op(a) op(b) is the column-major product c^T = op(b)^T op(a)^T over the same
// bytes, so BLAS gets b first. A block of rows of c starts at row r0 of op(a) (row r0 of a,
// column r0 of a stored [K, M]); a block of columns at column c0 of op(b) (column c0 of b,
// row c0 of b stored [N, K]).
void block(const GemmShape& s, int64_t bi, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
           const float* a, const float* b, float* c, SgemmFn sgemm) {
  const float* ab = a + bi * s.m * s.k + (s.trans_a ? r0 : r0 * s.k);
  const float* bb = b + bi * s.k * s.n + (s.trans_b ? c0 * s.k : c0);
  float* cb = c + bi * s.m * s.n + r0 * s.n + c0;
  const int n = static_cast<int>(c1 - c0), m = static_cast<int>(r1 - r0),
            k = static_cast<int>(s.k);
  const int lda = static_cast<int>(s.trans_a ? s.m : s.k);
  const int ldb = static_cast<int>(s.trans_b ? s.k : s.n);
  const int ldc = static_cast<int>(s.n);
  const char ta = s.trans_a ? 'T' : 'N', tb = s.trans_b ? 'T' : 'N';
  const float one = 1.0f, zero = 0.0f;
  sgemm(&tb, &ta, &n, &m, &k, &one, bb, &ldb, ab, &lda, &zero, cb, &ldc);
}

}  // namespace

void set_blas(const Blas& blas) {
  g_local_threads.store(blas.set_local_threads);
  g_sgemm.store(blas.sgemm);
}

Blas blas() { return Blas{g_sgemm.load(), g_local_threads.load()}; }

std::string check_shape(const GemmShape& s) {
  if (s.batch < 1 || s.m < 1 || s.n < 1 || s.k < 1) {
    return "every dim must be at least 1 (batch " + std::to_string(s.batch) + ", m " +
           std::to_string(s.m) + ", n " + std::to_string(s.n) + ", k " + std::to_string(s.k) +
           ")";
  }
  if (s.m > INT_MAX || s.n > INT_MAX || s.k > INT_MAX) {
    return "m, n and k must fit a 32-bit BLAS int";
  }
  return "";
}

void gemm(const GemmShape& s, const float* a, const float* b, float* c, const Blas& with,
          const ParallelFor& parallel_for, int64_t threads) {
  // In double: m * n * k of 32-bit dims can pass int64.
  const double macs = static_cast<double>(s.m) * static_cast<double>(s.n) * s.k;
  const int64_t parts =
      std::clamp<int64_t>(static_cast<int64_t>(std::min(s.batch * macs / kMinPartMacs, 1e6)),
                          1, std::max<int64_t>(threads, 1));
  if (!with.set_local_threads) {
    for (int64_t bi = 0; bi < s.batch; ++bi) block(s, bi, 0, s.m, 0, s.n, a, b, c, with.sgemm);
    return;
  }
  // As many parts as threads: whole batches when there are enough of them, else slices of
  // each batch along its longer dim (rows or columns of c), so every sgemm call has the
  // widest panels the split allows.
  const bool by_batch = s.batch >= parts;
  const bool by_rows = s.m >= s.n;
  const int64_t dim = by_rows ? s.m : s.n;
  const int64_t slices =
      by_batch ? 1
               : std::clamp<int64_t>((parts + s.batch - 1) / s.batch, 1,
                                     std::max<int64_t>(dim / kMinSlice, 1));
  const int64_t items = by_batch ? parts : s.batch * slices;
  auto body = [&](int64_t i) {
    const int previous = with.set_local_threads(1);
    if (by_batch) {
      for (int64_t bi = s.batch * i / parts; bi < s.batch * (i + 1) / parts; ++bi) {
        block(s, bi, 0, s.m, 0, s.n, a, b, c, with.sgemm);
      }
    } else {
      const int64_t bi = i / slices, j = i % slices;
      const int64_t lo = dim * j / slices, hi = dim * (j + 1) / slices;
      if (by_rows) {
        block(s, bi, lo, hi, 0, s.n, a, b, c, with.sgemm);
      } else {
        block(s, bi, 0, s.m, lo, hi, a, b, c, with.sgemm);
      }
    }
    with.set_local_threads(previous);
  };
  for_each_item(parallel_for, items, body);
}

extern "C" XLA_FFI_Error* torchtpu_gemm_ffi(XLA_FFI_CallFrame* frame) {
  if (ffi::answer_metadata(frame)) return nullptr;
  const char* what = "torchtpu_gemm";
  const Blas with = blas();
  if (with.sgemm == nullptr) {
    return ffi::error(frame, std::string(what) + ": no BLAS sgemm was given to the kernel "
                      "(the device runtime sets it when the running PyTorch exports one)",
                      XLA_FFI_Error_Code_INTERNAL);
  }
  const XLA_FFI_Buffer *a = ffi::arg(frame, 0), *b = ffi::arg(frame, 1);
  const XLA_FFI_Buffer* c = ffi::ret(frame, 0);
  if (!a || !b || !c) {
    return ffi::error(frame, std::string(what) + ": expected 2 buffer operands (and an "
                      "ignored third) and 1 result");
  }
  GemmShape s;
  s.trans_a = ffi::int_attr(frame, "trans_a").value_or(0) != 0;
  s.trans_b = ffi::int_attr(frame, "trans_b").value_or(0) != 0;
  const bool ranks = a->rank == 3 && b->rank == 3 && c->rank == 3 &&
                     a->dtype == XLA_FFI_DataType_F32 && b->dtype == XLA_FFI_DataType_F32 &&
                     c->dtype == XLA_FFI_DataType_F32;
  if (ranks) {
    s.batch = c->dims[0];
    s.m = c->dims[1];
    s.n = c->dims[2];
    s.k = s.trans_a ? a->dims[1] : a->dims[2];
  }
  const bool ok = ranks && a->dims[0] == s.batch && b->dims[0] == s.batch &&
                  (s.trans_a ? a->dims[2] : a->dims[1]) == s.m &&
                  (s.trans_b ? b->dims[2] : b->dims[1]) == s.k &&
                  (s.trans_b ? b->dims[1] : b->dims[2]) == s.n;
  std::string problem = ok ? check_shape(s) : "";
  if (!ok || !problem.empty()) {
    return ffi::error(frame, std::string(what) + ": expected a f32[B,M,K] (trans_a: [B,K,M]), "
                      "b f32[B,K,N] (trans_b: [B,N,K]) and c f32[B,M,N]" +
                      (problem.empty() ? "" : " with " + problem) + "; got a " +
                      ffi::describe(a) + ", b " + ffi::describe(b) + ", c " + ffi::describe(c) +
                      (s.trans_a ? ", trans_a" : "") + (s.trans_b ? ", trans_b" : ""));
  }
  gemm(s, static_cast<const float*>(a->data), static_cast<const float*>(b->data),
       static_cast<float*>(c->data), with,
       ffi::pool_parallel_for(frame), ffi::pool_threads(frame));
  return nullptr;
}

}  // namespace torchtpu::kernels
