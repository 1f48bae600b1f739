// Sort lowerings (sort, topk, kthvalue) on the CPU plugin against hand-sorted values:
// NaN orders above every number, equal values keep their original order (stable).
#include <gtest/gtest.h>

#include <cmath>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;

void expect_exact(const LoweringRun& run, size_t k, const std::vector<double>& expected) {
  ASSERT_GT(run.outputs.size(), k);
  const std::vector<double>& got = run.outputs[k].values;
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "output " << k << " at " << i << ": " << got[i];
    } else {
      EXPECT_EQ(got[i], expected[i]) << "output " << k << " at " << i;
    }
  }
}

// Rows: [3, NaN, 1, 3, -inf] and [2, 2, 0, 5, 1].
const HostTensor kRows{{DType::kF32, {2, 5}}, {3, kNaN, 1, 3, -kInf, 2, 2, 0, 5, 1}};

TEST(SortLowering, AscendingPutsNanLastAndKeepsTiesInOrder) {
  auto run = run_lowering("aten::sort", {tensor_arg(kRows), int_arg(-1), bool_arg(false)},
                          {TensorType{DType::kF32, {2, 5}}, TensorType{DType::kI64, {2, 5}}},
                          {{0, kRows}});
  expect_exact(run, 0, {-kInf, 1, 3, 3, kNaN, 0, 1, 2, 2, 5});
  expect_exact(run, 1, {4, 2, 0, 3, 1, 2, 4, 0, 1, 3});
}

TEST(SortLowering, StableDescendingAlongDim0PutsNanFirst) {
  // sort.stable(self, stable, dim, descending): dim 0 of the 2x5 rows.
  auto run = run_lowering("aten::sort.stable",
                          {tensor_arg(kRows), bool_arg(true), int_arg(0), bool_arg(true)},
                          {TensorType{DType::kF32, {2, 5}}, TensorType{DType::kI64, {2, 5}}},
                          {{0, kRows}});
  expect_exact(run, 0, {3, kNaN, 1, 5, 1, 2, 2, 0, 3, -kInf});
  expect_exact(run, 1, {0, 0, 0, 1, 1, 1, 1, 1, 0, 0});
}

TEST(SortLowering, IntegersAndBools) {
  HostTensor ints{{DType::kI64, {4}}, {7, -2, 7, 0}};
  auto run = run_lowering("aten::sort", {tensor_arg(ints), int_arg(0), bool_arg(true)},
                          {TensorType{DType::kI64, {4}}, TensorType{DType::kI64, {4}}},
                          {{0, ints}});
  expect_exact(run, 0, {7, 7, 0, -2});
  expect_exact(run, 1, {0, 2, 3, 1});
  HostTensor bools{{DType::kBool, {3}}, {1, 0, 1}};
  auto b = run_lowering("aten::sort", {tensor_arg(bools), int_arg(0), bool_arg(false)},
                        {TensorType{DType::kBool, {3}}, TensorType{DType::kI64, {3}}},
                        {{0, bools}});
  expect_exact(b, 0, {0, 1, 1});
  expect_exact(b, 1, {1, 0, 2});
}

TEST(SortLowering, TopkLargestAndSmallest) {
  auto largest = run_lowering("aten::topk",
                              {tensor_arg(kRows), int_arg(2), int_arg(1), bool_arg(true),
                               bool_arg(true)},
                              {TensorType{DType::kF32, {2, 2}}, TensorType{DType::kI64, {2, 2}}},
                              {{0, kRows}});
  expect_exact(largest, 0, {kNaN, 3, 5, 2});
  expect_exact(largest, 1, {1, 0, 3, 0});
  auto smallest = run_lowering("aten::topk",
                               {tensor_arg(kRows), int_arg(1), int_arg(-1), bool_arg(false),
                                bool_arg(true)},
                               {TensorType{DType::kF32, {2, 1}}, TensorType{DType::kI64, {2, 1}}},
                               {{0, kRows}});
  expect_exact(smallest, 0, {-kInf, 0});
  expect_exact(smallest, 1, {4, 2});
}

TEST(SortLowering, KthvalueKeepdim) {
  auto run = run_lowering("aten::kthvalue",
                          {tensor_arg(kRows), int_arg(3), int_arg(1), bool_arg(true)},
                          {TensorType{DType::kF32, {2, 1}}, TensorType{DType::kI64, {2, 1}}},
                          {{0, kRows}});
  expect_exact(run, 0, {3, 2});
  expect_exact(run, 1, {0, 0});
}

}  // namespace
}  // namespace torchtpu::testing
