// Functional collectives (`_c10d_functional::*`) as lowerings of compiled graphs: each op
// lowered through the table with its group name already rewritten into replica groups
// (what python/torchtpu/dynamo/collectives.py does), compiled over the 4 devices of the
// test client and run; results checked against the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "collectives_util.h"
#include "lowering_harness.h"
#include "lowering/collectives.h"
#include "lowering/lowering.h"

namespace torchtpu {
namespace {

using lowering::ArgKind;
using lowering::OpArg;

OpArg tensor_arg(const TensorType& t) {
  OpArg a;
  a.kind = ArgKind::kTensor;
  a.type = t;
  return a;
}

using testing::int_arg;
using testing::ints_arg;
using testing::string_arg;

// Lowers one functional collective and runs it on every device, replica r with
// input_of(r): each replica's result.
std::vector<std::vector<double>> run_op(const std::string& op, std::vector<OpArg> args,
                                        const TensorType& in, const TensorType& out) {
  auto lowered = lowering::lower_op(op, std::move(args), {out});
  EXPECT_TRUE(lowered.ok()) << op << ": " << lowered.status().to_string();
  if (!lowered.ok()) return {};
  std::vector<std::vector<std::vector<double>>> inputs;
  for (int r = 0; r < 4; ++r) inputs.push_back({input_of(r, in.num_elements(), in.dtype)});
  return run(lowered->text, kWorld, inputs, {in}, out.dtype);
}

TEST(FunctionalCollectives, ReplicaGroupsRoundTrip) {
  std::string text = lowering::encode_replica_groups(kPairs);
  EXPECT_EQ(text, "tpu_replica_groups:0,1;2,3");
  auto back = lowering::parse_replica_groups(text);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, kPairs);
  for (const char* bad : {"0", "tpu_replica_groups:", "tpu_replica_groups:0,,1",
                          "tpu_replica_groups:0,1;2", "tpu_replica_groups:1,2"}) {
    auto parsed = lowering::parse_replica_groups(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
  }
  auto unresolved = lowering::parse_replica_groups("3");
  ASSERT_FALSE(unresolved.ok());
  EXPECT_NE(unresolved.status().message().find("was not resolved"), std::string::npos)
      << unresolved.status().message();
}

TEST(FunctionalCollectives, AllReduceOverPairs) {
  TensorType t{DType::kF32, {4, 2}};
  std::string groups = lowering::encode_replica_groups(kPairs);
  for (const char* op : {"sum", "avg", "max"}) {
    auto got = run_op("_c10d_functional::all_reduce",
                      {tensor_arg(t), string_arg(op), string_arg(groups)}, t, t);
    ASSERT_EQ(got.size(), 4u) << op;
    for (int r = 0; r < 4; ++r) {
      auto [group, pos] = group_of(kPairs, r);
      auto a = input_of(group[0], 8, DType::kF32), b = input_of(group[1], 8, DType::kF32);
      for (int i = 0; i < 8; ++i) {
        double want = std::string(op) == "sum"   ? a[i] + b[i]
                      : std::string(op) == "avg" ? (a[i] + b[i]) / 2
                                                 : std::max(a[i], b[i]);
        EXPECT_EQ(got[r][i], want) << op << " replica " << r << " element " << i;
      }
    }
  }
}

TEST(FunctionalCollectives, GatherScatterAllToAllBroadcastWait) {
  TensorType t{DType::kF32, {2, 3}};
  std::string world = lowering::encode_replica_groups(lowering::whole_world(4));
  // all_gather_into_tensor: the inputs stacked along dim 0 in group order.
  auto gathered = run_op("_c10d_functional::all_gather_into_tensor",
                         {tensor_arg(t), int_arg(4), string_arg(world)}, t,
                         TensorType{DType::kF32, {8, 3}});
  ASSERT_EQ(gathered.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    for (int j = 0; j < 4; ++j) {
      auto x = input_of(j, 6, DType::kF32);
      for (int i = 0; i < 6; ++i) EXPECT_EQ(gathered[r][6 * j + i], x[i]);
    }
  }
  // reduce_scatter_tensor: chunk r of dim 0 of the sum.
  TensorType big{DType::kF32, {8, 3}};
  auto scattered = run_op("_c10d_functional::reduce_scatter_tensor",
                          {tensor_arg(big), string_arg("sum"), int_arg(4), string_arg(world)},
                          big, TensorType{DType::kF32, {2, 3}});
  ASSERT_EQ(scattered.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 6; ++i) {
      double want = 0;
      for (int j = 0; j < 4; ++j) want += input_of(j, 24, DType::kF32)[6 * r + i];
      EXPECT_EQ(scattered[r][i], want);
    }
  }
  // all_to_all_single with equal splits given explicitly: rank r gets row-chunk r of each.
  TensorType rows{DType::kF32, {4, 3}};
  auto exchanged = run_op("_c10d_functional::all_to_all_single",
                          {tensor_arg(rows), ints_arg({1, 1, 1, 1}), ints_arg({1, 1, 1, 1}),
                           string_arg(world)},
                          rows, rows);
  ASSERT_EQ(exchanged.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    for (int j = 0; j < 4; ++j) {
      auto x = input_of(j, 12, DType::kF32);
      for (int c = 0; c < 3; ++c) EXPECT_EQ(exchanged[r][3 * j + c], x[3 * r + c]);
    }
  }
  // broadcast from position 1 of each pair; wait_tensor is the identity.
  std::string pairs = lowering::encode_replica_groups(kPairs);
  auto cast = run_op("_c10d_functional::broadcast",
                     {tensor_arg(t), int_arg(1), string_arg(pairs)}, t, t);
  ASSERT_EQ(cast.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(cast[r], input_of(group_of(kPairs, r).first[1], 6, DType::kF32));
  }
  auto waited = run_op("_c10d_functional::wait_tensor", {tensor_arg(t)}, t, t);
  ASSERT_EQ(waited.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(waited[r], input_of(r, 6, DType::kF32));
}

TEST(FunctionalCollectives, BitwiseAllReduceOverPairs) {
  // Gathered and folded (XLA's CPU runtime refuses a bitwise all_reduce region on integers).
  TensorType t{DType::kI32, {3, 2}};
  std::string groups = lowering::encode_replica_groups(kPairs);
  for (const char* op : {"band", "bor", "bxor"}) {
    auto got = run_op("_c10d_functional::all_reduce",
                      {tensor_arg(t), string_arg(op), string_arg(groups)}, t, t);
    ASSERT_EQ(got.size(), 4u) << op;
    for (int r = 0; r < 4; ++r) {
      auto [group, pos] = group_of(kPairs, r);
      auto a = input_of(group[0], 6, DType::kI32), b = input_of(group[1], 6, DType::kI32);
      for (int i = 0; i < 6; ++i) {
        auto x = static_cast<int32_t>(a[i]), y = static_cast<int32_t>(b[i]);
        int32_t want = std::string(op) == "band" ? (x & y) : std::string(op) == "bor" ? (x | y)
                                                                                      : (x ^ y);
        EXPECT_EQ(got[r][i], want) << op << " replica " << r << " element " << i;
      }
    }
  }
}

TEST(FunctionalCollectives, WhatTheLoweringDoesNotTakeIsAnError) {
  TensorType t{DType::kF32, {4, 3}};
  std::string world = lowering::encode_replica_groups(lowering::whole_world(4));
  auto unresolved = lowering::lower_op("_c10d_functional::all_reduce",
                                       {tensor_arg(t), string_arg("sum"), string_arg("0")}, {t});
  ASSERT_FALSE(unresolved.ok());
  EXPECT_NE(unresolved.status().message().find("was not resolved"), std::string::npos);
  auto band = lowering::lower_op("_c10d_functional::all_reduce",
                                 {tensor_arg(t), string_arg("band"), string_arg(world)}, {t});
  ASSERT_FALSE(band.ok());
  EXPECT_NE(band.status().message().find("band is defined on integer and bool tensors only"),
            std::string::npos)
      << band.status().message();
  auto unknown = lowering::lower_op("_c10d_functional::all_reduce",
                                    {tensor_arg(t), string_arg("median"), string_arg(world)}, {t});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'median' has no lowering"), std::string::npos);
  auto size = lowering::lower_op("_c10d_functional::all_gather_into_tensor",
                                 {tensor_arg(t), int_arg(2), string_arg(world)},
                                 {TensorType{DType::kF32, {16, 3}}});
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("group_size 2 but the group has 4"), std::string::npos);
  auto uneven = lowering::lower_op(
      "_c10d_functional::all_to_all_single",
      {tensor_arg(t), ints_arg({2, 1, 1, 0}), ints_arg({1, 1, 1, 1}), string_arg(world)}, {t});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("uneven splits"), std::string::npos);
}

}  // namespace
}  // namespace torchtpu
