// Linear-algebra lowerings (linalg_factor.cc, linalg_decomp.cc, linalg_eigh.cc,
// linalg_svd.cc) and Builder::while_loop, run on the CPU plugin. Expected values were
// worked by hand or computed with NumPy (LAPACK) in float64 from the same inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::Value;

TensorType f64(Dims d) { return TensorType{DType::kF64, std::move(d)}; }
TensorType i32(Dims d) { return TensorType{DType::kI32, std::move(d)}; }

void expect_values(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

void expect_values(const HostTensor& got, const std::vector<double>& want, double tol) {
  expect_values(got.values, want, tol);
}

// 3x3 symmetric positive-definite.
HostTensor spd3() { return HostTensor{f64({3, 3}), {4, 2, 0.6, 2, 5, 1, 0.6, 1, 3}}; }
// Needs row exchanges in both columns: LU = [[3, 4, 1], [0, 1, 5], [1/3, 2/3, -11/3]].
HostTensor pivoting3() { return HostTensor{f64({3, 3}), {1, 2, 0, 3, 4, 1, 0, 1, 5}}; }

TEST(LinalgLowering, WhileLoopCarriesItsState) {
  lowering::Builder b;
  Value x = b.param(TensorType{DType::kF64, {2}});
  auto out = b.while_loop(
      {b.constant_i64(0, DType::kI64), x},
      [](lowering::Builder& lb, const std::vector<Value>& s) {
        return std::vector<Value>{lb.compare(s[0], lb.constant_i64(3, DType::kI64), "LT")};
      },
      [](lowering::Builder& lb, const std::vector<Value>& s) {
        Value doubled = lb.add(s[1], s[1]);
        return std::vector<Value>{lb.add(s[0], lb.constant_i64(1, DType::kI64)), doubled};
      });
  std::string text = b.finish({out[1], out[0]});
  EXPECT_NE(text.find("\"stablehlo.while\""), std::string::npos) << text;
  auto results = run_module(text, {HostTensor{f64({2}), {1.5, -2}}});
  ASSERT_EQ(results.size(), 2u);
  expect_values(results[0], {12, -16}, 0);
  expect_values(results[1], {3}, 0);
}

TEST(LinalgLowering, CholeskyExFactorsAndReportsTheFailingMinor) {
  auto run = run_lowering("aten::linalg_cholesky_ex",
                          {tensor_arg(spd3()), bool_arg(false), bool_arg(false)},
                          {f64({3, 3}), i32({})}, {{0, spd3()}});
  ASSERT_EQ(run.outputs.size(), 2u);
  expect_values(run.outputs[0], {2, 0, 0, 1, 2, 0, 0.3, 0.35, 1.6695807857064}, 1e-12);
  expect_values(run.outputs[1], {0}, 0);
  // The leading minor of order 2 is 4 * 1 - 2 * 2 = 0: not positive-definite.
  HostTensor bad{f64({3, 3}), {4, 2, 0.6, 2, 1, 1, 0.6, 1, 3}};
  auto failed = run_lowering("aten::linalg_cholesky_ex",
                             {tensor_arg(bad), bool_arg(false), bool_arg(true)},
                             {f64({3, 3}), i32({})}, {{0, bad}});
  ASSERT_EQ(failed.outputs.size(), 2u);
  expect_values(failed.outputs[1], {2}, 0);
  ASSERT_EQ(failed.checks.size(), 1u);  // check_errors=True: a LinAlgError data check
  EXPECT_FALSE(failed.checks[0]);
}

TEST(LinalgLowering, CholeskyUpperIsTheTransposeAndReadsTheUpperTriangle) {
  HostTensor a = spd3();
  a.values[3] = a.values[6] = a.values[7] = 99;  // junk below the diagonal
  auto run = run_lowering("aten::linalg_cholesky_ex",
                          {tensor_arg(a), bool_arg(true), bool_arg(false)},
                          {f64({3, 3}), i32({})}, {{0, a}});
  ASSERT_EQ(run.outputs.size(), 2u);
  expect_values(run.outputs[0], {2, 1, 0.3, 0, 2, 0.35, 0, 0, 1.6695807857064}, 1e-12);
}

TEST(LinalgLowering, LuFactorPivotsLikeLapack) {
  HostTensor a = pivoting3();
  auto run = run_lowering("aten::linalg_lu_factor_ex",
                          {tensor_arg(a), bool_arg(true), bool_arg(false)},
                          {f64({3, 3}), i32({3}), i32({})}, {{0, a}});
  ASSERT_EQ(run.outputs.size(), 3u);
  expect_values(run.outputs[0], {3, 4, 1, 0, 1, 5, 1.0 / 3, 2.0 / 3, -11.0 / 3}, 1e-14);
  expect_values(run.outputs[1], {2, 3, 3}, 0);
  expect_values(run.outputs[2], {0}, 0);
}

TEST(LinalgLowering, LuFactorOfASingularMatrixReportsTheZeroPivot) {
  HostTensor a{f64({3, 3}), {1, 2, 3, 2, 4, 6, 1, 0, 1}};  // row 1 = 2 * row 0
  auto run = run_lowering("aten::linalg_lu_factor_ex",
                          {tensor_arg(a), bool_arg(true), bool_arg(false)},
                          {f64({3, 3}), i32({3}), i32({})}, {{0, a}});
  ASSERT_EQ(run.outputs.size(), 3u);
  // Pivots 2 (row [2, 4, 6]), then [1, 0, 1] - [1, 2, 3] / 2 = [0, -2, -2]; U[2, 2] = 0.
  expect_values(run.outputs[1], {2, 3, 3}, 0);
  expect_values(run.outputs[2], {3}, 0);
}

TEST(LinalgLowering, SolveExAndLuSolveSolve) {
  HostTensor a = pivoting3();
  HostTensor rhs{f64({3, 1}), {1, 2, 3}};
  auto run = run_lowering("aten::_linalg_solve_ex",
                          {tensor_arg(a), tensor_arg(rhs), bool_arg(true), bool_arg(false)},
                          {f64({3, 1}), f64({3, 3}), i32({3}), i32({})}, {{0, a}, {1, rhs}});
  ASSERT_EQ(run.outputs.size(), 4u);
  expect_values(run.outputs[0], {-5.0 / 11, 8.0 / 11, 5.0 / 11}, 1e-14);
  // A^T x = b from the same factors (adjoint).
  HostTensor lu = run.outputs[1], piv = run.outputs[2];
  auto adj = run_lowering("aten::linalg_lu_solve",
                          {tensor_arg(lu), tensor_arg(piv), tensor_arg(rhs), bool_arg(true),
                           bool_arg(true)},
                          {f64({3, 1})}, {{0, lu}, {1, piv}, {2, rhs}});
  // A^T = [[1, 3, 0], [2, 4, 1], [0, 1, 5]].
  expect_values(output_values(adj, DType::kF64), {2.0 / 11, 3.0 / 11, 6.0 / 11}, 1e-14);
}

TEST(LinalgLowering, InvExAndSolveTriangular) {
  HostTensor a = pivoting3();
  auto inv = run_lowering("aten::linalg_inv_ex", {tensor_arg(a), bool_arg(false)},
                          {f64({3, 3}), i32({})}, {{0, a}});
  ASSERT_EQ(inv.outputs.size(), 2u);
  // A^-1 = adj(A) / det(A), det(A) = -11.
  expect_values(inv.outputs[0],
                {19.0 / -11, -10.0 / -11, 2.0 / -11, -15.0 / -11, 5.0 / -11, -1.0 / -11,
                 3.0 / -11, -1.0 / -11, -2.0 / -11},
                1e-14);
  HostTensor l{f64({2, 2}), {2, 99, 1, 4}};  // 99 is above the diagonal: never read
  HostTensor rhs{f64({2, 1}), {2, 9}};
  auto tri = run_lowering("aten::linalg_solve_triangular",
                          {tensor_arg(l), tensor_arg(rhs), bool_arg(false), bool_arg(true),
                           bool_arg(false)},
                          {f64({2, 1})}, {{0, l}, {1, rhs}});
  expect_values(output_values(tri, DType::kF64), {1, 2}, 1e-15);
}

TEST(LinalgLowering, QrMatchesLapack) {
  HostTensor a = spd3();
  auto run = run_lowering("aten::linalg_qr", {tensor_arg(a), string_arg("reduced")},
                          {f64({3, 3}), f64({3, 3})}, {{0, a}});
  ASSERT_EQ(run.outputs.size(), 2u);
  expect_values(run.outputs[0],
                {-0.88648441, 0.45866057, -0.06144806, -0.44324221, -0.87973494, -0.17205458,
                 -0.13297266, -0.12528733, 0.98316904},
                1e-8);
  expect_values(run.outputs[1],
                {-4.51220567, -4.12215253, -1.37405084, 0, -3.6066409, -0.98040059, 0, 0,
                 2.74058369},
                1e-8);
}

TEST(LinalgLowering, EighGivesAscendingEigenvaluesAndOrthonormalVectors) {
  HostTensor a = spd3();
  auto run = run_lowering("aten::_linalg_eigh", {tensor_arg(a), string_arg("L"), bool_arg(true)},
                          {f64({3}), f64({3, 3})}, {{0, a}});
  ASSERT_EQ(run.outputs.size(), 2u);
  expect_values(run.outputs[0], {2.3724689848089815, 2.722508207322903, 6.905022807868116},
                1e-13);
  const std::vector<double>& v = run.outputs[1].values;  // columns are eigenvectors
  const std::vector<double>& w = run.outputs[0].values;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      double recon = 0, gram = 0;
      for (int k = 0; k < 3; ++k) {
        recon += v[i * 3 + k] * w[k] * v[j * 3 + k];
        gram += v[k * 3 + i] * v[k * 3 + j];
      }
      EXPECT_NEAR(recon, a.values[i * 3 + j], 1e-13) << i << "," << j;
      EXPECT_NEAR(gram, i == j ? 1 : 0, 1e-14) << i << "," << j;
    }
  }
}

TEST(LinalgLowering, SvdOfATallMatrix) {
  HostTensor m{f64({3, 2}), {1, 2, 3, 4, 5, 6}};
  auto run = run_lowering("aten::_linalg_svd",
                          {tensor_arg(m), bool_arg(false), bool_arg(true), none_arg()},
                          {f64({3, 2}), f64({2}), f64({2, 2})}, {{0, m}});
  ASSERT_EQ(run.outputs.size(), 3u);
  expect_values(run.outputs[1], {9.525518091565107, 0.5143005806586443}, 1e-13);
  const std::vector<double>& u = run.outputs[0].values;
  const std::vector<double>& s = run.outputs[1].values;
  const std::vector<double>& vh = run.outputs[2].values;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) {
      double recon = 0;
      for (int k = 0; k < 2; ++k) recon += u[i * 2 + k] * s[k] * vh[k * 2 + j];
      EXPECT_NEAR(recon, m.values[i * 2 + j], 1e-13) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace torchtpu::testing
