// Module calls (lowering/module_call.h): a provider's functions spliced into eager and
// graph modules and run on the CPU plugin. The functions here are written by hand in the
// form a JAX export takes after torchtpu.kernels prepares it: private, renamed, generic.
#include <gtest/gtest.h>

#include <string>

#include "lowering/graph.h"
#include "lowering/module_call.h"
#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::GraphNode;
using lowering::GraphSpec;
using lowering::ModuleFunctions;
using V = std::vector<double>;

// a * x + y for x, y f32[n] and the scale a, through a helper function (as JAX's exports
// call private functions of their own).
std::string axpy_functions(const std::string& prefix, int64_t n, double a) {
  std::string t = "tensor<" + std::to_string(n) + "xf32>";
  return "\"func.func\"() <{function_type = (" + t + ", " + t + ") -> " + t + ", sym_name = \"" +
         prefix + "main\", sym_visibility = \"private\"}> ({\n"
         "^bb0(%arg0: " + t + ", %arg1: " + t + "):\n"
         "  %0 = \"stablehlo.constant\"() <{value = dense<" + std::to_string(a) + "> : " + t +
         "}> : () -> " + t + "\n"
         "  %1 = \"func.call\"(%0, %arg0) <{callee = @" + prefix + "mul}> : (" + t + ", " + t +
         ") -> " + t + "\n"
         "  %2 = \"stablehlo.add\"(%1, %arg1) : (" + t + ", " + t + ") -> " + t + "\n"
         "  \"func.return\"(%2) : (" + t + ") -> ()\n"
         "}) : () -> ()\n"
         "\"func.func\"() <{function_type = (" + t + ", " + t + ") -> " + t + ", sym_name = \"" +
         prefix + "mul\", sym_visibility = \"private\"}> ({\n"
         "^bb0(%arg0: " + t + ", %arg1: " + t + "):\n"
         "  %0 = \"stablehlo.multiply\"(%arg0, %arg1) : (" + t + ", " + t + ") -> " + t + "\n"
         "  \"func.return\"(%0) : (" + t + ") -> ()\n"
         "}) : () -> ()\n";
}

int g_provider_calls = 0;

// test::axpy(Tensor x, Tensor y, float a): one exported module per (n, a).
base::StatusOr<ModuleFunctions> provider(const std::string& op, const std::vector<OpArg>& args,
                                         const std::vector<TensorType>& out_types) {
  ++g_provider_calls;
  if (op == "test::failing") return base::invalid_argument("test::failing: no export");
  if (args.size() != 3 || args[0].kind != ArgKind::kTensor || out_types.size() != 1) {
    return base::invalid_argument(op + ": unexpected call");
  }
  int64_t n = args[0].type.dims.at(0);
  double a = args[2].double_value;
  std::string prefix = "jax_axpy" + std::to_string(n) + "_" + std::to_string(int(a)) + "_";
  return ModuleFunctions{prefix + "main", axpy_functions(prefix, n, a)};
}

class ModuleCall : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    lowering::set_module_provider(provider);
    ASSERT_TRUE(lowering::register_module_call("test::axpy").ok());
    ASSERT_TRUE(lowering::register_module_call("test::failing").ok());
  }
};

TEST_F(ModuleCall, EagerModuleRunsTheSplicedFunctions) {
  HostTensor x = arange(DType::kF32, {4});
  HostTensor y = arange(DType::kF32, {4}, 10);
  TensorType out{DType::kF32, {4}};
  auto run = run_lowering("test::axpy", {tensor_arg(x), tensor_arg(y), double_arg(3)}, {out},
                          {{0, x}, {1, y}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{10, 14, 18, 22}));
  EXPECT_NE(run.text.find("\"func.call\""), std::string::npos) << run.text;
}

TEST_F(ModuleCall, GraphSplicesEachModuleOnce) {
  // Two calls of one module (n = 3, a = 2) and one of another (a = 5) in one graph.
  GraphSpec spec;
  spec.inputs = {TensorType{DType::kF32, {3}}, TensorType{DType::kF32, {3}}};
  auto call = [&](int x, int y, double a, int out) {
    GraphNode n;
    n.op = "test::axpy";
    n.args = {tensor_arg(HostTensor{spec.inputs[0], {}}),
              tensor_arg(HostTensor{spec.inputs[1], {}}), double_arg(a)};
    n.tensor_refs = {x, y, -1};
    n.list_refs = {{}, {}, {}};
    n.scalars.resize(3);
    n.out_types = {TensorType{DType::kF32, {3}}};
    n.out_ids = {out};
    spec.nodes.push_back(n);
  };
  call(0, 1, 2, 2);  // v2 = 2 x + y
  call(2, 1, 2, 3);  // v3 = 2 v2 + y
  call(3, 0, 5, 4);  // v4 = 5 v3 + x
  spec.outputs = {4};
  auto lowered = lowering::lower_graph(spec);
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  const std::string& text = lowered->text;
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t p = text.find(s); p != std::string::npos; p = text.find(s, p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("sym_name = \"jax_axpy3_2_main\""), 1u) << text;
  EXPECT_EQ(count("sym_name = \"jax_axpy3_5_main\""), 1u) << text;
  EXPECT_EQ(count("callee = @jax_axpy3_2_main"), 2u) << text;
  HostTensor x{spec.inputs[0], {1, 2, 3}};
  HostTensor y{spec.inputs[1], {10, 20, 30}};
  std::vector<HostTensor> out = run_module(text, {x, y});
  ASSERT_EQ(out.size(), 1u);
  // v2 = (12, 24, 36), v3 = (34, 68, 102), v4 = (171, 342, 513)
  EXPECT_EQ(out[0].values, (V{171, 342, 513}));
}

TEST_F(ModuleCall, ProviderErrorsAreTheLoweringsErrors) {
  HostTensor x = arange(DType::kF32, {2});
  auto lowered = lowering::lower_op("test::failing", {tensor_arg(x), tensor_arg(x), double_arg(1)},
                                    {TensorType{DType::kF32, {2}}});
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().message().find("test::failing: no export"), std::string::npos);
}

TEST_F(ModuleCall, RegistrationRefusesTakenAndUnqualifiedNames) {
  EXPECT_FALSE(lowering::register_module_call("aten::add.Tensor").ok());
  EXPECT_FALSE(lowering::register_module_call("axpy").ok());
  EXPECT_TRUE(lowering::register_module_call("test::axpy").ok());  // again: no-op
  EXPECT_TRUE(lowering::is_module_call("test::axpy"));
  EXPECT_FALSE(lowering::is_module_call("test::other"));
  EXPECT_TRUE(lowering::accepts_complex("test::axpy"));
}

}  // namespace
}  // namespace torchtpu::testing
