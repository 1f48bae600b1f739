// Random lowerings run on the CPU plugin: distribution sanity (bounds, mean, variance of
// 10k draws with tolerances several standard errors wide) and stream determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;

constexpr int64_t kDraws = 10000;

HostTensor empty_like_type(TensorType t) {
  return HostTensor{t, std::vector<double>(static_cast<size_t>(t.num_elements()), 0)};
}

OpArg self_arg(const TensorType& t) { return tensor_arg(empty_like_type(t)); }

double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double variance_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size() - 1);
}

TEST(RandomLowering, UniformF32HasRightRangeMeanAndVariance) {
  TensorType t{DType::kF32, {100, 100}};
  auto out = run_lowering("aten::uniform_", {self_arg(t), double_arg(2), double_arg(5), none_arg()},
                          {t}, {}).outputs;
  ASSERT_EQ(out.size(), 1u);
  const auto& v = out[0].values;
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 2.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 5.0);
  EXPECT_NEAR(mean_of(v), 3.5, 0.05);         // standard error 0.009
  EXPECT_NEAR(variance_of(v), 9.0 / 12, 0.05);
}

// [1, 2) is where rounding x * (to - from) + from lands on `to` for the short types
// (1 + 255/256 rounds to 2 in bf16); the range must stay half-open for every dtype.
TEST(RandomLowering, UniformStaysHalfOpenInEveryFloatDtype) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    TensorType t{d, {kDraws}};
    auto out = run_lowering("aten::uniform_",
                            {self_arg(t), double_arg(1), double_arg(2), none_arg()}, {t},
                            {}).outputs;
    ASSERT_EQ(out.size(), 1u) << base::dtype_name(d);
    const auto& v = out[0].values;
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 1.0) << base::dtype_name(d);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 2.0) << base::dtype_name(d);
    EXPECT_NEAR(mean_of(v), 1.5, 0.02) << base::dtype_name(d);
  }
}

TEST(RandomLowering, SameStateRepeatsAndOtherStatesDiffer) {
  TensorType t{DType::kF32, {1000}};
  std::vector<OpArg> args{self_arg(t), double_arg(0), double_arg(1), none_arg()};
  auto draw = [&](RngState state) {
    return run_lowering("aten::uniform_", args, {t}, {}, {}, {}, state).outputs;
  };
  auto a = draw({7, 3});
  auto same = draw({7, 3});
  auto next_offset = draw({7, 4});
  auto other_seed = draw({8, 3});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(next_offset.size(), 1u);
  ASSERT_EQ(other_seed.size(), 1u);
  EXPECT_EQ(a[0].values, same[0].values);
  auto num_equal = [](const std::vector<double>& x, const std::vector<double>& y) {
    int64_t n = 0;
    for (size_t i = 0; i < x.size(); ++i) n += x[i] == y[i];
    return n;
  };
  // Neighbouring offsets must not give shifted copies of one stream either.
  std::vector<double> shifted(a[0].values.begin() + 1, a[0].values.end());
  shifted.push_back(0);
  EXPECT_LT(num_equal(a[0].values, next_offset[0].values), 5);
  EXPECT_LT(num_equal(shifted, next_offset[0].values), 5);
  EXPECT_LT(num_equal(a[0].values, other_seed[0].values), 5);
}

TEST(RandomLowering, NormalMatchesMeanAndStdForOddCounts) {
  for (DType d : {DType::kF32, DType::kF64}) {
    TensorType t{d, {kDraws + 1}};  // odd: one Box–Muller pair is half used
    auto out = run_lowering("aten::normal_",
                            {self_arg(t), double_arg(1), double_arg(2), none_arg()}, {t},
                            {}).outputs;
    ASSERT_EQ(out.size(), 1u);
    const auto& v = out[0].values;
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
    EXPECT_NEAR(mean_of(v), 1.0, 0.08) << base::dtype_name(d);  // standard error 0.02
    EXPECT_NEAR(variance_of(v), 4.0, 0.25) << base::dtype_name(d);
    // About 68.3% of draws lie within one std of the mean.
    double within = std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x - 1) < 2; });
    EXPECT_NEAR(within / v.size(), 0.6827, 0.02);
  }
}

TEST(RandomLowering, NormalTensorTensorBroadcastsAndChecksStd) {
  TensorType t{DType::kF32, {2, 5000}};
  HostTensor mean{{DType::kF32, {2, 1}}, {-10, 10}};
  HostTensor std_dev{{DType::kF32, {2, 1}}, {0.5, 3}};
  auto run = run_lowering("aten::normal.Tensor_Tensor",
                          {tensor_arg(mean), tensor_arg(std_dev), none_arg()}, {t},
                          {{0, mean}, {1, std_dev}});
  const auto& out = run.outputs;
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> row0(out[0].values.begin(), out[0].values.begin() + 5000);
  std::vector<double> row1(out[0].values.begin() + 5000, out[0].values.end());
  EXPECT_NEAR(mean_of(row0), -10, 0.05);
  EXPECT_NEAR(std::sqrt(variance_of(row0)), 0.5, 0.03);
  EXPECT_NEAR(mean_of(row1), 10, 0.25);
  EXPECT_NEAR(std::sqrt(variance_of(row1)), 3, 0.15);
  ASSERT_EQ(run.checks, std::vector<bool>{true});
  HostTensor bad{{DType::kF32, {2, 1}}, {1, -1}};
  auto bad_run = run_lowering("aten::normal.Tensor_Tensor",
                              {tensor_arg(mean), tensor_arg(bad), none_arg()}, {t},
                              {{0, mean}, {1, bad}});
  EXPECT_EQ(bad_run.checks, std::vector<bool>{false});
}

TEST(RandomLowering, NormalFloatTensorUsesScalarMean) {
  TensorType t{DType::kF32, {kDraws}};
  HostTensor std_dev{{DType::kF32, {}}, {0.25}};
  auto out = run_lowering("aten::normal.float_Tensor",
                          {double_arg(5), tensor_arg(std_dev), none_arg()}, {t},
                          {{1, std_dev}}).outputs;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NEAR(mean_of(out[0].values), 5, 0.02);
  EXPECT_NEAR(std::sqrt(variance_of(out[0].values)), 0.25, 0.02);
}

TEST(RandomLowering, BernoulliScalarHitsProbabilityAndEdges) {
  TensorType t{DType::kF32, {kDraws}};
  auto run = [&](double p) {
    auto out = run_lowering("aten::bernoulli_.float", {self_arg(t), double_arg(p), none_arg()}, {t},
                            {}).outputs;
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? std::vector<double>{} : out[0].values;
  };
  auto v = run(0.3);
  for (double x : v) ASSERT_TRUE(x == 0 || x == 1);
  EXPECT_NEAR(mean_of(v), 0.3, 0.02);  // standard error 0.0046
  EXPECT_EQ(mean_of(run(0)), 0);
  EXPECT_EQ(mean_of(run(1)), 1);
}

TEST(RandomLowering, BernoulliTensorTakesPerElementProbability) {
  TensorType t{DType::kF32, {3, 4000}};
  HostTensor p{{DType::kF32, {3, 1}}, {0, 1, 0.75}};
  auto out = run_lowering("aten::bernoulli_.Tensor", {self_arg(t), tensor_arg(p), none_arg()}, {t},
                          {{0, empty_like_type(t)}, {1, p}}).outputs;
  ASSERT_EQ(out.size(), 1u);
  const auto& v = out[0].values;
  EXPECT_EQ(mean_of({v.begin(), v.begin() + 4000}), 0);
  EXPECT_EQ(mean_of({v.begin() + 4000, v.begin() + 8000}), 1);
  EXPECT_NEAR(mean_of({v.begin() + 8000, v.end()}), 0.75, 0.03);

  // bernoulli(self): the probabilities are self's values.
  HostTensor probs{{DType::kF64, {kDraws}}, std::vector<double>(kDraws, 0.2)};
  auto functional = run_lowering("aten::bernoulli", {tensor_arg(probs), none_arg()}, {probs.type},
                                 {{0, probs}}).outputs;
  ASSERT_EQ(functional.size(), 1u);
  EXPECT_NEAR(mean_of(functional[0].values), 0.2, 0.02);
}

TEST(RandomLowering, RandomFromToCoversEveryIntegerEvenly) {
  TensorType t{DType::kI64, {kDraws}};
  auto out = run_lowering("aten::random_.from", {self_arg(t), int_arg(-3), int_arg(7), none_arg()},
                          {t}, {}).outputs;
  ASSERT_EQ(out.size(), 1u);
  std::vector<int> counts(10, 0);
  for (double x : out[0].values) {
    ASSERT_EQ(x, std::floor(x));
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 7);
    ++counts[static_cast<int>(x) + 3];
  }
  for (int n : counts) EXPECT_NEAR(n, 1000, 150);  // binomial sd 30
}

TEST(RandomLowering, RandomToAndFullRangeRespectDtypes) {
  TensorType f{DType::kF32, {kDraws}};
  auto to = run_lowering("aten::random_.to", {self_arg(f), int_arg(5), none_arg()}, {f},
                         {}).outputs;
  ASSERT_EQ(to.size(), 1u);
  for (double x : to[0].values) ASSERT_TRUE(x == std::floor(x) && x >= 0 && x < 5) << x;
  EXPECT_NEAR(mean_of(to[0].values), 2, 0.1);

  // random_() spans [0, max] for integers, [0, 2^digits] for floats and {0, 1} for bool.
  struct Case { DType dtype; double max; };
  for (Case c : {Case{DType::kU8, 255}, Case{DType::kI8, 127}, Case{DType::kF16, 2048},
                 Case{DType::kBool, 1}, Case{DType::kI32, 2147483647.0}}) {
    TensorType t{c.dtype, {kDraws}};
    auto out = run_lowering("aten::random_", {self_arg(t), none_arg()}, {t}, {}).outputs;
    ASSERT_EQ(out.size(), 1u) << base::dtype_name(c.dtype);
    const auto& v = out[0].values;
    EXPECT_GE(*std::min_element(v.begin(), v.end()), 0) << base::dtype_name(c.dtype);
    EXPECT_LE(*std::max_element(v.begin(), v.end()), c.max) << base::dtype_name(c.dtype);
    EXPECT_NEAR(mean_of(v), c.max / 2, c.max * 0.03) << base::dtype_name(c.dtype);
  }

  // from = int64 min without `to` draws all 64 bits.
  TensorType l{DType::kI64, {kDraws}};
  auto full = run_lowering("aten::random_.from",
                           {self_arg(l), int_arg(std::numeric_limits<int64_t>::min()), none_arg(),
                            none_arg()},
                           {l}, {}).outputs;
  ASSERT_EQ(full.size(), 1u);
  const auto& drawn = full[0].values;
  auto negatives = std::count_if(drawn.begin(), drawn.end(), [](double x) { return x < 0; });
  EXPECT_NEAR(negatives, kDraws / 2, 250);
}

TEST(RandomLowering, RandomRejectsEmptyRange) {
  TensorType t{DType::kI64, {4}};
  auto lowered = lowering::lower_op("aten::random_.from",
                                    {self_arg(t), int_arg(5), int_arg(5), none_arg()}, {t});
  EXPECT_FALSE(lowered.ok());
  TensorType bytes{DType::kU8, {4}};
  auto out_of_dtype =
      lowering::lower_op("aten::random_.to", {self_arg(bytes), int_arg(300), none_arg()}, {bytes});
  EXPECT_FALSE(out_of_dtype.ok());
}

TEST(RandomLowering, ExponentialGeometricLogNormalCauchyShapes) {
  TensorType t{DType::kF32, {kDraws}};
  auto e = run_lowering("aten::exponential_", {self_arg(t), double_arg(2), none_arg()}, {t},
                        {}).outputs;
  ASSERT_EQ(e.size(), 1u);
  for (double x : e[0].values) ASSERT_TRUE(std::isfinite(x) && x >= 0);
  EXPECT_NEAR(mean_of(e[0].values), 0.5, 0.03);  // standard error 0.005
  EXPECT_NEAR(variance_of(e[0].values), 0.25, 0.03);

  auto g = run_lowering("aten::geometric_", {self_arg(t), double_arg(0.25), none_arg()}, {t},
                        {}).outputs;
  ASSERT_EQ(g.size(), 1u);
  for (double x : g[0].values) ASSERT_TRUE(x >= 1 && x == std::floor(x)) << x;
  EXPECT_NEAR(mean_of(g[0].values), 4, 0.15);  // 1/p; standard error 0.035

  auto ln = run_lowering("aten::log_normal_",
                         {self_arg(t), double_arg(0.5), double_arg(0.25), none_arg()}, {t},
                         {}).outputs;
  ASSERT_EQ(ln.size(), 1u);
  std::vector<double> logs;
  for (double x : ln[0].values) {
    ASSERT_GT(x, 0);
    logs.push_back(std::log(x));
  }
  EXPECT_NEAR(mean_of(logs), 0.5, 0.02);
  EXPECT_NEAR(std::sqrt(variance_of(logs)), 0.25, 0.02);

  auto ca = run_lowering("aten::cauchy_", {self_arg(t), double_arg(3), double_arg(2), none_arg()},
                         {t}, {}).outputs;
  ASSERT_EQ(ca.size(), 1u);
  const auto& v = ca[0].values;
  double below = std::count_if(v.begin(), v.end(), [](double x) { return x < 3; });
  double within = std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x - 3) < 2; });
  EXPECT_NEAR(below / kDraws, 0.5, 0.03);   // median
  EXPECT_NEAR(within / kDraws, 0.5, 0.03);  // quartiles at median +- sigma
}

TEST(RandomLowering, NativeDropoutKeepsAndScales) {
  TensorType t{DType::kF32, {kDraws}};
  TensorType mask{DType::kBool, {kDraws}};
  HostTensor x{t, std::vector<double>(kDraws, 3.0)};
  auto out = run_lowering("aten::native_dropout", {tensor_arg(x), double_arg(0.2), bool_arg(true)},
                          {t, mask}, {{0, x}}).outputs;
  ASSERT_EQ(out.size(), 2u);
  int64_t kept = 0;
  for (int64_t i = 0; i < kDraws; ++i) {
    bool m = out[1].values[i] != 0;
    kept += m;
    ASSERT_FLOAT_EQ(out[0].values[i], m ? 3.0f / 0.8f : 0.0f);
  }
  EXPECT_NEAR(static_cast<double>(kept) / kDraws, 0.8, 0.02);

  auto all_dropped = run_lowering("aten::native_dropout",
                                  {tensor_arg(x), double_arg(1), none_arg()}, {t, mask},
                                  {{0, x}}).outputs;
  ASSERT_EQ(all_dropped.size(), 2u);
  EXPECT_EQ(mean_of(all_dropped[0].values), 0);
  EXPECT_EQ(mean_of(all_dropped[1].values), 0);

  auto eval = run_lowering("aten::native_dropout",
                           {tensor_arg(x), double_arg(0.5), bool_arg(false)}, {t, mask},
                           {{0, x}}).outputs;
  ASSERT_EQ(eval.size(), 2u);
  EXPECT_EQ(eval[0].values, x.values);
  EXPECT_EQ(mean_of(eval[1].values), 1);
}

TEST(RandomLowering, NativeDropoutBackwardMasksAndScales) {
  HostTensor grad{{DType::kF32, {4}}, {1, 2, 3, 4}};
  HostTensor mask{{DType::kBool, {4}}, {1, 0, 1, 0}};
  auto out = run_lowering("aten::native_dropout_backward",
                          {tensor_arg(grad), tensor_arg(mask), double_arg(2)}, {grad.type},
                          {{0, grad}, {1, mask}}).outputs;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].values, (std::vector<double>{2, 0, 6, 0}));
}

TEST(RandomLowering, RandpermIsAShuffledPermutation) {
  for (DType d : {DType::kI64, DType::kF32}) {
    TensorType t{d, {100}};
    auto out = run_lowering("aten::randperm.generator_out", {int_arg(100), none_arg(), self_arg(t)},
                            {t}, {}).outputs;
    ASSERT_EQ(out.size(), 1u);
    std::vector<double> sorted = out[0].values;
    std::sort(sorted.begin(), sorted.end());
    std::vector<double> expected(100);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(sorted, expected);
    EXPECT_NE(out[0].values, expected);  // identity has probability 1/100!
  }
}

TEST(RandomLowering, EmptyOutputsNeedNoBits) {
  TensorType t{DType::kF32, {0, 3}};
  auto out = run_lowering("aten::normal_", {self_arg(t), double_arg(0), double_arg(1), none_arg()},
                          {t}, {}).outputs;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].values.empty());
}

}  // namespace
}  // namespace torchtpu::testing
