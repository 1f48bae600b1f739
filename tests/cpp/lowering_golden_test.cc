// Golden StableHLO: a representative lowering per family, lowered with fixed arguments and
// compared byte for byte with tests/cpp/golden/<test name>.mlir. A refactor of the builder
// or of a lowering then shows up as a diff of generated programs, which a reviewer reads
// instead of guessing. Each golden module is also compiled on the plugin, so a golden file
// can never hold a program the plugin rejects.
//
// TORCHTPU_GOLDEN_DIR (optional) names the directory, else tests/cpp/golden (set by CMake);
// with TORCHTPU_UPDATE_GOLDEN=1
// the test rewrites its file instead of comparing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;

TensorType f32(Dims d) { return TensorType{DType::kF32, std::move(d)}; }
TensorType i64(Dims d) { return TensorType{DType::kI64, std::move(d)}; }

OpArg typed_tensor(const TensorType& t) { return tensor_arg(HostTensor{t, {}}); }

OpArg list_of(const std::vector<TensorType>& types) {
  OpArg a;
  a.kind = ArgKind::kTensorList;
  a.list_types = types;
  return a;
}

bool updating() {
  const char* v = std::getenv("TORCHTPU_UPDATE_GOLDEN");
  return v != nullptr && std::string(v) == "1";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// TORCHTPU_GOLDEN_DIR when set; otherwise tests/cpp/golden in the source tree (CMake passes
// its absolute path: __FILE__ may be relative when ccache rewrites paths), so running the
// binary directly (outside ctest) compares against the same files.
std::string golden_dir() {
  const char* dir = std::getenv("TORCHTPU_GOLDEN_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return TORCHTPU_GOLDEN_SOURCE_DIR;
}

// Names the first differing line, so a failure reads like the top of a diff.
std::string first_difference(const std::string& want, const std::string& got) {
  std::vector<std::string> w = lines_of(want), g = lines_of(got);
  size_t n = std::max(w.size(), g.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string wl = i < w.size() ? w[i] : "<end of file>";
    const std::string gl = i < g.size() ? g[i] : "<end of module>";
    if (wl != gl) {
      return "line " + std::to_string(i + 1) + ":\n  golden: " + wl + "\n  now:    " + gl;
    }
  }
  return "the texts differ only in trailing bytes";
}

// Lowers `op`, checks the module compiles on the plugin, and compares (or, when updating,
// writes) the golden file named after the running test.
void expect_golden(const std::string& op, const std::vector<OpArg>& args,
                   const std::vector<TensorType>& out_types) {
  const std::string test_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  auto lowered = lowering::lower_op(op, args, out_types);
  ASSERT_TRUE(lowered.ok()) << op << ": " << lowered.status().to_string();
  const std::string& text = lowered->text;

  auto exe = test_client()->compile(text, 0);
  ASSERT_TRUE(exe.ok()) << op << ": the plugin rejects the module: " << exe.status().to_string()
                        << "\n"
                        << text;

  const std::string path = golden_dir() + "/" + test_name + ".mlir";

  if (updating()) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ASSERT_TRUE(out.good()) << "golden: cannot write " << path;
    out << text;
    ASSERT_TRUE(out.good()) << "golden: write failed for " << path;
    return;
  }

  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "golden: " << path << " is missing; generate it with "
                         << "TORCHTPU_UPDATE_GOLDEN=1 ctest -R GoldenLowering." << test_name
                         << " and review the new file";
  std::ostringstream want;
  want << in.rdbuf();
  EXPECT_TRUE(want.str() == text)
      << "golden: " << op << " now lowers to a different module than " << path << " at "
      << first_difference(want.str(), text)
      << "\nIf the change is intended, regenerate with TORCHTPU_UPDATE_GOLDEN=1 and review the "
         "diff.\nFull module now:\n"
      << text;
}

// Elementwise: promotion of a broadcast operand and a runtime alpha.
TEST(GoldenLowering, AddTensorAlphaBroadcast) {
  expect_golden("aten::add.Tensor",
                {typed_tensor(f32({2, 3})), typed_tensor(f32({3})),
                 scalar_arg(ScalarCategory::kInt)},
                {f32({2, 3})});
}

TEST(GoldenLowering, MulScalarIntTensorFloatScalar) {
  expect_golden("aten::mul.Scalar",
                {typed_tensor(i64({4})), scalar_arg(ScalarCategory::kFloat)}, {f32({4})});
}

TEST(GoldenLowering, LtTensorMixedDtypes) {
  expect_golden("aten::lt.Tensor", {typed_tensor(i64({2, 1})), typed_tensor(f32({3}))},
                {TensorType{DType::kBool, {2, 3}}});
}

TEST(GoldenLowering, WhereSelf) {
  expect_golden("aten::where.self",
                {typed_tensor(TensorType{DType::kBool, {2, 3}}), typed_tensor(f32({2, 3})),
                 typed_tensor(f32({3}))},
                {f32({2, 3})});
}

TEST(GoldenLowering, SoftmaxLastDim) {
  expect_golden("aten::_softmax", {typed_tensor(f32({2, 5})), int_arg(-1), bool_arg(false)},
                {f32({2, 5})});
}

TEST(GoldenLowering, GeluTanh) {
  expect_golden("aten::gelu", {typed_tensor(f32({4})), string_arg("tanh")}, {f32({4})});
}

TEST(GoldenLowering, SumDimIntListKeepdim) {
  expect_golden("aten::sum.dim_IntList",
                {typed_tensor(f32({2, 3, 4})), ints_arg({1}), bool_arg(true), none_arg()},
                {f32({2, 1, 4})});
}

TEST(GoldenLowering, MaxDimValuesAndIndices) {
  expect_golden("aten::max.dim", {typed_tensor(f32({3, 4})), int_arg(1), bool_arg(false)},
                {f32({3}), i64({3})});
}

TEST(GoldenLowering, Mm) {
  expect_golden("aten::mm", {typed_tensor(f32({2, 3})), typed_tensor(f32({3, 4}))},
                {f32({2, 4})});
}

TEST(GoldenLowering, Bmm) {
  expect_golden("aten::bmm", {typed_tensor(f32({2, 3, 4})), typed_tensor(f32({2, 4, 5}))},
                {f32({2, 3, 5})});
}

TEST(GoldenLowering, NativeLayerNormAffine) {
  expect_golden("aten::native_layer_norm",
                {typed_tensor(f32({2, 3})), ints_arg({3}), typed_tensor(f32({3})),
                 typed_tensor(f32({3})), double_arg(1e-5)},
                {f32({2, 3}), f32({2, 1}), f32({2, 1})});
}

TEST(GoldenLowering, NllLossForwardMeanIgnoreIndex) {
  // reduction 1 = mean; ignore_index -100 is PyTorch's default.
  expect_golden("aten::nll_loss_forward",
                {typed_tensor(f32({3, 4})), typed_tensor(i64({3})), none_arg(), int_arg(1),
                 int_arg(-100)},
                {f32({}), f32({})});
}

TEST(GoldenLowering, IndexSelectWithBoundsCheck) {
  expect_golden("aten::index_select",
                {typed_tensor(f32({2, 3})), int_arg(1), typed_tensor(i64({2}))}, {f32({2, 2})});
}

TEST(GoldenLowering, CatThreeTensors) {
  expect_golden("aten::cat", {list_of({f32({2, 1}), f32({2, 2}), f32({2, 3})}), int_arg(-1)},
                {f32({2, 6})});
}

TEST(GoldenLowering, UniformInPlace) {
  expect_golden("aten::uniform_",
                {typed_tensor(f32({8})), double_arg(2), double_arg(5), none_arg()}, {f32({8})});
}

TEST(GoldenLowering, Conv2dStridePaddingBias) {
  expect_golden("aten::convolution_overrideable",
                {typed_tensor(f32({1, 2, 5, 5})), typed_tensor(f32({3, 2, 3, 3})),
                 typed_tensor(f32({3})), ints_arg({2, 2}), ints_arg({1, 1}), ints_arg({1, 1}),
                 bool_arg(false), ints_arg({0, 0}), int_arg(1)},
                {f32({1, 3, 3, 3})});
}

}  // namespace
}  // namespace torchtpu::testing
