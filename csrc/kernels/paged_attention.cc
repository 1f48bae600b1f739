#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ffi_handler.h"

namespace torchtpu::kernels {
namespace {

struct Scratch {
  std::vector<float> scores;       // [rows, keys]
  std::vector<int64_t> lo, hi;     // each row's visible keys [lo, hi)
  std::vector<int64_t> kv_offset;  // each row's kv head's offset in a slot
};

// e^x for x <= 0 (softmax after subtracting the row maximum), to about 2 ulp, in a form
// the compiler vectorizes (std::exp is a scalar library call per element): x = n ln2 + r,
// e^r by a degree-6 polynomial, 2^n through the exponent bits.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);  // e^-87 is about the smallest normal float
  float n = std::floor(x * 1.44269504f + 0.5f);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 split in two for exactness
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// The keys [lo, hi) a query at `pos` sees in a context of `ctx` keys: up to its position
// and, with a window, the last `window` of those; empty (lo == hi) when it sees none.
inline void visible_keys(int64_t pos, int64_t ctx, int64_t window, int64_t* lo, int64_t* hi) {
  *hi = std::max<int64_t>(0, std::min(ctx, pos + 1));
  *lo = std::min(*hi, window > 0 ? std::max<int64_t>(0, pos - window + 1) : int64_t{0});
}

// row[lo, hi) from scores to softmax probabilities, in place (lo < hi).
__attribute__((always_inline)) inline void softmax_in_place(float* row, int64_t lo,
                                                            int64_t hi) {
  float top = row[lo];
  for (int64_t j = lo + 1; j < hi; ++j) top = std::max(top, row[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = lo; j < hi; ++j) {
    row[j] = exp_nonpositive(row[j] - top);
    sum += row[j];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = lo; j < hi; ++j) row[j] *= inv;
}

// One sequence's n queries, from token t0: each query has H heads, and each (query, head)
// is a row that reads the keys and values of kv head head / (H / KV). Pass 1 scores every
// key a row sees, pass 2 turns scores into probabilities, pass 3 accumulates values.
// Passes 1 and 3 walk the context slot by slot, reading each slot's keys (or values) for
// all kv heads at once: a page is contiguous in the pool, so reads are sequential. kD is
// the head size when it is a compile-time constant (0: use shape.head_dim).
template <int kD>
__attribute__((always_inline)) inline void attend_one_sequence(
    const PagedAttentionShape& sh, const float* q, const float* k, const float* v,
    const int64_t* pages, const int64_t* positions, float scale, int64_t window, int64_t s,
    int64_t t0, int64_t n, Scratch& scratch, float* out) {
  const int64_t group = sh.heads / sh.kv_heads, ps = sh.page_size;
  const int64_t d = kD > 0 ? kD : sh.head_dim;
  const int64_t ctx = sh.pages_per_seq * ps, rows = n * sh.heads;
  const int64_t slot_stride = sh.kv_heads * d;
  scratch.lo.resize(rows);
  scratch.hi.resize(rows);
  scratch.kv_offset.resize(rows);
  int64_t keys = 0;  // keys [0, keys) cover every row's visible range
  for (int64_t r = 0; r < rows; ++r) {  // row r = query r / H, head r % H
    visible_keys(positions[t0 + r / sh.heads], ctx, window, &scratch.lo[r], &scratch.hi[r]);
    scratch.kv_offset[r] = (r % sh.heads) / group * d;
    keys = std::max(keys, scratch.hi[r]);
  }
  const float* queries = q + t0 * sh.heads * d;  // [rows, d]
  float* results = out + t0 * sh.heads * d;
  std::fill(results, results + rows * d, 0.0f);
  if (keys == 0) return;
  const int64_t* table = pages + s * sh.pages_per_seq;
  auto slot_of = [&](int64_t j) { return (table[j / ps] * ps + j % ps) * slot_stride; };
  // Pages are scattered, so the hardware prefetcher loses the stream at every page
  // boundary; ask for the slot kPrefetch positions ahead, every cache line of it.
  constexpr int64_t kPrefetch = 8;
  auto prefetch = [&](const float* pool, int64_t j) {
    if (j >= keys) return;
    const char* p = reinterpret_cast<const char*>(pool + slot_of(j));
    for (int64_t b = 0; b < slot_stride * 4; b += 64) __builtin_prefetch(p + b);
  };
  scratch.scores.resize(static_cast<size_t>(rows * keys));
  float* scores = scratch.scores.data();
  const int64_t* lo = scratch.lo.data();
  const int64_t* hi = scratch.hi.data();
  const int64_t* kv_offset = scratch.kv_offset.data();

  for (int64_t j = 0; j < keys; ++j) {
    prefetch(k, j + kPrefetch);
    const float* slot = k + slot_of(j);
    for (int64_t r = 0; r < rows; ++r) {
      if (j < lo[r] || j >= hi[r]) continue;
      const float* qr = queries + r * d;
      const float* key = slot + kv_offset[r];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < d; ++c) dot += qr[c] * key[c];
      scores[r * keys + j] = dot * scale;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (lo[r] < hi[r]) softmax_in_place(scores + r * keys, lo[r], hi[r]);  // else: zeros
  }
  for (int64_t j = 0; j < keys; ++j) {
    prefetch(v, j + kPrefetch);
    const float* slot = v + slot_of(j);
    for (int64_t r = 0; r < rows; ++r) {
      if (j < lo[r] || j >= hi[r]) continue;
      const float p = scores[r * keys + j];
      const float* value = slot + kv_offset[r];
      float* o = results + r * d;
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) o[c] += p * value[c];
    }
  }
}

// Several queries per sequence (a prefill chunk): work items are (sequence, kv head, block
// of kQueryBlock queries), so one sequence still uses every thread. Scores come from keys
// transposed into blocks of kKeyBlock ([D][kKeyBlock] per block): each row then
// accumulates kKeyBlock scores per multiply-add across the head dimension, with no
// horizontal sums; each row then sums its probability-weighted value rows in registers.
constexpr int64_t kQueryBlock = 16;
constexpr int64_t kKeyBlock = 16;

int64_t query_blocks(int64_t n) { return (n + kQueryBlock - 1) / kQueryBlock; }

// Eight floats (two SSE registers in the baseline build, one AVX2 register in x86-64-v3).
constexpr int kLanes = 8;
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
using UnalignedVec = float __attribute__((vector_size(kLanes * sizeof(float)), aligned(4)));

struct BlockScratch {
  std::vector<float> keys_t;         // [key blocks, D, kKeyBlock]
  std::vector<float> scores;         // [rows, key blocks * kKeyBlock]
  std::vector<int64_t> lo, hi;       // each row's visible keys [lo, hi)
  std::vector<const float*> values;  // each key's value row for this kv head
};

template <int kD>
__attribute__((always_inline)) inline void attend_query_block(
    const PagedAttentionShape& sh, const float* q, const float* k, const float* v,
    const int64_t* pages, const int64_t* positions, float scale, int64_t window, int64_t s,
    int64_t t0, int64_t n, int64_t kvh, int64_t block, BlockScratch& scratch, float* out) {
  const int64_t group = sh.heads / sh.kv_heads, ps = sh.page_size;
  const int64_t d = kD > 0 ? kD : sh.head_dim;
  const int64_t ctx = sh.pages_per_seq * ps, slot_stride = sh.kv_heads * d;
  const int64_t first = t0 + block * kQueryBlock;  // this block's first query (token)
  const int64_t rows = std::min(kQueryBlock, t0 + n - first) * group;
  // row r = (query first + r / group, head kvh * group + r % group)
  auto query = [&](int64_t r) {
    return q + ((first + r / group) * sh.heads + kvh * group + r % group) * d;
  };
  auto result = [&](int64_t r) {
    return out + ((first + r / group) * sh.heads + kvh * group + r % group) * d;
  };
  scratch.lo.resize(rows);
  scratch.hi.resize(rows);
  int64_t keys = 0;
  for (int64_t r = 0; r < rows; ++r) {
    visible_keys(positions[first + r / group], ctx, window, &scratch.lo[r], &scratch.hi[r]);
    keys = std::max(keys, scratch.hi[r]);
    std::fill(result(r), result(r) + d, 0.0f);
  }
  if (keys == 0) return;
  const int64_t* table = pages + s * sh.pages_per_seq;
  auto slot_of = [&](int64_t j) { return (table[j / ps] * ps + j % ps) * slot_stride + kvh * d; };
  const int64_t blocks = (keys + kKeyBlock - 1) / kKeyBlock;
  scratch.keys_t.assign(static_cast<size_t>(blocks * d * kKeyBlock), 0.0f);
  float* keys_t = scratch.keys_t.data();
  for (int64_t j = 0; j < keys; ++j) {
    const float* key = k + slot_of(j);
    float* dst = keys_t + (j / kKeyBlock) * d * kKeyBlock + j % kKeyBlock;
    for (int64_t c = 0; c < d; ++c) dst[c * kKeyBlock] = key[c];
  }
  const int64_t stride = blocks * kKeyBlock;  // a score row, padded to whole key blocks
  scratch.scores.resize(static_cast<size_t>(rows * stride));
  float* scores = scratch.scores.data();
  // Scores, kRows rows at a time: kRows * kKeyBlock independent sums share each load of a
  // transposed key block (one sum per row would wait on its own adds). A group covers the
  // union of its rows' key ranges; scores outside a row's range are never read.
  constexpr int64_t kRows = 4;
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    const int64_t nr = std::min(kRows, rows - r0);
    int64_t first_block = blocks, last_block = 0;
    const float* qs[kRows];
    for (int64_t i = 0; i < kRows; ++i) {
      const int64_t r = r0 + std::min(i, nr - 1);  // a short group repeats its last row
      qs[i] = query(r);
      if (scratch.lo[r] == scratch.hi[r]) continue;
      first_block = std::min(first_block, scratch.lo[r] / kKeyBlock);
      last_block = std::max(last_block, (scratch.hi[r] + kKeyBlock - 1) / kKeyBlock);
    }
    for (int64_t b = first_block; b < last_block; ++b) {
      float acc[kRows][kKeyBlock] = {};
      const float* kt = keys_t + b * d * kKeyBlock;
      for (int64_t c = 0; c < d; ++c) {
        const float* kc = kt + c * kKeyBlock;
        for (int64_t i = 0; i < kRows; ++i) {
          const float qc = qs[i][c];
#pragma omp simd
          for (int64_t x = 0; x < kKeyBlock; ++x) acc[i][x] += qc * kc[x];
        }
      }
      for (int64_t i = 0; i < nr; ++i) {
        float* row = scores + (r0 + i) * stride + b * kKeyBlock;
#pragma omp simd
        for (int64_t x = 0; x < kKeyBlock; ++x) row[x] = acc[i][x] * scale;
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (scratch.lo[r] < scratch.hi[r]) {  // else: sees no key, stays zero
      softmax_in_place(scores + r * stride, scratch.lo[r], scratch.hi[r]);
    }
  }
  // Values: each row sums p * value over its keys in registers (when the head size is a
  // compile-time constant), reading the value rows of this kv head from L2.
  scratch.values.resize(static_cast<size_t>(keys));
  for (int64_t j = 0; j < keys; ++j) scratch.values[j] = v + slot_of(j);
  const float* const* values = scratch.values.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = scores + r * stride;
    float* o = result(r);
    if constexpr (kD > 0 && kD % kLanes == 0) {
      // Written with vector types: GCC leaves the plain loop scalar here.
      constexpr int kVectors = kD / kLanes;
      Vec acc[kVectors] = {};
      for (int64_t j = scratch.lo[r]; j < scratch.hi[r]; ++j) {
        const Vec pj = Vec{} + p[j];
        const auto* value = reinterpret_cast<const UnalignedVec*>(values[j]);
        for (int c = 0; c < kVectors; ++c) acc[c] += pj * value[c];
      }
      std::memcpy(o, acc, sizeof acc);
    } else {
      for (int64_t j = scratch.lo[r]; j < scratch.hi[r]; ++j) {
        const float pj = p[j];
        const float* value = values[j];
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) o[c] += pj * value[c];
      }
    }
  }
}

// On x86-64, functions marked so are built twice, for x86-64-v3 (AVX2, FMA) and for the
// baseline, and the loader picks what the CPU runs; elsewhere they are built once.
#if defined(__x86_64__)
#define TORCHTPU_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TORCHTPU_CPU_CLONES
#endif

// What one parallel work item computes: sequence `seq`'s queries [t0, t0 + n), all of them
// by the one-query path (kvh < 0), or query block `block` of kv head `kvh`.
struct WorkItem {
  int64_t seq, t0, n, kvh, block;
};

// One work item, for any head size, with a per-thread scratch; the loops above are inlined
// into each clone.
TORCHTPU_CPU_CLONES
void attend_item(const PagedAttentionShape& sh, const float* q, const float* k, const float* v,
                 const int64_t* pages, const int64_t* positions, float scale, int64_t window,
                 const WorkItem& it, float* out) {
  if (it.kvh < 0) {
    thread_local Scratch scratch;
    switch (sh.head_dim) {
      case 64:
        attend_one_sequence<64>(sh, q, k, v, pages, positions, scale, window, it.seq, it.t0,
                                it.n, scratch, out);
        break;
      case 128:
        attend_one_sequence<128>(sh, q, k, v, pages, positions, scale, window, it.seq, it.t0,
                                 it.n, scratch, out);
        break;
      default:
        attend_one_sequence<0>(sh, q, k, v, pages, positions, scale, window, it.seq, it.t0,
                               it.n, scratch, out);
        break;
    }
    return;
  }
  thread_local BlockScratch scratch;
  switch (sh.head_dim) {
    case 64:
      attend_query_block<64>(sh, q, k, v, pages, positions, scale, window, it.seq, it.t0, it.n,
                             it.kvh, it.block, scratch, out);
      break;
    case 128:
      attend_query_block<128>(sh, q, k, v, pages, positions, scale, window, it.seq, it.t0, it.n,
                              it.kvh, it.block, scratch, out);
      break;
    default:
      attend_query_block<0>(sh, q, k, v, pages, positions, scale, window, it.seq, it.t0, it.n,
                            it.kvh, it.block, scratch, out);
      break;
  }
}

}  // namespace

std::string check_shape(const PagedAttentionShape& sh) {
  if (sh.tokens < 0 || sh.seqs < 0 || sh.heads <= 0 || sh.kv_heads <= 0 || sh.head_dim <= 0 ||
      sh.num_slots < 0 || sh.pages_per_seq < 0 || sh.page_size <= 0) {
    return "sizes must be positive (heads, kv heads, head dim, page size) or non-negative";
  }
  if (sh.heads % sh.kv_heads != 0) {
    return std::to_string(sh.heads) + " query heads are not a multiple of " +
           std::to_string(sh.kv_heads) + " kv heads";
  }
  if (sh.num_slots % sh.page_size != 0) {
    return "the pool's " + std::to_string(sh.num_slots) + " slots are not whole pages of " +
           std::to_string(sh.page_size);
  }
  return "";
}

std::string paged_attention(const PagedAttentionShape& sh, const float* q, const float* k,
                            const float* v, const int64_t* pages, const int64_t* positions,
                            const int64_t* query_start, float scale, int64_t window,
                            float* out, const ParallelFor& parallel_for) {
  const int64_t num_pages = sh.num_slots / sh.page_size;
  for (int64_t i = 0; i < sh.seqs * sh.pages_per_seq; ++i) {
    if (pages[i] < 0 || pages[i] >= num_pages) {
      return "page id " + std::to_string(pages[i]) + " (sequence " +
             std::to_string(i / sh.pages_per_seq) + ") is outside the pool of " +
             std::to_string(num_pages) + " pages";
    }
  }
  for (int64_t s = 0; s <= sh.seqs; ++s) {
    const int64_t prev = s == 0 ? 0 : query_start[s - 1];
    if (query_start[s] < prev || query_start[s] > sh.tokens) {
      return "query_start[" + std::to_string(s) + "] = " + std::to_string(query_start[s]) +
             " is out of order (expected non-decreasing from 0, at most " +
             std::to_string(sh.tokens) + " queries)";
    }
  }
  const int64_t row_floats = sh.heads * sh.head_dim;
  const int64_t used = sh.seqs > 0 ? query_start[sh.seqs] : 0;
  std::fill(out + used * row_floats, out + sh.tokens * row_floats, 0.0f);  // padding
  // Few queries (decodes, speculative verifications): a sequence per item, keys read
  // straight from the pool. Many (prefill chunks): (kv head, query block) items over
  // transposed key blocks, listed first so the long items start first.
  std::vector<WorkItem> items;
  for (int64_t s = 0; s < sh.seqs; ++s) {
    const int64_t t0 = query_start[s], n = query_start[s + 1] - t0;
    if (n <= kFewQueries) continue;
    for (int64_t kvh = 0; kvh < sh.kv_heads; ++kvh) {
      for (int64_t b = 0; b < query_blocks(n); ++b) items.push_back({s, t0, n, kvh, b});
    }
  }
  for (int64_t s = 0; s < sh.seqs; ++s) {
    const int64_t t0 = query_start[s], n = query_start[s + 1] - t0;
    if (n > 0 && n <= kFewQueries) items.push_back({s, t0, n, -1, 0});
  }
  auto body = [&](int64_t i) {
    attend_item(sh, q, k, v, pages, positions, scale, window, items[i], out);
  };
  for_each_item(parallel_for, static_cast<int64_t>(items.size()), body);
  return "";
}

extern "C" XLA_FFI_Error* torchtpu_paged_attention_ffi(XLA_FFI_CallFrame* frame) {
  if (ffi::answer_metadata(frame)) return nullptr;
  const char* what = "torchtpu_paged_attention";
  const XLA_FFI_Buffer *q = ffi::arg(frame, 0), *k = ffi::arg(frame, 1), *v = ffi::arg(frame, 2),
                       *pages = ffi::arg(frame, 3), *pos = ffi::arg(frame, 4),
                       *starts = ffi::arg(frame, 5);
  const XLA_FFI_Buffer* out = ffi::ret(frame, 0);
  auto page_size = ffi::int_attr(frame, "page_size");
  auto window = ffi::int_attr(frame, "window");
  auto scale = ffi::float_attr(frame, "scale");
  if (!q || !k || !v || !pages || !pos || !starts || !out || !page_size || !window || !scale) {
    return ffi::error(frame, std::string(what) + ": expected 6 buffer operands, 1 buffer "
                      "result and attributes page_size (i64), scale (f32), window (i64)");
  }
  auto is = [](const XLA_FFI_Buffer* b, XLA_FFI_DataType t, int64_t rank) {
    return b->dtype == t && b->rank == rank;
  };
  PagedAttentionShape sh;
  if (is(q, XLA_FFI_DataType_F32, 3) && is(k, XLA_FFI_DataType_F32, 3) &&
      is(pages, XLA_FFI_DataType_S64, 2) && is(pos, XLA_FFI_DataType_S64, 1) &&
      is(starts, XLA_FFI_DataType_S64, 1)) {
    sh = {q->dims[0], pages->dims[0], q->dims[1], k->dims[1], q->dims[2], k->dims[0],
          pages->dims[1], *page_size};
  }
  std::string bad = sh.heads == 0 ? "operands are not f32[T,H,D], f32[N,KV,D] twice, "
                                    "s64[S,P], s64[T], s64[S+1]"
                                  : check_shape(sh);
  auto same = [](const XLA_FFI_Buffer* a, const XLA_FFI_Buffer* b) {
    return a->dtype == b->dtype && a->rank == b->rank &&
           std::equal(a->dims, a->dims + a->rank, b->dims);
  };
  if (bad.empty() && (!same(k, v) || !same(q, out) || k->dims[2] != sh.head_dim ||
                      pos->dims[0] != sh.tokens || starts->dims[0] != sh.seqs + 1)) {
    bad = "operand shapes disagree";
  }
  if (!bad.empty()) {
    return ffi::error(frame, std::string(what) + ": " + bad + " (q " + ffi::describe(q) + ", k " +
                      ffi::describe(k) + ", v " + ffi::describe(v) + ", pages " +
                      ffi::describe(pages) + ", positions " + ffi::describe(pos) +
                      ", query_start " + ffi::describe(starts) + ", out " +
                      ffi::describe(out) + ", page_size " + std::to_string(*page_size) + ")");
  }
  std::string failed = paged_attention(
      sh, static_cast<const float*>(q->data), static_cast<const float*>(k->data),
      static_cast<const float*>(v->data), static_cast<const int64_t*>(pages->data),
      static_cast<const int64_t*>(pos->data), static_cast<const int64_t*>(starts->data), *scale,
      *window, static_cast<float*>(out->data), ffi::pool_parallel_for(frame));
  if (!failed.empty()) return ffi::error(frame, std::string(what) + ": " + failed);
  return nullptr;
}

}  // namespace torchtpu::kernels
