// The fft lowerings (stablehlo.fft) and the complex gate, on the CPU plugin, against a
// direct O(n^2) discrete Fourier transform computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <vector>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using cd = std::complex<double>;

// Interleaved (re, im) values of `v`.
std::vector<double> interleave(const std::vector<cd>& v) {
  std::vector<double> out;
  for (const cd& z : v) {
    out.push_back(z.real());
    out.push_back(z.imag());
  }
  return out;
}

// DFT of each row of a (rows, n) signal: sign -1 forward, +1 inverse (unscaled).
std::vector<cd> dft_rows(const std::vector<cd>& x, int64_t rows, int64_t n, int sign) {
  std::vector<cd> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < n; ++k) {
      cd acc = 0;
      for (int64_t j = 0; j < n; ++j) {
        acc += x[r * n + j] * std::polar(1.0, sign * 2 * M_PI * double(j * k) / double(n));
      }
      out[r * n + k] = acc;
    }
  }
  return out;
}

std::vector<cd> signal(int64_t count) {
  std::vector<cd> v;
  for (int64_t i = 0; i < count; ++i) {
    v.emplace_back(std::sin(0.7 * i) + 0.1 * i, std::cos(1.3 * i));
  }
  return v;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST(FftLowering, C2cForwardAndInverseWithNormalization) {
  const int64_t rows = 2, n = 5;
  std::vector<cd> x = signal(rows * n);
  HostTensor in{{DType::kC64, {rows, n}}, interleave(x)};
  TensorType out{DType::kC64, {rows, n}};
  // Forward, no normalization (torch.fft.fft's default).
  auto run = run_lowering("aten::_fft_c2c",
      {tensor_arg(in), ints_arg({1}), int_arg(0), bool_arg(true)},
                          {out}, {{0, in}});
  EXPECT_NE(run.text.find("fft_type FFT"), std::string::npos) << run.text;
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_near(run.outputs[0].values, interleave(dft_rows(x, rows, n, -1)), 1e-4);
  // Inverse, normalized by 1/n (torch.fft.ifft's default).
  run = run_lowering("aten::_fft_c2c",
      {tensor_arg(in), ints_arg({-1}), int_arg(2), bool_arg(false)},
                     {out}, {{0, in}});
  std::vector<cd> inv = dft_rows(x, rows, n, +1);
  for (cd& z : inv) z /= double(n);
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_near(run.outputs[0].values, interleave(inv), 1e-5);
  // Inverse without normalization ("forward" norm for ifft): XLA's 1/n is undone.
  run = run_lowering("aten::_fft_c2c",
      {tensor_arg(in), ints_arg({1}), int_arg(0), bool_arg(false)},
                     {out}, {{0, in}});
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_near(run.outputs[0].values, interleave(dft_rows(x, rows, n, +1)), 1e-4);
}

TEST(FftLowering, C2cOverALeadingDimTransposes) {
  const int64_t n = 4, cols = 3;
  std::vector<cd> x = signal(n * cols);
  HostTensor in{{DType::kC128, {n, cols}}, interleave(x)};
  auto run = run_lowering("aten::_fft_c2c",
      {tensor_arg(in), ints_arg({0}), int_arg(1), bool_arg(true)},
                          {TensorType{DType::kC128, {n, cols}}}, {{0, in}});
  // The reference transforms columns: transpose, DFT rows, transpose back, scale 1/sqrt(n).
  std::vector<cd> t(n * cols);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[j * n + i] = x[i * cols + j];
  }
  std::vector<cd> f = dft_rows(t, cols, n, -1);
  std::vector<cd> want(n * cols);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < cols; ++j) want[i * cols + j] = f[j * n + i] / std::sqrt(double(n));
  }
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_near(run.outputs[0].values, interleave(want), 1e-10);
}

TEST(FftLowering, R2cOnesidedAndC2rInverse) {
  const int64_t n = 6;
  std::vector<double> real;
  std::vector<cd> as_complex;
  for (int64_t i = 0; i < n; ++i) {
    real.push_back(std::sin(0.9 * i) + i);
    as_complex.emplace_back(real.back(), 0);
  }
  HostTensor in{{DType::kF32, {n}}, real};
  auto run = run_lowering("aten::_fft_r2c",
      {tensor_arg(in), ints_arg({0}), int_arg(0), bool_arg(true)},
                          {TensorType{DType::kC64, {n / 2 + 1}}}, {{0, in}});
  EXPECT_NE(run.text.find("fft_type RFFT"), std::string::npos) << run.text;
  std::vector<cd> full = dft_rows(as_complex, 1, n, -1);
  std::vector<cd> half(full.begin(), full.begin() + n / 2 + 1);
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_near(run.outputs[0].values, interleave(half), 1e-4);
  // c2r of the half spectrum with 1/n normalization is the signal again.
  HostTensor spec{{DType::kC64, {n / 2 + 1}}, interleave(half)};
  auto back = run_lowering("aten::_fft_c2r",
      {tensor_arg(spec), ints_arg({0}), int_arg(2), int_arg(n)},
                           {TensorType{DType::kF32, {n}}}, {{0, spec}});
  EXPECT_NE(back.text.find("fft_type IRFFT"), std::string::npos) << back.text;
  ASSERT_EQ(back.outputs.size(), 1u);
  expect_near(back.outputs[0].values, real, 1e-4);
}

TEST(FftLowering, R2cTwoSidedIsTheFullTransform) {
  const int64_t n = 5;
  std::vector<double> real;
  std::vector<cd> as_complex;
  for (int64_t i = 0; i < n; ++i) {
    real.push_back(0.5 * i - 1);
    as_complex.emplace_back(real.back(), 0);
  }
  HostTensor in{{DType::kF64, {n}}, real};
  auto run = run_lowering("aten::_fft_r2c",
      {tensor_arg(in), ints_arg({0}), int_arg(0), bool_arg(false)},
                          {TensorType{DType::kC128, {n}}}, {{0, in}});
  ASSERT_EQ(run.outputs.size(), 1u);
  expect_near(run.outputs[0].values, interleave(dft_rows(as_complex, 1, n, -1)), 1e-10);
}

TEST(ComplexGate, LoweringsNotWrittenForComplexDecline) {
  HostTensor z{{DType::kC64, {3}}, {1, 2, 3, 4, 5, 6}};
  // _logcumsumexp is lowered for real dtypes only: a complex call is unimplemented (CPU
  // fallback).
  auto lowered = lowering::lower_op("aten::_logcumsumexp", {tensor_arg(z), int_arg(0)},
                                    {TensorType{DType::kC64, {3}}});
  ASSERT_FALSE(lowered.ok());
  EXPECT_EQ(lowered.status().code(), base::StatusCode::kUnimplemented);
  EXPECT_NE(lowered.status().message().find("complex"), std::string::npos);
  EXPECT_TRUE(lowering::accepts_complex("aten::mul.Tensor"));
  EXPECT_TRUE(lowering::accepts_complex("aten::mul_.Tensor"));
  EXPECT_TRUE(lowering::accepts_complex("aten::_conj"));
  EXPECT_TRUE(lowering::accepts_complex("aten::vdot"));
  EXPECT_FALSE(lowering::accepts_complex("aten::maximum"));
  // A list op takes complex where its item op does.
  EXPECT_TRUE(lowering::accepts_complex("aten::_foreach_add_.List"));
  EXPECT_TRUE(lowering::accepts_complex("aten::_foreach_norm.Scalar"));
  EXPECT_FALSE(lowering::accepts_complex("aten::_foreach_maximum.List"));
}

TEST(ComplexLowering, MulAndAbsOfComplex) {
  HostTensor a{{DType::kC64, {2}}, {1, 2, 3, -1}};
  HostTensor b{{DType::kC64, {2}}, {0, 1, 2, 2}};
  auto run = run_lowering("aten::mul.Tensor", {tensor_arg(a), tensor_arg(b)},
                          {TensorType{DType::kC64, {2}}}, {{0, a}, {1, b}});
  ASSERT_EQ(run.outputs.size(), 1u);
  // (1+2i) i = -2+i; (3-i)(2+2i) = 8+4i.
  expect_near(run.outputs[0].values, {-2, 1, 8, 4}, 1e-6);
  auto abs = run_lowering("aten::abs", {tensor_arg(a)}, {TensorType{DType::kF32, {2}}}, {{0, a}});
  ASSERT_EQ(abs.outputs.size(), 1u);
  expect_near(abs.outputs[0].values, {std::sqrt(5.0), std::sqrt(10.0)}, 1e-6);
}

}  // namespace
}  // namespace torchtpu::testing
