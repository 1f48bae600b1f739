#include "lowering/host_gemm.h"

#include <atomic>
#include <climits>
#include <string>
#include <utility>

namespace torchtpu::lowering {
namespace {

std::atomic<bool> g_host_gemm{false};
std::atomic<bool> g_widen_half{false};

// Below this many multiply-adds in all (128x128x64) a product is too small to pay for
// the call: the plugin sets up each custom call's execution (a dozen host allocations on
// the enqueuing thread) and XLA's own dot, fused into its neighbours, runs as fast. A
// product of fewer than kMinRows rows, columns or contracted elements (a decode step's few
// tokens, an outer product) is bound by reading memory, which XLA's emitter streams as
// fast.
constexpr int64_t kMinMacs = int64_t{1} << 20;
constexpr int64_t kMinRows = 16;

bool leading(const Dims& dims) {
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

// `v` as a rank-3 [B, rows, cols] operand and whether it is read transposed: `trans` says
// whether the kernel reads it transposed as given; a transpose of the last two dims (the
// batch dims kept in place) is undone and flips it.
Value operand(Builder& b, Value v, int64_t batch, bool& trans) {
  const int64_t r = v.rank();
  if (const Builder::Transposed* t = b.transposed_from(v)) {
    Dims swap_last;
    for (int64_t i = 0; i < r; ++i) swap_last.push_back(i);
    std::swap(swap_last[r - 2], swap_last[r - 1]);
    if (t->permutation == swap_last) {
      v = t->source;
      trans = !trans;
    }
  }
  return b.reshape(v, {batch, v.dims()[r - 2], v.dims()[r - 1]});
}

// XLA's CPU client runs a program whose cost analysis counts under 1000 flops on the
// calling thread, synchronously, and the analysis counts a custom call as 0 flops: a program
// of products alone would block the host for its whole run (an eager mm could not overlap
// the next op's dispatch). So the call also takes the sum of up to 1024 leading elements of
// each operand, which it ignores: a read of at most 8 KiB that the analysis counts as the
// 1000-plus flops it is owed (K (M + N) >= 1440 for the products this lowering covers).
Value cost_operand(Builder& b, Value v) {
  const int64_t n = v.type.num_elements();
  Value flat = b.reshape(v, {n});
  Value head = n > 1024 ? b.slice(flat, {0}, {1024}, {1}) : flat;
  return b.reduce_sum(head, {0});
}

}  // namespace

void set_host_gemm(bool on) { g_host_gemm.store(on); }
bool host_gemm() { return g_host_gemm.load(); }

void set_widen_half_products(bool on) { g_widen_half.store(on); }
bool widen_half_products() { return g_widen_half.load(); }

std::optional<Value> host_gemm_product(Builder& b, Value lhs, Value rhs, const Dims& lhs_batch,
                                       const Dims& rhs_batch, const Dims& lhs_contract,
                                       const Dims& rhs_contract) {
  if (!host_gemm() || lhs.dtype() != DType::kF32 || rhs.dtype() != DType::kF32) {
    return std::nullopt;
  }
  const int64_t nb = static_cast<int64_t>(lhs_batch.size());
  if (lhs.rank() != nb + 2 || rhs.rank() != nb + 2 || !leading(lhs_batch) ||
      !leading(rhs_batch) || lhs_contract.size() != 1 || rhs_contract.size() != 1) {
    return std::nullopt;
  }
  Dims out_dims;
  int64_t batch = 1;
  for (int64_t d = 0; d < nb; ++d) {
    if (lhs.dims()[d] != rhs.dims()[d]) return std::nullopt;
    out_dims.push_back(lhs.dims()[d]);
    batch *= lhs.dims()[d];
  }
  // lhs [.., M, K] or (contracting its first matrix dim) [.., K, M]; rhs [.., K, N] or
  // [.., N, K].
  bool trans_a = lhs_contract[0] == nb, trans_b = rhs_contract[0] == nb + 1;
  const int64_t m = lhs.dims()[trans_a ? nb + 1 : nb], k = lhs.dims()[lhs_contract[0]];
  const int64_t n = rhs.dims()[trans_b ? nb : nb + 1];
  if (batch < 1 || m < kMinRows || n < kMinRows || k < kMinRows || m > INT_MAX || n > INT_MAX ||
      k > INT_MAX ||
      static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
              static_cast<double>(k) < kMinMacs) {
    return std::nullopt;
  }
  Value a = operand(b, lhs, batch, trans_a), bm = operand(b, rhs, batch, trans_b);
  std::string attrs = "call_target_name = \"torchtpu_gemm\", api_version = 4 : i32, "
                      "backend_config = {trans_a = " + std::to_string(trans_a ? 1 : 0) +
                      " : i64, trans_b = " + std::to_string(trans_b ? 1 : 0) + " : i64}";
  Value cost = b.add(cost_operand(b, a), cost_operand(b, bm));
  Value c = b.op("stablehlo.custom_call", {a, bm, cost}, TensorType{DType::kF32, {batch, m, n}},
                 attrs);
  out_dims.push_back(m);
  out_dims.push_back(n);
  return b.reshape(c, out_dims);
}

}  // namespace torchtpu::lowering
