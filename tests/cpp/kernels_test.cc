// Host kernels: the paged-attention kernel against a direct double-precision reading of its
// definition, and the same kernel run by the XLA CPU plugin as a custom call that the
// `torchtpu::paged_attention` lowering emits.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "kernels/host_kernels.h"
#include "kernels/paged_attention.h"
#include "lowering_harness.h"

namespace torchtpu::kernels {
namespace {

struct Case {
  PagedAttentionShape shape;
  int64_t window = 0;
};

struct Inputs {
  std::vector<float> q, k, v;
  std::vector<int64_t> pages, positions;
};

// Random queries and pool; each sequence gets distinct random pages; positions run up to
// and past the context; the last query of sequence 0 sits at -1 (sees no key).
Inputs make_inputs(const PagedAttentionShape& sh, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  Inputs in;
  in.q.resize(sh.seqs * sh.queries * sh.heads * sh.head_dim);
  in.k.resize(sh.num_slots * sh.kv_heads * sh.head_dim);
  in.v.resize(in.k.size());
  for (auto* t : {&in.q, &in.k, &in.v}) {
    for (float& x : *t) x = normal(gen);
  }
  const int64_t num_pages = sh.num_slots / sh.page_size, ctx = sh.pages_per_seq * sh.page_size;
  for (int64_t s = 0; s < sh.seqs; ++s) {
    std::vector<int64_t> ids(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), gen);
    in.pages.insert(in.pages.end(), ids.begin(), ids.begin() + sh.pages_per_seq);
    for (int64_t i = 0; i < sh.queries; ++i) {
      in.positions.push_back(static_cast<int64_t>(gen() % (ctx + 3)));
    }
  }
  if (sh.queries > 1) in.positions[sh.queries - 1] = -1;
  return in;
}

std::vector<double> reference(const PagedAttentionShape& sh, const Inputs& in, double scale,
                              int64_t window) {
  const int64_t d = sh.head_dim, group = sh.heads / sh.kv_heads;
  const int64_t ctx = sh.pages_per_seq * sh.page_size;
  std::vector<double> out(in.q.size(), 0.0);
  for (int64_t s = 0; s < sh.seqs; ++s) {
    for (int64_t i = 0; i < sh.queries; ++i) {
      int64_t pos = in.positions[s * sh.queries + i];
      for (int64_t h = 0; h < sh.heads; ++h) {
        const float* qr = &in.q[((s * sh.queries + i) * sh.heads + h) * d];
        std::vector<double> w;
        std::vector<const float*> values;
        for (int64_t j = 0; j < ctx; ++j) {
          if (j > pos || (window > 0 && j <= pos - window)) continue;
          int64_t slot = in.pages[s * sh.pages_per_seq + j / sh.page_size] * sh.page_size +
                         j % sh.page_size;
          const float* key = &in.k[(slot * sh.kv_heads + h / group) * d];
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += double(qr[c]) * key[c];
          w.push_back(dot * scale);
          values.push_back(&in.v[(slot * sh.kv_heads + h / group) * d]);
        }
        if (w.empty()) continue;
        double top = *std::max_element(w.begin(), w.end()), sum = 0;
        for (double& x : w) sum += (x = std::exp(x - top));
        double* o = &out[((s * sh.queries + i) * sh.heads + h) * d];
        for (size_t j = 0; j < w.size(); ++j) {
          for (int64_t c = 0; c < d; ++c) o[c] += w[j] / sum * values[j][c];
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

// Shapes: decode (Q=1) and several queries per sequence, grouped and plain heads, the two
// head sizes with a specialized loop and one without, a sliding window.
const Case kCases[] = {
    {{3, 1, 9, 3, 64, 40 * 16, 8, 16}, 0},
    {{2, 5, 4, 4, 128, 12 * 8, 4, 8}, 0},
    {{4, 3, 6, 2, 40, 20 * 4, 6, 4}, 0},
    {{2, 4, 8, 2, 64, 30 * 16, 5, 16}, 7},
    {{1, 1, 2, 1, 16, 1 * 4, 1, 4}, 0},
    {{2, 37, 6, 3, 64, 16 * 16, 6, 16}, 0},   // three query blocks, the last one short
    {{1, 20, 4, 2, 36, 12 * 8, 5, 8}, 9},     // a head size with no vector accumulation
};

TEST(PagedAttentionKernel, MatchesADirectReading) {
  uint32_t seed = 0;
  for (const Case& c : kCases) {
    SCOPED_TRACE("S=" + std::to_string(c.shape.seqs) + " Q=" + std::to_string(c.shape.queries) +
                 " D=" + std::to_string(c.shape.head_dim) + " window=" + std::to_string(c.window));
    ASSERT_EQ(check_shape(c.shape), "");
    Inputs in = make_inputs(c.shape, ++seed);
    std::vector<float> out(in.q.size(), -1.0f);
    float scale = 1.0f / std::sqrt(static_cast<float>(c.shape.head_dim));
    ASSERT_EQ(paged_attention(c.shape, in.q.data(), in.k.data(), in.v.data(), in.pages.data(),
                              in.positions.data(), scale, c.window, out.data()), "");
    expect_close(out, reference(c.shape, in, scale, c.window));
  }
}

TEST(PagedAttentionKernel, ThreadsGiveTheSameBits) {
  ParallelFor two_threads = [](int64_t n, const std::function<void(int64_t)>& body) {
    std::thread other([&] { for (int64_t i = 1; i < n; i += 2) body(i); });
    for (int64_t i = 0; i < n; i += 2) body(i);
    other.join();
  };
  for (const Case& c : {kCases[0], kCases[3]}) {  // one query (by sequence), several (by block)
    Inputs in = make_inputs(c.shape, 7);
    std::vector<float> serial(in.q.size()), threaded(in.q.size());
    ASSERT_EQ(paged_attention(c.shape, in.q.data(), in.k.data(), in.v.data(), in.pages.data(),
                              in.positions.data(), 0.125f, c.window, serial.data()), "");
    ASSERT_EQ(paged_attention(c.shape, in.q.data(), in.k.data(), in.v.data(), in.pages.data(),
                              in.positions.data(), 0.125f, c.window, threaded.data(),
                              two_threads), "");
    EXPECT_EQ(serial, threaded);
  }
}

TEST(PagedAttentionKernel, RejectsAPageOutsideThePool) {
  const Case& c = kCases[0];
  Inputs in = make_inputs(c.shape, 3);
  in.pages[c.shape.pages_per_seq + 2] = 40;  // the pool has pages 0..39
  std::vector<float> out(in.q.size());
  std::string why = paged_attention(c.shape, in.q.data(), in.k.data(), in.v.data(),
                                    in.pages.data(), in.positions.data(), 0.125f, 0, out.data());
  EXPECT_EQ(why, "page id 40 (sequence 1) is outside the pool of 40 pages");
}

TEST(PagedAttentionKernel, ChecksTheShape) {
  EXPECT_EQ(check_shape({1, 1, 9, 2, 64, 64, 1, 16}), "9 query heads are not a multiple of 2 kv heads");
  EXPECT_EQ(check_shape({1, 1, 4, 2, 64, 60, 1, 16}),
            "the pool's 60 slots are not whole pages of 16");
  EXPECT_NE(check_shape({1, 1, 4, 2, 64, 64, 1, 0}), "");
}

// The lowering's custom call, compiled and run by the plugin with the kernel registered.
TEST(HostKernelCall, PagedAttentionRunsOnThePlugin) {
  auto client = testing::test_client();
  ASSERT_EQ(client->platform_name(), "cpu");
  for (const HostKernel& k : host_kernels()) {
    base::Status st = client->plugin().register_ffi_handler(k.target, "Host",
                                                            reinterpret_cast<void*>(k.handler));
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  const Case& c = kCases[3];  // several queries, a window
  const PagedAttentionShape& sh = c.shape;
  Inputs in = make_inputs(sh, 11);
  using base::DType;
  auto host = [](DType t, lowering::Dims dims, auto values) {
    testing::HostTensor h{{t, std::move(dims)}, {}};
    h.values.assign(values.begin(), values.end());
    return h;
  };
  std::vector<testing::HostTensor> inputs = {
      host(DType::kF32, {sh.seqs, sh.queries, sh.heads, sh.head_dim}, in.q),
      host(DType::kF32, {sh.num_slots, sh.kv_heads, sh.head_dim}, in.k),
      host(DType::kF32, {sh.num_slots, sh.kv_heads, sh.head_dim}, in.v),
      host(DType::kI64, {sh.seqs, sh.pages_per_seq}, in.pages),
      host(DType::kI64, {sh.seqs, sh.queries}, in.positions)};
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
  expect_close(got, reference(sh, in, 0.125, c.window));
}

TEST(HostKernelCall, LoweringRejectsWrongOperands) {
  lowering::OpArg q = testing::tensor_arg({{base::DType::kF32, {1, 1, 4, 8}}, {}});
  lowering::OpArg pool = testing::tensor_arg({{base::DType::kF32, {32, 3, 8}}, {}});
  lowering::OpArg pages = testing::tensor_arg({{base::DType::kI32, {1, 2}}, {}});  // not i64
  lowering::OpArg pos = testing::tensor_arg({{base::DType::kI64, {1, 1}}, {}});
  auto lowered = lowering::lower_op(
      "torchtpu::paged_attention",
      {q, pool, pool, pages, pos, testing::int_arg(16), testing::double_arg(0.5),
       testing::int_arg(0)},
      {{base::DType::kF32, {1, 1, 4, 8}}});
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().message().find("torchtpu::paged_attention: expected q f32[S,Q,H,D]"),
            std::string::npos);
  EXPECT_NE(lowered.status().message().find("pages tensor<1x2xi32>"), std::string::npos)
      << lowered.status().message();
}

}  // namespace
}  // namespace torchtpu::kernels
