// Factory lowerings run on the CPU plugin and compared with values computed the way
// PyTorch's CPU kernels compute them.
#include <gtest/gtest.h>

#include <cmath>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;

OpArg out_arg(const TensorType& t) {
  OpArg a;
  a.kind = ArgKind::kTensor;
  a.type = t;
  return a;
}

TEST(FactoryLowering, FillScalarCastsToSelfDtype) {
  TensorType f{DType::kF32, {2, 3}};
  auto run = run_lowering("aten::fill_.Scalar", {out_arg(f), scalar_arg(ScalarCategory::kFloat)},
                          {f}, {}, {{1, 2.5}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, std::vector<double>(6, 2.5));

  TensorType l{DType::kI64, {4}};
  auto ints = run_lowering("aten::fill_.Scalar", {out_arg(l), scalar_arg(ScalarCategory::kInt)},
                           {l}, {}, {{1, -7}});
  ASSERT_EQ(ints.outputs.size(), 1u);
  EXPECT_EQ(ints.outputs[0].values, std::vector<double>(4, -7));
}

TEST(FactoryLowering, FillTensorTakesZeroDimDeviceTensor) {
  TensorType f{DType::kF32, {3}};
  HostTensor value{{DType::kF64, {}}, {0.125}};
  auto run = run_lowering("aten::fill_.Tensor", {out_arg(f), tensor_arg(value)}, {f}, {{1, value}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, std::vector<double>(3, 0.125));

  TensorType b{DType::kBool, {2}};
  auto flag = run_lowering("aten::fill_.Tensor", {out_arg(b), scalar_arg(ScalarCategory::kFloat)},
                           {b}, {}, {{1, 0.5}});
  ASSERT_EQ(flag.outputs.size(), 1u);
  EXPECT_EQ(flag.outputs[0].values, (std::vector<double>{1, 1}));
}

TEST(FactoryLowering, ZeroProducesZeros) {
  TensorType t{DType::kI32, {2, 2}};
  auto run = run_lowering("aten::zero_", {out_arg(t)}, {t}, {});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, std::vector<double>(4, 0));
}

std::vector<OpArg> arange_args(const TensorType& out, ScalarCategory c) {
  return {scalar_arg(c), scalar_arg(c), scalar_arg(c), out_arg(out)};
}

TEST(FactoryLowering, ArangeFloatAccumulatesInDouble) {
  TensorType t{DType::kF32, {26}};
  auto run = run_lowering("aten::arange.start_out", arange_args(t, ScalarCategory::kFloat), {t}, {},
                          {{0, 0.3}, {1, 2.9}, {2, 0.1}});
  ASSERT_EQ(run.outputs.size(), 1u);
  for (int i = 0; i < 26; ++i) {
    EXPECT_EQ(run.outputs[0].values[i], static_cast<float>(0.3 + 0.1 * i)) << i;
  }
  TensorType d{DType::kF64, {5}};
  auto f64 = run_lowering("aten::arange.start_out", arange_args(d, ScalarCategory::kFloat), {d}, {},
                          {{0, 1}, {1, 2.2}, {2, 0.25}});
  ASSERT_EQ(f64.outputs.size(), 1u);
  EXPECT_EQ(f64.outputs[0].values, (std::vector<double>{1, 1.25, 1.5, 1.75, 2}));
}

TEST(FactoryLowering, ArangeIntegersStepExactly) {
  TensorType t{DType::kI64, {5}};
  auto run = run_lowering("aten::arange.start_out", arange_args(t, ScalarCategory::kInt), {t}, {},
                          {{0, -3}, {1, 7}, {2, 2}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{-3, -1, 1, 3, 5}));
  // Values beyond 2^53 stay exact: the sequence is built in i64.
  TensorType big{DType::kI64, {3}};
  auto exact = run_lowering("aten::arange.start_out", arange_args(big, ScalarCategory::kInt), {big},
                            {},
                            {{0, 9007199254740992.0}, {1, 9007199254740995.0}, {2, 1}});
  ASSERT_EQ(exact.outputs.size(), 1u);
  EXPECT_EQ(exact.outputs[0].values[2] - exact.outputs[0].values[0], 2);
}

TEST(FactoryLowering, LinspaceFloatIsSymmetricAndFused) {
  TensorType t{DType::kF32, {11}};
  auto run = run_lowering("aten::linspace.out",
                          {scalar_arg(ScalarCategory::kFloat), scalar_arg(ScalarCategory::kFloat),
                           int_arg(11), out_arg(t)},
                          {t}, {}, {{0, -1.3}, {1, 2.7}});
  ASSERT_EQ(run.outputs.size(), 1u);
  float start = -1.3f, end = 2.7f, step = (end - start) / 10.0f;
  for (int i = 0; i < 11; ++i) {
    double expected = i < 5 ? static_cast<float>(std::fma(double{step}, i, double{start}))
                            : static_cast<float>(std::fma(-double{step}, 10 - i, double{end}));
    EXPECT_EQ(run.outputs[0].values[i], expected) << i;
  }
  EXPECT_EQ(run.outputs[0].values[10], double{end});
}

TEST(FactoryLowering, LinspaceIntegersTruncateAndSingleStepIsStart) {
  TensorType t{DType::kI64, {4}};
  std::vector<OpArg> args{scalar_arg(ScalarCategory::kInt), scalar_arg(ScalarCategory::kInt),
                          int_arg(4), out_arg(t)};
  auto run = run_lowering("aten::linspace.out", args, {t}, {}, {{0, 0}, {1, 10}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{0, 3, 6, 10}));
  TensorType one{DType::kF32, {1}};
  auto single = run_lowering("aten::linspace.out", {args[0], args[1], int_arg(1), out_arg(one)},
                             {one}, {}, {{0, 4}, {1, 9}});
  ASSERT_EQ(single.outputs.size(), 1u);
  EXPECT_EQ(single.outputs[0].values, (std::vector<double>{4}));
}

TEST(FactoryLowering, LogspacePowersOfTheBase) {
  TensorType t{DType::kF32, {5}};
  auto run = run_lowering("aten::logspace.out",
                          {scalar_arg(ScalarCategory::kFloat), scalar_arg(ScalarCategory::kFloat),
                           int_arg(5), double_arg(3), out_arg(t)},
                          {t}, {}, {{0, 0.5}, {1, 2.5}});
  ASSERT_EQ(run.outputs.size(), 1u);
  for (int i = 0; i < 5; ++i) {
    double exponent = i < 2 ? 0.5 + 0.5 * i : 2.5 - 0.5 * (4 - i);
    EXPECT_FLOAT_EQ(run.outputs[0].values[i], static_cast<float>(std::pow(3.0, exponent))) << i;
  }
  TensorType l{DType::kI64, {5}};
  auto ints = run_lowering("aten::logspace.out",
                           {scalar_arg(ScalarCategory::kInt), scalar_arg(ScalarCategory::kInt),
                            int_arg(5), double_arg(2), out_arg(l)},
                           {l}, {}, {{0, 0}, {1, 4}});
  ASSERT_EQ(ints.outputs.size(), 1u);
  EXPECT_EQ(ints.outputs[0].values, (std::vector<double>{1, 2, 4, 8, 16}));
}

TEST(FactoryLowering, EyeRectangularAndSquare) {
  TensorType t{DType::kF32, {2, 3}};
  auto run = run_lowering("aten::eye.m_out", {int_arg(2), int_arg(3), out_arg(t)}, {t}, {});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{1, 0, 0, 0, 1, 0}));
  TensorType b{DType::kBool, {2, 2}};
  auto square = run_lowering("aten::eye.out", {int_arg(2), out_arg(b)}, {b}, {});
  ASSERT_EQ(square.outputs.size(), 1u);
  EXPECT_EQ(square.outputs[0].values, (std::vector<double>{1, 0, 0, 1}));
}

}  // namespace
}  // namespace torchtpu::testing
