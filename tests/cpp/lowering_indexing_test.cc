// Indexing lowerings run on the CPU plugin and compared with hand-computed values,
// including the device-side bounds checks (LoweringRun::checks).
#include <gtest/gtest.h>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;
using V = std::vector<double>;

HostTensor zeros(DType t, Dims dims) {
  HostTensor h{{t, dims}, {}};
  h.values.assign(h.type.num_elements(), 0);
  return h;
}

// A Tensor?[] argument: the present tensors and their positions in the original list.
OpArg index_list_arg(const std::vector<HostTensor>& items, Dims positions = {}) {
  OpArg a;
  a.kind = ArgKind::kTensorList;
  for (const HostTensor& h : items) a.list_types.push_back(h.type);
  a.ints = std::move(positions);
  return a;
}

bool all_checks_hold(const LoweringRun& run) {
  for (bool ok : run.checks) {
    if (!ok) return false;
  }
  return true;
}

TEST(IndexingLowering, IndexSelectGathersSlicesAndRejectsBadIndices) {
  HostTensor x = arange(DType::kF32, {2, 3});
  HostTensor idx{{DType::kI32, {2}}, {2, 0}};
  auto run = run_lowering("aten::index_select", {tensor_arg(x), int_arg(1), tensor_arg(idx)},
                          {TensorType{DType::kF32, {2, 2}}}, {{0, x}, {2, idx}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{2, 0, 5, 3}));
  ASSERT_EQ(run.checks.size(), 1u);
  EXPECT_TRUE(run.checks[0]);
  for (double bad : {3.0, -1.0}) {
    HostTensor b{{DType::kI64, {1}}, {bad}};
    auto r = run_lowering("aten::index_select.out",
                          {tensor_arg(x), int_arg(1), tensor_arg(b), tensor_arg(x)},
                          {TensorType{DType::kF32, {2, 1}}}, {{0, x}, {2, b}});
    ASSERT_EQ(r.checks.size(), 1u);
    EXPECT_FALSE(r.checks[0]) << "index " << bad;
  }
  auto lowered = lowering::lower_op("aten::index_select", {tensor_arg(x), int_arg(1), tensor_arg(idx)},
                                    {TensorType{DType::kF32, {2, 2}}});
  ASSERT_TRUE(lowered.ok());
  EXPECT_EQ(lowered->check_messages, (std::vector<std::string>{"index out of range in self"}));
}

TEST(IndexingLowering, GatherAlongDimChecksBounds) {
  HostTensor x = arange(DType::kF32, {2, 3});
  HostTensor idx{{DType::kI64, {2, 2}}, {2, 0, 1, 1}};
  auto run = run_lowering("aten::gather", {tensor_arg(x), int_arg(1), tensor_arg(idx), bool_arg(false)},
                          {TensorType{DType::kF32, {2, 2}}}, {{0, x}, {2, idx}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{2, 0, 4, 4}));
  EXPECT_TRUE(all_checks_hold(run));
  HostTensor neg{{DType::kI64, {1, 1}}, {-1}};
  auto bad = run_lowering("aten::gather", {tensor_arg(x), int_arg(1), tensor_arg(neg), bool_arg(false)},
                          {TensorType{DType::kF32, {1, 1}}}, {{0, x}, {2, neg}});
  ASSERT_EQ(bad.checks.size(), 1u);
  EXPECT_FALSE(bad.checks[0]);
}

TEST(IndexingLowering, ScatterSrcUsesIndexShapedPartOfSource) {
  HostTensor self = zeros(DType::kF32, {2, 3});
  HostTensor idx{{DType::kI64, {1, 2}}, {2, 0}};
  HostTensor src = arange(DType::kF32, {2, 3}, 10);
  auto run = run_lowering("aten::scatter.src",
                          {tensor_arg(self), int_arg(1), tensor_arg(idx), tensor_arg(src)},
                          {self.type}, {{0, self}, {2, idx}, {3, src}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{11, 0, 10, 0, 0, 0}));
  EXPECT_TRUE(all_checks_hold(run));
  HostTensor oob{{DType::kI64, {1, 1}}, {3}};
  auto bad = run_lowering("aten::scatter_.src",
                          {tensor_arg(self), int_arg(1), tensor_arg(oob), tensor_arg(src)},
                          {self.type}, {{0, self}, {2, oob}, {3, src}});
  ASSERT_EQ(bad.checks.size(), 1u);
  EXPECT_FALSE(bad.checks[0]);
}

TEST(IndexingLowering, ScatterValueAndLegacyReduce) {
  HostTensor self = zeros(DType::kF32, {3});
  HostTensor idx{{DType::kI64, {2}}, {0, 2}};
  auto value = run_lowering("aten::scatter.value",
                            {tensor_arg(self), int_arg(0), tensor_arg(idx), scalar_arg(ScalarCategory::kFloat)},
                            {self.type}, {{0, self}, {2, idx}}, {{3, 7}});
  ASSERT_EQ(value.outputs.size(), 1u);
  EXPECT_EQ(value.outputs[0].values, (V{7, 0, 7}));
  HostTensor ones{{DType::kF32, {3}}, {1, 1, 1}};
  HostTensor dup{{DType::kI64, {2}}, {0, 0}};
  HostTensor src{{DType::kF32, {2}}, {2, 3}};
  auto mul = run_lowering("aten::scatter.reduce",
                          {tensor_arg(ones), int_arg(0), tensor_arg(dup), tensor_arg(src), string_arg("multiply")},
                          {ones.type}, {{0, ones}, {2, dup}, {3, src}});
  ASSERT_EQ(mul.outputs.size(), 1u);
  EXPECT_EQ(mul.outputs[0].values, (V{6, 1, 1}));
  auto add = run_lowering("aten::scatter.value_reduce",
                          {tensor_arg(ones), int_arg(0), tensor_arg(dup), scalar_arg(ScalarCategory::kFloat),
                           string_arg("add")},
                          {ones.type}, {{0, ones}, {2, dup}}, {{3, 2}});
  ASSERT_EQ(add.outputs.size(), 1u);
  EXPECT_EQ(add.outputs[0].values, (V{5, 1, 1}));
}

TEST(IndexingLowering, ScatterAddAccumulatesDuplicates) {
  HostTensor self = zeros(DType::kI64, {3});
  HostTensor idx{{DType::kI64, {3}}, {0, 0, 2}};
  HostTensor src{{DType::kI64, {3}}, {1, 2, 3}};
  auto run = run_lowering("aten::scatter_add_",
                          {tensor_arg(self), int_arg(0), tensor_arg(idx), tensor_arg(src)},
                          {self.type}, {{0, self}, {2, idx}, {3, src}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{3, 0, 3}));
}

LoweringRun scatter_reduce(const HostTensor& self, const std::string& reduce, bool include_self) {
  HostTensor idx{{DType::kI64, {3}}, {0, 0, 1}};
  HostTensor src{{self.type.dtype, {3}}, {1, 2, -3}};
  return run_lowering("aten::scatter_reduce.two",
                      {tensor_arg(self), int_arg(0), tensor_arg(idx), tensor_arg(src),
                       string_arg(reduce), bool_arg(include_self)},
                      {self.type}, {{0, self}, {2, idx}, {3, src}});
}

TEST(IndexingLowering, ScatterReduceTwoModes) {
  HostTensor ints{{DType::kI64, {3}}, {10, 10, 10}};
  // Integer mean rounds toward -inf; without self only the scattered values count.
  EXPECT_EQ(scatter_reduce(ints, "mean", true).outputs.at(0).values, (V{4, 3, 10}));
  EXPECT_EQ(scatter_reduce(ints, "mean", false).outputs.at(0).values, (V{1, -3, 10}));
  HostTensor floats{{DType::kF32, {3}}, {5, 5, 5}};
  EXPECT_EQ(scatter_reduce(floats, "amax", false).outputs.at(0).values, (V{2, -3, 5}));
  EXPECT_EQ(scatter_reduce(floats, "amin", true).outputs.at(0).values, (V{1, -3, 5}));
  EXPECT_EQ(scatter_reduce(floats, "prod", true).outputs.at(0).values, (V{10, -15, 5}));
  EXPECT_EQ(scatter_reduce(floats, "sum", false).outputs.at(0).values, (V{3, -3, 5}));
  V mean = scatter_reduce(floats, "mean", true).outputs.at(0).values;
  ASSERT_EQ(mean.size(), 3u);
  EXPECT_NEAR(mean[0], 8.0 / 3.0, 1e-6);
  EXPECT_EQ(mean[1], 1);
  EXPECT_EQ(mean[2], 5);
}

TEST(IndexingLowering, IndexAddScalesByAlphaAndRejectsNegative) {
  HostTensor self = zeros(DType::kF32, {2, 3});
  HostTensor idx{{DType::kI64, {3}}, {0, 2, 0}};
  HostTensor src = arange(DType::kF32, {2, 3}, 1);
  auto run = run_lowering("aten::index_add",
                          {tensor_arg(self), int_arg(1), tensor_arg(idx), tensor_arg(src),
                           scalar_arg(ScalarCategory::kInt)},
                          {self.type}, {{0, self}, {2, idx}, {3, src}}, {{4, 2}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{8, 0, 4, 20, 0, 10}));
  EXPECT_TRUE(all_checks_hold(run));
  HostTensor neg{{DType::kI64, {1}}, {-1}};
  HostTensor one_col = arange(DType::kF32, {2, 1});
  auto bad = run_lowering("aten::index_add_",
                          {tensor_arg(self), int_arg(1), tensor_arg(neg), tensor_arg(one_col),
                           scalar_arg(ScalarCategory::kInt)},
                          {self.type}, {{0, self}, {2, neg}, {3, one_col}}, {{4, 1}});
  ASSERT_EQ(bad.checks.size(), 1u);
  EXPECT_FALSE(bad.checks[0]);
}

TEST(IndexingLowering, IndexCopyAndIndexFill) {
  HostTensor self = zeros(DType::kF32, {2, 3});
  HostTensor row{{DType::kI64, {1}}, {1}};
  HostTensor src{{DType::kF32, {1, 3}}, {1, 2, 3}};
  auto copy = run_lowering("aten::index_copy",
                           {tensor_arg(self), int_arg(0), tensor_arg(row), tensor_arg(src)},
                           {self.type}, {{0, self}, {2, row}, {3, src}});
  ASSERT_EQ(copy.outputs.size(), 1u);
  EXPECT_EQ(copy.outputs[0].values, (V{0, 0, 0, 1, 2, 3}));
  EXPECT_TRUE(all_checks_hold(copy));
  // index_fill wraps negative indices.
  HostTensor x = arange(DType::kF32, {2, 3});
  HostTensor neg{{DType::kI64, {1}}, {-1}};
  auto fill = run_lowering("aten::index_fill_.int_Scalar",
                           {tensor_arg(x), int_arg(1), tensor_arg(neg), scalar_arg(ScalarCategory::kFloat)},
                           {x.type}, {{0, x}, {2, neg}}, {{3, 7}});
  ASSERT_EQ(fill.outputs.size(), 1u);
  EXPECT_EQ(fill.outputs[0].values, (V{0, 1, 7, 3, 4, 7}));
  EXPECT_TRUE(all_checks_hold(fill));
}

// A failed index check writes nothing (every index becomes one a scatter drops), so an
// in-place update may give the failed run's result its argument's buffer.
TEST(IndexingLowering, AFailedIndexCheckWritesNothing) {
  HostTensor self = arange(DType::kF32, {3, 2});
  HostTensor rows{{DType::kI64, {2}}, {1, 7}};
  HostTensor src{{DType::kF32, {2, 2}}, {10, 20, 30, 40}};
  auto copy = run_lowering("aten::index_copy",
                           {tensor_arg(self), int_arg(0), tensor_arg(rows), tensor_arg(src)},
                           {self.type}, {{0, self}, {2, rows}, {3, src}});
  ASSERT_EQ(copy.outputs.size(), 1u);
  EXPECT_EQ(copy.outputs[0].values, self.values);
  EXPECT_EQ(copy.checks, (std::vector<bool>{false}));
  EXPECT_TRUE(copy.checks_guarded);
}

TEST(IndexingLowering, MaskedFillBroadcastsMask) {
  HostTensor x = arange(DType::kF32, {2, 3});
  HostTensor mask{{DType::kBool, {3}}, {1, 0, 1}};
  auto run = run_lowering("aten::masked_fill_.Scalar",
                          {tensor_arg(x), tensor_arg(mask), scalar_arg(ScalarCategory::kInt)},
                          {x.type}, {{0, x}, {1, mask}}, {{2, -1}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{-1, 1, -1, -1, 4, -1}));
  HostTensor value{{DType::kF32, {}}, {9}};
  auto tensor_value = run_lowering("aten::masked_fill.Tensor",
                                   {tensor_arg(x), tensor_arg(mask), tensor_arg(value)},
                                   {x.type}, {{0, x}, {1, mask}, {2, value}});
  ASSERT_EQ(tensor_value.outputs.size(), 1u);
  EXPECT_EQ(tensor_value.outputs[0].values, (V{9, 1, 9, 9, 4, 9}));
}

TEST(IndexingLowering, MaskedScatterFillsInOrderAndChecksSourceSize) {
  HostTensor self = zeros(DType::kF32, {2, 3});
  HostTensor mask{{DType::kBool, {2, 3}}, {1, 0, 1, 0, 1, 0}};
  HostTensor src{{DType::kF32, {4}}, {10, 20, 30, 40}};
  auto run = run_lowering("aten::masked_scatter_", {tensor_arg(self), tensor_arg(mask), tensor_arg(src)},
                          {self.type}, {{0, self}, {1, mask}, {2, src}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{10, 0, 20, 0, 30, 0}));
  EXPECT_TRUE(all_checks_hold(run));
  HostTensor short_src{{DType::kF32, {2}}, {10, 20}};
  auto bad = run_lowering("aten::masked_scatter_", {tensor_arg(self), tensor_arg(mask), tensor_arg(short_src)},
                          {self.type}, {{0, self}, {1, mask}, {2, short_src}});
  ASSERT_EQ(bad.checks.size(), 1u);
  EXPECT_FALSE(bad.checks[0]);
}

TEST(IndexingLowering, TakeWrapsNegativeIndices) {
  HostTensor x = arange(DType::kI64, {2, 3});
  HostTensor idx{{DType::kI64, {2, 2}}, {-1, 0, 4, 2}};
  auto run = run_lowering("aten::take", {tensor_arg(x), tensor_arg(idx)},
                          {TensorType{DType::kI64, {2, 2}}}, {{0, x}, {1, idx}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{5, 0, 4, 2}));
  EXPECT_TRUE(all_checks_hold(run));
  HostTensor oob{{DType::kI64, {1}}, {6}};
  auto bad = run_lowering("aten::take", {tensor_arg(x), tensor_arg(oob)},
                          {TensorType{DType::kI64, {1}}}, {{0, x}, {1, oob}});
  ASSERT_EQ(bad.checks.size(), 1u);
  EXPECT_FALSE(bad.checks[0]);
}

TEST(IndexingLowering, IndexSeparatedIndicesGoFirst) {
  // x[[0, 1], :, [1, 2]] on a 2x3x4 tensor -> shape [2, 3].
  HostTensor x = arange(DType::kI64, {2, 3, 4});
  HostTensor i0{{DType::kI64, {2}}, {0, 1}};
  HostTensor i2{{DType::kI32, {2}}, {1, 2}};
  auto run = run_lowering("aten::index.Tensor", {tensor_arg(x), index_list_arg({i0, i2}, {0, 2})},
                          {TensorType{DType::kI64, {2, 3}}}, {{0, x}}, {}, {{1, {i0, i2}}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{1, 5, 9, 14, 18, 22}));
  EXPECT_TRUE(all_checks_hold(run));
}

TEST(IndexingLowering, IndexConsecutiveIndicesBroadcastInPlace) {
  // x[:, [[0], [2]], [1, 3]] on a 2x3x4 tensor -> shape [2, 2, 2].
  HostTensor x = arange(DType::kI64, {2, 3, 4});
  HostTensor i1{{DType::kI64, {2, 1}}, {0, 2}};
  HostTensor i2{{DType::kI64, {2}}, {1, 3}};
  auto run = run_lowering("aten::index.Tensor", {tensor_arg(x), index_list_arg({i1, i2}, {1, 2})},
                          {TensorType{DType::kI64, {2, 2, 2}}}, {{0, x}}, {}, {{1, {i1, i2}}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{1, 3, 9, 11, 13, 15, 21, 23}));
}

TEST(IndexingLowering, IndexWrapsNegativeAndChecksBounds) {
  HostTensor x = arange(DType::kF32, {2, 3});
  HostTensor idx{{DType::kI64, {2}}, {-1, 0}};
  auto run = run_lowering("aten::index.Tensor", {tensor_arg(x), index_list_arg({idx}, {1})},
                          {TensorType{DType::kF32, {2, 2}}}, {{0, x}}, {}, {{1, {idx}}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{2, 0, 5, 3}));
  EXPECT_TRUE(all_checks_hold(run));
  HostTensor oob{{DType::kI64, {1}}, {2}};
  auto bad = run_lowering("aten::index.Tensor", {tensor_arg(x), index_list_arg({oob})},
                          {TensorType{DType::kF32, {1, 3}}}, {{0, x}}, {}, {{1, {oob}}});
  ASSERT_EQ(bad.checks.size(), 1u);
  EXPECT_FALSE(bad.checks[0]);
}

TEST(IndexingLowering, IndexPutAccumulatesAndBroadcastsValues) {
  HostTensor self = zeros(DType::kF32, {4});
  HostTensor idx{{DType::kI64, {3}}, {0, 0, 3}};
  HostTensor values{{DType::kF32, {3}}, {1, 2, 3}};
  auto acc = run_lowering("aten::index_put",
                          {tensor_arg(self), index_list_arg({idx}), tensor_arg(values), bool_arg(true)},
                          {self.type}, {{0, self}, {2, values}}, {}, {{1, {idx}}});
  ASSERT_EQ(acc.outputs.size(), 1u);
  EXPECT_EQ(acc.outputs[0].values, (V{3, 0, 0, 3}));
  // self[-1] = 9 on a 2x3 tensor through _index_put_impl_ (a 0-d value fills the row).
  HostTensor m = zeros(DType::kF32, {2, 3});
  HostTensor row{{DType::kI64, {1}}, {-1}};
  HostTensor nine{{DType::kF32, {}}, {9}};
  auto put = run_lowering("aten::_index_put_impl_",
                          {tensor_arg(m), index_list_arg({row}), tensor_arg(nine), bool_arg(false),
                           bool_arg(false)},
                          {m.type}, {{0, m}, {2, nine}}, {}, {{1, {row}}});
  ASSERT_EQ(put.outputs.size(), 1u);
  EXPECT_EQ(put.outputs[0].values, (V{0, 0, 0, 9, 9, 9}));
  EXPECT_TRUE(all_checks_hold(put));
}

}  // namespace
}  // namespace torchtpu::testing
