// Reduction lowerings run on the CPU plugin and compared with hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;


OpArg dtype_arg(DType t) {
  OpArg a;
  a.kind = ArgKind::kDType;
  a.dtype = t;
  return a;
}

// Elementwise comparison where NaN matches NaN and infinities must match exactly.
void expect_values(const LoweringRun& run, size_t k, const std::vector<double>& expected,
                   double tol = 1e-5) {
  ASSERT_GT(run.outputs.size(), k);
  const std::vector<double>& got = run.outputs[k].values;
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i];
    } else if (std::isinf(expected[i])) {
      EXPECT_EQ(got[i], expected[i]) << "at " << i;
    } else {
      EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::abs(expected[i]))) << "at " << i;
    }
  }
}

const HostTensor k2x3{{DType::kF32, {2, 3}}, {1, 2, 3, 4, 5, 6}};

TEST(ReductionLowering, SumOverDimsKeepdimAndAll) {
  auto rows = run_lowering("aten::sum.dim_IntList",
                           {tensor_arg(k2x3), ints_arg({-1}), bool_arg(false), none_arg()},
                           {TensorType{DType::kF32, {2}}}, {{0, k2x3}});
  expect_values(rows, 0, {6, 15});
  auto cols = run_lowering("aten::sum.IntList_out",
                           {tensor_arg(k2x3), ints_arg({0}), bool_arg(true), none_arg(),
                            none_arg()},
                           {TensorType{DType::kF32, {1, 3}}}, {{0, k2x3}});
  ASSERT_EQ(cols.outputs.size(), 1u);
  EXPECT_EQ(cols.outputs[0].type.dims, (Dims{1, 3}));
  expect_values(cols, 0, {5, 7, 9});
  // None and an empty list both mean every dim.
  for (OpArg dims : {none_arg(), ints_arg({})}) {
    auto all = run_lowering("aten::sum.dim_IntList",
                            {tensor_arg(k2x3), dims, bool_arg(false), none_arg()},
                            {TensorType{DType::kF32, {}}}, {{0, k2x3}});
    expect_values(all, 0, {21});
  }
}

TEST(ReductionLowering, SumOfBoolAndWithDtypeAreInt64) {
  HostTensor flags{{DType::kBool, {4}}, {1, 0, 1, 1}};
  auto run = run_lowering("aten::sum.dim_IntList",
                          {tensor_arg(flags), none_arg(), bool_arg(false), none_arg()},
                          {TensorType{DType::kI64, {}}}, {{0, flags}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].type.dtype, DType::kI64);
  expect_values(run, 0, {3});
  auto typed = run_lowering("aten::sum.dim_IntList",
                            {tensor_arg(k2x3), ints_arg({1}), bool_arg(false),
                             dtype_arg(DType::kF64)},
                            {TensorType{DType::kF64, {2}}}, {{0, k2x3}});
  ASSERT_EQ(typed.outputs.size(), 1u);
  EXPECT_EQ(typed.outputs[0].type.dtype, DType::kF64);
  expect_values(typed, 0, {6, 15});
}

TEST(ReductionLowering, ZeroDimAndBoolInputs) {
  HostTensor scalar{{DType::kF32, {}}, {2.5}};
  auto sum = run_lowering("aten::sum.dim_IntList",
                          {tensor_arg(scalar), ints_arg({0}), bool_arg(true), none_arg()},
                          {TensorType{DType::kF32, {}}}, {{0, scalar}});
  expect_values(sum, 0, {2.5});
  auto cumsum = run_lowering("aten::cumsum", {tensor_arg(scalar), int_arg(0), none_arg()},
                             {TensorType{DType::kF32, {}}}, {{0, scalar}});
  expect_values(cumsum, 0, {2.5});
  auto max0 = run_lowering("aten::max.dim", {tensor_arg(scalar), int_arg(0), bool_arg(false)},
                           {TensorType{DType::kF32, {}}, TensorType{DType::kI64, {}}},
                           {{0, scalar}});
  expect_values(max0, 0, {2.5});
  expect_values(max0, 1, {0});
  HostTensor flags{{DType::kBool, {2, 2}}, {0, 1, 0, 0}};
  auto amax = run_lowering("aten::amax", {tensor_arg(flags), ints_arg({1}), bool_arg(false)},
                           {TensorType{DType::kBool, {2}}}, {{0, flags}});
  expect_values(amax, 0, {1, 0});
  auto max = run_lowering("aten::max.dim", {tensor_arg(flags), int_arg(1), bool_arg(false)},
                          {TensorType{DType::kBool, {2}}, TensorType{DType::kI64, {2}}},
                          {{0, flags}});
  expect_values(max, 0, {1, 0});
  expect_values(max, 1, {1, 0});
  auto prod = run_lowering("aten::prod", {tensor_arg(flags), dtype_arg(DType::kBool)},
                           {TensorType{DType::kBool, {}}}, {{0, flags}});
  expect_values(prod, 0, {0});
}

TEST(ReductionLowering, EmptyReductionsGiveIdentities) {
  HostTensor empty{{DType::kF32, {0, 3}}, {}};
  auto sum = run_lowering("aten::sum.dim_IntList",
                          {tensor_arg(empty), ints_arg({0}), bool_arg(false), none_arg()},
                          {TensorType{DType::kF32, {3}}}, {{0, empty}});
  expect_values(sum, 0, {0, 0, 0});
  auto prod = run_lowering("aten::prod.dim_int",
                           {tensor_arg(empty), int_arg(0), bool_arg(false), none_arg()},
                           {TensorType{DType::kF32, {3}}}, {{0, empty}});
  expect_values(prod, 0, {1, 1, 1});
  auto mean = run_lowering("aten::mean.dim",
                           {tensor_arg(empty), ints_arg({0}), bool_arg(false), none_arg()},
                           {TensorType{DType::kF32, {3}}}, {{0, empty}});
  expect_values(mean, 0, {kNaN, kNaN, kNaN});
}

TEST(ReductionLowering, NansumSkipsNaN) {
  HostTensor x{{DType::kF32, {4}}, {1, kNaN, 2, kNaN}};
  auto run = run_lowering("aten::nansum", {tensor_arg(x), none_arg(), bool_arg(false), none_arg()},
                          {TensorType{DType::kF32, {}}}, {{0, x}});
  expect_values(run, 0, {3});
}

TEST(ReductionLowering, MeanAndProd) {
  auto mean = run_lowering("aten::mean.out",
                           {tensor_arg(k2x3), ints_arg({1}), bool_arg(true), none_arg(),
                            none_arg()},
                           {TensorType{DType::kF32, {2, 1}}}, {{0, k2x3}});
  expect_values(mean, 0, {2, 5});
  auto prod_all = run_lowering("aten::prod", {tensor_arg(k2x3), none_arg()},
                               {TensorType{DType::kF32, {}}}, {{0, k2x3}});
  expect_values(prod_all, 0, {720});
  HostTensor ints{{DType::kI32, {2, 2}}, {2, 3, 4, 5}};
  auto prod_dim = run_lowering("aten::prod.int_out",
                               {tensor_arg(ints), int_arg(0), bool_arg(false), none_arg(),
                                none_arg()},
                               {TensorType{DType::kI64, {2}}}, {{0, ints}});
  ASSERT_EQ(prod_dim.outputs.size(), 1u);
  EXPECT_EQ(prod_dim.outputs[0].type.dtype, DType::kI64);
  expect_values(prod_dim, 0, {8, 15});
}

TEST(ReductionLowering, AmaxAminAndFullMaxPropagateNaN) {
  HostTensor x{{DType::kF32, {2, 3}}, {1, kNaN, 3, -4, 5, -6}};
  auto amax = run_lowering("aten::amax", {tensor_arg(x), ints_arg({1}), bool_arg(false)},
                           {TensorType{DType::kF32, {2}}}, {{0, x}});
  expect_values(amax, 0, {kNaN, 5});
  auto amin = run_lowering("aten::amin.out",
                           {tensor_arg(x), ints_arg({0}), bool_arg(true), none_arg()},
                           {TensorType{DType::kF32, {1, 3}}}, {{0, x}});
  expect_values(amin, 0, {-4, kNaN, -6});
  auto max = run_lowering("aten::max", {tensor_arg(k2x3)}, {TensorType{DType::kF32, {}}},
                          {{0, k2x3}});
  expect_values(max, 0, {6});
  auto min = run_lowering("aten::min.unary_out", {tensor_arg(x), none_arg()},
                          {TensorType{DType::kF32, {}}}, {{0, x}});
  expect_values(min, 0, {kNaN});
  HostTensor ints{{DType::kI64, {3}}, {-7, 9, 2}};
  auto imax = run_lowering("aten::amax", {tensor_arg(ints), ints_arg({}), bool_arg(false)},
                           {TensorType{DType::kI64, {}}}, {{0, ints}});
  expect_values(imax, 0, {9});
  auto aminmax = run_lowering("aten::aminmax", {tensor_arg(k2x3), int_arg(1), bool_arg(false)},
                              {TensorType{DType::kF32, {2}}, TensorType{DType::kF32, {2}}},
                              {{0, k2x3}});
  expect_values(aminmax, 0, {1, 4});
  expect_values(aminmax, 1, {3, 6});
}

TEST(ReductionLowering, MaxDimPicksFirstOfTiesAndFirstNaN) {
  HostTensor x{{DType::kF32, {3, 4}}, {1, 7, 7, 2,  //
                                       5, kNaN, 9, kNaN,  //
                                       -1, -1, -3, -3}};
  auto max = run_lowering("aten::max.dim", {tensor_arg(x), int_arg(1), bool_arg(false)},
                          {TensorType{DType::kF32, {3}}, TensorType{DType::kI64, {3}}}, {{0, x}});
  expect_values(max, 0, {7, kNaN, -1});
  expect_values(max, 1, {1, 1, 0});
  EXPECT_EQ(max.outputs[1].type.dtype, DType::kI64);
  auto min = run_lowering("aten::min.dim_min",
                          {tensor_arg(x), int_arg(-1), bool_arg(true), none_arg(), none_arg()},
                          {TensorType{DType::kF32, {3, 1}}, TensorType{DType::kI64, {3, 1}}},
                          {{0, x}});
  expect_values(min, 0, {1, kNaN, -3});
  expect_values(min, 1, {0, 1, 2});
  HostTensor ints{{DType::kI32, {2, 3}}, {4, 4, 1, 0, 8, 8}};
  auto imax = run_lowering("aten::max.dim", {tensor_arg(ints), int_arg(0), bool_arg(false)},
                           {TensorType{DType::kI32, {3}}, TensorType{DType::kI64, {3}}},
                           {{0, ints}});
  expect_values(imax, 0, {4, 8, 8});
  expect_values(imax, 1, {0, 1, 1});
}

TEST(ReductionLowering, ArgmaxArgminFlattenedAndAlongDim) {
  HostTensor x{{DType::kF32, {2, 3}}, {3, 9, 1, 9, 0, 0}};
  auto flat = run_lowering("aten::argmax", {tensor_arg(x), none_arg(), bool_arg(false)},
                           {TensorType{DType::kI64, {}}}, {{0, x}});
  expect_values(flat, 0, {1});
  auto dim = run_lowering("aten::argmin.out",
                          {tensor_arg(x), int_arg(1), bool_arg(true), none_arg()},
                          {TensorType{DType::kI64, {2, 1}}}, {{0, x}});
  expect_values(dim, 0, {2, 1});
  HostTensor scalar{{DType::kF32, {}}, {2.5}};
  auto s = run_lowering("aten::argmax", {tensor_arg(scalar), int_arg(0), bool_arg(false)},
                        {TensorType{DType::kI64, {}}}, {{0, scalar}});
  expect_values(s, 0, {0});
}

TEST(ReductionLowering, AnyAllAndCountNonzero) {
  HostTensor x{{DType::kF32, {2, 3}}, {0, 0, 0, 1, 2, 0}};
  auto any_dim = run_lowering("aten::any.dim", {tensor_arg(x), int_arg(1), bool_arg(false)},
                              {TensorType{DType::kBool, {2}}}, {{0, x}});
  expect_values(any_dim, 0, {0, 1});
  auto all_dim = run_lowering("aten::all.out",
                              {tensor_arg(x), int_arg(0), bool_arg(false), none_arg()},
                              {TensorType{DType::kBool, {3}}}, {{0, x}});
  expect_values(all_dim, 0, {0, 0, 0});
  HostTensor flags{{DType::kBool, {3}}, {1, 1, 1}};
  auto all = run_lowering("aten::all", {tensor_arg(flags)}, {TensorType{DType::kBool, {}}},
                          {{0, flags}});
  expect_values(all, 0, {1});
  auto any = run_lowering("aten::any.all_out", {tensor_arg(x), none_arg()},
                          {TensorType{DType::kBool, {}}}, {{0, x}});
  expect_values(any, 0, {1});
  auto count = run_lowering("aten::count_nonzero.dim_IntList", {tensor_arg(x), ints_arg({0})},
                            {TensorType{DType::kI64, {3}}}, {{0, x}});
  expect_values(count, 0, {1, 1, 0});
}

TEST(ReductionLowering, VarStdWithRuntimeCorrection) {
  // Rows {1,2,3} and {4,5,6}: squared deviations sum to 2 per row.
  auto var = run_lowering("aten::var.correction",
                          {tensor_arg(k2x3), ints_arg({1}), none_arg(), bool_arg(false)},
                          {TensorType{DType::kF32, {2}}}, {{0, k2x3}});
  expect_values(var, 0, {1, 1});
  auto std0 = run_lowering("aten::std.correction_out",
                           {tensor_arg(k2x3), ints_arg({1}), scalar_arg(ScalarCategory::kInt),
                            bool_arg(true), none_arg()},
                           {TensorType{DType::kF32, {2, 1}}}, {{0, k2x3}}, {{2, 0}});
  expect_values(std0, 0, {std::sqrt(2.0 / 3), std::sqrt(2.0 / 3)});
  // All six values: mean 3.5, squared deviations sum to 17.5.
  auto var_mean = run_lowering("aten::var_mean.correction",
                               {tensor_arg(k2x3), none_arg(), none_arg(), bool_arg(false)},
                               {TensorType{DType::kF32, {}}, TensorType{DType::kF32, {}}},
                               {{0, k2x3}});
  expect_values(var_mean, 0, {3.5});
  expect_values(var_mean, 1, {3.5});
  auto std_mean = run_lowering("aten::std_mean.correction",
                               {tensor_arg(k2x3), ints_arg({0}), scalar_arg(ScalarCategory::kInt),
                                bool_arg(false)},
                               {TensorType{DType::kF32, {3}}, TensorType{DType::kF32, {3}}},
                               {{0, k2x3}}, {{2, 2}});
  // Two samples with correction 2: 4.5 / max(0, 0) = inf.
  expect_values(std_mean, 0, {kInf, kInf, kInf});
  expect_values(std_mean, 1, {2.5, 3.5, 4.5});
}

TEST(ReductionLowering, LogsumexpIsStableAndKeepsNegativeInfinity) {
  HostTensor x{{DType::kF32, {3, 2}}, {1000, 1000, 0, std::log(3.0), -kInf, -kInf}};
  auto run = run_lowering("aten::logsumexp.out",
                          {tensor_arg(x), ints_arg({1}), bool_arg(false), none_arg()},
                          {TensorType{DType::kF32, {3}}}, {{0, x}});
  expect_values(run, 0, {1000 + std::log(2.0), std::log(4.0), -kInf});
}

// Each order's norm over dim 1 of {{3, -4}, {0, 2}}.
struct NormCase {
  double p;
  std::vector<double> expected;
};

std::vector<NormCase> norm_cases() {
  return {{2, {5, 2}}, {1, {7, 2}}, {kInf, {4, 2}}, {-kInf, {3, 0}}, {0, {2, 1}},
          {3, {std::cbrt(91.0), 2}}};
}

TEST(ReductionLowering, VectorNormSelectsOrderAtRunTime) {
  HostTensor x{{DType::kF32, {2, 2}}, {3, -4, 0, 2}};
  for (const NormCase& k : norm_cases()) {
    auto run = run_lowering("aten::linalg_vector_norm",
                            {tensor_arg(x), scalar_arg(ScalarCategory::kFloat), ints_arg({1}),
                             bool_arg(false), none_arg()},
                            {TensorType{DType::kF32, {2}}}, {{0, x}}, {{1, k.p}});
    SCOPED_TRACE("p = " + std::to_string(k.p));
    expect_values(run, 0, k.expected);
  }
  // norm with p=None is the 2-norm; an empty dim list means every dim.
  auto norm = run_lowering("aten::norm.ScalarOpt_dim",
                           {tensor_arg(x), none_arg(), ints_arg({}), bool_arg(false)},
                           {TensorType{DType::kF32, {}}}, {{0, x}});
  expect_values(norm, 0, {std::sqrt(29.0)});
}

// The order as structure (eager calls and compiled graphs): the same values, and only
// that order's reduction in the module (one reduce; a power only for other orders).
TEST(ReductionLowering, VectorNormEmitsOnlyAStructuralOrdersReduction) {
  HostTensor x{{DType::kF32, {2, 2}}, {3, -4, 0, 2}};
  for (const NormCase& k : norm_cases()) {
    auto run = run_lowering("aten::linalg_vector_norm",
                            {tensor_arg(x), double_arg(k.p), ints_arg({1}), bool_arg(false),
                             none_arg()},
                            {TensorType{DType::kF32, {2}}}, {{0, x}});
    SCOPED_TRACE("p = " + std::to_string(k.p));
    expect_values(run, 0, k.expected);
    size_t reduces = 0;
    for (size_t at = run.text.find("stablehlo.reduce"); at != std::string::npos;
         at = run.text.find("stablehlo.reduce", at + 1)) {
      ++reduces;
    }
    EXPECT_EQ(reduces, 1u) << run.text;
    EXPECT_EQ(run.text.find("stablehlo.power") != std::string::npos, k.p == 3) << run.text;
  }
}

TEST(ReductionLowering, NaNPropagatesThroughInfNormAndLogcumsumexp) {
  HostTensor x{{DType::kF32, {3}}, {1, kNaN, 2}};
  for (double p : {kInf, -kInf}) {
    auto norm = run_lowering("aten::linalg_vector_norm.out",
                             {tensor_arg(x), scalar_arg(ScalarCategory::kFloat), none_arg(),
                              bool_arg(false), none_arg(), none_arg()},
                             {TensorType{DType::kF32, {}}}, {{0, x}}, {{1, p}});
    expect_values(norm, 0, {kNaN});
  }
  auto lcse = run_lowering("aten::_logcumsumexp.out", {tensor_arg(x), int_arg(0), none_arg()},
                           {TensorType{DType::kF32, {3}}}, {{0, x}});
  expect_values(lcse, 0, {1, kNaN, kNaN});
}

TEST(ReductionLowering, CumulativeScans) {
  auto cumsum = run_lowering("aten::cumsum", {tensor_arg(k2x3), int_arg(1), none_arg()},
                             {TensorType{DType::kF32, {2, 3}}}, {{0, k2x3}});
  expect_values(cumsum, 0, {1, 3, 6, 4, 9, 15});
  auto cumprod = run_lowering("aten::cumprod.out",
                              {tensor_arg(k2x3), int_arg(0), none_arg(), none_arg()},
                              {TensorType{DType::kF32, {2, 3}}}, {{0, k2x3}});
  expect_values(cumprod, 0, {1, 2, 3, 4, 10, 18});
  HostTensor flags{{DType::kBool, {4}}, {1, 0, 1, 1}};
  auto counts = run_lowering("aten::cumsum_", {tensor_arg(flags), int_arg(0), none_arg()},
                             {TensorType{DType::kI64, {4}}}, {{0, flags}});
  expect_values(counts, 0, {1, 1, 2, 3});
  HostTensor x{{DType::kF32, {4}}, {-kInf, 0, std::log(3.0), 1000}};
  auto lcse = run_lowering("aten::_logcumsumexp", {tensor_arg(x), int_arg(0)},
                           {TensorType{DType::kF32, {4}}}, {{0, x}});
  expect_values(lcse, 0, {-kInf, 0, std::log(4.0), 1000});
}

TEST(ReductionLowering, Bf16AccumulatesInF32) {
  // 1024 ones: a bf16 accumulator stalls at 256 (256 + 1 rounds back to 256).
  HostTensor ones{{DType::kBF16, {1024}}, std::vector<double>(1024, 1.0)};
  auto sum = output_values(
      run_lowering("aten::sum.dim_IntList",
                   {tensor_arg(ones), none_arg(), bool_arg(false), none_arg()},
                   {TensorType{DType::kBF16, {}}}, {{0, ones}}),
      DType::kBF16);
  EXPECT_EQ(sum, (std::vector<double>{1024}));
  auto cumsum = output_values(run_lowering("aten::cumsum",
                                           {tensor_arg(ones), int_arg(0), none_arg()},
                                           {TensorType{DType::kBF16, {1024}}}, {{0, ones}}),
                              DType::kBF16);
  ASSERT_EQ(cumsum.size(), 1024u);
  EXPECT_EQ(cumsum.back(), 1024);
  auto mean = output_values(
      run_lowering("aten::mean.dim",
                   {tensor_arg(ones), ints_arg({0}), bool_arg(false), none_arg()},
                   {TensorType{DType::kBF16, {}}}, {{0, ones}}),
      DType::kBF16);
  EXPECT_EQ(mean, (std::vector<double>{1}));
}

}  // namespace
}  // namespace torchtpu::testing
