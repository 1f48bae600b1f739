// Matrix-product lowerings run on the CPU plugin and compared with hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "lowering/host_gemm.h"
#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;


OpArg scalar() { return scalar_arg(ScalarCategory::kFloat); }

void expect_values(const LoweringRun& run, const std::vector<double>& expected, double tol = 1e-5) {
  ASSERT_EQ(run.outputs.size(), 1u);
  const std::vector<double>& got = run.outputs[0].values;
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i];
    } else {
      EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::abs(expected[i]))) << "at " << i;
    }
  }
}

// A (2x3) and B (3x2): A @ B = [[58, 64], [139, 154]].
const HostTensor kA{{DType::kF32, {2, 3}}, {1, 2, 3, 4, 5, 6}};
const HostTensor kB{{DType::kF32, {3, 2}}, {7, 8, 9, 10, 11, 12}};

TEST(MatmulLowering, MmAndOutVariant) {
  for (const char* op : {"aten::mm", "aten::mm.out"}) {
    std::vector<OpArg> args{tensor_arg(kA), tensor_arg(kB)};
    if (std::string(op) == "aten::mm.out") args.push_back(none_arg());
    auto run = run_lowering(op, args, {TensorType{DType::kF32, {2, 2}}}, {{0, kA}, {1, kB}});
    SCOPED_TRACE(op);
    expect_values(run, {58, 64, 139, 154});
  }
}

TEST(MatmulLowering, IntegerMmStaysExact) {
  HostTensor a{{DType::kI64, {1, 2}}, {3000000000, 2}};
  HostTensor b{{DType::kI64, {2, 1}}, {3, 5}};
  auto run = run_lowering("aten::mm", {tensor_arg(a), tensor_arg(b)},
                          {TensorType{DType::kI64, {1, 1}}}, {{0, a}, {1, b}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].type.dtype, DType::kI64);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{9000000010}));
}

TEST(MatmulLowering, BmmMultipliesEachBatch) {
  HostTensor a{{DType::kF32, {2, 1, 2}}, {1, 2, 3, 4}};
  HostTensor b{{DType::kF32, {2, 2, 1}}, {5, 6, 7, 8}};
  auto run = run_lowering("aten::bmm", {tensor_arg(a), tensor_arg(b)},
                          {TensorType{DType::kF32, {2, 1, 1}}}, {{0, a}, {1, b}});
  expect_values(run, {1 * 5 + 2 * 6, 3 * 7 + 4 * 8});
}

TEST(MatmulLowering, DotAndVdot) {
  HostTensor x{{DType::kF64, {3}}, {1, 2, 3}};
  HostTensor y{{DType::kF64, {3}}, {4, -5, 6}};
  for (const char* op : {"aten::dot", "aten::vdot"}) {
    auto run = run_lowering(op, {tensor_arg(x), tensor_arg(y)}, {TensorType{DType::kF64, {}}},
                            {{0, x}, {1, y}});
    SCOPED_TRACE(op);
    expect_values(run, {12});
  }
}

TEST(MatmulLowering, AddmmScalesAndBroadcastsSelf) {
  HostTensor bias{{DType::kF32, {2}}, {1, -1}};
  auto run = run_lowering("aten::addmm",
                          {tensor_arg(bias), tensor_arg(kA), tensor_arg(kB), scalar(), scalar()},
                          {TensorType{DType::kF32, {2, 2}}}, {{0, bias}, {1, kA}, {2, kB}},
                          {{3, 2.0}, {4, 0.5}});
  expect_values(run, {29 + 2, 32 - 2, 69.5 + 2, 77 - 2});
}

TEST(MatmulLowering, AddmmWithZeroBetaIgnoresNaNInSelf) {
  HostTensor self{{DType::kF32, {2, 2}}, {kNaN, kNaN, 1, kNaN}};
  for (const char* op : {"aten::addmm_", "aten::addmm.out"}) {
    std::vector<OpArg> args{tensor_arg(self), tensor_arg(kA), tensor_arg(kB), scalar(), scalar()};
    if (std::string(op) == "aten::addmm.out") args.push_back(none_arg());
    auto run = run_lowering(op, args, {TensorType{DType::kF32, {2, 2}}},
                            {{0, self}, {1, kA}, {2, kB}}, {{3, 0.0}, {4, 1.0}});
    SCOPED_TRACE(op);
    expect_values(run, {58, 64, 139, 154});
  }
  // A nonzero beta lets NaN through.
  auto run = run_lowering("aten::addmm",
                          {tensor_arg(self), tensor_arg(kA), tensor_arg(kB), scalar(), scalar()},
                          {TensorType{DType::kF32, {2, 2}}}, {{0, self}, {1, kA}, {2, kB}},
                          {{3, 1.0}, {4, 1.0}});
  expect_values(run, {kNaN, kNaN, 140, kNaN});
}

TEST(MatmulLowering, BaddbmmAndAddbmm) {
  HostTensor a{{DType::kF32, {2, 1, 2}}, {1, 2, 3, 4}};
  HostTensor b{{DType::kF32, {2, 2, 1}}, {5, 6, 7, 8}};
  HostTensor self{{DType::kF32, {1}}, {100}};
  // Products per batch: 17 and 53.
  auto baddbmm = run_lowering("aten::baddbmm",
                              {tensor_arg(self), tensor_arg(a), tensor_arg(b), scalar(), scalar()},
                              {TensorType{DType::kF32, {2, 1, 1}}}, {{0, self}, {1, a}, {2, b}},
                              {{3, 0.5}, {4, 2.0}});
  expect_values(baddbmm, {50 + 34, 50 + 106});
  auto addbmm = run_lowering("aten::addbmm",
                             {tensor_arg(self), tensor_arg(a), tensor_arg(b), scalar(), scalar()},
                             {TensorType{DType::kF32, {1, 1}}}, {{0, self}, {1, a}, {2, b}},
                             {{3, 1.0}, {4, 1.0}});
  expect_values(addbmm, {100 + 17 + 53});
}

TEST(MatmulLowering, Addmv) {
  HostTensor vec{{DType::kF32, {3}}, {1, 0, -1}};
  HostTensor self{{DType::kF32, {2}}, {10, 20}};
  auto run = run_lowering("aten::addmv_",
                          {tensor_arg(self), tensor_arg(kA), tensor_arg(vec), scalar(), scalar()},
                          {TensorType{DType::kF32, {2}}}, {{0, self}, {1, kA}, {2, vec}},
                          {{3, 1.0}, {4, 3.0}});
  expect_values(run, {10 - 6, 20 - 6});
}

TEST(MatmulLowering, AddmmActivationReluAndGelu) {
  HostTensor self{{DType::kF32, {2}}, {-60, kNaN}};
  auto relu = run_lowering("aten::_addmm_activation",
                           {tensor_arg(self), tensor_arg(kA), tensor_arg(kB), scalar(), scalar(),
                            bool_arg(false)},
                           {TensorType{DType::kF32, {2, 2}}}, {{0, self}, {1, kA}, {2, kB}},
                           {{3, 1.0}, {4, 1.0}});
  expect_values(relu, {0, kNaN, 79, kNaN});
  HostTensor zero{{DType::kF32, {1}}, {0}};
  HostTensor one{{DType::kF32, {1, 1}}, {1}};
  HostTensor x{{DType::kF32, {1, 1}}, {1.5}};
  auto gelu = run_lowering("aten::_addmm_activation.out",
                           {tensor_arg(zero), tensor_arg(one), tensor_arg(x), scalar(), scalar(),
                            bool_arg(true), none_arg()},
                           {TensorType{DType::kF32, {1, 1}}}, {{0, zero}, {1, one}, {2, x}},
                           {{3, 1.0}, {4, 1.0}});
  // The erf form: 0.5 x (1 + erf(x / sqrt 2)).
  expect_values(gelu, {0.5 * 1.5 * (1 + std::erf(1.5 / std::sqrt(2.0)))});
}

TEST(MatmulLowering, Bf16DotAccumulatesInF32) {
  // 512 products of 1 * 1: a bf16 accumulator would stall at 256.
  constexpr int64_t kN = 512;
  HostTensor ones{{DType::kBF16, {kN}}, std::vector<double>(kN, 1.0)};
  auto run = run_lowering("aten::dot", {tensor_arg(ones), tensor_arg(ones)},
                          {TensorType{DType::kBF16, {}}}, {{0, ones}, {1, ones}});
  EXPECT_EQ(output_values(run, DType::kBF16), (std::vector<double>{512}));
}

TEST(MatmulLowering, HalfProductsWidenTheirOperandsOnCpuPlugins) {
  // XLA's CPU runtime has no bf16 x bf16 = f32 dot in every program (it ran one to zeros
  // or garbage without an error): on a CPU plugin the operands widen to f32 first.
  HostTensor a{{DType::kBF16, {2, 3}}, {1, 2, 3, 4, 5, 6}};
  HostTensor b{{DType::kBF16, {3, 2}}, {7, 8, 9, 10, 11, 12}};
  for (bool widen : {false, true}) {
    lowering::set_widen_half_products(widen);
    auto run = run_lowering("aten::mm", {tensor_arg(a), tensor_arg(b)},
                            {TensorType{DType::kBF16, {2, 2}}}, {{0, a}, {1, b}});
    lowering::set_widen_half_products(false);
    EXPECT_EQ(run.text.find("(tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>") !=
                  std::string::npos, widen) << run.text;
    EXPECT_EQ(output_values(run, DType::kBF16), (std::vector<double>{58, 64, 139, 154}));
  }
}

}  // namespace
}  // namespace torchtpu::testing
