// Shape lowerings run on the CPU plugin and compared with hand-computed values.
#include <gtest/gtest.h>

#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using lowering::ScalarCategory;
using V = std::vector<double>;

OpArg list_arg(const std::vector<HostTensor>& items) {
  OpArg a;
  a.kind = ArgKind::kTensorList;
  for (const HostTensor& h : items) a.list_types.push_back(h.type);
  return a;
}

// Runs a one-tensor op (arg 0) with structural args and returns its only output.
HostTensor run1(const std::string& op, const HostTensor& x, std::vector<OpArg> rest,
                TensorType out, const std::map<int, double>& scalars = {}) {
  std::vector<OpArg> args{tensor_arg(x)};
  args.insert(args.end(), rest.begin(), rest.end());
  auto run = run_lowering(op, args, {out}, {{0, x}}, scalars);
  EXPECT_EQ(run.outputs.size(), 1u) << op;
  return run.outputs.empty() ? HostTensor{} : run.outputs[0];
}

TEST(ShapeLowering, CatPromotesAndSkipsLegacyEmpty) {
  HostTensor a{{DType::kI32, {1, 2}}, {1, 1}};
  HostTensor empty{{DType::kF32, {0}}, {}};
  HostTensor c{{DType::kF64, {1, 2}}, {0.5, 0.5}};
  auto run = run_lowering("aten::cat", {list_arg({a, empty, c}), int_arg(0)},
                          {TensorType{DType::kF64, {2, 2}}}, {}, {}, {{0, {a, empty, c}}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].type.dtype, DType::kF64);
  EXPECT_EQ(run.outputs[0].values, (V{1, 1, 0.5, 0.5}));
}

TEST(ShapeLowering, CatAlongNegativeDim) {
  HostTensor a = arange(DType::kF32, {2, 1});
  HostTensor b = arange(DType::kF32, {2, 2}, 10);
  auto run = run_lowering("aten::cat.out", {list_arg({a, b}), int_arg(-1), tensor_arg(b)},
                          {TensorType{DType::kF32, {2, 3}}}, {}, {}, {{0, {a, b}}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 10, 11, 1, 12, 13}));
}

TEST(ShapeLowering, FlipReversesListedDims) {
  HostTensor x = arange(DType::kF32, {2, 3});
  EXPECT_EQ(run1("aten::flip", x, {ints_arg({-1})}, x.type).values, (V{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(run1("aten::flip", x, {ints_arg({0, 1})}, x.type).values, (V{5, 4, 3, 2, 1, 0}));
}

TEST(ShapeLowering, RollAlongDimsAndFlattened) {
  HostTensor x = arange(DType::kI64, {2, 3});
  EXPECT_EQ(run1("aten::roll", x, {ints_arg({1}), ints_arg({1})}, x.type).values,
            (V{2, 0, 1, 5, 3, 4}));
  EXPECT_EQ(run1("aten::roll", x, {ints_arg({2}), ints_arg({})}, x.type).values,
            (V{4, 5, 0, 1, 2, 3}));
  EXPECT_EQ(run1("aten::roll", x, {ints_arg({-1, 4}), ints_arg({0, -1})}, x.type).values,
            (V{5, 3, 4, 2, 0, 1}));
}

TEST(ShapeLowering, ConstantPadNdPadsAndCrops) {
  HostTensor x = arange(DType::kF32, {2, 3});
  EXPECT_EQ(run1("aten::constant_pad_nd", x, {ints_arg({-1, 2}), scalar_arg(ScalarCategory::kFloat)},
                 TensorType{DType::kF32, {2, 4}}, {{2, 9}})
                .values,
            (V{1, 2, 9, 9, 4, 5, 9, 9}));
  EXPECT_EQ(run1("aten::constant_pad_nd", x, {ints_arg({1, 0, 0, 1}), scalar_arg(ScalarCategory::kInt)},
                 TensorType{DType::kF32, {3, 4}}, {{2, -1}})
                .values,
            (V{-1, 0, 1, 2, -1, 3, 4, 5, -1, -1, -1, -1}));
}

TEST(ShapeLowering, RepeatTilesWholeCopies) {
  HostTensor x{{DType::kI32, {2, 1}}, {1, 2}};
  EXPECT_EQ(run1("aten::repeat", x, {ints_arg({2, 3})}, TensorType{DType::kI32, {4, 3}}).values,
            (V{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2}));
  HostTensor v = arange(DType::kF32, {2});
  EXPECT_EQ(run1("aten::repeat", v, {ints_arg({2, 2})}, TensorType{DType::kF32, {2, 4}}).values,
            (V{0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(ShapeLowering, TrilTriuHonourDiagonal) {
  HostTensor x = arange(DType::kF32, {3, 3}, 1);
  EXPECT_EQ(run1("aten::tril", x, {int_arg(0)}, x.type).values, (V{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(run1("aten::tril_", x, {int_arg(-1)}, x.type).values, (V{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_EQ(run1("aten::triu.out", x, {int_arg(1), tensor_arg(x)}, x.type).values,
            (V{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  HostTensor batch = arange(DType::kI64, {2, 2, 2}, 1);
  EXPECT_EQ(run1("aten::triu", batch, {int_arg(0)}, batch.type).values, (V{1, 2, 0, 4, 5, 6, 0, 8}));
}

TEST(ShapeLowering, DiagonalCopyOffsetsAndDims) {
  HostTensor x = arange(DType::kI64, {3, 4});
  EXPECT_EQ(run1("aten::diagonal_copy", x, {int_arg(1), int_arg(0), int_arg(1)},
                 TensorType{DType::kI64, {3}}).values,
            (V{1, 6, 11}));
  EXPECT_EQ(run1("aten::diagonal_copy", x, {int_arg(-1), int_arg(0), int_arg(1)},
                 TensorType{DType::kI64, {2}}).values,
            (V{4, 9}));
  EXPECT_EQ(run1("aten::diagonal_copy", x, {int_arg(1), int_arg(1), int_arg(0)},
                 TensorType{DType::kI64, {2}}).values,
            (V{4, 9}));
  HostTensor batch = arange(DType::kF32, {2, 2, 2});
  EXPECT_EQ(run1("aten::diagonal_copy", batch, {int_arg(0), int_arg(1), int_arg(2)},
                 TensorType{DType::kF32, {2, 2}}).values,
            (V{0, 3, 4, 7}));
}

TEST(ShapeLowering, DiagEmbedPlacesLastDimOnDiagonal) {
  HostTensor v{{DType::kF32, {2}}, {1, 2}};
  EXPECT_EQ(run1("aten::diag_embed", v, {int_arg(0), int_arg(-2), int_arg(-1)},
                 TensorType{DType::kF32, {2, 2}}).values,
            (V{1, 0, 0, 2}));
  EXPECT_EQ(run1("aten::diag_embed", v, {int_arg(1), int_arg(-2), int_arg(-1)},
                 TensorType{DType::kF32, {3, 3}}).values,
            (V{0, 1, 0, 0, 0, 2, 0, 0, 0}));
  HostTensor m{{DType::kI64, {2, 2}}, {1, 2, 3, 4}};
  EXPECT_EQ(run1("aten::diag_embed", m, {int_arg(-1), int_arg(0), int_arg(2)},
                 TensorType{DType::kI64, {3, 2, 3}}).values,
            (V{0, 0, 0, 0, 0, 0, 1, 0, 0, 3, 0, 0, 0, 2, 0, 0, 4, 0}));
}

TEST(ShapeLowering, CatOfOnlyEmptyInputsIsEmpty) {
  HostTensor empty{{DType::kF32, {0}}, {}};
  auto run = run_lowering("aten::cat", {list_arg({empty, empty}), int_arg(0)},
                          {TensorType{DType::kF32, {0}}}, {}, {}, {{0, {empty, empty}}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].type.dims, (Dims{0}));
  EXPECT_TRUE(run.outputs[0].values.empty());
}

TEST(ShapeLowering, SliceScatterWritesStridedSlice) {
  HostTensor self = arange(DType::kF32, {2, 5});
  HostTensor src{{DType::kF32, {2, 2}}, {-1, -2, -3, -4}};
  // self[:, 1:5:2] = src
  auto run = run_lowering("aten::slice_scatter",
                          {tensor_arg(self), tensor_arg(src), int_arg(1), int_arg(1), int_arg(5), int_arg(2)},
                          {self.type}, {{0, self}, {1, src}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{0, -1, 2, -2, 4, 5, -3, 7, -4, 9}));
  // self[-1:] = src along dim 0, start given negative and end left out.
  HostTensor row{{DType::kF32, {1, 5}}, {9, 9, 9, 9, 9}};
  auto tail = run_lowering("aten::slice_scatter",
                           {tensor_arg(self), tensor_arg(row), int_arg(0), int_arg(-1), none_arg(), int_arg(1)},
                           {self.type}, {{0, self}, {1, row}});
  ASSERT_EQ(tail.outputs.size(), 1u);
  EXPECT_EQ(tail.outputs[0].values, (V{0, 1, 2, 3, 4, 9, 9, 9, 9, 9}));
}

TEST(ShapeLowering, SelectScatterWritesOneIndex) {
  HostTensor self = arange(DType::kI64, {2, 3});
  HostTensor src{{DType::kI64, {2}}, {-1, -2}};
  auto run = run_lowering("aten::select_scatter",
                          {tensor_arg(self), tensor_arg(src), int_arg(1), int_arg(-1)},
                          {self.type}, {{0, self}, {1, src}});
  ASSERT_EQ(run.outputs.size(), 1u);
  EXPECT_EQ(run.outputs[0].values, (V{0, 1, -1, 3, 4, -2}));
}

}  // namespace
}  // namespace torchtpu::testing
