// List ops (_foreach_*) and multinomial on the CPU plugin: one module for a whole list,
// per-item scalars from a Scalar[] argument, and multinomial's frequencies and checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;

OpArg list_arg(const std::vector<HostTensor>& items) {
  OpArg a;
  a.kind = ArgKind::kTensorList;
  for (const HostTensor& t : items) a.list_types.push_back(t.type);
  return a;
}

OpArg scalar_list_arg(size_t n) {
  OpArg a;
  a.kind = ArgKind::kScalarList;
  a.scalar_categories.assign(n, ScalarCategory::kFloat);
  return a;
}

TEST(ForeachLowering, AddListWithAlphaIsOneModuleForEveryItem) {
  std::vector<HostTensor> self{{{DType::kF32, {2}}, {1, 2}}, {{DType::kF32, {3}}, {3, 4, 5}}};
  std::vector<HostTensor> other{{{DType::kF32, {2}}, {10, 20}}, {{DType::kF32, {3}}, {1, 1, 1}}};
  auto run = run_lowering("aten::_foreach_add_.List",
                          {list_arg(self), list_arg(other), scalar_arg(ScalarCategory::kFloat)},
                          {self[0].type, self[1].type}, {}, {{2, 0.5}}, {{0, self}, {1, other}});
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{6, 12}));
  EXPECT_EQ(run.outputs[1].values, (std::vector<double>{3.5, 4.5, 5.5}));
}

TEST(ForeachLowering, ScalarListGivesEachItemItsOwnRuntimeScalar) {
  std::vector<HostTensor> self{{{DType::kF32, {2}}, {1, 2}}, {{DType::kF32, {1}}, {8}}};
  auto run = run_lowering("aten::_foreach_div.ScalarList", {list_arg(self), scalar_list_arg(2)},
                          {self[0].type, self[1].type}, {}, {}, {{0, self}}, {},
                          {{1, {2.0, 4.0}}});
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{0.5, 1}));
  EXPECT_EQ(run.outputs[1].values, (std::vector<double>{2}));
}

TEST(ForeachLowering, NormMapsOntoVectorNorm) {
  std::vector<HostTensor> self{{{DType::kF32, {2}}, {3, 4}}, {{DType::kF32, {2, 2}}, {1, 1, 1, 1}}};
  TensorType scalar{DType::kF32, {}};
  auto run = run_lowering("aten::_foreach_norm.Scalar",
                          {list_arg(self), scalar_arg(ScalarCategory::kInt), none_arg()},
                          {scalar, scalar}, {}, {{1, 2}}, {{0, self}});
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_NEAR(run.outputs[0].values[0], 5, 1e-6);
  EXPECT_NEAR(run.outputs[1].values[0], 2, 1e-6);
}

TEST(MultinomialLowering, FrequenciesFollowProbabilities) {
  HostTensor probs{{DType::kF32, {4}}, {0.1, 0.2, 0, 0.7}};
  constexpr int64_t kSamples = 20000;
  auto run = run_lowering("aten::multinomial",
                          {tensor_arg(probs), int_arg(kSamples), bool_arg(true), none_arg()},
                          {{DType::kI64, {kSamples}}}, {{0, probs}}, {}, {}, {7, 3});
  ASSERT_EQ(run.outputs.size(), 1u);
  std::vector<double> counts(4, 0);
  for (double v : run.outputs[0].values) counts.at(static_cast<size_t>(v)) += 1;
  // Standard error of a frequency near 0.5 over 20k draws is 0.0035; allow ~4x.
  EXPECT_NEAR(counts[0] / kSamples, 0.1, 0.015);
  EXPECT_NEAR(counts[1] / kSamples, 0.2, 0.015);
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[3] / kSamples, 0.7, 0.015);
  for (bool ok : run.checks) EXPECT_TRUE(ok);
}

TEST(MultinomialLowering, WithoutReplacementDrawsDistinctCategoriesPerRow) {
  HostTensor probs{{DType::kF32, {3, 5}}, {1, 1, 1, 1, 1, 5, 4, 3, 2, 1, 0, 1, 0, 1, 1}};
  auto run = run_lowering("aten::multinomial",
                          {tensor_arg(probs), int_arg(3), bool_arg(false), none_arg()},
                          {{DType::kI64, {3, 3}}}, {{0, probs}}, {}, {}, {1, 0});
  ASSERT_EQ(run.outputs.size(), 1u);
  const auto& v = run.outputs[0].values;
  for (int r = 0; r < 3; ++r) {
    std::set<double> row(v.begin() + 3 * r, v.begin() + 3 * r + 3);
    EXPECT_EQ(row.size(), 3u) << "row " << r;
  }
  // Row 2 has exactly three nonzero categories: all of them are drawn.
  std::set<double> last(v.begin() + 6, v.end());
  EXPECT_EQ(last, (std::set<double>{1, 3, 4}));
}

TEST(MultinomialLowering, InvalidProbabilitiesFailTheDataChecks) {
  HostTensor negative{{DType::kF32, {3}}, {0.5, -0.1, 0.6}};
  auto bad = run_lowering("aten::multinomial",
                          {tensor_arg(negative), int_arg(1), bool_arg(true), none_arg()},
                          {{DType::kI64, {1}}}, {{0, negative}});
  ASSERT_EQ(bad.checks.size(), 2u);
  EXPECT_FALSE(bad.checks[0]);
  HostTensor zero_row{{DType::kF32, {2, 2}}, {0, 0, 1, 1}};
  auto zero = run_lowering("aten::multinomial",
                           {tensor_arg(zero_row), int_arg(1), bool_arg(true), none_arg()},
                           {{DType::kI64, {2, 1}}}, {{0, zero_row}});
  ASSERT_EQ(zero.checks.size(), 2u);
  EXPECT_TRUE(zero.checks[0]);
  EXPECT_FALSE(zero.checks[1]);
}

}  // namespace
}  // namespace torchtpu::testing
