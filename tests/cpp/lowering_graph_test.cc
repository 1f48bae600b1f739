// Graph-mode lowerings (graph_ops.cc) run on the CPU plugin and compared with
// hand-computed values.
#include <gtest/gtest.h>

#include "lowering/graph.h"
#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;
using V = std::vector<double>;

HostTensor arange(DType t, Dims dims, double start = 0) {
  HostTensor h{{t, dims}, {}};
  for (int64_t i = 0; i < h.type.num_elements(); ++i) h.values.push_back(start + i);
  return h;
}

TensorType type(DType t, Dims dims) { return TensorType{t, std::move(dims)}; }

// Runs a one-tensor op (arg 0) with structural args and returns its only output.
HostTensor run1(const std::string& op, const HostTensor& x, std::vector<OpArg> rest,
                TensorType out) {
  std::vector<OpArg> args{tensor_arg(x)};
  args.insert(args.end(), rest.begin(), rest.end());
  auto run = run_lowering(op, args, {out}, {{0, x}});
  EXPECT_EQ(run.outputs.size(), 1u) << op;
  if (run.outputs.empty()) return HostTensor{};
  EXPECT_EQ(run.outputs[0].type, out) << op;
  return run.outputs[0];
}

OpArg dtype_arg(DType t) {
  OpArg a;
  a.kind = ArgKind::kDType;
  a.dtype = t;
  return a;
}

TEST(GraphLowering, ViewUnsqueezeSqueezeKeepRowMajorOrder) {
  HostTensor x = arange(DType::kF32, {2, 3});
  EXPECT_EQ(run1("aten::view", x, {ints_arg({3, 2})}, type(DType::kF32, {3, 2})).values, x.values);
  EXPECT_EQ(run1("aten::unsqueeze", x, {int_arg(-1)}, type(DType::kF32, {2, 3, 1})).values,
            x.values);
  HostTensor y = arange(DType::kI64, {1, 3, 1});
  EXPECT_EQ(run1("aten::squeeze.dims", y, {ints_arg({0, 2})}, type(DType::kI64, {3})).values,
            (V{0, 1, 2}));
  EXPECT_EQ(run1("aten::alias", y, {}, y.type).values, y.values);
}

TEST(GraphLowering, PermuteTransposeAndT) {
  HostTensor x = arange(DType::kF32, {2, 1, 3});
  EXPECT_EQ(run1("aten::permute", x, {ints_arg({-1, 0, 1})}, type(DType::kF32, {3, 2, 1})).values,
            (V{0, 3, 1, 4, 2, 5}));
  HostTensor m = arange(DType::kI32, {2, 3});
  EXPECT_EQ(run1("aten::transpose.int", m, {int_arg(0), int_arg(-1)}, type(DType::kI32, {3, 2}))
                .values,
            (V{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(run1("aten::t", m, {}, type(DType::kI32, {3, 2})).values, (V{0, 3, 1, 4, 2, 5}));
  HostTensor v = arange(DType::kF32, {3});
  EXPECT_EQ(run1("aten::t", v, {}, v.type).values, v.values);
}

TEST(GraphLowering, ExpandBroadcastsSizeOneAndLeadingDims) {
  HostTensor x = arange(DType::kF32, {3, 1});
  EXPECT_EQ(run1("aten::expand", x, {ints_arg({2, -1, 2}), bool_arg(false)},
                 type(DType::kF32, {2, 3, 2}))
                .values,
            (V{0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}));
}

TEST(GraphLowering, SliceClampsStartAndSteps) {
  HostTensor x = arange(DType::kF32, {10});
  // x[-8::3] -> 2, 5, 8
  EXPECT_EQ(run1("aten::slice.Tensor", x, {int_arg(0), int_arg(-8), none_arg(), int_arg(3)},
                 type(DType::kF32, {3}))
                .values,
            (V{2, 5, 8}));
  HostTensor m = arange(DType::kI64, {2, 4});
  // m[:, 1:100:2] -> columns 1 and 3
  EXPECT_EQ(run1("aten::slice.Tensor", m, {int_arg(1), int_arg(1), int_arg(100), int_arg(2)},
                 type(DType::kI64, {2, 2}))
                .values,
            (V{1, 3, 5, 7}));
  // An empty slice is an empty value.
  EXPECT_EQ(run1("aten::slice.Tensor", m, {int_arg(1), int_arg(9), none_arg(), int_arg(1)},
                 type(DType::kI64, {2, 0}))
                .values,
            (V{}));
}

TEST(GraphLowering, SelectWrapsNegativeIndex) {
  HostTensor m = arange(DType::kF32, {2, 3});
  EXPECT_EQ(run1("aten::select.int", m, {int_arg(1), int_arg(-1)}, type(DType::kF32, {2})).values,
            (V{2, 5}));
  EXPECT_EQ(run1("aten::select.int", m, {int_arg(0), int_arg(1)}, type(DType::kF32, {3})).values,
            (V{3, 4, 5}));
  EXPECT_FALSE(lowering::lower_op("aten::select.int", {tensor_arg(m), int_arg(0), int_arg(2)},
                                  {type(DType::kF32, {3})})
                   .ok());
}

TEST(GraphLowering, SplitWithSizesSplitAndUnbind) {
  HostTensor x = arange(DType::kF32, {5});
  auto run = run_lowering("aten::split_with_sizes", {tensor_arg(x), ints_arg({2, 3}), int_arg(0)},
                          {type(DType::kF32, {2}), type(DType::kF32, {3})}, {{0, x}});
  ASSERT_EQ(run.outputs.size(), 2u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 1}));
  EXPECT_EQ(run.outputs[1].values, (V{2, 3, 4}));

  HostTensor m = arange(DType::kI64, {2, 5});
  run = run_lowering("aten::split.Tensor", {tensor_arg(m), int_arg(2), int_arg(-1)},
                     {type(DType::kI64, {2, 2}), type(DType::kI64, {2, 2}),
                      type(DType::kI64, {2, 1})},
                     {{0, m}});
  ASSERT_EQ(run.outputs.size(), 3u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 1, 5, 6}));
  EXPECT_EQ(run.outputs[1].values, (V{2, 3, 7, 8}));
  EXPECT_EQ(run.outputs[2].values, (V{4, 9}));

  HostTensor u = arange(DType::kF32, {2, 3});
  run = run_lowering("aten::unbind.int", {tensor_arg(u), int_arg(1)},
                     {type(DType::kF32, {2}), type(DType::kF32, {2}), type(DType::kF32, {2})},
                     {{0, u}});
  ASSERT_EQ(run.outputs.size(), 3u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 3}));
  EXPECT_EQ(run.outputs[1].values, (V{1, 4}));
  EXPECT_EQ(run.outputs[2].values, (V{2, 5}));
}

TEST(GraphLowering, AsStridedReadsDenseRowMajorBuffer) {
  HostTensor x = arange(DType::kF32, {2, 3});
  // out[i][j] = flat[1 + i + 2j]: a gather.
  EXPECT_EQ(run1("aten::as_strided", x, {ints_arg({2, 2}), ints_arg({1, 2}), int_arg(1)},
                 type(DType::kF32, {2, 2}))
                .values,
            (V{1, 3, 2, 4}));
  // A contiguous window: a slice.
  EXPECT_EQ(run1("aten::as_strided", x, {ints_arg({2, 2}), ints_arg({2, 1}), int_arg(2)},
                 type(DType::kF32, {2, 2}))
                .values,
            (V{2, 3, 4, 5}));
  // Stride 0 repeats; no offset given means 0.
  EXPECT_EQ(run1("aten::as_strided", x, {ints_arg({2, 3}), ints_arg({0, 1}), none_arg()},
                 type(DType::kF32, {2, 3}))
                .values,
            (V{0, 1, 2, 0, 1, 2}));
  EXPECT_FALSE(lowering::lower_op("aten::as_strided",
                                  {tensor_arg(x), ints_arg({2, 2}), ints_arg({3, 1}), int_arg(2)},
                                  {type(DType::kF32, {2, 2})})
                   .ok());
}

TEST(GraphLowering, CopyBroadcastsAndConvertsSource) {
  HostTensor dst = arange(DType::kI64, {2, 3});
  HostTensor src{{DType::kF32, {3}}, {1.5, -2.5, 3}};
  auto run = run_lowering("aten::copy", {tensor_arg(dst), tensor_arg(src), bool_arg(false)},
                          {dst.type}, {{0, dst}, {1, src}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{1, -2, 3, 1, -2, 3}));
}

TEST(GraphLowering, EmptyIsZeros) {
  std::vector<OpArg> args{ints_arg({2, 2}), none_arg(), none_arg(),
                          none_arg(), none_arg(), none_arg()};
  auto run = run_lowering("aten::empty.memory_format", args, {type(DType::kF32, {2, 2})}, {});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 0, 0, 0}));
  run = run_lowering("aten::empty_strided",
                     {ints_arg({0, 3}), ints_arg({3, 1}), none_arg(), none_arg(), none_arg(),
                      none_arg()},
                     {type(DType::kI64, {0, 3})}, {});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_TRUE(run.outputs[0].values.empty());
}

// (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
std::vector<OpArg> conv_args(const HostTensor& x, const HostTensor& w, const HostTensor& bias) {
  return {tensor_arg(x), tensor_arg(w), tensor_arg(bias), ints_arg({1, 1}), ints_arg({0, 0}),
          ints_arg({1, 1}), bool_arg(false), ints_arg({0, 0}), int_arg(1)};
}

TEST(GraphLowering, ConvolutionLowersLikeOverrideable) {
  HostTensor x = arange(DType::kF32, {1, 1, 3, 3});
  HostTensor w{{DType::kF32, {1, 1, 2, 2}}, {1, 1, 1, 1}};
  HostTensor bias{{DType::kF32, {1}}, {10}};
  auto run = run_lowering("aten::convolution", conv_args(x, w, bias),
                          {type(DType::kF32, {1, 1, 2, 2})},
                          {{0, x}, {1, w}, {2, bias}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{18, 22, 30, 34}));
}

TEST(GraphLowering, ConvolutionBackwardDropsBiasSizes) {
  HostTensor gy{{DType::kF32, {1, 1, 2, 2}}, {1, 1, 1, 1}};
  HostTensor x = arange(DType::kF32, {1, 1, 3, 3});
  HostTensor w{{DType::kF32, {1, 1, 2, 2}}, {1, 1, 1, 1}};
  auto args = [&](Dims mask) {
    return std::vector<OpArg>{tensor_arg(gy), tensor_arg(x), tensor_arg(w), ints_arg({1}),
                              ints_arg({1, 1}), ints_arg({0, 0}), ints_arg({1, 1}), bool_arg(false),
                              ints_arg({0, 0}), int_arg(1), ints_arg(std::move(mask))};
  };
  auto run = run_lowering("aten::convolution_backward", args({1, 1, 1}),
                          {x.type, w.type, type(DType::kF32, {1})}, {{0, gy}, {1, x}, {2, w}});
  ASSERT_EQ(run.outputs.size(), 3u);
  EXPECT_EQ(run.outputs[0].values, (V{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  EXPECT_EQ(run.outputs[1].values, (V{8, 12, 20, 24}));
  EXPECT_EQ(run.outputs[2].values, (V{4}));
  // A graph lists only the results the mask asks for.
  run = run_lowering("aten::convolution_backward", args({0, 1, 0}), {w.type},
                     {{0, gy}, {1, x}, {2, w}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{8, 12, 20, 24}));
}

TEST(GraphLowering, EmbeddingGathersRowsAndChecksIndices) {
  HostTensor w = arange(DType::kF32, {3, 2});
  HostTensor idx{{DType::kI64, {2, 2}}, {2, 0, 1, 2}};
  std::vector<OpArg> args{tensor_arg(w), tensor_arg(idx), int_arg(-1), bool_arg(false),
                          bool_arg(false)};
  auto run =
      run_lowering("aten::embedding", args, {type(DType::kF32, {2, 2, 2})}, {{0, w}, {1, idx}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{4, 5, 0, 1, 2, 3, 4, 5}));
  ASSERT_EQ(run.checks.size(), 1u);
  EXPECT_TRUE(run.checks[0]);
  HostTensor bad{{DType::kI64, {2, 2}}, {2, 0, 3, 2}};
  run = run_lowering("aten::embedding", args, {type(DType::kF32, {2, 2, 2})}, {{0, w}, {1, bad}});
  ASSERT_EQ(run.checks.size(), 1u);
  EXPECT_FALSE(run.checks[0]);
}

TEST(GraphLowering, BatchNormNoTrainingUsesRunningStats) {
  HostTensor x{{DType::kF32, {2, 2}}, {1, 2, 3, 4}};
  HostTensor w{{DType::kF32, {2}}, {1, 2}};
  HostTensor b{{DType::kF32, {2}}, {0, 1}};
  HostTensor rm{{DType::kF32, {2}}, {1, 2}};
  HostTensor rv{{DType::kF32, {2}}, {4, 1}};
  std::vector<OpArg> args{tensor_arg(x), tensor_arg(w), tensor_arg(b), tensor_arg(rm),
                          tensor_arg(rv), double_arg(0.1), double_arg(0)};
  auto run = run_lowering("aten::_native_batch_norm_legit_no_training", args,
                          {x.type, type(DType::kF32, {0}), type(DType::kF32, {0})},
                          {{0, x}, {1, w}, {2, b}, {3, rm}, {4, rv}});
  ASSERT_EQ(run.outputs.size(), 3u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 1, 1, 5}));
}

TEST(GraphLowering, BatchNormFunctionalUpdatesRunningStats) {
  HostTensor x{{DType::kF32, {2, 2}}, {1, 2, 3, 6}};
  HostTensor rm{{DType::kF32, {2}}, {0, 0}};
  HostTensor rv{{DType::kF32, {2}}, {1, 1}};
  auto args = [&](bool training) {
    return std::vector<OpArg>{tensor_arg(x), none_arg(), none_arg(), tensor_arg(rm), tensor_arg(rv),
                              bool_arg(training), double_arg(0.5), double_arg(0)};
  };
  TensorType stat = type(DType::kF32, {2});
  auto run = run_lowering("aten::_native_batch_norm_legit_functional", args(true),
                          {x.type, stat, stat, stat, stat}, {{0, x}, {3, rm}, {4, rv}});
  ASSERT_EQ(run.outputs.size(), 5u);
  EXPECT_EQ(run.outputs[0].values, (V{-1, -1, 1, 1}));
  EXPECT_EQ(run.outputs[1].values, (V{2, 4}));
  EXPECT_EQ(run.outputs[2].values, (V{1, 0.5}));
  // mean 0.5 * 0 + 0.5 * {2, 4}; variance 0.5 * 1 + 0.5 * unbiased {2, 8}.
  EXPECT_EQ(run.outputs[3].values, (V{1, 2}));
  EXPECT_EQ(run.outputs[4].values, (V{1.5, 4.5}));
  run = run_lowering("aten::_native_batch_norm_legit_functional", args(false),
                     {x.type, type(DType::kF32, {0}), type(DType::kF32, {0}), stat, stat},
                     {{0, x}, {3, rm}, {4, rv}});
  ASSERT_EQ(run.outputs.size(), 5u);
  EXPECT_EQ(run.outputs[0].values, (V{1, 2, 3, 6}));
  EXPECT_EQ(run.outputs[3].values, rm.values);
  EXPECT_EQ(run.outputs[4].values, rv.values);
}

// Factories and conversions (graph mode only; eager leaves them to composite kernels).
class GraphLoweringFactories : public ::testing::Test {};

std::vector<OpArg> factory_options() { return {none_arg(), none_arg(), none_arg(), none_arg()}; }

TEST_F(GraphLoweringFactories, FullAndScalarTensorUseRuntimeScalar) {
  std::vector<OpArg> args{ints_arg({2, 2}), scalar_arg(ScalarCategory::kInt)};
  for (const OpArg& a : factory_options()) args.push_back(a);
  auto run = run_lowering("aten::full", args, {type(DType::kI64, {2, 2})}, {}, {{1, 7}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{7, 7, 7, 7}));

  HostTensor x = arange(DType::kF32, {3});
  std::vector<OpArg> like{tensor_arg(x), scalar_arg(ScalarCategory::kFloat)};
  for (const OpArg& a : factory_options()) like.push_back(a);
  like.push_back(none_arg());
  run = run_lowering("aten::full_like", like, {x.type}, {{0, x}}, {{1, -0.5}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{-0.5, -0.5, -0.5}));

  std::vector<OpArg> st{scalar_arg(ScalarCategory::kFloat)};
  for (const OpArg& a : factory_options()) st.push_back(a);
  run = run_lowering("aten::scalar_tensor", st, {type(DType::kF32, {})}, {}, {{0, 2.5}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{2.5}));
}

TEST_F(GraphLoweringFactories, ZerosOnesAndLikes) {
  std::vector<OpArg> args{ints_arg({3})};
  for (const OpArg& a : factory_options()) args.push_back(a);
  auto run = run_lowering("aten::ones", args, {type(DType::kBool, {3})}, {});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{1, 1, 1}));
  HostTensor x = arange(DType::kF32, {2}, 5);
  std::vector<OpArg> like{tensor_arg(x)};
  for (const OpArg& a : factory_options()) like.push_back(a);
  like.push_back(none_arg());
  run = run_lowering("aten::zeros_like", like, {type(DType::kI64, {2})}, {{0, x}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 0}));
}

TEST_F(GraphLoweringFactories, ArangeOverloads) {
  std::vector<OpArg> step_args{scalar_arg(ScalarCategory::kInt), scalar_arg(ScalarCategory::kInt),
                               scalar_arg(ScalarCategory::kFloat)};
  for (const OpArg& a : factory_options()) step_args.push_back(a);
  auto run = run_lowering("aten::arange.start_step", step_args, {type(DType::kF32, {3})}, {},
                          {{0, 1}, {1, 2}, {2, 0.5}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{1, 1.5, 2}));

  std::vector<OpArg> start_args{scalar_arg(ScalarCategory::kInt), scalar_arg(ScalarCategory::kInt)};
  for (const OpArg& a : factory_options()) start_args.push_back(a);
  run = run_lowering("aten::arange.start", start_args, {type(DType::kI64, {3})}, {},
                     {{0, -2}, {1, 1}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{-2, -1, 0}));

  std::vector<OpArg> end_args{scalar_arg(ScalarCategory::kInt)};
  for (const OpArg& a : factory_options()) end_args.push_back(a);
  run = run_lowering("aten::arange", end_args, {type(DType::kI64, {4})}, {}, {{0, 4}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 1, 2, 3}));
}

TEST_F(GraphLoweringFactories, ToCopyConvertsAndCloneKeepsValues) {
  HostTensor x{{DType::kF32, {3}}, {1.75, -1.75, 0}};
  std::vector<OpArg> args{tensor_arg(x), dtype_arg(DType::kI64), none_arg(), none_arg(), none_arg(),
                          bool_arg(false), none_arg()};
  auto to_copy = [&](DType t) {
    auto run = run_lowering("aten::_to_copy", args, {type(t, {3})}, {{0, x}});
    return run.outputs.empty() ? V{} : run.outputs[0].values;
  };
  EXPECT_EQ(to_copy(DType::kI64), (V{1, -1, 0}));
  args[1] = dtype_arg(DType::kBool);
  EXPECT_EQ(to_copy(DType::kBool), (V{1, 1, 0}));
  EXPECT_EQ(run1("aten::clone", x, {none_arg()}, x.type).values, x.values);
}

// One graph node of `spec` (or of one of its regions): `op` over value ids `refs` (-1 for a
// non-tensor argument), defining `outs` of types `types`.
lowering::GraphNode graph_node(const std::string& op, std::vector<OpArg> args,
                               std::vector<int> refs, std::vector<TensorType> types,
                               std::vector<int> outs) {
  lowering::GraphNode n;
  n.op = op;
  n.args = std::move(args);
  n.tensor_refs = std::move(refs);
  n.list_refs.resize(n.args.size());
  n.scalars.resize(n.args.size());
  n.out_types = std::move(types);
  n.out_ids = std::move(outs);
  return n;
}

TEST(GraphLowering, EachCheckNamesTheNodeThatRequiredIt) {
  // v2 = neg(x); v3 = index_select(v2, 0, i); v4 = index_select(x, 0, i): checks of nodes
  // 1 and 2, results after the outputs, failing where the index is out of range.
  lowering::GraphSpec spec;
  HostTensor x = arange(DType::kF32, {4});
  HostTensor i{type(DType::kI64, {2}), {1, 7}};
  spec.inputs = {x.type, i.type};
  auto node = [&](const std::string& op, std::vector<OpArg> args, std::vector<int> refs,
                  int out) {
    spec.nodes.push_back(graph_node(op, std::move(args), std::move(refs),
                                    {op == "aten::neg" ? x.type : type(DType::kF32, {2})},
                                    {out}));
  };
  node("aten::neg", {tensor_arg(x)}, {0}, 2);
  node("aten::index_select", {tensor_arg(x), int_arg(0), tensor_arg(i)}, {2, -1, 1}, 3);
  node("aten::index_select", {tensor_arg(x), int_arg(0), tensor_arg(i)}, {0, -1, 1}, 4);
  spec.outputs = {3, 4};
  auto lowered = lowering::lower_graph(spec, "checks");
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  EXPECT_EQ(lowered->check_nodes, (std::vector<int>{1, 2}));
  ASSERT_EQ(lowered->check_messages.size(), 2u);
  // The checks come back as one i1 vector after the outputs, one flag per check.
  std::vector<HostTensor> out = run_module(lowered->text, {x, i});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].type.dims, (std::vector<int64_t>{2}));
  EXPECT_EQ(out[2].values, (V{0, 0}));  // node 1's check failed
  i.values = {1, 3};
  out = run_module(lowered->text, {x, i});
  EXPECT_EQ(out[2].values, (V{1, 1}));
}

// Runs a lowered graph: graph inputs from `inputs`, every scalar parameter `scalar`.
std::vector<HostTensor> run_graph(const lowering::LoweredGraph& g,
                                  const std::vector<HostTensor>& inputs, double scalar = 1) {
  std::vector<HostTensor> params;
  for (const lowering::GraphParam& p : g.params) {
    params.push_back(p.source == lowering::GraphParam::Source::kInput
                         ? inputs.at(p.input_index)
                         : HostTensor{TensorType{p.dtype, {}}, {scalar}});
  }
  return run_module(g.text, params);
}

TEST(GraphLowering, CondRunsTheBranchItsPredicatePicksAndReportsThatBranchsChecks) {
  // cond(pred, x, i): true branch index_select(x, 0, i) (a checked index), false branch
  // x[0:2]. The branch's check leaves the case as a flag, true when the branch is not taken.
  HostTensor pred{type(DType::kBool, {}), {1}};
  HostTensor x = arange(DType::kF32, {4});
  HostTensor i{type(DType::kI64, {2}), {1, 3}};
  TensorType two = type(DType::kF32, {2});
  lowering::GraphSpec branch_true, branch_false, spec;
  branch_true.inputs = branch_false.inputs = {x.type, i.type};
  branch_true.nodes = {graph_node("aten::index_select", {tensor_arg(x), int_arg(0), tensor_arg(i)},
                                  {0, -1, 1}, {two}, {2})};
  branch_false.nodes = {graph_node(
      "aten::slice.Tensor", {tensor_arg(x), int_arg(0), int_arg(0), int_arg(2), int_arg(1)},
      {0, -1, -1, -1, -1}, {two}, {2})};
  branch_true.outputs = branch_false.outputs = {2};
  spec.inputs = {pred.type, x.type, i.type};
  spec.regions = {branch_true, branch_false};
  lowering::GraphNode cond = graph_node(lowering::kCondOp,
                                        {tensor_arg(pred), tensor_arg(x), tensor_arg(i)},
                                        {0, 1, 2}, {two}, {3});
  cond.regions = {0, 1};
  spec.nodes = {cond};
  spec.outputs = {3};
  auto lowered = lowering::lower_graph(spec, "cond");
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  EXPECT_EQ(lowered->check_nodes, (std::vector<int>{0}));
  ASSERT_EQ(lowered->check_messages.size(), 1u);
  EXPECT_EQ(lowered->check_messages[0], "index out of range in self");

  std::vector<HostTensor> out = run_graph(*lowered, {pred, x, i});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].values, (V{1, 3}));
  EXPECT_EQ(out[1].values, (V{1}));
  i.values = {1, 7};
  EXPECT_EQ(run_graph(*lowered, {pred, x, i})[1].values, (V{0}));  // the taken branch failed
  pred.values = {0};
  out = run_graph(*lowered, {pred, x, i});
  EXPECT_EQ(out[0].values, (V{0, 1}));
  EXPECT_EQ(out[1].values, (V{1}));  // the failing index is in the branch not taken
}

TEST(GraphLowering, WhileLoopCarriesItsStateAndReadsLoopInvariantInputs) {
  // (k, s) = while k < limit: (k + one, s * w); limit, one and w are loop-invariant.
  HostTensor k{type(DType::kI64, {}), {0}};
  HostTensor s{type(DType::kF32, {3}), {1, 2, 3}};
  HostTensor limit{type(DType::kI64, {}), {4}};
  HostTensor one{type(DType::kI64, {}), {1}};
  HostTensor w{type(DType::kF32, {3}), {2, 0.5, -1}};
  std::vector<TensorType> region_inputs = {k.type, s.type, limit.type, one.type, w.type};
  lowering::GraphSpec cond, body, spec;
  cond.inputs = body.inputs = region_inputs;
  cond.nodes = {graph_node("aten::lt.Tensor", {tensor_arg(k), tensor_arg(limit)}, {0, 2},
                           {type(DType::kBool, {})}, {5})};
  cond.outputs = {5};
  body.nodes = {
      graph_node("aten::add.Tensor", {tensor_arg(k), tensor_arg(one),
                                      scalar_arg(ScalarCategory::kInt)},
                 {0, 3, -1}, {k.type}, {5}),
      graph_node("aten::mul.Tensor", {tensor_arg(s), tensor_arg(w)}, {1, 4}, {s.type}, {6})};
  body.outputs = {5, 6};
  spec.inputs = region_inputs;
  spec.regions = {cond, body};
  lowering::GraphNode loop = graph_node(
      lowering::kWhileOp,
      {tensor_arg(k), tensor_arg(s), tensor_arg(limit), tensor_arg(one), tensor_arg(w)},
      {0, 1, 2, 3, 4}, {k.type, s.type}, {5, 6});
  loop.regions = {0, 1};
  spec.nodes = {loop};
  spec.outputs = {5, 6};
  auto lowered = lowering::lower_graph(spec, "loop");
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  EXPECT_TRUE(lowered->check_messages.empty());
  std::vector<HostTensor> out = run_graph(*lowered, {k, s, limit, one, w});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].values, (V{4}));
  EXPECT_EQ(out[1].values, (V{16, 0.125, 3}));
  // A subgraph that returns the wrong type is refused, not built.
  spec.regions[1].outputs = {6, 5};
  EXPECT_FALSE(lowering::lower_graph(spec, "loop").ok());
}

}  // namespace
}  // namespace torchtpu::testing
