// Activation and softmax lowerings run on the CPU plugin and compared with std:: math.
// Forward ops are checked against the closed form; backward ops run in f64 and are
// checked against a central finite difference of the same closed form, so a wrong
// derivative cannot agree with its own copy.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;


using Fn = std::function<double(double)>;

HostTensor host(DType t, Dims dims, std::vector<double> values) {
  return HostTensor{TensorType{t, std::move(dims)}, std::move(values)};
}

OpArg float_scalar() { return scalar_arg(ScalarCategory::kFloat); }

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "] = " << got[i];
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " [" << i << "]";
    } else {
      EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i])))
          << what << " [" << i << "]";
    }
  }
}

std::vector<double> map(const std::vector<double>& xs, const Fn& f) {
  std::vector<double> out;
  for (double x : xs) out.push_back(f(x));
  return out;
}

// Runs a one-tensor forward op (tensor at arg 0, `scalars` by arg index) and compares
// with `ref` elementwise.
void check_forward(const std::string& op, std::vector<OpArg> extra,
                   const std::map<int, double>& scalars, const HostTensor& x, const Fn& ref,
                   double tol, DType out = DType::kF32) {
  std::vector<OpArg> args{tensor_arg(x)};
  args.insert(args.end(), extra.begin(), extra.end());
  auto run = run_lowering(op, args, {TensorType{out, x.type.dims}}, {{0, x}}, scalars);
  ASSERT_EQ(run.outputs.size(), 1u) << op;
  EXPECT_EQ(run.outputs[0].type.dtype, out) << op;
  expect_close(run.outputs[0].values, map(x.values, ref), tol, op);
}

// Runs a backward op in f64 with grad at arg 0 and x at `x_arg` and compares with
// grad * f'(x) by central difference. `saved` maps x to the tensor the op receives
// (x itself, or f(x) for ops that save the output).
void check_backward(const std::string& op, std::vector<OpArg> args, size_t x_arg,
                    const std::map<int, double>& scalars, const std::vector<double>& xs,
                    const Fn& f, const Fn& saved = [](double x) { return x; }) {
  Dims dims{static_cast<int64_t>(xs.size())};
  HostTensor grad = host(DType::kF64, dims, {});
  for (size_t i = 0; i < xs.size(); ++i) grad.values.push_back(0.5 + 0.25 * i);
  HostTensor s = host(DType::kF64, dims, map(xs, saved));
  args[0] = tensor_arg(grad);
  args[x_arg] = tensor_arg(s);
  auto run = run_lowering(op, args, {TensorType{DType::kF64, dims}},
                          {{0, grad}, {static_cast<int>(x_arg), s}}, scalars);
  ASSERT_EQ(run.outputs.size(), 1u) << op;
  std::vector<double> want;
  for (size_t i = 0; i < xs.size(); ++i) {
    double h = 1e-6;
    want.push_back(grad.values[i] * (f(xs[i] + h) - f(xs[i] - h)) / (2 * h));
  }
  expect_close(run.outputs[0].values, want, 1e-6, op);
}

const std::vector<double> kXs{-3.5, -1.25, -0.3, 0.2, 0.9, 2.75};

TEST(ActivationLowering, ReluKeepsIntegersAndPropagatesNaN) {
  check_forward("aten::relu", {}, {}, host(DType::kF32, {4}, {-2, -0.0, 1.5, kNaN}),
                [](double x) { return std::isnan(x) ? x : std::max(x, 0.0); }, 0);
  check_forward("aten::relu_", {}, {}, host(DType::kI64, {3}, {-7, 0, 9}),
                [](double x) { return std::max(x, 0.0); }, 0, DType::kI64);
}

TEST(ActivationLowering, ThresholdAndItsBackward) {
  auto ref = [](double x) { return x <= 1.0 ? -5.0 : x; };
  check_forward("aten::threshold", {float_scalar(), float_scalar()}, {{1, 1.0}, {2, -5.0}},
                host(DType::kF32, {5}, {0.5, 1.0, 1.5, -3, kNaN}), ref, 0);
  check_forward("aten::threshold.out", {float_scalar(), float_scalar()}, {{1, 2}, {2, 100}},
                host(DType::kI32, {4}, {1, 2, 3, -4}),
                [](double x) { return x <= 2 ? 100.0 : x; }, 0, DType::kI32);

  HostTensor g = host(DType::kF32, {4}, {1, 2, 3, 4});
  HostTensor x = host(DType::kF32, {4}, {-1, 0, 0.5, kNaN});
  auto run = run_lowering("aten::threshold_backward",
                          {tensor_arg(g), tensor_arg(x), float_scalar()},
                          {TensorType{DType::kF32, {4}}}, {{0, g}, {1, x}}, {{2, 0.0}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{0, 0, 3, 4}));
}

TEST(ActivationLowering, LeakyReluAndItsBackward) {
  auto f = [](double x) { return x > 0 ? x : 0.1 * x; };
  check_forward("aten::leaky_relu", {float_scalar()}, {{1, 0.1}},
                host(DType::kF32, {6}, kXs), f, 1e-6);
  check_backward("aten::leaky_relu_backward.grad_input",
                 {none_arg(), none_arg(), float_scalar(), bool_arg(false)}, 1, {{2, 0.1}}, kXs, f);
  // With self_is_result the saved tensor is the output, whose sign matches the input's.
  check_backward("aten::leaky_relu_backward",
                 {none_arg(), none_arg(), float_scalar(), bool_arg(true)}, 1, {{2, 0.1}}, kXs, f,
                 f);
}

TEST(ActivationLowering, HardtanhClampsIntsAndFloats) {
  auto f = [](double x) { return std::min(std::max(x, -1.0), 2.0); };
  check_forward("aten::hardtanh", {float_scalar(), float_scalar()}, {{1, -1.0}, {2, 2.0}},
                host(DType::kF32, {6}, kXs), f, 1e-7);
  OpArg int_scalar = scalar_arg(ScalarCategory::kInt);
  check_forward("aten::hardtanh_", {int_scalar, int_scalar}, {{1, -1}, {2, 2}},
                host(DType::kI64, {4}, {-5, 0, 1, 8}), f, 0, DType::kI64);
  check_backward("aten::hardtanh_backward",
                 {none_arg(), none_arg(), float_scalar(), float_scalar()}, 1, {{2, -1.0}, {3, 2.0}},
                 kXs, f);
}

TEST(ActivationLowering, EluForwardAndBothBackwardForms) {
  const double alpha = 1.5, scale = 1.2, input_scale = 0.8;
  auto f = [=](double x) {
    return x <= 0 ? std::expm1(x * input_scale) * alpha * scale : x * scale;
  };
  std::vector<OpArg> s3{float_scalar(), float_scalar(), float_scalar()};
  std::map<int, double> fwd_scalars{{1, alpha}, {2, scale}, {3, input_scale}};
  check_forward("aten::elu", s3, fwd_scalars, host(DType::kF32, {6}, kXs), f, 1e-6);
  std::vector<OpArg> bwd{none_arg(),      float_scalar(), float_scalar(),
                         float_scalar(),  bool_arg(false), none_arg()};
  check_backward("aten::elu_backward", bwd, 5, fwd_scalars, kXs, f);
  bwd[4] = bool_arg(true);
  check_backward("aten::elu_backward.grad_input", bwd, 5, fwd_scalars, kXs, f, f);
}

TEST(ActivationLowering, SoftplusUsesLinearBranchAboveThreshold) {
  const double beta = 2.0, threshold = 3.0;
  auto f = [=](double x) {
    return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
  };
  check_forward("aten::softplus", {float_scalar(), float_scalar()}, {{1, beta}, {2, threshold}},
                host(DType::kF32, {7}, {-3.5, -1.25, -0.3, 0.2, 0.9, 2.75, 40}), f, 1e-6);
  check_backward("aten::softplus_backward",
                 {none_arg(), none_arg(), float_scalar(), float_scalar()}, 1,
                 {{2, beta}, {3, threshold}}, kXs, f);
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(ActivationLowering, SigmoidAndTanhWithOutputBasedBackward) {
  check_forward("aten::sigmoid", {}, {}, host(DType::kF32, {6}, kXs), sigmoid, 1e-6);
  // Integer inputs compute in float (the meta kernel makes the output float).
  check_forward("aten::sigmoid.out", {}, {}, host(DType::kI64, {3}, {-2, 0, 3}), sigmoid, 1e-6);
  check_forward("aten::tanh_", {}, {}, host(DType::kF32, {6}, kXs),
                [](double x) { return std::tanh(x); }, 1e-6);
  check_backward("aten::sigmoid_backward", {none_arg(), none_arg()}, 1, {}, kXs, sigmoid, sigmoid);
  check_backward("aten::tanh_backward.grad_input", {none_arg(), none_arg()}, 1, {}, kXs,
                 [](double x) { return std::tanh(x); }, [](double x) { return std::tanh(x); });
}

TEST(ActivationLowering, SiluAndMish) {
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  auto mish = [](double x) { return x * std::tanh(std::log1p(std::exp(x))); };
  check_forward("aten::silu", {}, {}, host(DType::kF32, {6}, kXs), silu, 1e-6);
  check_forward("aten::mish_", {}, {}, host(DType::kF32, {6}, kXs), mish, 1e-6);
  check_forward("aten::mish", {}, {}, host(DType::kF32, {2}, {100, -100}), mish, 1e-6);
  check_backward("aten::silu_backward.grad_input", {none_arg(), none_arg()}, 1, {}, kXs, silu);
}

TEST(ActivationLowering, HardsigmoidAndHardswish) {
  auto hs = [](double x) { return std::min(std::max(x + 3, 0.0), 6.0) / 6; };
  auto hw = [=](double x) { return x * hs(x); };
  std::vector<double> xs{-4.5, -2.5, -0.3, 0.2, 2.75, 3.5};
  check_forward("aten::hardsigmoid", {}, {}, host(DType::kF32, {6}, xs), hs, 1e-6);
  check_forward("aten::hardswish.out", {}, {}, host(DType::kF32, {6}, xs), hw, 1e-6);
  check_backward("aten::hardsigmoid_backward", {none_arg(), none_arg()}, 1, {}, xs, hs);
  check_backward("aten::hardswish_backward", {none_arg(), none_arg()}, 1, {}, xs, hw);
  // At the kinks and for NaN, ATen's conventions: -3 -> 0, 3 -> grad, NaN -> grad.
  HostTensor g = host(DType::kF32, {3}, {2, 2, 2}), x = host(DType::kF32, {3}, {-3, 3, kNaN});
  auto run = run_lowering("aten::hardswish_backward", {tensor_arg(g), tensor_arg(x)},
                          {TensorType{DType::kF32, {3}}}, {{0, g}, {1, x}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{0, 2, 2}));
}

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(ActivationLowering, GeluExactAndTanhApproximation) {
  check_forward("aten::gelu", {string_arg("none")}, {}, host(DType::kF32, {6}, kXs), gelu_erf,
                1e-6);
  check_forward("aten::gelu_", {string_arg("tanh")}, {}, host(DType::kF32, {6}, kXs), gelu_tanh,
                1e-6);
  check_backward("aten::gelu_backward", {none_arg(), none_arg(), string_arg("none")}, 1, {}, kXs,
                 gelu_erf);
  check_backward("aten::gelu_backward.grad_input", {none_arg(), none_arg(), string_arg("tanh")}, 1,
                 {}, kXs, gelu_tanh);
}

TEST(ActivationLowering, GeluRejectsUnknownApproximation) {
  HostTensor x = host(DType::kF32, {2}, {1, 2});
  auto lowered = lowering::lower_op("aten::gelu", {tensor_arg(x), string_arg("fast")},
                                    {TensorType{DType::kF32, {2}}});
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().to_string().find("fast"), std::string::npos);
}

TEST(ActivationLowering, HardshrinkAndSoftshrink) {
  auto hard = [](double x) { return std::fabs(x) <= 0.5 ? 0.0 : x; };
  auto soft = [](double x) { return x > 0.5 ? x - 0.5 : (x < -0.5 ? x + 0.5 : x * 0.0); };
  std::vector<double> xs{-2.0, -0.5, -0.25, 0.0, 0.5, 1.25, kNaN};
  check_forward("aten::hardshrink", {float_scalar()}, {{1, 0.5}}, host(DType::kF32, {7}, xs), hard,
                0);
  check_forward("aten::softshrink.out", {float_scalar()}, {{1, 0.5}}, host(DType::kF32, {7}, xs),
                soft, 0);
  // Away from the band's edges, where the derivative is defined.
  check_backward("aten::softshrink_backward", {none_arg(), none_arg(), float_scalar()}, 1,
                 {{2, 0.5}}, kXs, soft);
  check_backward("aten::hardshrink_backward.grad_input", {none_arg(), none_arg(), float_scalar()},
                 1, {{2, 0.5}}, kXs, hard);
}

TEST(ActivationLowering, LogSigmoidDoesNotOverflow) {
  auto f = [](double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))); };
  HostTensor x = host(DType::kF32, {4}, {-200, -1.5, 0.5, 200});
  auto run = run_lowering("aten::log_sigmoid_forward", {tensor_arg(x)},
                          {TensorType{DType::kF32, {4}}, TensorType{DType::kF32, {0}}}, {{0, x}});
  ASSERT_EQ(run.outputs.size(), 2u);
  expect_close(run.outputs[0].values, map(x.values, f), 1e-6, "log_sigmoid_forward");
  EXPECT_TRUE(run.outputs[1].values.empty());
  std::vector<OpArg> args{none_arg(), none_arg(), tensor_arg(host(DType::kF64, {0}, {}))};
  check_backward("aten::log_sigmoid_backward", args, 1, {}, kXs, f);
}

TEST(ActivationLowering, LogitWithAndWithoutEps) {
  auto logit = [](double x) { return std::log(x / (1 - x)); };
  HostTensor x = host(DType::kF32, {5}, {0.25, 0.5, 0.9, 1.5, kNaN});
  check_forward("aten::logit", {none_arg()}, {}, x, logit, 1e-6);
  auto clamped = [=](double v) { return v < 0.3 ? logit(0.3) : logit(v > 0.7 ? 0.7 : v); };
  check_forward("aten::logit_", {double_arg(0.3)}, {}, x, clamped, 1e-6);
  std::vector<double> inside{0.1, 0.35, 0.5, 0.65, 0.9};
  check_backward("aten::logit_backward", {none_arg(), none_arg(), none_arg()}, 1, {}, inside,
                 logit);
  check_backward("aten::logit_backward.grad_input", {none_arg(), none_arg(), double_arg(0.3)}, 1,
                 {}, inside, clamped);
  // Without eps the gradient outside [0, 1] is NaN.
  HostTensor g = host(DType::kF32, {2}, {1, 1}), out = host(DType::kF32, {2}, {-0.5, 1.5});
  auto run = run_lowering("aten::logit_backward", {tensor_arg(g), tensor_arg(out), none_arg()},
                          {TensorType{DType::kF32, {2}}}, {{0, g}, {1, out}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_TRUE(std::isnan(run.outputs[0].values[0]) && std::isnan(run.outputs[0].values[1]));
}

TEST(ActivationLowering, GluAndItsBackward) {
  // x: [2, 4], dim -1 -> a = x[:, :2], b = x[:, 2:]
  std::vector<double> xv{0.5, -1, 2, -0.5, 1.5, 0.25, -3, 1};
  HostTensor x = host(DType::kF64, {2, 4}, xv);
  auto run = run_lowering("aten::glu", {tensor_arg(x), int_arg(-1)},
                          {TensorType{DType::kF64, {2, 2}}}, {{0, x}});
  ASSERT_EQ(run.outputs.size(), 1u);
  std::vector<double> want;
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 2; ++j) want.push_back(xv[r * 4 + j] * sigmoid(xv[r * 4 + j + 2]));
  expect_close(run.outputs[0].values, want, 1e-12, "glu");

  std::vector<double> gv{1, -2, 0.5, 3};
  HostTensor g = host(DType::kF64, {2, 2}, gv);
  auto back = run_lowering("aten::glu_backward", {tensor_arg(g), tensor_arg(x), int_arg(1)},
                           {TensorType{DType::kF64, {2, 4}}}, {{0, g}, {1, x}});
  ASSERT_EQ(back.outputs.size(), 1u);
  std::vector<double> want_grad(8);
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 2; ++j) {
      double a = xv[r * 4 + j], s = sigmoid(xv[r * 4 + j + 2]), gr = gv[r * 2 + j];
      want_grad[r * 4 + j] = gr * s;
      want_grad[r * 4 + j + 2] = gr * a * s * (1 - s);
    }
  }
  expect_close(back.outputs[0].values, want_grad, 1e-12, "glu_backward");
}

TEST(ActivationLowering, PreluBroadcastsWeightAndReturnsBothGrads) {
  // x: [2, 3] with one weight per column (weight arrives broadcastable, [3]).
  HostTensor x = host(DType::kF32, {2, 3}, {-1, 2, -3, 4, -5, 6});
  HostTensor w = host(DType::kF32, {3}, {0.5, 0.25, 2});
  auto run = run_lowering("aten::_prelu_kernel", {tensor_arg(x), tensor_arg(w)},
                          {TensorType{DType::kF32, {2, 3}}}, {{0, x}, {1, w}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (std::vector<double>{-0.5, 2, -6, 4, -1.25, 6}));
  HostTensor g = host(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  auto back = run_lowering("aten::_prelu_kernel_backward",
                           {tensor_arg(g), tensor_arg(x), tensor_arg(w)},
                           {TensorType{DType::kF32, {2, 3}}, TensorType{DType::kF32, {2, 3}}},
                           {{0, g}, {1, x}, {2, w}});
  ASSERT_EQ(back.outputs.size(), 2u);
  EXPECT_EQ(back.outputs[0].values, (std::vector<double>{0.5, 2, 6, 4, 1.25, 6}));
  EXPECT_EQ(back.outputs[1].values, (std::vector<double>{-1, 0, -9, 0, -25, 0}));
}

// Row-wise softmax of a row-major [rows, cols] matrix over the last dim.
std::vector<double> softmax_rows(const std::vector<double>& v, int64_t cols, bool log) {
  std::vector<double> out(v.size());
  for (size_t r = 0; r < v.size() / cols; ++r) {
    double m = -kInf, sum = 0;
    for (int64_t j = 0; j < cols; ++j) m = std::max(m, v[r * cols + j]);
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(v[r * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j) {
      double s = v[r * cols + j] - m;
      out[r * cols + j] = log ? s - std::log(sum) : std::exp(s) / sum;
    }
  }
  return out;
}

std::vector<double> transpose2(const std::vector<double>& v, int64_t rows, int64_t cols) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = v[i * cols + j];
  return out;
}

TEST(ActivationLowering, SoftmaxIsStableForLargeInputs) {
  // exp(1000) overflows any float type: only the max-subtracted form gets these right.
  HostTensor x = host(DType::kF32, {2, 3}, {1000, 1001, 1002, -1, 0, 1});
  for (bool log : {false, true}) {
    const char* op = log ? "aten::_log_softmax" : "aten::_softmax";
    auto run = run_lowering(op, {tensor_arg(x), int_arg(-1), bool_arg(false)},
                            {TensorType{DType::kF32, {2, 3}}}, {{0, x}});
    ASSERT_EQ(run.outputs.size(), 1u);
    expect_close(run.outputs[0].values, softmax_rows(x.values, 3, log), 1e-6, op);
  }
}

TEST(ActivationLowering, SoftmaxOverLeadingDimInF64) {
  HostTensor x = host(DType::kF64, {2, 3}, {0.5, -1, 3, 2, 2, -4});
  for (bool log : {false, true}) {
    const char* op = log ? "aten::_log_softmax.out" : "aten::_softmax.out";
    auto run = run_lowering(op, {tensor_arg(x), int_arg(0), bool_arg(false), none_arg()},
                            {TensorType{DType::kF64, {2, 3}}}, {{0, x}});
    ASSERT_EQ(run.outputs.size(), 1u);
    auto want = transpose2(softmax_rows(transpose2(x.values, 2, 3), 2, log), 3, 2);
    expect_close(run.outputs[0].values, want, 1e-12, op);
  }
}

TEST(ActivationLowering, SoftmaxOfZeroDimTensor) {
  HostTensor x = host(DType::kF32, {}, {7.5});
  auto sm = run_lowering("aten::_softmax", {tensor_arg(x), int_arg(0), bool_arg(false)},
                         {TensorType{DType::kF32, {}}}, {{0, x}});
  ASSERT_EQ(sm.outputs.size(), 1u);
  EXPECT_EQ(sm.outputs[0].values, (std::vector<double>{1}));
  auto lsm = run_lowering("aten::_log_softmax", {tensor_arg(x), int_arg(-1), bool_arg(false)},
                          {TensorType{DType::kF32, {}}}, {{0, x}});
  ASSERT_EQ(lsm.outputs.size(), 1u);
  EXPECT_EQ(lsm.outputs[0].values, (std::vector<double>{0}));
}

TEST(ActivationLowering, SoftmaxBackwardMatchesFiniteDifference) {
  // d/dx_j of sum_i g_i * softmax(x)_i, by central differences on softmax_rows.
  std::vector<double> x{0.3, -1.2, 2.0, 0.7};
  std::vector<double> g{1.0, -0.5, 0.25, 2.0};
  for (bool log : {false, true}) {
    auto y = softmax_rows(x, 4, log);
    std::vector<double> want;
    for (size_t j = 0; j < x.size(); ++j) {
      auto xp = x, xm = x;
      xp[j] += 1e-6;
      xm[j] -= 1e-6;
      auto yp = softmax_rows(xp, 4, log), ym = softmax_rows(xm, 4, log);
      double d = 0;
      for (size_t i = 0; i < x.size(); ++i) d += g[i] * (yp[i] - ym[i]) / 2e-6;
      want.push_back(d);
    }
    HostTensor gt = host(DType::kF64, {1, 4}, g), yt = host(DType::kF64, {1, 4}, y);
    OpArg input_dtype;
    input_dtype.kind = ArgKind::kDType;
    input_dtype.dtype = DType::kF64;
    const char* op = log ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data.out";
    auto run = run_lowering(op, {tensor_arg(gt), tensor_arg(yt), int_arg(1), input_dtype},
                            {TensorType{DType::kF64, {1, 4}}}, {{0, gt}, {1, yt}});
    ASSERT_EQ(run.outputs.size(), 1u);
    expect_close(run.outputs[0].values, want, 1e-6, op);
  }
}

TEST(ActivationLowering, Bf16SoftmaxComputesInF32) {
  std::vector<double> xs{1.0, 2.0, 3.0, 4.0, 100.0, 100.5, 101.0, 99.0};
  HostTensor x = host(DType::kBF16, {2, 4}, {});
  for (double v : xs) x.values.push_back(round_to_bf16(v));
  auto want = softmax_rows(x.values, 4, false);
  // half_to_float: the f32 result of the f32 computation, unrounded.
  auto f32_run = run_lowering("aten::_softmax", {tensor_arg(x), int_arg(1), bool_arg(true)},
                              {TensorType{DType::kF32, {2, 4}}}, {{0, x}});
  expect_close(output_values(f32_run, DType::kF32), want, 1e-6, "half_to_float");
  EXPECT_NE(f32_run.text.find("tensor<2x4xbf16>) -> tensor<2x4xf32>"), std::string::npos)
      << f32_run.text;
  // bf16 output: the f32 result rounded once (bf16 has 8 significant bits).
  auto bf16 = output_values(run_lowering("aten::_softmax",
                                         {tensor_arg(x), int_arg(1), bool_arg(false)},
                                         {TensorType{DType::kBF16, {2, 4}}}, {{0, x}}),
                            DType::kBF16);
  std::vector<double> want_bf16;
  for (double v : want) want_bf16.push_back(round_to_bf16(v));
  expect_close(bf16, want_bf16, 0, "bf16");
}

TEST(ActivationLowering, Bf16GeluRoundsOnceFromF32) {
  HostTensor x = host(DType::kBF16, {6}, {});
  for (double v : kXs) x.values.push_back(round_to_bf16(v));
  auto got = output_values(run_lowering("aten::gelu", {tensor_arg(x), string_arg("tanh")},
                                        {TensorType{DType::kBF16, {6}}}, {{0, x}}),
                           DType::kBF16);
  std::vector<double> want;
  for (double v : x.values) want.push_back(round_to_bf16(gelu_tanh(v)));
  // f32 vs f64 evaluation may straddle a bf16 rounding boundary: allow one bf16 ulp
  // (8 significant bits).
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LE(std::fabs(got[i] - want[i]), std::ldexp(std::fabs(want[i]), -7)) << i;
  }
}

TEST(ActivationLowering, SoftmaxBackwardToHalfInputDtype) {
  // The half_to_float case: f32 grad and output, bf16 grad_input.
  HostTensor g = host(DType::kF32, {1, 3}, {1, 0, -1});
  HostTensor y = host(DType::kF32, {1, 3}, {0.25, 0.25, 0.5});
  OpArg input_dtype;
  input_dtype.kind = ArgKind::kDType;
  input_dtype.dtype = DType::kBF16;
  auto got = output_values(
      run_lowering("aten::_softmax_backward_data",
                   {tensor_arg(g), tensor_arg(y), int_arg(-1), input_dtype},
                   {TensorType{DType::kBF16, {1, 3}}}, {{0, g}, {1, y}}),
      DType::kBF16);
  // sum(g * y) = -0.25; y * (g + 0.25) = {0.3125, 0.0625, -0.375}, all exact in bf16.
  expect_close(got, {0.3125, 0.0625, -0.375}, 0, "softmax backward bf16");
}

}  // namespace
}  // namespace torchtpu::testing
