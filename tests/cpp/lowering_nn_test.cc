// Normalization, loss and embedding-gradient lowerings run on the CPU plugin. Expected
// values were computed with PyTorch 2.13 on CPU in float64 from the same inputs.
#include <gtest/gtest.h>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;

// Deterministic test data: ((i * mul) % mod - off) * scale.
HostTensor seq(DType t, Dims dims, int mul = 7, int mod = 11, int off = 5, double scale = 0.25) {
  HostTensor h{{t, std::move(dims)}, {}};
  for (int64_t i = 0; i < h.type.num_elements(); ++i) {
    h.values.push_back(((i * mul) % mod - off) * scale);
  }
  return h;
}

void expect_values(const HostTensor& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.values.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.values[i], want[i], tol) << "at " << i;
}

TensorType f64(Dims d) { return TensorType{DType::kF64, std::move(d)}; }
TensorType f32(Dims d) { return TensorType{DType::kF32, std::move(d)}; }

TEST(NnLowering, LayerNormForwardReturnsOutMeanRstd) {
  HostTensor x = seq(DType::kF32, {2, 3}), w = seq(DType::kF32, {3}, 3, 5, 1, 0.5),
             b = seq(DType::kF32, {3}, 2, 7, 3, 0.1);
  auto run = run_lowering("aten::native_layer_norm",
                          {tensor_arg(x), ints_arg({3}), tensor_arg(w), tensor_arg(b),
                           double_arg(1e-5)},
                          {f32({2, 3}), f32({2, 1}), f32({2, 1})}, {{0, x}, {2, w}, {3, b}});
  ASSERT_EQ(run.outputs.size(), 3u);
  expect_values(run.outputs[0], {0.281232539, 1.17871158, 0.1, -0.912367843, -0.1, 0.1}, 1e-5);
  expect_values(run.outputs[1], {-0.416666667, 0.25}, 1e-6);
  expect_values(run.outputs[2], {1.39495809, 1.22473569}, 1e-5);
}

// Runs native_layer_norm_backward on seq data with the given mask and result types.
LoweringRun layer_norm_backward(Dims mask, std::vector<TensorType> out_types) {
  HostTensor x = seq(DType::kF64, {2, 3}), w = seq(DType::kF64, {3}, 3, 5, 1, 0.5),
             b = seq(DType::kF64, {3}, 2, 7, 3, 0.1), go = seq(DType::kF64, {2, 3}, 5, 13, 6, 0.3);
  HostTensor mean{f64({2, 1}), {-0.416666667, 0.25}};
  HostTensor rstd{f64({2, 1}), {1.394958090, 1.224735690}};
  return run_lowering("aten::native_layer_norm_backward",
                      {tensor_arg(go), tensor_arg(x), ints_arg({3}), tensor_arg(mean),
                       tensor_arg(rstd), tensor_arg(w), tensor_arg(b), ints_arg(std::move(mask))},
                      out_types, {{0, go}, {1, x}, {3, mean}, {4, rstd}, {5, w}, {6, b}});
}

TEST(NnLowering, LayerNormBackwardAllGradients) {
  auto run = layer_norm_backward({1, 1, 1}, {f64({2, 3}), f64({3}), f64({3})});
  ASSERT_EQ(run.outputs.size(), 3u);
  expect_values(run.outputs[0], {0.203603518, 0.152674815, -0.356278333, 5.5e-06, 0, -5.5e-06},
                1e-6);
  expect_values(run.outputs[1], {0.622754316, -0.383613475, -2.34402004}, 1e-6);
  expect_values(run.outputs[2], {-3, 0, 3}, 1e-9);
}

TEST(NnLowering, LayerNormBackwardMaskedGradientsAreZerosOrLeftOut) {
  auto all = layer_norm_backward({1, 0, 0}, {f64({2, 3}), f64({3}), f64({3})});
  ASSERT_EQ(all.outputs.size(), 3u);
  expect_values(all.outputs[0], {0.203603518, 0.152674815, -0.356278333, 5.5e-06, 0, -5.5e-06},
                1e-6);
  expect_values(all.outputs[1], {0, 0, 0}, 0);
  expect_values(all.outputs[2], {0, 0, 0}, 0);
  auto defined_only = layer_norm_backward({0, 0, 1}, {f64({3})});
  ASSERT_EQ(defined_only.outputs.size(), 1u);
  expect_values(defined_only.outputs[0], {-3, 0, 3}, 1e-9);
}

TEST(NnLowering, GroupNormForwardAndBackward) {
  HostTensor x = seq(DType::kF64, {2, 4, 3}), w = seq(DType::kF64, {4}, 3, 5, 1, 0.5),
             b = seq(DType::kF64, {4}, 2, 7, 3, 0.1), go = seq(DType::kF64, {2, 4, 3}, 5, 13, 6,
                                                               0.3);
  auto fwd = run_lowering("aten::native_group_norm",
                          {tensor_arg(x), tensor_arg(w), tensor_arg(b), int_arg(2), int_arg(4),
                           int_arg(3), int_arg(2), double_arg(1e-5)},
                          {f64({2, 4, 3}), f64({2, 2}), f64({2, 2})}, {{0, x}, {1, w}, {2, b}});
  ASSERT_EQ(fwd.outputs.size(), 3u);
  expect_values(fwd.outputs[0],
                {0.396521068, -0.648260534, -0.0512424758, 1.49204816, 0.298012039, -0.896024078,
                 0.1, 0.1, 0.1, 1.88895316, 0.0730066909, -1.74293978, -0.443148232, 0.243963281,
                 -0.958481867, -0.157259293, -1.53148232, 0.873407977, 0.1, 0.1, 0.1, 0.214111061,
                 -1.84722348, 1.76011197},
                1e-6);
  expect_values(fwd.outputs[1], {-0.0833333333, -0.125, 0.291666667, -0.208333333}, 1e-8);
  expect_values(fwd.outputs[2], {1.19403612, 1.21063098, 1.37422303, 1.37422303}, 1e-6);
  HostTensor mean{f64({2, 2}), fwd.outputs[1].values}, rstd{f64({2, 2}), fwd.outputs[2].values};
  auto bwd = run_lowering("aten::native_group_norm_backward",
                          {tensor_arg(go), tensor_arg(x), tensor_arg(mean), tensor_arg(rstd),
                           tensor_arg(w), int_arg(2), int_arg(4), int_arg(3), int_arg(2),
                           ints_arg({1, 1, 1})},
                          {f64({2, 4, 3}), f64({4}), f64({4})},
                          {{0, go}, {1, x}, {2, mean}, {3, rstd}, {4, w}});
  ASSERT_EQ(bwd.outputs.size(), 3u);
  expect_values(bwd.outputs[0],
                {-0.323614971, 0.475241966, -1.38850456, -0.410542209, 0.412292523, 1.23512725,
                 -0.593295562, -0.227339193, 0.138617175, -0.501806469, 2.58806961, -1.40424556,
                 -0.723155378, 1.26382957, -0.358193001, 1.42265849, -1.53755946, -0.0675802187,
                 -0.152062791, 0.577838606, -0.699488839, -3.06158925, 0.760313955, 2.57498832},
                1e-6);
  expect_values(bwd.outputs[1], {3.43645804, -1.28280749, 3.26133017, 2.54477146}, 1e-6);
  expect_values(bwd.outputs[2], {-2.4, 1.2, 0.9, 0.6}, 1e-9);
}

TEST(NnLowering, BatchNormTrainingForwardAndBackward) {
  HostTensor x = seq(DType::kF64, {3, 2, 2}), w = seq(DType::kF64, {2}, 3, 5, 1, 0.5),
             b = seq(DType::kF64, {2}, 2, 7, 3, 0.1), go = seq(DType::kF64, {3, 2, 2}, 5, 13, 6,
                                                               0.3);
  HostTensor rm{f64({2}), {0, 0}}, rv{f64({2}), {1, 1}};
  auto fwd = run_lowering("aten::native_batch_norm",
                          {tensor_arg(x), tensor_arg(w), tensor_arg(b), tensor_arg(rm),
                           tensor_arg(rv),
                           bool_arg(true), double_arg(0.1), double_arg(1e-5)},
                          {f64({3, 2, 2}), f64({2}), f64({2})}, {{0, x}, {1, w}, {2, b}, {3, rm},
                                                                 {4, rv}});
  ASSERT_EQ(fwd.outputs.size(), 3u);
  expect_values(fwd.outputs[0],
                {0.343262197, -0.782446648, -0.730588352, 1.30669709, -0.621631099, 0.0216310987,
                 1.01565631, -0.148506796, 0.182446648, -0.943262197, -0.439547574, -1.60371069},
                1e-6);
  expect_values(fwd.outputs[1], {-0.25, 0.0416666667}, 1e-8);
  expect_values(fwd.outputs[2], {1.28652439, 1.16416311}, 1e-6);
  HostTensor sm{f64({2}), fwd.outputs[1].values}, si{f64({2}), fwd.outputs[2].values};
  auto bwd = run_lowering("aten::native_batch_norm_backward",
                          {tensor_arg(go), tensor_arg(x), tensor_arg(w), none_arg(), none_arg(),
                           tensor_arg(sm), tensor_arg(si), bool_arg(true), double_arg(1e-5),
                           ints_arg({1, 1, 1})},
                          {f64({3, 2, 2}), f64({2}), f64({2})},
                          {{0, go}, {1, x}, {2, w}, {5, sm}, {6, si}});
  ASSERT_EQ(bwd.outputs.size(), 3u);
  expect_values(bwd.outputs[0],
                {0.651031434, 0.291681839, 0.939278027, -0.940104511, -0.180781723, -1.49169999,
                 -0.372265063, 0.85134593, 0.544559018, 0.185209423, 1.41918538, -1.89743976},
                1e-6);
  expect_values(bwd.outputs[1], {2.50872257, -2.31377418}, 1e-6);
  expect_values(bwd.outputs[2], {-1.5, 0.9}, 1e-9);
}

TEST(NnLowering, BatchNormEvalUsesRunningStats) {
  HostTensor x{f32({1, 2, 2}), {1, 3, 2, 6}}, rm{f32({2}), {1, 2}}, rv{f32({2}), {4, 16}};
  auto run = run_lowering("aten::native_batch_norm",
                          {tensor_arg(x), none_arg(), none_arg(), tensor_arg(rm), tensor_arg(rv),
                           bool_arg(false), double_arg(0.1), double_arg(0)},
                          {f32({1, 2, 2}), f32({0}), f32({0})}, {{0, x}, {3, rm}, {4, rv}});
  ASSERT_EQ(run.outputs.size(), 3u);
  expect_values(run.outputs[0], {0, 1, 0, 1}, 1e-6);
  EXPECT_TRUE(run.outputs[1].values.empty());
}

// nll_loss_forward over seq(3x4) with targets {1, ignored, 3} and class weights 1..4.
LoweringRun nll(int64_t reduction, Dims out_dims, HostTensor target) {
  HostTensor x = seq(DType::kF32, {3, 4});
  HostTensor w{f32({4}), {1, 2, 3, 4}};
  return run_lowering("aten::nll_loss_forward",
                      {tensor_arg(x), tensor_arg(target), tensor_arg(w), int_arg(reduction),
                       int_arg(-100)},
                      {f32(std::move(out_dims)), f32({})}, {{0, x}, {1, target}, {2, w}});
}

TEST(NnLowering, NllLossReductionsWeightsAndIgnoreIndex) {
  HostTensor t{{DType::kI64, {3}}, {1, -100, 3}};
  auto none = nll(0, {3}, t);
  ASSERT_EQ(none.outputs.size(), 2u);
  expect_values(none.outputs[0], {-1, 0, 5}, 1e-6);
  expect_values(none.outputs[1], {0}, 0);
  ASSERT_EQ(none.checks, (std::vector<bool>{true}));
  auto mean = nll(1, {}, t);
  ASSERT_EQ(mean.outputs.size(), 2u);
  expect_values(mean.outputs[0], {0.666666667}, 1e-6);
  expect_values(mean.outputs[1], {6}, 1e-6);
  auto sum = nll(2, {}, t);
  ASSERT_EQ(sum.outputs.size(), 2u);
  expect_values(sum.outputs[0], {4}, 1e-6);
}

TEST(NnLowering, NllLossOutOfBoundsTargetFailsCheck) {
  auto run = nll(1, {}, HostTensor{{DType::kI64, {3}}, {1, 7, 3}});
  ASSERT_EQ(run.checks, (std::vector<bool>{false}));
  auto negative = nll(1, {}, HostTensor{{DType::kI64, {3}}, {1, -1, 3}});
  ASSERT_EQ(negative.checks, (std::vector<bool>{false}));
}

TEST(NnLowering, NllLossBackwardMean) {
  HostTensor x = seq(DType::kF64, {3, 4}), t{{DType::kI64, {3}}, {1, -100, 3}};
  HostTensor w{f64({4}), {1, 2, 3, 4}}, go{f64({}), {2}}, tw{f64({}), {6}};
  auto run = run_lowering("aten::nll_loss_backward",
                          {tensor_arg(go), tensor_arg(x), tensor_arg(t), tensor_arg(w), int_arg(1),
                           int_arg(-100), tensor_arg(tw)},
                          {f64({3, 4})}, {{0, go}, {1, x}, {2, t}, {3, w}, {6, tw}});
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_values(run.outputs[0], {0, -0.666666667, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1.33333333}, 1e-8);
}

TEST(NnLowering, NllLoss2dWithIgnoreIndexInsideClassRange) {
  HostTensor x = seq(DType::kF64, {1, 3, 2, 2}), t{{DType::kI64, {1, 2, 2}}, {0, 2, 1, 0}};
  auto run = run_lowering("aten::nll_loss2d_forward",
                          {tensor_arg(x), tensor_arg(t), none_arg(), int_arg(0), int_arg(0)},
                          {f64({1, 2, 2}), f64({})}, {{0, x}, {1, t}});
  ASSERT_EQ(run.outputs.size(), 2u);
  expect_values(run.outputs[0], {0, -0.75, -1, 0}, 1e-9);
}

TEST(NnLowering, MseLossAndBackward) {
  HostTensor x = seq(DType::kF64, {2, 3}), y = seq(DType::kF64, {2, 3}, 5, 13, 6, 0.3);
  auto fwd = run_lowering("aten::mse_loss", {tensor_arg(x), tensor_arg(y), int_arg(1)}, {f64({})},
                          {{0, x}, {1, y}});
  ASSERT_EQ(fwd.outputs.size(), 1u);
  expect_values(fwd.outputs[0], {2.72333333}, 1e-7);
  HostTensor g{f64({}), {1.5}};
  auto bwd = run_lowering("aten::mse_loss_backward",
                          {tensor_arg(g), tensor_arg(x), tensor_arg(y), int_arg(1)}, {f64({2, 3})},
                          {{0, g}, {1, x}, {2, y}});
  ASSERT_EQ(bwd.outputs.size(), 1u);
  expect_values(bwd.outputs[0], {0.275, 0.4, -0.85, 1.225, -0.025, -1.275}, 1e-9);
}

TEST(NnLowering, SmoothL1AndHuberLossAndBackward) {
  HostTensor x = seq(DType::kF64, {2, 3}), y = seq(DType::kF64, {2, 3}, 5, 13, 6, 0.3);
  auto sl1 = run_lowering("aten::smooth_l1_loss",
                          {tensor_arg(x), tensor_arg(y), int_arg(0), double_arg(0.5)}, {f64({2,
                                                                                             3})},
                          {{0, x}, {1, y}});
  ASSERT_EQ(sl1.outputs.size(), 1u);
  expect_values(sl1.outputs[0], {0.3, 0.55, 1.45, 2.2, 0.0025, 2.3}, 1e-9);
  HostTensor ones{f64({2, 3}), {1, 1, 1, 1, 1, 1}};
  auto sl1b = run_lowering("aten::smooth_l1_loss_backward.grad_input",
                           {tensor_arg(ones), tensor_arg(x), tensor_arg(y), int_arg(0),
                            double_arg(0.5)},
                           {f64({2, 3})}, {{0, ones}, {1, x}, {2, y}});
  ASSERT_EQ(sl1b.outputs.size(), 1u);
  expect_values(sl1b.outputs[0], {1, 1, -1, 1, -0.1, -1}, 1e-9);
  auto hub = run_lowering("aten::huber_loss",
                          {tensor_arg(x), tensor_arg(y), int_arg(2), double_arg(0.5)}, {f64({})},
                          {{0, x}, {1, y}});
  ASSERT_EQ(hub.outputs.size(), 1u);
  expect_values(hub.outputs[0], {3.40125}, 1e-9);
  HostTensor g{f64({}), {1}};
  auto hubb = run_lowering("aten::huber_loss_backward.out",
                           {tensor_arg(g), tensor_arg(x), tensor_arg(y), int_arg(2),
                            double_arg(0.5)},
                           {f64({2, 3})}, {{0, g}, {1, x}, {2, y}});
  ASSERT_EQ(hubb.outputs.size(), 1u);
  expect_values(hubb.outputs[0], {0.5, 0.5, -0.5, 0.5, -0.05, -0.5}, 1e-9);
}

TEST(NnLowering, SmoothL1WithZeroBetaIsL1) {
  HostTensor x{f64({3}), {-2, 0, 0.5}}, y{f64({3}), {0, 0, 0}}, ones{f64({3}), {1, 1, 1}};
  auto fwd = run_lowering("aten::smooth_l1_loss",
                          {tensor_arg(x), tensor_arg(y), int_arg(0), double_arg(0)}, {f64({3})},
                          {{0, x}, {1, y}});
  ASSERT_EQ(fwd.outputs.size(), 1u);
  expect_values(fwd.outputs[0], {2, 0, 0.5}, 0);
  auto bwd = run_lowering("aten::smooth_l1_loss_backward.grad_input",
                          {tensor_arg(ones), tensor_arg(x), tensor_arg(y), int_arg(0),
                           double_arg(0)},
                          {f64({3})}, {{0, ones}, {1, x}, {2, y}});
  ASSERT_EQ(bwd.outputs.size(), 1u);
  expect_values(bwd.outputs[0], {-1, -1, 1}, 0);  // PyTorch's grad at 0 is -1
}

TEST(NnLowering, BinaryCrossEntropyClampsLogAndChecksRange) {
  HostTensor p{f64({4}), {0.1, 0.5, 0.9, 1.0}}, t{f64({4}), {0, 1, 1, 0}}, w{f64({4}), {1, 2, 0.5,
                                                                                        1}};
  auto fwd = run_lowering("aten::binary_cross_entropy",
                          {tensor_arg(p), tensor_arg(t), tensor_arg(w), int_arg(1)}, {f64({})},
                          {{0, p}, {1, t}, {2, w}});
  ASSERT_EQ(fwd.outputs.size(), 1u);
  expect_values(fwd.outputs[0], {25.3860838}, 1e-6);
  EXPECT_EQ(fwd.checks, (std::vector<bool>{true, true}));  // input, then target in [0, 1]
  HostTensor g{f64({}), {1}};
  auto bwd = run_lowering("aten::binary_cross_entropy_backward",
                          {tensor_arg(g), tensor_arg(p), tensor_arg(t), tensor_arg(w), int_arg(1)},
                          {f64({4})}, {{0, g}, {1, p}, {2, t}, {3, w}});
  ASSERT_EQ(bwd.outputs.size(), 1u);
  // At x = 1 the denominator x * (1 - x) is clamped to 1e-12.
  expect_values(bwd.outputs[0], {0.277777778, -1, -0.138888889, 2.50000001e+11}, 1e3);
  EXPECT_NEAR(bwd.outputs[0].values[0], 0.277777778, 1e-8);
  EXPECT_NEAR(bwd.outputs[0].values[2], -0.138888889, 1e-8);
  HostTensor bad{f64({4}), {0.1, 1.5, 0.9, 1.0}};
  auto out_of_range = run_lowering("aten::binary_cross_entropy",
                                   {tensor_arg(bad), tensor_arg(t), none_arg(), int_arg(0)},
                                   {f64({4})}, {{0, bad}, {1, t}});
  EXPECT_EQ(out_of_range.checks, (std::vector<bool>{false, true}));
  HostTensor bad_target{f64({4}), {0, 2, 1, -0.5}};
  auto target_out_of_range = run_lowering(
      "aten::binary_cross_entropy", {tensor_arg(p), tensor_arg(bad_target), none_arg(), int_arg(0)},
      {f64({4})}, {{0, p}, {1, bad_target}});
  EXPECT_EQ(target_out_of_range.checks, (std::vector<bool>{true, false}));
}

LoweringRun embedding_backward(int64_t padding_idx, bool scale) {
  HostTensor go = seq(DType::kF32, {2, 3, 2}), idx{{DType::kI64, {2, 3}}, {0, 2, 2, 4, 1, 2}};
  return run_lowering("aten::embedding_dense_backward",
                      {tensor_arg(go), tensor_arg(idx), int_arg(5), int_arg(padding_idx),
                       bool_arg(scale)},
                      {f32({5, 2})}, {{0, go}, {1, idx}});
}

TEST(NnLowering, EmbeddingDenseBackwardSumsRowsAndZeroesPadding) {
  auto run = embedding_backward(1, false);
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_values(run.outputs[0], {-1.25, 0.5, 0, 0, -0.5, -0.75, 0, 0, 1, 0}, 1e-6);
  EXPECT_EQ(run.checks, (std::vector<bool>{true}));
}

TEST(NnLowering, EmbeddingDenseBackwardScalesByFrequency) {
  auto run = embedding_backward(4, true);
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_values(run.outputs[0], {-1.25, 0.5, -1, 0.75, -0.166666667, -0.25, 0, 0, 0, 0}, 1e-6);
}

}  // namespace
}  // namespace torchtpu::testing
