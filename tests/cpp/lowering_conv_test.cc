// Convolution and pooling lowerings run on the CPU plugin. Expected values were computed
// with PyTorch 2.13 on CPU in float64 (aten::convolution / convolution_backward and the
// pooling ops) from the same inputs.
#include <gtest/gtest.h>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;

// Deterministic test data: ((i * mul) % mod - off) * scale.
HostTensor seq(Dims dims, int mul = 7, int mod = 11, int off = 5, double scale = 0.25) {
  HostTensor h{{DType::kF64, std::move(dims)}, {}};
  for (int64_t i = 0; i < h.type.num_elements(); ++i) {
    h.values.push_back(((i * mul) % mod - off) * scale);
  }
  return h;
}

TensorType f64(Dims d) { return TensorType{DType::kF64, std::move(d)}; }

void expect_values(const HostTensor& got, const std::vector<double>& want, double tol = 1e-9) {
  ASSERT_EQ(got.values.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.values[i], want[i], tol) << "at " << i;
}

// [1, 3, 5, 5]
const std::vector<double> kC2 = {
    -1.875, -0.75, -1.25, 1, -2.125, -1, -0.875, 0.125, -0.25, -2, -2.375, -1, 1.375, -3.125,
    -0.75, -1, -1.125, -0.125, -1.875, 0.5, -1.75, -1.75, 1.125, -2.875, -1.25, 0.125, 0.5, -0.75,
    2.125, -1.25, -1.375, -0.25, 2.5, -3, 1.75, 0.75, -0.25, -3, 2.5, 1, -1.25, -0.25, 2.5, -3,
    -1.125, 1, 0, -1.5, 2.5, -0.125, 0.25, 1.125, 1, -0.5, 2.75, 2, 1, -1.375, 1.75, 2.375, 0.75,
    1.125, 0.125, 1.875, -0.375, 2.25, 1.25, -1.125, 3.375, 1, 1.25, 0.5, -0.375, 2.875, 0.375};
// [1, 2, 4, 4]
const std::vector<double> kC2B0 = {
    5.1, -4.35, 1.8, 0.15, 4.65, 1.05, 1.35, -0.3, 4.2, 0.6, -3, 5.1, 1.8, 0.15, -5.4, 4.65, -4.35,
    5.1, -3, 0.6, -5.85, -0.3, 1.35, 1.05, -5.4, 0.15, 1.8, -4.35, -3, 0.6, 4.2, -5.85};
// [3, 2, 2, 2]
const std::vector<double> kC2B1 = {
    2.1, -6.075, 3.15, 3.75, 0.825, -2.1, -0.15, 3.75, -6.075, -1.575, 3.75, -3.45, -2.1, 3.75,
    3.75, -0.15, -1.575, 5.85, -3.45, 5.925, 3.75, -0.15, -0.15, -4.05};
// [3]
const std::vector<double> kC2B2 = {
    -0.6, 0.9, -1.5};
// [2, 4, 3, 3]
const std::vector<double> kC2g = {
    1.25, -2.375, 1.375, 0.875, -1.375, 1.875, 0.75, 1.125, 0.375, 2.125, 2.125, -2.5, -3.625,
    -2.5, 1.25, 0.625, 2.5, -1.25, -2.375, 1.375, 0.875, 3.375, 3, -1.875, -1.625, -3.875, 1.125,
    -1.625, -0.125, -1.25, 3.375, 0.25, 1.25, -2.375, 1.5, -2.5, 0.75, 1.25, -1, 0.875, -1.75, 1,
    1.25, -2, 1.75, -1, 1.25, 0.75, 2.875, 0.25, -2.5, -4, -0.75, 0.5, 0.375, -1, 0.375, -2.625, 2,
    0.875, 2.125, 2.125, -2.5, -1.25, -0.125, -1.625, -1.625, -2, -0.5, 1.75, -0.875, 1.125};
// [2, 4, 5, 5]
const std::vector<double> kC2gB0 = {
    0, 2.25, -0.75, 2.55, 0.45, 0.3, -4.05, -1.2, 0.6, 1.2, -0.3, 1.2, 0.9, -0.45, 0.15, -0.3,
    -3.75, 2.1, 2.85, -1.35, -0.6, 2.1, 0.6, -3.45, -0.15, -1.8, -1.35, 0.45, -0.45, 0.75, 0.9, 3,
    -2.25, -3.15, -1.5, -0.9, 1.35, -0.6, 0.3, 1.65, 1.2, -1.8, -1.95, -0.15, 2.7, 0, 0.15, 0.3,
    1.05, -1.35, -2.1, 0.3, 1.8, 0.3, -2.1, 2.1, -2.1, -1.8, 1.8, 0.15, 1.8, -1.65, 1.8, 0.3, -2.1,
    -1.8, -2.1, 2.1, -2.1, 2.1, 1.8, 0.3, -2.1, 0.3, 1.8, 0.15, -2.1, -0.6, 2.1, 0.6, -1.35, 3.6,
    -0.9, -3.45, 1.5, -0.15, 2.7, -0.9, 3, 0.3, 5.55111512e-17, -3.9, -1.5, 4.65, -1.05, -0.45,
    1.65, 0.75, -3.9, 0, 0.3, -2.55, -0.45, 1.65, 0.75, -1.05, 3.45, -0.6, -3.6, 1.8, 0, 2.25,
    -0.75, 2.55, 0.45, 0.3, -4.05, -1.2, 0.6, 1.2, -0.3, 1.2, 0.9, -0.45, 0.15, 1.2, -0.15, -0.45,
    0.75, -0.15, 2.55, -1.11022302e-16, 1.35, -2.25, -1.8, -1.8, -1.35, 0.45, -0.45, 0.75, 0.9, 3,
    -2.25, -3.15, -1.5, -0.9, 1.35, -0.6, 0.3, 1.65, -2.1, 0.3, 1.8, 0.3, -2.1, 0.15, 1.8, -1.8,
    1.8, 0.15, -2.1, 0.3, 1.8, 0.3, -2.1, 2.1, -2.1, -1.8, 1.8, 0.15, 1.8, -1.65, 1.8, 0.3, -2.1,
    0.45, -3, -0.3, 1.2, 0.9, 1.2, 1.35, -0.3, -3.75, 2.1, 0.15, -2.1, -0.6, 2.1, 0.6, -1.35, 3.6,
    -0.9, -3.45, 1.5, -0.15, 2.7, -0.9, 3, 0.3};
// [4, 2, 3, 3]
const std::vector<double> kC2gB1 = {
    -2.775, 4.95, -2.775, -0.225, 9.15, -0.225, -2.775, 4.95, -2.775, -3.9, 5.025, -1.875, 0.15,
    1.725, -5.55, -3.675, 4.875, -1.65, -2.775, -3.825, 5.025, 3.675, -0.6, 3.675, 5.025, -3.825,
    -2.775, -1.65, -3.3, 5.25, -5.1, -3.225, 6.75, 5.4, -3.45, -3.3, 4.425, 2.25, -1.725, -0.975,
    9.75, -4.125, 1.575, -2.325, 1.275, 5.55, -6, -3.675, -1.35, 9.975, -3.9, 1.275, 6.45, -3.075,
    1.275, -1.575, 4.875, 3.975, -2.325, -1.125, -4.5, 0.675, 2.025, -3.075, -0.45, 6.225, 4.05,
    -7.2, -2.4, 0.45, -0.675, 1.95};
// [4]
const std::vector<double> kC2gB2 = {
    -2.22044605e-16, -2.7, 2.4, -0.3};
// [1, 2, 3]
const std::vector<double> kC1 = {
    2.125, -1, 1.375, -1.5, -0.625, 1.625};
// [1, 2, 7]
const std::vector<double> kC1B0 = {
    1.2, 0.45, -0.6, -0.3, -0.6, 0.45, 1.2, -1.8, -0.3, 2.4, -0.3, -0.6, 0.45, -0.3};
// [2, 2, 3]
const std::vector<double> kC1B1 = {
    1.5, 0.825, 0.975, 1.2, -2.775, 1.5, 0.75, 1.425, 1.275, 1.05, -3.225, 0.75};
// [2]
const std::vector<double> kC1B2 = {
    -0.9, 0.9};
// [1, 2, 2, 2, 2]
const std::vector<double> kC3 = {
    1.875, -1.25, -0.625, -3.75, -0.125, -0.5, -1.25, 2.5, -2.5, -2.5, 0.25, 0.25, 0.25, 1.625,
    -2.5, 1.625};
// [1, 1, 3, 3, 3]
const std::vector<double> kC3B0 = {
    0.3, -0.6, -0.15, 2.7, -1.5, -0.9, -2.1, 3.45, -1.65, 1.05, -3.15, 1.2, -2.1, 4.5, 1.8, 1.2,
    -5.1, 3, -0.3, 1.2, -3.6, 0.3, -0.15, 1.2, -0.3, 1.05, -1.65};
// [2, 1, 2, 2, 2]
const std::vector<double> kC3B1 = {
    2.325, -0.45, -2.7, 4.425, -2.85, 0.975, -0.45, -1.575, 3.675, 4.05, -0.15, -0.6, 0.45, -2.475,
    4.05, -3};
// [2]
const std::vector<double> kC3B2 = {
    0.3, -1.2};
// [1, 2, 6, 6]
const std::vector<double> kT2 = {
    -0.25, 0.875, -1.25, -1.375, -2.25, -0.5, 0.125, -2.75, -0.75, 1, -3, 0.125, -0.5, -1.75, -1.5,
    -2.625, 0.25, -0.25, -1.125, 0.25, -0.625, -1.5, -1.5, -1.375, -0.75, -1.625, -1.75, -2.5, 0,
    0, -1.375, 0.625, -1.375, -2.125, 0, -2.5, -0.375, -1.125, 1, -1.125, -0.375, 0.75, -1, 0.375,
    1.75, 0.375, -1, -0.125, -0.375, -1.125, 1, -1.125, -0.375, 0.625, -1, 3.125, 1.75, -2.375, -1,
    0.25, -0.375, 0.25, -0.375, 1.625, -0.375, 0.5, 0.5, 1.5, -1.25, -0.375, -0.25, 0.625};
// [1, 4, 3, 3]
const std::vector<double> kT2B0 = {
    1.5, 2.1, -4.65, -0.45, -6.9, 2.85, 2.25, 4.8, 2.85, -2.55, -0.3, 2.1, 2.85, 3.9, -3, -3.75,
    -6.3, 0.45, -0.3, -4.65, -1.2, -0.6, 3.3, 2.85, 2.85, -3.3, -3.75, 0.9, 3, 1.95, -0.75, -3.6,
    0.75, -0.75, 3, 1.5};
// [4, 1, 3, 3]
const std::vector<double> kT2B1 = {
    1.725, -0.45, -0.3, -0.6, 2.175, -1.5, 0.525, 3.525, -1.125, -1.5, 2.1, 1.8, 3.225, -0.75,
    -4.125, -2.25, -2.475, 3.9, -1.725, -1.875, 3, -2.25, 2.175, -0.15, 3.225, -3, -2.4, -1.125,
    1.275, 1.575, 0.525, 1.575, -1.65, -0.6, 0.75, 0.45};
// [2]
const std::vector<double> kT2B2 = {
    -1.2, 0.6};
// [1, 2, 3, 3]
const std::vector<double> kMp = {
    1, 1.25, 1.25, 1, 1, 1.25, 0.75, 1, 0.5, 1.25, 1, 1, 1.25, 1.25, 1, 0.5, 1.25, 0.25};
// [1, 2, 3, 3]
const std::vector<double> kMpIdx = {
    6, 3, 3, 6, 6, 14, 20, 17, 23, 0, 3, 3, 11, 11, 14, 20, 22, 23};
// [1, 2, 5, 5]
const std::vector<double> kMpB = {
    0, 0, 0, 0.9, 0, 0, -2.7, 0, 0, 0, 0, 0, 0, 0, 1.8, 0, 0, 0.9, 0, 0, -0.6, 0, 0, -1.5, 0, 0, 0,
    0, 0.6, 0, 0, 0, 0, 0, 0, 0, -1.2, 0, 0, -0.3, 0, 0, 0, 0, 0, 1.2, 0, -1.2, 0.3, 0};
// [2, 2, 2]
const std::vector<double> kMpd = {
    0.5, 1.25, 0.75, 1.25, 1.25, 1, 1.25, 1.25};
// [2, 2, 2]
const std::vector<double> kMpdIdx = {
    0, 14, 20, 14, 0, 14, 22, 22};
// [1, 1, 3, 3]
const std::vector<double> kAp1 = {
    -0.0555555556, 0.138888889, 0.138888889, -0.194444444, -0.111111111, -0.0555555556, 0,
    -0.0833333333, -0.111111111};
// [1, 1, 5, 5]
const std::vector<double> kAp1B = {
    -0.2, -0.233333333, -0.0333333333, 0.1, 0.133333333, -0.333333333, -0.333333333, 0,
    0.333333333, 0.333333333, -0.133333333, -0.1, 0.0333333333, 0.233333333, 0.2, -0.2,
    -0.0666666667, 0.133333333, 0.166666667, 0.0333333333, -0.0666666667, 0.0333333333, 0.1,
    -0.0666666667, -0.166666667};
// [1, 1, 3, 3]
const std::vector<double> kAp0 = {
    -0.125, 0.208333333, 0.3125, -0.291666667, -0.111111111, -0.0833333333, 0, -0.125, -0.25};
// [1, 1, 5, 5]
const std::vector<double> kAp0B = {
    -0.45, -0.5, -0.05, 0.25, 0.3, -0.65, -0.666666667, -0.0166666667, 0.583333333, 0.6, -0.2,
    -0.166666667, 0.0333333333, 0.333333333, 0.3, -0.35, -0.166666667, 0.183333333, 0.108333333,
    -0.075, -0.15, 0, 0.15, -0.225, -0.375};
// [1, 1, 2, 2]
const std::vector<double> kApDiv = {
    -0.166666667, -0.0833333333, -0.666666667, 0.333333333};
// [1, 1, 5, 5]
const std::vector<double> kApDivB = {
    -0.6, -0.6, -0.1, -0.1, 0, -0.6, -0.6, -0.1, -0.1, 0, 0.4, 0.4, -0.4, -0.4, 0, 0.4, 0.4, -0.4,
    -0.4, 0, 0, 0, 0, 0, 0};
// [1, 2, 3, 2]
const std::vector<double> kAap = {
    -0.3125, 0.4375, -0.125, 0.166666667, 0.0625, 0.125, 0.3125, -0.3125, 0.0416666667, -0.125, 0,
    0.0625};
// [1, 2, 5, 4]
const std::vector<double> kAapB = {
    -0.45, -0.45, -0.075, -0.075, -0.25, -0.25, -0.275, -0.275, 0.2, 0.2, -0.2, -0.2, 0.275, 0.275,
    0.25, 0.25, 0.075, 0.075, 0.45, 0.45, -0.15, -0.15, 0.225, 0.225, -0.4, -0.4, 0.225, 0.225,
    -0.25, -0.25, 0, 0, 0.125, 0.125, -0.225, -0.225, 0.375, 0.375, -0.225, -0.225};

struct ConvCase {
  Dims input, weight;
  bool bias;
  Dims stride, padding, dilation;
  bool transposed;
  Dims output_padding;
  int64_t groups;
  Dims out;
};

// Runs convolution_overrideable and convolution_backward_overrideable (all three grads)
// and compares with PyTorch's results.
void check_conv(const ConvCase& k, const std::vector<double>& want_out,
                const std::vector<double>& want_grad_input,
                    const std::vector<double>& want_grad_weight,
                const std::vector<double>& want_grad_bias) {
  HostTensor x = seq(k.input), w = seq(k.weight, 3, 5, 2, 0.5);
  int64_t cout = k.transposed ? k.weight[1] * k.groups : k.weight[0];
  HostTensor bias = seq({cout}, 1, 3, 1, 1.0);
  std::vector<OpArg> args{tensor_arg(x), tensor_arg(w), k.bias ? tensor_arg(bias) : none_arg(),
                          ints_arg(k.stride), ints_arg(k.padding), ints_arg(k.dilation),
                          bool_arg(k.transposed), ints_arg(k.output_padding), int_arg(k.groups)};
  std::map<int, HostTensor> tensors{{0, x}, {1, w}};
  if (k.bias) tensors[2] = bias;
  auto fwd = run_lowering("aten::convolution_overrideable", args, {f64(k.out)}, tensors);
  ASSERT_EQ(fwd.outputs.size(), 1u);
  expect_values(fwd.outputs[0], want_out);

  HostTensor go = seq(k.out, 5, 13, 6, 0.3);
  auto bwd = run_lowering("aten::convolution_backward_overrideable",
                          {tensor_arg(go), tensor_arg(x), tensor_arg(w), ints_arg(k.stride),
                           ints_arg(k.padding), ints_arg(k.dilation), bool_arg(k.transposed),
                           ints_arg(k.output_padding), int_arg(k.groups), ints_arg({1, 1, 1})},
                          {f64(k.input), f64(k.weight), f64({cout})}, {{0, go}, {1, x}, {2, w}});
  ASSERT_EQ(bwd.outputs.size(), 3u);
  expect_values(bwd.outputs[0], want_grad_input);
  expect_values(bwd.outputs[1], want_grad_weight);
  expect_values(bwd.outputs[2], want_grad_bias);
}

TEST(ConvLowering, Conv2dWithBiasAndPadding) {
  check_conv({{1, 2, 4, 4}, {3, 2, 2, 2}, true, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1, {1, 3,
                                                                                           5, 5}},
             kC2, kC2B0, kC2B1, kC2B2);
}

// Stride 2 over 5 + 2 * 1 padded positions leaves no input uncovered, but the groups
// split both the input gradient and the weight gradient.
TEST(ConvLowering, Conv2dStridedGrouped) {
  check_conv({{2, 4, 5, 5}, {4, 2, 3, 3}, false, {2, 2}, {1, 1}, {1, 1}, false, {0, 0}, 2, {2, 4,
                                                                                            3, 3}},
             kC2g, kC2gB0, kC2gB1, kC2gB2);
}

TEST(ConvLowering, Conv1dDilated) {
  check_conv({{1, 2, 7}, {2, 2, 3}, false, {1}, {0}, {2}, false, {0}, 1, {1, 2, 3}}, kC1, kC1B0,
             kC1B1, kC1B2);
}

TEST(ConvLowering, Conv3d) {
  check_conv({{1, 1, 3, 3, 3}, {2, 1, 2, 2, 2}, false, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, false,
              {0, 0, 0}, 1, {1, 2, 2, 2, 2}},
             kC3, kC3B0, kC3B1, kC3B2);
}

TEST(ConvLowering, ConvTranspose2dGroupedWithOutputPadding) {
  check_conv({{1, 4, 3, 3}, {4, 1, 3, 3}, true, {2, 2}, {1, 1}, {1, 1}, true, {1, 1}, 2, {1, 2, 6,
                                                                                          6}},
             kT2, kT2B0, kT2B1, kT2B2);
}

TEST(ConvLowering, ConvBackwardReturnsOnlyMaskedGradients) {
  HostTensor x = seq({1, 2, 4, 4}), w = seq({3, 2, 2, 2}, 3, 5, 2, 0.5), go = seq({1, 3, 5, 5}, 5,
                                                                                  13, 6, 0.3);
  std::vector<OpArg> args{tensor_arg(go), tensor_arg(x), tensor_arg(w), ints_arg({1, 1}),
                          ints_arg({1, 1}), ints_arg({1, 1}), bool_arg(false), ints_arg({0, 0}),
                          int_arg(1), ints_arg({0, 1, 0})};
  auto only = run_lowering("aten::convolution_backward_overrideable", args, {f64({3, 2, 2, 2})},
                           {{0, go}, {1, x}, {2, w}});
  ASSERT_EQ(only.outputs.size(), 1u);
  expect_values(only.outputs[0], kC2B1);
  auto all = run_lowering("aten::convolution_backward_overrideable", args,
                          {f64({1, 2, 4, 4}), f64({3, 2, 2, 2}), f64({3})}, {{0, go}, {1, x}, {2,
                                                                                               w}});
  ASSERT_EQ(all.outputs.size(), 3u);
  expect_values(all.outputs[0], std::vector<double>(32, 0.0));
  expect_values(all.outputs[1], kC2B1);
}

// 5x5 planes whose first two elements tie: the first index wins, as on CPU.
HostTensor pool_input() {
  HostTensor x = seq({1, 2, 5, 5});
  x.values[0] = x.values[1];
  return x;
}

TEST(ConvLowering, MaxPool2dCeilModeIndicesAndBackward) {
  HostTensor x = pool_input();
  auto fwd = run_lowering("aten::max_pool2d_with_indices",
                          {tensor_arg(x), ints_arg({3, 3}), ints_arg({2, 2}), ints_arg({1, 1}),
                           ints_arg({1, 1}), bool_arg(true)},
                          {f64({1, 2, 3, 3}), TensorType{DType::kI64, {1, 2, 3, 3}}}, {{0, x}});
  ASSERT_EQ(fwd.outputs.size(), 2u);
  expect_values(fwd.outputs[0], kMp);
  expect_values(fwd.outputs[1], kMpIdx);
  HostTensor go = seq({1, 2, 3, 3}, 5, 13, 6, 0.3);
  HostTensor idx{{DType::kI64, {1, 2, 3, 3}}, kMpIdx};
  auto bwd = run_lowering("aten::max_pool2d_with_indices_backward",
                          {tensor_arg(go), tensor_arg(x), ints_arg({3, 3}), ints_arg({2, 2}),
                           ints_arg({1, 1}), ints_arg({1, 1}), bool_arg(true), tensor_arg(idx)},
                          {f64({1, 2, 5, 5})}, {{0, go}, {1, x}, {7, idx}});
  ASSERT_EQ(bwd.outputs.size(), 1u);
  expect_values(bwd.outputs[0], kMpB);
}

TEST(ConvLowering, MaxPool2dDilatedUnbatched) {
  HostTensor x = pool_input();
  x.type.dims = {2, 5, 5};
  auto run = run_lowering("aten::max_pool2d_with_indices",
                          {tensor_arg(x), ints_arg({2, 2}), ints_arg({2, 2}), ints_arg({0, 0}),
                           ints_arg({2, 2}), bool_arg(false)},
                          {f64({2, 2, 2}), TensorType{DType::kI64, {2, 2, 2}}}, {{0, x}});
  ASSERT_EQ(run.outputs.size(), 2u);
  expect_values(run.outputs[0], kMpd);
  expect_values(run.outputs[1], kMpdIdx);
}

// avg_pool2d(3x3, stride 2, padding 1, ceil_mode) and its backward.
void check_avg_pool(bool count_include_pad, const std::vector<double>& want,
                    const std::vector<double>& want_grad) {
  HostTensor x = seq({1, 1, 5, 5});
  auto fwd = run_lowering("aten::avg_pool2d",
                          {tensor_arg(x), ints_arg({3, 3}), ints_arg({2, 2}), ints_arg({1, 1}),
                           bool_arg(true), bool_arg(count_include_pad), none_arg()},
                          {f64({1, 1, 3, 3})}, {{0, x}});
  ASSERT_EQ(fwd.outputs.size(), 1u);
  expect_values(fwd.outputs[0], want);
  HostTensor go = seq({1, 1, 3, 3}, 5, 13, 6, 0.3);
  auto bwd = run_lowering("aten::avg_pool2d_backward",
                          {tensor_arg(go), tensor_arg(x), ints_arg({3, 3}), ints_arg({2, 2}),
                           ints_arg({1, 1}), bool_arg(true), bool_arg(count_include_pad),
                               none_arg()},
                          {f64({1, 1, 5, 5})}, {{0, go}, {1, x}});
  ASSERT_EQ(bwd.outputs.size(), 1u);
  expect_values(bwd.outputs[0], want_grad);
}

TEST(ConvLowering, AvgPool2dCountIncludePad) { check_avg_pool(true, kAp1, kAp1B); }

TEST(ConvLowering, AvgPool2dExcludePad) { check_avg_pool(false, kAp0, kAp0B); }

TEST(ConvLowering, AvgPool2dDivisorOverride) {
  HostTensor x = seq({1, 1, 5, 5});
  auto fwd = run_lowering("aten::avg_pool2d",
                          {tensor_arg(x), ints_arg({2, 2}), ints_arg({2, 2}), ints_arg({0, 0}),
                           bool_arg(false), bool_arg(true), int_arg(3)},
                          {f64({1, 1, 2, 2})}, {{0, x}});
  ASSERT_EQ(fwd.outputs.size(), 1u);
  expect_values(fwd.outputs[0], kApDiv);
  HostTensor go = seq({1, 1, 2, 2}, 5, 13, 6, 0.3);
  auto bwd = run_lowering("aten::avg_pool2d_backward",
                          {tensor_arg(go), tensor_arg(x), ints_arg({2, 2}), ints_arg({2, 2}),
                           ints_arg({0, 0}), bool_arg(false), bool_arg(true), int_arg(3)},
                          {f64({1, 1, 5, 5})}, {{0, go}, {1, x}});
  ASSERT_EQ(bwd.outputs.size(), 1u);
  expect_values(bwd.outputs[0], kApDivB);
}

TEST(ConvLowering, AdaptiveAvgPool2dOverlappingWindowsAndBackward) {
  HostTensor x = seq({1, 2, 5, 4});
  auto fwd = run_lowering("aten::_adaptive_avg_pool2d", {tensor_arg(x), ints_arg({3, 2})},
                          {f64({1, 2, 3, 2})}, {{0, x}});
  ASSERT_EQ(fwd.outputs.size(), 1u);
  expect_values(fwd.outputs[0], kAap);
  HostTensor go = seq({1, 2, 3, 2}, 5, 13, 6, 0.3);
  auto bwd = run_lowering("aten::_adaptive_avg_pool2d_backward", {tensor_arg(go), tensor_arg(x)},
                          {f64({1, 2, 5, 4})}, {{0, go}, {1, x}});
  ASSERT_EQ(bwd.outputs.size(), 1u);
  expect_values(bwd.outputs[0], kAapB);
}

}  // namespace
}  // namespace torchtpu::testing
