// Attention over a paged KV pool, as a host kernel for the XLA CPU plugin.
//
// The serving model's decode step attends each sequence's new token to its context,
// which lives in pages of a shared KV pool. Written in StableHLO, that is a gather of the
// sequence's pages, two transposes and two batched matmuls with 3-row left operands, and
// XLA's CPU backend spends several times the cost of reading the keys and values once
// (bench/serve_layer_bench.py shows it). This kernel reads each key and value row once,
// straight from its page, with an exact softmax per query row. Prefill chunks (many
// queries per sequence) take a blocked path over transposed key blocks instead.
//
// The batch is ragged: one forward step holds decodes (one query), speculative verifications
// (a few) and prefill chunks (many) of different sequences, their queries concatenated.
// Shapes (f32, row-major):
//   q            [T, H, D]   T query tokens, H heads of size D
//   k, v         [N, KV, D]  the pool: N slots, KV heads (H is a multiple of KV)
//   pages        [S, P]      each sequence's page table; context position j lives in slot
//                            pages[s, j / page_size] * page_size + j % page_size
//   positions    [T]         each query's position; it sees keys j <= position (and
//                            j > position - window when window > 0), j < P * page_size
//   query_start  [S + 1]     sequence s owns queries [query_start[s], query_start[s + 1]);
//                            non-decreasing, query_start[S] <= T
//   out          [T, H, D]
// A query that sees no key, and a query past query_start[S] (padding), gets zeros.
// A sequence's queries are computed the same way whatever else is in the batch, and a
// sequence with at most kFewQueries queries takes the same path as a single query, so a
// decode and a short speculative verification give bitwise the same rows.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/parallel_for.h"
#include "kernels/xla_ffi.h"

namespace torchtpu::kernels {

struct PagedAttentionShape {
  int64_t tokens = 0;      // T
  int64_t seqs = 0;        // S
  int64_t heads = 0;       // H
  int64_t kv_heads = 0;    // KV
  int64_t head_dim = 0;    // D
  int64_t num_slots = 0;   // N
  int64_t pages_per_seq = 0;  // P
  int64_t page_size = 0;
};

// Empty when the shape is consistent, else what is wrong.
std::string check_shape(const PagedAttentionShape& shape);

// Sequences of at most this many queries are computed by the one-query path.
inline constexpr int64_t kFewQueries = 8;

// Computes `out`; returns an empty string, or why it could not (a page id outside the
// pool, query_start out of order), in which case `out` is unspecified. Sequences are
// independent: `parallel_for` spreads them over threads (empty: one after another on this
// thread).
std::string paged_attention(const PagedAttentionShape& shape, const float* q, const float* k,
                            const float* v, const int64_t* pages, const int64_t* positions,
                            const int64_t* query_start, float scale, int64_t window,
                            float* out, const ParallelFor& parallel_for = {});

// The custom-call target name and its typed-FFI handler. Operands: q, k, v, pages,
// positions, query_start (as above); result: out. Attributes: page_size (i64), scale
// (f32), window (i64).
inline constexpr char kPagedAttentionTarget[] = "torchtpu_paged_attention";
extern "C" XLA_FFI_Error* torchtpu_paged_attention_ffi(XLA_FFI_CallFrame* frame);

}  // namespace torchtpu::kernels
