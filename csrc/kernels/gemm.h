// float32 matrix products for the XLA CPU plugin, computed by a BLAS sgemm.
//
// XLA's CPU dot emitter reaches well under the FLOP rate of an optimized BLAS on the
// matrix sizes of small transformers (about half on a 512x128 by 128x384 product), and
// every f32 product of a model pays it. The kernels stay
// torch-free: the device runtime hands them the sgemm of the BLAS the running PyTorch
// ships (set_blas), and turns the lowering to this kernel on only when it has one.
//
// Shapes (row-major): a f32[B, M, K] (trans_a: f32[B, K, M]), b f32[B, K, N] (trans_b:
// f32[B, N, K]); c f32[B, M, N] = op(a) @ op(b) per batch, where op transposes the last two
// dims when asked. Every dim fits a BLAS int (32 bits).
//
// The work is split into as many parts as XLA's CPU pool has threads (whole batches, or
// slices of c along its longer dim), each one sgemm call run with one BLAS thread, so the
// BLAS's own threads never compete with XLA's. A BLAS that cannot be told to run one call
// on one thread (no `set_local_threads`) gets one call per batch, on the calling thread,
// with its own threading.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/parallel_for.h"
#include "kernels/xla_ffi.h"

namespace torchtpu::kernels {

// The Fortran sgemm interface (column-major, 32-bit ints), and a call that sets the number
// of threads the BLAS uses on the calling thread only, returning the previous setting (MKL's
// mkl_set_num_threads_local; 0 restores the process-wide setting).
using SgemmFn = void (*)(const char* trans_a, const char* trans_b, const int* m, const int* n,
                         const int* k, const float* alpha, const float* a, const int* lda,
                         const float* b, const int* ldb, const float* beta, float* c,
                         const int* ldc);
using LocalThreadsFn = int (*)(int threads);

struct Blas {
  SgemmFn sgemm = nullptr;
  LocalThreadsFn set_local_threads = nullptr;
};

// The BLAS the kernel computes with; none until set (the handler then returns an error).
void set_blas(const Blas& blas);
Blas blas();

struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
};

// Empty when the shape is one the kernel computes, else what is wrong.
std::string check_shape(const GemmShape& shape);

// Computes c (shape must pass check_shape) in up to `threads` parts that `parallel_for`
// spreads over threads (empty: one call per batch on this thread). The result does not
// depend on the split: each element of c is one dot product of a row and a column, which
// a BLAS computes the same way in any block.
void gemm(const GemmShape& shape, const float* a, const float* b, float* c, const Blas& with,
          const ParallelFor& parallel_for = {}, int64_t threads = 1);

// The custom-call target name and its typed-FFI handler. Operands: a, b (rank 3, as
// above), and optionally a third operand the kernel ignores (the lowering passes one so
// that XLA's cost analysis sees work: lowering/host_gemm.cc); result: c. Attributes:
// trans_a, trans_b (i64, 0 or 1).
inline constexpr char kGemmTarget[] = "torchtpu_gemm";
extern "C" XLA_FFI_Error* torchtpu_gemm_ffi(XLA_FFI_CallFrame* frame);

}  // namespace torchtpu::kernels
