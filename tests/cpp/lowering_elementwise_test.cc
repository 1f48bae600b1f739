// Elementwise lowerings run on the CPU plugin and compared with hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;

TEST(ElementwiseLowering, AddBroadcastsAndAppliesAlpha) {
  HostTensor a{{DType::kF32, {2, 3}}, {1, 2, 3, 4, 5, 6}};
  HostTensor b{{DType::kF32, {3}}, {10, 20, 30}};
  auto run = run_lowering("aten::add.Tensor",
                          {tensor_arg(a), tensor_arg(b), scalar_arg(ScalarCategory::kInt)},
                          {TensorType{DType::kF32, {2, 3}}}, {{0, a}, {1, b}}, {{2, 2.0}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{21, 42, 63, 24, 45, 66}));
}

TEST(ElementwiseLowering, IntTensorPlusFloatScalarPromotesToFloat) {
  HostTensor a{{DType::kI64, {3}}, {1, 2, 3}};
  OpArg s = scalar_arg(ScalarCategory::kFloat);
  auto run = run_lowering("aten::add.Scalar", {tensor_arg(a), s, scalar_arg(ScalarCategory::kInt)},
                          {TensorType{DType::kF32, {3}}}, {{0, a}}, {{1, 0.5}, {2, 1}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].type.dtype, DType::kF32);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{1.5, 2.5, 3.5}));
}

TEST(ElementwiseLowering, FloorDivideAndRemainderFollowPython) {
  HostTensor a{{DType::kI64, {4}}, {7, -7, 7, -7}};
  HostTensor b{{DType::kI64, {4}}, {2, 2, -2, -2}};
  auto div = run_lowering("aten::div.Tensor_mode", {tensor_arg(a), tensor_arg(b), string_arg("floor")},
                          {TensorType{DType::kI64, {4}}}, {{0, a}, {1, b}});
  ASSERT_EQ(div.outputs.size(), 1u);
  EXPECT_EQ(div.outputs[0].values, (std::vector<double>{3, -4, -4, 3}));
  auto rem = run_lowering("aten::remainder.Tensor", {tensor_arg(a), tensor_arg(b)},
                          {TensorType{DType::kI64, {4}}}, {{0, a}, {1, b}});
  ASSERT_EQ(rem.outputs.size(), 1u);
  EXPECT_EQ(rem.outputs[0].values, (std::vector<double>{1, 1, -1, -1}));
}

TEST(ElementwiseLowering, ComparisonYieldsBool) {
  HostTensor a{{DType::kF32, {3}}, {1, 2, 3}};
  auto run = run_lowering("aten::lt.Scalar", {tensor_arg(a), scalar_arg(ScalarCategory::kInt)},
                          {TensorType{DType::kBool, {3}}}, {{0, a}}, {{1, 2}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{1, 0, 0}));
}

TEST(ElementwiseLowering, ErfAndTanThroughChlo) {
  HostTensor a{{DType::kF32, {2}}, {0.5, -1.0}};
  auto run = run_lowering("aten::erf", {tensor_arg(a)}, {TensorType{DType::kF32, {2}}}, {{0, a}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_NEAR(run.outputs[0].values[0], std::erf(0.5), 1e-6);
  EXPECT_NEAR(run.outputs[0].values[1], std::erf(-1.0), 1e-6);
  auto tan = run_lowering("aten::tan", {tensor_arg(a)}, {TensorType{DType::kF32, {2}}}, {{0, a}});
  ASSERT_EQ(tan.outputs.size(), 1u);
  EXPECT_NEAR(tan.outputs[0].values[0], std::tan(0.5), 1e-6);
}

}  // namespace
}  // namespace torchtpu::testing
