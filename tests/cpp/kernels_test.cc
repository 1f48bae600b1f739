// Host kernels: the paged-attention, int8 matmul and GEMM kernels against direct
// double-precision readings of their definitions, and the same kernels run by the XLA CPU
// plugin as the custom calls that the `torchtpu::paged_attention` and `torchtpu::int8_matmul`
// lowerings, and aten::mm on float32, emit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/host_kernels.h"
#include "kernels/int8_matmul.h"
#include "kernels/paged_attention.h"
#include "lowering/host_gemm.h"
#include "lowering_harness.h"

namespace torchtpu::kernels {
namespace {

// A ragged batch: `counts[s]` queries of sequence s, then `padding` queries of no sequence.
struct Case {
  int64_t heads, kv_heads, head_dim, num_slots, pages_per_seq, page_size;
  std::vector<int64_t> counts;
  int64_t padding = 0;
  int64_t window = 0;

  PagedAttentionShape shape() const {
    int64_t tokens = padding;
    for (int64_t n : counts) tokens += n;
    return {tokens, static_cast<int64_t>(counts.size()), heads, kv_heads, head_dim, num_slots,
            pages_per_seq, page_size};
  }
};

struct Inputs {
  std::vector<float> q, k, v;
  std::vector<int64_t> pages, positions, query_start;
};

// Random queries and pool; each sequence gets distinct random pages; positions run up to
// and past the context; the last query of a sequence with several sits at -1 (sees no key).
Inputs make_inputs(const Case& c, uint32_t seed) {
  const PagedAttentionShape sh = c.shape();
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  Inputs in;
  in.q.resize(sh.tokens * sh.heads * sh.head_dim);
  in.k.resize(sh.num_slots * sh.kv_heads * sh.head_dim);
  in.v.resize(in.k.size());
  for (auto* t : {&in.q, &in.k, &in.v}) {
    for (float& x : *t) x = normal(gen);
  }
  const int64_t num_pages = sh.num_slots / sh.page_size, ctx = sh.pages_per_seq * sh.page_size;
  in.query_start.push_back(0);
  for (int64_t n : c.counts) {
    std::vector<int64_t> ids(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), gen);
    in.pages.insert(in.pages.end(), ids.begin(), ids.begin() + sh.pages_per_seq);
    for (int64_t i = 0; i < n; ++i) in.positions.push_back(static_cast<int64_t>(gen() % (ctx + 3)));
    if (n > 1) in.positions.back() = -1;
    in.query_start.push_back(in.query_start.back() + n);
  }
  for (int64_t i = 0; i < c.padding; ++i) in.positions.push_back(0);
  return in;
}

std::vector<double> reference(const Case& c, const Inputs& in, double scale) {
  const PagedAttentionShape sh = c.shape();
  const int64_t d = sh.head_dim, group = sh.heads / sh.kv_heads;
  const int64_t ctx = sh.pages_per_seq * sh.page_size;
  std::vector<double> out(in.q.size(), 0.0);
  for (int64_t s = 0; s < sh.seqs; ++s) {
    for (int64_t t = in.query_start[s]; t < in.query_start[s + 1]; ++t) {
      int64_t pos = in.positions[t];
      for (int64_t h = 0; h < sh.heads; ++h) {
        const float* qr = &in.q[(t * sh.heads + h) * d];
        std::vector<double> w;
        std::vector<const float*> values;
        for (int64_t j = 0; j < ctx; ++j) {
          if (j > pos || (c.window > 0 && j <= pos - c.window)) continue;
          int64_t slot = in.pages[s * sh.pages_per_seq + j / sh.page_size] * sh.page_size +
                         j % sh.page_size;
          const float* key = &in.k[(slot * sh.kv_heads + h / group) * d];
          double dot = 0;
          for (int64_t x = 0; x < d; ++x) dot += double(qr[x]) * key[x];
          w.push_back(dot * scale);
          values.push_back(&in.v[(slot * sh.kv_heads + h / group) * d]);
        }
        if (w.empty()) continue;
        double top = *std::max_element(w.begin(), w.end()), sum = 0;
        for (double& x : w) sum += (x = std::exp(x - top));
        double* o = &out[(t * sh.heads + h) * d];
        for (size_t j = 0; j < w.size(); ++j) {
          for (int64_t x = 0; x < d; ++x) o[x] += w[j] / sum * values[j][x];
        }
      }
    }
  }
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LT(worst, 2e-5);
}

std::string run(const Case& c, const Inputs& in, float scale, std::vector<float>& out,
                const ParallelFor& parallel_for = {}) {
  return paged_attention(c.shape(), in.q.data(), in.k.data(), in.v.data(), in.pages.data(),
                         in.positions.data(), in.query_start.data(), scale, c.window, out.data(),
                         parallel_for);
}

// Batches: decodes only; a few queries per sequence (the one-query path); many (the blocked
// path, three query blocks with the last one short); mixed with empty sequences and padding;
// grouped and plain heads; the two head sizes with a specialized loop and one without; a
// sliding window.
const Case kCases[] = {
    {9, 3, 64, 40 * 16, 8, 16, {1, 1, 1}},
    {4, 4, 128, 12 * 8, 4, 8, {5, 5}},
    {6, 2, 40, 20 * 4, 6, 4, {3, 3, 3, 3}},
    {8, 2, 64, 30 * 16, 5, 16, {4, 4}, 0, 7},
    {2, 1, 16, 1 * 4, 1, 4, {1}},
    {6, 3, 64, 16 * 16, 6, 16, {37, 37}},
    {4, 2, 36, 12 * 8, 5, 8, {20}, 0, 9},
    {6, 3, 64, 32 * 16, 6, 16, {1, 0, 23, 6, 1}, 5},
    {6, 3, 64, 32 * 16, 6, 16, {9, 2, 0}, 3, 20},
};

TEST(PagedAttentionKernel, MatchesADirectReading) {
  uint32_t seed = 0;
  for (const Case& c : kCases) {
    const PagedAttentionShape sh = c.shape();
    SCOPED_TRACE("T=" + std::to_string(sh.tokens) + " S=" + std::to_string(sh.seqs) +
                 " D=" + std::to_string(sh.head_dim) + " window=" + std::to_string(c.window));
    ASSERT_EQ(check_shape(sh), "");
    Inputs in = make_inputs(c, ++seed);
    std::vector<float> out(in.q.size(), -1.0f);
    float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
    ASSERT_EQ(run(c, in, scale, out), "");
    expect_close(out, reference(c, in, scale));  // padding rows: zeros
  }
}

// A sequence's rows do not depend on what else is in the batch, and a few queries take the
// same path as one: a speculative verification's rows equal the decodes' bit for bit.
TEST(PagedAttentionKernel, ASequencesRowsDoNotDependOnTheBatch) {
  Case alone{9, 3, 64, 40 * 16, 8, 16, {kFewQueries}};
  Inputs in = make_inputs(alone, 5);
  in.positions.back() = 100;
  std::vector<float> together(in.q.size());
  ASSERT_EQ(run(alone, in, 0.125f, together), "");
  const int64_t row = alone.heads * alone.head_dim;
  for (int64_t t = 0; t < kFewQueries; ++t) {
    Case one{9, 3, 64, 40 * 16, 8, 16, {1}, 2};
    Inputs single = in;
    single.q.assign(in.q.begin() + t * row, in.q.begin() + (t + 1) * row);
    single.q.resize(3 * row, 1.0f);  // padding rows hold anything
    single.positions = {in.positions[t], 0, 0};
    single.query_start = {0, 1};
    std::vector<float> out(single.q.size());
    ASSERT_EQ(run(one, single, 0.125f, out), "");
    EXPECT_TRUE(std::equal(out.begin(), out.begin() + row, together.begin() + t * row))
        << "query " << t;
  }
}

TEST(PagedAttentionKernel, ThreadsGiveTheSameBits) {
  ParallelFor two_threads = [](int64_t n, const std::function<void(int64_t)>& body) {
    std::thread other([&] { for (int64_t i = 1; i < n; i += 2) body(i); });
    for (int64_t i = 0; i < n; i += 2) body(i);
    other.join();
  };
  for (const Case& c : {kCases[0], kCases[5], kCases[7]}) {
    Inputs in = make_inputs(c, 7);
    std::vector<float> serial(in.q.size()), threaded(in.q.size());
    ASSERT_EQ(run(c, in, 0.125f, serial), "");
    ASSERT_EQ(run(c, in, 0.125f, threaded, two_threads), "");
    EXPECT_EQ(serial, threaded);
  }
}

TEST(PagedAttentionKernel, RejectsAPageOutsideThePoolAndQueryStartsOutOfOrder) {
  const Case& c = kCases[0];
  Inputs in = make_inputs(c, 3);
  in.pages[c.pages_per_seq + 2] = 40;  // the pool has pages 0..39
  std::vector<float> out(in.q.size());
  EXPECT_EQ(run(c, in, 0.125f, out), "page id 40 (sequence 1) is outside the pool of 40 pages");
  in = make_inputs(c, 3);
  in.query_start = {0, 2, 1, 3};
  EXPECT_EQ(run(c, in, 0.125f, out),
            "query_start[2] = 1 is out of order (expected non-decreasing from 0, at most 3 "
            "queries)");
  in.query_start = {0, 1, 2, 4};
  EXPECT_NE(run(c, in, 0.125f, out), "");
}

TEST(PagedAttentionKernel, ChecksTheShape) {
  EXPECT_EQ(check_shape({1, 1, 9, 2, 64, 64, 1, 16}), "9 query heads are not a multiple of 2 kv heads");
  EXPECT_EQ(check_shape({1, 1, 4, 2, 64, 60, 1, 16}),
            "the pool's 60 slots are not whole pages of 16");
  EXPECT_NE(check_shape({1, 1, 4, 2, 64, 64, 1, 0}), "");
}

// The packed layout the kernel takes (int8_matmul.h), written out from its definition:
// w[b, k, i] = wk[k, 64 b + i], zero past N.
std::vector<int8_t> pack(int64_t k, int64_t n, const std::vector<int8_t>& wk) {
  std::vector<int8_t> w(int8_packed_blocks(n) * k * kInt8PackedBlock, 0);
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t c = 0; c < n; ++c) {
      w[((c / kInt8PackedBlock) * k + j) * kInt8PackedBlock + c % kInt8PackedBlock] =
          wk[j * n + c];
    }
  }
  return w;
}

// The int8 kernel against a double-precision reading of the unpacked weights, for row
// counts around its register blocks (1, 2, 4 rows per pass, and 17 = 4 * 4 + 1), odd
// reduction lengths, and channel counts with and without a partial block of 64.
TEST(Int8MatmulKernel, MatchesADirectReading) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(-127, 127);
  for (auto [m, k, n] : {std::array<int64_t, 3>{1, 64, 64}, {3, 70, 37}, {16, 576, 100},
                         {5, 13, 3}, {7, 40, 192}, {2, 8, 129}, {1, 77, 101}, {3, 77, 101},
                         {17, 77, 101}, {17, 131, 192}, {1, 1, 1}}) {
    std::vector<float> x(m * k), scale(n), out(m * n, -1.0f);
    std::vector<int8_t> wk(n * k);
    for (float& v : x) v = normal(gen);
    for (float& v : scale) v = std::abs(normal(gen)) * 0.01f;
    for (int8_t& v : wk) v = static_cast<int8_t>(byte(gen));
    const std::vector<int8_t> w = pack(k, n, wk);
    for (Int8Isa isa : {Int8Isa::kAvx512, Int8Isa::kAvx2, Int8Isa::kPortable}) {
      if (!int8_isa_supported(isa)) continue;  // this CPU cannot run that code
      std::fill(out.begin(), out.end(), -1.0f);
      int8_matmul(m, k, n, x.data(), w.data(), scale.data(), out.data(), {}, isa);
      double worst = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (int64_t c = 0; c < k; ++c) want += double(x[i * k + c]) * wk[c * n + j];
          worst = std::max(worst, std::abs(out[i * n + j] - want * scale[j]));
        }
      }
      EXPECT_LT(worst, 1e-4) << m << "x" << k << "x" << n << " isa " << static_cast<int>(isa);
    }
  }
}

// Work items split the blocks; whatever the split, every channel is written once and the
// result is the one-thread result (items run here on threads of our own).
TEST(Int8MatmulKernel, SplitOverThreadsEqualsOneThread) {
  std::mt19937 gen(2);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> byte(-127, 127);
  for (auto [m, k, n] : {std::array<int64_t, 3>{1, 576, 1536}, {1, 576, 49152 / 16},
                         {3, 1536, 576 + 13}}) {
    std::vector<float> x(m * k), scale(n, 0.01f), one(m * n), many(m * n, -1.0f);
    std::vector<int8_t> wk(n * k);
    for (float& v : x) v = normal(gen);
    for (int8_t& v : wk) v = static_cast<int8_t>(byte(gen));
    const std::vector<int8_t> w = pack(k, n, wk);
    int8_matmul(m, k, n, x.data(), w.data(), scale.data(), one.data());
    int64_t items_run = 0;
    ParallelFor threads = [&](int64_t count, const std::function<void(int64_t)>& body) {
      items_run = count;
      std::vector<std::thread> pool;
      for (int64_t i = 0; i < count; ++i) pool.emplace_back(body, i);
      for (std::thread& t : pool) t.join();
    };
    int8_matmul(m, k, n, x.data(), w.data(), scale.data(), many.data(), threads);
    EXPECT_GT(items_run, 1) << m << "x" << k << "x" << n;
    EXPECT_EQ(one, many) << m << "x" << k << "x" << n;
  }
}

// Every host kernel registered with the test client's plugin (as the device runtime does
// on a CPU platform).
void register_host_kernels() {
  auto client = testing::test_client();
  ASSERT_EQ(client->platform_name(), "cpu");
  for (const HostKernel& k : host_kernels()) {
    base::Status st = client->plugin().register_ffi_handler(k.target, "Host",
                                                            reinterpret_cast<void*>(k.handler));
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
}

// A column-major Fortran sgemm read straight from its definition (C = alpha op(A) op(B) +
// beta C, beta 0 never reading C), standing in for the BLAS the device runtime hands the
// GEMM kernel (these tests link no torch). It counts the thread settings asked of it.
std::atomic<int> g_local_threads_calls{0};

void reference_sgemm(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                     const float* alpha, const float* a, const int* lda, const float* b,
                     const int* ldb, const float* beta, float* c, const int* ldc) {
  for (int j = 0; j < *n; ++j) {
    for (int i = 0; i < *m; ++i) {
      float sum = 0.0f;
      for (int l = 0; l < *k; ++l) {
        const float av = *ta == 'N' ? a[i + l * *lda] : a[l + i * *lda];
        const float bv = *tb == 'N' ? b[l + j * *ldb] : b[j + l * *ldb];
        sum += av * bv;
      }
      c[i + j * *ldc] = *alpha * sum + (*beta == 0.0f ? 0.0f : *beta * c[i + j * *ldc]);
    }
  }
}

int reference_local_threads(int) {
  ++g_local_threads_calls;
  return 0;
}

// c[bi, i, j] in double from row-major a and b as GemmShape lays them out.
std::vector<double> gemm_reference(const GemmShape& s, const std::vector<float>& a,
                                   const std::vector<float>& b) {
  std::vector<double> c(s.batch * s.m * s.n);
  for (int64_t bi = 0; bi < s.batch; ++bi) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < s.k; ++l) {
          double av = s.trans_a ? a[bi * s.m * s.k + l * s.m + i] : a[bi * s.m * s.k + i * s.k + l];
          double bv = s.trans_b ? b[bi * s.k * s.n + j * s.k + l] : b[bi * s.k * s.n + l * s.n + j];
          sum += av * bv;
        }
        c[(bi * s.m + i) * s.n + j] = sum;
      }
    }
  }
  return c;
}

ParallelFor thread_per_item() {
  return [](int64_t count, const std::function<void(int64_t)>& body) {
    std::vector<std::thread> pool;
    for (int64_t i = 0; i < count; ++i) pool.emplace_back(body, i);
    for (std::thread& t : pool) t.join();
  };
}

// Every transpose combination, one and several batches, more rows than columns and the
// reverse: the product matches the definition, and splitting it over 2 or 3 threads gives
// exactly the one-call bits.
TEST(GemmKernel, MatchesTheDefinitionWhicheverWayItIsSplit) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  const Blas with{&reference_sgemm, &reference_local_threads};
  // Each at least 3 parts' worth of work: split by rows, by columns, by batch, and by rows
  // within batches (2 batches, 3 parts).
  for (auto [batch, m, n, k] : {std::array<int64_t, 4>{1, 260, 140, 50}, {1, 40, 400, 100},
                                {3, 64, 96, 90}, {2, 70, 60, 200}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        GemmShape s{batch, m, n, k, ta, tb};
        ASSERT_EQ(check_shape(s), "");
        std::vector<float> a(batch * m * k), b(batch * k * n);
        for (float& v : a) v = normal(gen);
        for (float& v : b) v = normal(gen);
        std::vector<float> one(batch * m * n, -1.0f);
        gemm(s, a.data(), b.data(), one.data(), with);
        std::vector<double> want = gemm_reference(s, a, b);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(one[i], want[i], 1e-4 * (1 + std::abs(want[i])))
              << batch << "x" << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb;
        }
        for (int64_t threads : {2, 3}) {
          g_local_threads_calls = 0;
          std::vector<float> split(batch * m * n, -1.0f);
          gemm(s, a.data(), b.data(), split.data(), with, thread_per_item(), threads);
          EXPECT_EQ(split, one) << batch << "x" << m << "x" << n << "x" << k << " ta " << ta
                                << " tb " << tb << " threads " << threads;
          // Each part sets one BLAS thread and restores the setting.
          EXPECT_GE(g_local_threads_calls.load(), 4);
        }
      }
    }
  }
  GemmShape empty{1, 0, 4, 4};
  EXPECT_NE(check_shape(empty).find("every dim must be at least 1"), std::string::npos);
  GemmShape huge{1, int64_t{1} << 31, 4, 4};
  EXPECT_NE(check_shape(huge).find("32-bit BLAS int"), std::string::npos);
}

// aten::mm on float32 with the host GEMM on: the module calls the kernel, which the plugin
// runs; small products and other dtypes keep dot_general.
TEST(HostKernelCall, Float32MmRunsOnTheGemmKernel) {
  ASSERT_NO_FATAL_FAILURE(register_host_kernels());
  set_blas({&reference_sgemm, &reference_local_threads});
  lowering::set_host_gemm(true);
  using base::DType;
  testing::HostTensor a = testing::arange(DType::kF32, {96, 80}, -3800);
  testing::HostTensor b = testing::arange(DType::kF32, {80, 160}, -6400);
  for (double& v : a.values) v /= 256;
  for (double& v : b.values) v /= 512;
  auto lowered = lowering::lower_op("aten::mm", {testing::tensor_arg(a), testing::tensor_arg(b)},
                                    {{DType::kF32, {96, 160}}});
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  EXPECT_NE(lowered->text.find("torchtpu_gemm"), std::string::npos);
  EXPECT_EQ(lowered->text.find("dot_general"), std::string::npos);
  auto run = testing::run_lowering("aten::mm", {testing::tensor_arg(a), testing::tensor_arg(b)},
                                   {{DType::kF32, {96, 160}}}, {{0, a}, {1, b}});
  ASSERT_EQ(run.outputs.size(), 1u);
  std::vector<float> af(a.values.begin(), a.values.end()), bf(b.values.begin(), b.values.end());
  std::vector<double> want = gemm_reference({1, 96, 160, 80}, af, bf);
  // 80 products of up to ~190 each, summed in float32 with cancellation: a few float32
  // ulps of the largest partial sums.
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(run.outputs[0].values[i], want[i], 2e-2);

  testing::HostTensor small = testing::arange(DType::kF32, {8, 8});
  auto tiny = lowering::lower_op("aten::mm", {testing::tensor_arg(small), testing::tensor_arg(small)},
                                 {{DType::kF32, {8, 8}}});
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->text.find("torchtpu_gemm"), std::string::npos);
  testing::HostTensor wide = testing::arange(DType::kF64, {96, 80});
  testing::HostTensor wide_b = testing::arange(DType::kF64, {80, 160});
  auto f64 = lowering::lower_op("aten::mm", {testing::tensor_arg(wide), testing::tensor_arg(wide_b)},
                                {{DType::kF64, {96, 160}}});
  ASSERT_TRUE(f64.ok());
  EXPECT_EQ(f64->text.find("torchtpu_gemm"), std::string::npos);
  lowering::set_host_gemm(false);
  auto off = lowering::lower_op("aten::mm", {testing::tensor_arg(a), testing::tensor_arg(b)},
                                {{DType::kF32, {96, 160}}});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->text.find("torchtpu_gemm"), std::string::npos);
}

// The lowering's custom call, compiled and run by the plugin with the kernel registered.
TEST(HostKernelCall, PagedAttentionRunsOnThePlugin) {
  ASSERT_NO_FATAL_FAILURE(register_host_kernels());
  const Case& c = kCases[7];  // ragged, padding
  const PagedAttentionShape sh = c.shape();
  Inputs in = make_inputs(c, 11);
  using base::DType;
  auto host = [](DType t, lowering::Dims dims, auto values) {
    testing::HostTensor h{{t, std::move(dims)}, {}};
    h.values.assign(values.begin(), values.end());
    return h;
  };
  std::vector<testing::HostTensor> inputs = {
      host(DType::kF32, {sh.tokens, sh.heads, sh.head_dim}, in.q),
      host(DType::kF32, {sh.num_slots, sh.kv_heads, sh.head_dim}, in.k),
      host(DType::kF32, {sh.num_slots, sh.kv_heads, sh.head_dim}, in.v),
      host(DType::kI64, {sh.seqs, sh.pages_per_seq}, in.pages),
      host(DType::kI64, {sh.tokens}, in.positions),
      host(DType::kI64, {sh.seqs + 1}, in.query_start)};
  std::vector<lowering::OpArg> args;
  for (const auto& t : inputs) args.push_back(testing::tensor_arg(t));
  args.push_back(testing::int_arg(sh.page_size));
  args.push_back(testing::double_arg(0.125));
  args.push_back(testing::int_arg(c.window));
  auto lowered = lowering::lower_op("torchtpu::paged_attention", args, {inputs[0].type});
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  EXPECT_NE(lowered->text.find("torchtpu_paged_attention"), std::string::npos);
  auto outs = testing::run_module(lowered->text, inputs);
  ASSERT_EQ(outs.size(), 1u);
  std::vector<float> got(outs[0].values.begin(), outs[0].values.end());
  expect_close(got, reference(c, in, 0.125));
}

TEST(HostKernelCall, Int8MatmulRunsOnThePlugin) {
  ASSERT_NO_FATAL_FAILURE(register_host_kernels());
  using base::DType;
  testing::HostTensor x{{DType::kF32, {2, 3}}, {1, 2, 3, -1, 0, 0.5}};
  // [K, N] = [[1, 127], [-2, 0], [3, -127]], packed: one block of 3 rows of 64 channels.
  const std::vector<int8_t> wk = {1, 127, -2, 0, 3, -127};
  const std::vector<int8_t> packed = pack(3, 2, wk);
  testing::HostTensor w{{DType::kI8, {1, 3, 64}}, {}};
  w.values.assign(packed.begin(), packed.end());
  testing::HostTensor scale{{DType::kF32, {2}}, {0.5, 0.25}};
  auto lowered = lowering::lower_op(
      "torchtpu::int8_matmul",
      {testing::tensor_arg(x), testing::tensor_arg(w), testing::tensor_arg(scale)},
      {{DType::kF32, {2, 2}}});
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  auto outs = testing::run_module(lowered->text, {x, w, scale});
  ASSERT_EQ(outs.size(), 1u);
  // [1-4+9, 127-381] * [0.5, 0.25]; [-1+1.5, -127-63.5] * [0.5, 0.25]
  std::vector<double> want = {3.0, -63.5, 0.25, -47.625};
  std::vector<double> got(outs[0].values.begin(), outs[0].values.end());
  EXPECT_EQ(got, want);
}

TEST(HostKernelCall, LoweringRejectsWrongOperands) {
  lowering::OpArg q = testing::tensor_arg({{base::DType::kF32, {1, 4, 8}}, {}});
  lowering::OpArg pool = testing::tensor_arg({{base::DType::kF32, {32, 3, 8}}, {}});
  lowering::OpArg pages = testing::tensor_arg({{base::DType::kI32, {1, 2}}, {}});  // not i64
  lowering::OpArg pos = testing::tensor_arg({{base::DType::kI64, {1}}, {}});
  lowering::OpArg starts = testing::tensor_arg({{base::DType::kI64, {2}}, {}});
  auto lowered = lowering::lower_op(
      "torchtpu::paged_attention",
      {q, pool, pool, pages, pos, starts, testing::int_arg(16), testing::double_arg(0.5),
       testing::int_arg(0)},
      {{base::DType::kF32, {1, 4, 8}}});
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().message().find("torchtpu::paged_attention: expected q f32[T,H,D]"),
            std::string::npos);
  EXPECT_NE(lowered.status().message().find("pages tensor<1x2xi32>"), std::string::npos)
      << lowered.status().message();

  lowering::OpArg x = testing::tensor_arg({{base::DType::kF32, {2, 3}}, {}});
  lowering::OpArg w = testing::tensor_arg({{base::DType::kF32, {3, 4}}, {}});  // not int8
  lowering::OpArg scale = testing::tensor_arg({{base::DType::kF32, {4}}, {}});
  auto int8 = lowering::lower_op("torchtpu::int8_matmul", {x, w, scale},
                                 {{base::DType::kF32, {2, 4}}});
  ASSERT_FALSE(int8.ok());
  EXPECT_NE(int8.status().message().find("torchtpu::int8_matmul: expected x f32[M,K], w "
                                        "i8[ceil(N/64),K,64] (packed"),
            std::string::npos) << int8.status().message();
  // int8, but unpacked [K, N]
  lowering::OpArg unpacked = testing::tensor_arg({{base::DType::kI8, {3, 4}}, {}});
  auto flat = lowering::lower_op("torchtpu::int8_matmul", {x, unpacked, scale},
                                 {{base::DType::kF32, {2, 4}}});
  ASSERT_FALSE(flat.ok());
  EXPECT_NE(flat.status().message().find("w tensor<3x4xi8>"), std::string::npos)
      << flat.status().message();
}

}  // namespace
}  // namespace torchtpu::kernels
