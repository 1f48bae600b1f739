// Storage programs (strided read/write through a view, convert+broadcast, zeros) run on the
// CPU plugin and compared with hand-computed results. Views are PyTorch's (sizes, strides,
// offset) over the row-major flattened buffer.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lowering/storage_programs.h"
#include "lowering_harness.h"

namespace torchtpu::testing {
namespace {

using base::DType;
using V = std::vector<double>;

// Runs a storage program on `inputs`; returns its single result.
HostTensor run_program(const std::string& text, const std::vector<HostTensor>& inputs) {
  std::vector<HostTensor> results = run_module(text, inputs);
  EXPECT_EQ(results.size(), 1u) << text;
  return results.empty() ? HostTensor{} : results[0];
}

// The storage offset: a runtime operand of the view programs.
HostTensor offset_operand(int64_t offset) {
  return HostTensor{TensorType{DType::kI64, {}}, {static_cast<double>(offset)}};
}

HostTensor read_view(const HostTensor& base, const Dims& sizes, const Dims& strides,
                     int64_t offset) {
  return run_program(lowering::strided_read_module(base.type, sizes, strides),
                     {base, offset_operand(offset)});
}

HostTensor write_view(const HostTensor& base, const Dims& sizes, const Dims& strides,
                      int64_t offset, const V& value) {
  HostTensor v{TensorType{base.type.dtype, sizes}, value};
  return run_program(lowering::strided_write_module(base.type, sizes, strides),
                     {base, v, offset_operand(offset)});
}

void expect_tensor(const HostTensor& got, DType dtype, const Dims& dims, const V& values) {
  EXPECT_EQ(got.type.dtype, dtype) << base::dtype_name(got.type.dtype);
  EXPECT_EQ(got.type.dims, dims);
  EXPECT_EQ(got.values, values);
}

TEST(StorageProgram, ContiguousWindowWithOffset) {
  HostTensor base = arange(DType::kF32, {3, 4});
  // x.view(-1)[2:8].view(2, 3)
  expect_tensor(read_view(base, {2, 3}, {3, 1}, 2), DType::kF32, {2, 3}, {2, 3, 4, 5, 6, 7});
  expect_tensor(write_view(base, {2, 3}, {3, 1}, 2, {-1, -2, -3, -4, -5, -6}), DType::kF32,
                {3, 4}, {0, 1, -1, -2, -3, -4, -5, -6, 8, 9, 10, 11});
  // A window ending at the last element exercises the splice without a tail.
  expect_tensor(write_view(base, {4}, {1}, 8, {-8, -9, -10, -11}), DType::kF32, {3, 4},
                {0, 1, 2, 3, 4, 5, 6, 7, -8, -9, -10, -11});
}

TEST(StorageProgram, ManyViewsReadAndWrittenInOneProgramInOrder) {
  HostTensor base = arange(DType::kF32, {3, 4});
  // Flat [1:4], a transposed 2x2 window at 4 (flat 4 6 / 5 7), flat [6::2] (overlaps it).
  std::vector<lowering::ViewShape> views{{{3}, {1}}, {{2, 2}, {1, 2}}, {{3}, {2}}};
  HostTensor offsets{TensorType{DType::kI64, {3}}, {1, 4, 6}};
  std::vector<HostTensor> read =
      run_module(lowering::strided_multi_read_module(base.type, views), {base, offsets});
  ASSERT_EQ(read.size(), 3u);
  expect_tensor(read[0], DType::kF32, {3}, {1, 2, 3});
  expect_tensor(read[1], DType::kF32, {2, 2}, {4, 6, 5, 7});
  expect_tensor(read[2], DType::kF32, {3}, {6, 8, 10});
  HostTensor a{TensorType{DType::kF32, {3}}, {-1, -2, -3}};
  HostTensor b{TensorType{DType::kF32, {2, 2}}, {-4, -6, -5, -7}};
  HostTensor c{TensorType{DType::kF32, {3}}, {-60, -80, -100}};
  // Later views win where they overlap (flat 6), as three single writes in order would.
  expect_tensor(run_program(lowering::strided_multi_write_module(base.type, views),
                            {base, a, b, c, offsets}),
                DType::kF32, {3, 4}, {0, -1, -2, -3, -4, -5, -60, -7, -80, 9, -100, 11});
}

TEST(StorageProgram, ViewsOfSeveralStoragesReadInOneProgram) {
  HostTensor a = arange(DType::kF32, {2, 3});
  HostTensor b = arange(DType::kF32, {4});
  // a reshaped to [3, 2] (whole), b[1:3], a transposed, b reshaped to [2, 2] (whole).
  std::vector<lowering::ViewShape> views{
      {{3, 2}, {2, 1}, 0}, {{2}, {1}, 1}, {{3, 2}, {1, 3}, 0}, {{2, 2}, {2, 1}, 1}};
  HostTensor offsets{TensorType{DType::kI64, {4}}, {0, 1, 0, 0}};
  std::vector<HostTensor> read =
      run_module(lowering::strided_multi_read_module({a.type, b.type}, views), {a, b, offsets});
  ASSERT_EQ(read.size(), 4u);
  expect_tensor(read[0], DType::kF32, {3, 2}, {0, 1, 2, 3, 4, 5});
  expect_tensor(read[1], DType::kF32, {2}, {1, 2});
  expect_tensor(read[2], DType::kF32, {3, 2}, {0, 3, 1, 4, 2, 5});
  expect_tensor(read[3], DType::kF32, {2, 2}, {0, 1, 2, 3});
}

TEST(StorageProgram, TransposedView) {
  HostTensor base = arange(DType::kI64, {2, 3});
  // x.t(): sizes [3, 2], strides [1, 3]; element (i, j) is flat i + 3j.
  expect_tensor(read_view(base, {3, 2}, {1, 3}, 0), DType::kI64, {3, 2}, {0, 3, 1, 4, 2, 5});
  expect_tensor(write_view(base, {3, 2}, {1, 3}, 0, {10, 11, 12, 13, 14, 15}), DType::kI64,
                {2, 3}, {10, 12, 14, 11, 13, 15});
}

TEST(StorageProgram, StridedSliceStepTwo) {
  HostTensor base = arange(DType::kF32, {10});
  // x[1::2][:3]
  expect_tensor(read_view(base, {3}, {2}, 1), DType::kF32, {3}, {1, 3, 5});
  expect_tensor(write_view(base, {3}, {2}, 1, {-1, -2, -3}), DType::kF32, {10},
                {0, -1, 2, -2, 4, -3, 6, 7, 8, 9});
  // A 2-d strided slice: y = x.view(4, 3)[::2, 1:] -> flat 1, 2, 7, 8.
  HostTensor grid = arange(DType::kF32, {4, 3});
  expect_tensor(read_view(grid, {2, 2}, {6, 1}, 1), DType::kF32, {2, 2}, {1, 2, 7, 8});
  expect_tensor(write_view(grid, {2, 2}, {6, 1}, 1, {-1, -2, -7, -8}), DType::kF32, {4, 3},
                {0, -1, -2, 3, 4, 5, 6, -7, -8, 9, 10, 11});
}

TEST(StorageProgram, ExpandedViewReadRepeatsElements) {
  HostTensor row{TensorType{DType::kF32, {3}}, {1.5, 2.5, 3.5}};
  // row.expand(2, 3)
  expect_tensor(read_view(row, {2, 3}, {0, 1}, 0), DType::kF32, {2, 3},
                {1.5, 2.5, 3.5, 1.5, 2.5, 3.5});
  // A column of a [2, 2] buffer expanded across 3 columns: x[:, 1:].expand(2, 3).
  HostTensor square = arange(DType::kI64, {2, 2});
  expect_tensor(read_view(square, {2, 3}, {2, 0}, 1), DType::kI64, {2, 3}, {1, 1, 1, 3, 3, 3});
}

TEST(StorageProgram, SelectColumn) {
  HostTensor base = arange(DType::kF32, {3, 4});
  // x[:, 2]
  expect_tensor(read_view(base, {3}, {4}, 2), DType::kF32, {3}, {2, 6, 10});
  expect_tensor(write_view(base, {3}, {4}, 2, {-2, -6, -10}), DType::kF32, {3, 4},
                {0, 1, -2, 3, 4, 5, -6, 7, 8, 9, -10, 11});
}

TEST(StorageProgram, SelectRowIsAContiguousWindow) {
  HostTensor base{TensorType{DType::kBool, {2, 3}}, {0, 0, 0, 1, 1, 1}};
  // x[1] of a bool buffer, then written back flipped.
  expect_tensor(read_view(base, {3}, {1}, 3), DType::kBool, {3}, {1, 1, 1});
  expect_tensor(write_view(base, {3}, {1}, 3, {0, 1, 0}), DType::kBool, {2, 3},
                {0, 0, 0, 0, 1, 0});
}

TEST(StorageProgram, ZeroElementView) {
  HostTensor base = arange(DType::kF32, {2, 3});
  expect_tensor(read_view(base, {0, 3}, {3, 1}, 0), DType::kF32, {0, 3}, {});
  // A 0-element strided view with an offset: nothing to address, nothing to read.
  expect_tensor(read_view(base, {2, 0}, {1, 2}, 4), DType::kF32, {2, 0}, {});
  // Writing through an empty view leaves the buffer unchanged.
  expect_tensor(write_view(base, {0, 3}, {3, 1}, 0, {}), DType::kF32, {2, 3},
                {0, 1, 2, 3, 4, 5});
}

// The offset is a runtime operand: one program text reads (and writes) every row.
TEST(StorageProgram, OneProgramServesEveryOffset) {
  HostTensor base = arange(DType::kF32, {4, 3});
  std::string text = lowering::strided_read_module(base.type, {3}, {1});
  for (int64_t row = 0; row < 4; ++row) {
    double first = static_cast<double>(row * 3);
    expect_tensor(run_program(text, {base, offset_operand(row * 3)}), DType::kF32, {3},
                  {first, first + 1, first + 2});
  }
  // A column (strided): one gather program for every column.
  std::string column = lowering::strided_read_module(base.type, {4}, {3});
  expect_tensor(run_program(column, {base, offset_operand(2)}), DType::kF32, {4}, {2, 5, 8, 11});
  std::string write = lowering::strided_write_module(base.type, {4}, {3});
  HostTensor value{TensorType{DType::kF32, {4}}, {-1, -2, -3, -4}};
  expect_tensor(run_program(write, {base, value, offset_operand(1)}), DType::kF32, {4, 3},
                {0, -1, 2, 3, -2, 5, 6, -3, 8, 9, -4, 11});
}

TEST(StorageProgram, WholeBufferViewDetection) {
  using lowering::is_whole_buffer_view;
  EXPECT_TRUE(is_whole_buffer_view(12, {3, 4}, {4, 1}, 0));
  EXPECT_TRUE(is_whole_buffer_view(12, {12}, {1}, 0));
  // Strides of size-1 dims do not matter (PyTorch leaves them arbitrary after unsqueeze).
  EXPECT_TRUE(is_whole_buffer_view(12, {3, 1, 4}, {4, 99, 1}, 0));
  EXPECT_FALSE(is_whole_buffer_view(12, {3, 4}, {4, 1}, 1));         // offset
  EXPECT_FALSE(is_whole_buffer_view(12, {4, 3}, {1, 4}, 0));         // transposed
  EXPECT_FALSE(is_whole_buffer_view(12, {2, 4}, {4, 1}, 0));         // a prefix only
  EXPECT_FALSE(is_whole_buffer_view(12, {6}, {2}, 0));               // step 2
  EXPECT_FALSE(is_whole_buffer_view(3, {2, 3}, {0, 1}, 0));          // expanded
  EXPECT_FALSE(is_whole_buffer_view(12, {3, 4}, {0, 1}, 0));         // stride 0, same numel
}

TEST(StorageProgram, ConvertFloatToIntTruncatesTowardZeroAndBroadcasts) {
  HostTensor src{TensorType{DType::kF32, {3}}, {1.75, -1.75, -0.5}};
  expect_tensor(run_program(lowering::convert_module(src.type, DType::kI64, {2, 3}), {src}),
                DType::kI64, {2, 3}, {1, -1, 0, 1, -1, 0});
  HostTensor scalar{TensorType{DType::kF32, {}}, {7.9}};
  expect_tensor(run_program(lowering::convert_module(scalar.type, DType::kI64, {2}), {scalar}),
                DType::kI64, {2}, {7, 7});
}

// Out-of-range values and NaN follow PyTorch's CPU casts on x86-64 (through int32, or
// int64 for 64-bit targets; the minimum when out of range), not XLA's saturation.
TEST(StorageProgram, ConvertOutOfRangeFloatToIntLikePyTorchsCpu) {
  HostTensor src{TensorType{DType::kF32, {6}}, {3.4e38, -2.0, 300.0, kNaN, 3e9, -kInf}};
  expect_tensor(run_program(lowering::convert_module(src.type, DType::kI16, {6}), {src}),
                DType::kI16, {6}, {0, -2, 300, 0, 0, 0});
  expect_tensor(run_program(lowering::convert_module(src.type, DType::kU8, {6}), {src}),
                DType::kU8, {6}, {0, 254, 44, 0, 0, 0});
  expect_tensor(run_program(lowering::convert_module(src.type, DType::kI32, {6}), {src}),
                DType::kI32, {6}, {-2147483648.0, -2, 300, -2147483648.0, -2147483648.0,
                                   -2147483648.0});
  expect_tensor(run_program(lowering::convert_module(src.type, DType::kI64, {6}), {src}),
                DType::kI64, {6}, {-9223372036854775808.0, -2, 300, -9223372036854775808.0,
                                   3e9, -9223372036854775808.0});
}

TEST(StorageProgram, ConvertFloatToBoolIsNonZero) {
  HostTensor src{TensorType{DType::kF32, {2, 1}}, {0.0, -0.25}};
  expect_tensor(run_program(lowering::convert_module(src.type, DType::kBool, {2, 3}), {src}),
                DType::kBool, {2, 3}, {0, 0, 0, 1, 1, 1});
  HostTensor negative_zero{TensorType{DType::kF32, {2}}, {-0.0, 1e-30}};
  expect_tensor(
      run_program(lowering::convert_module(negative_zero.type, DType::kBool, {2}), {negative_zero}),
      DType::kBool, {2}, {0, 1});
}

TEST(StorageProgram, ConvertI64ToF32RoundsToNearest) {
  const int64_t big = 16777217;  // 2^24 + 1: not representable in f32
  HostTensor src{TensorType{DType::kI64, {3}}, {-3, 0, static_cast<double>(big)}};
  expect_tensor(run_program(lowering::convert_module(src.type, DType::kF32, {2, 3}), {src}),
                DType::kF32, {2, 3},
                {-3, 0, static_cast<float>(big), -3, 0, static_cast<float>(big)});
}

TEST(StorageProgram, ZerosOfEachType) {
  expect_tensor(run_program(lowering::zeros_module(TensorType{DType::kF32, {2, 3}}), {}),
                DType::kF32, {2, 3}, V(6, 0));
  expect_tensor(run_program(lowering::zeros_module(TensorType{DType::kI64, {4}}), {}), DType::kI64,
                {4}, V(4, 0));
  expect_tensor(run_program(lowering::zeros_module(TensorType{DType::kBool, {}}), {}),
                DType::kBool, {}, {0});
  expect_tensor(run_program(lowering::zeros_module(TensorType{DType::kF64, {0, 2}}), {}),
                DType::kF64, {0, 2}, {});
}

}  // namespace
}  // namespace torchtpu::testing
