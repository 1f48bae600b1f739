// Collective programs (lowering/collectives) on the real XLA CPU plugin with 4 devices:
// compiled replicated over a device list, run in one execution, each replica's result
// checked against a reference computed here on the host. Inputs are small integers, so
// every dtype (bf16 included) holds the sums and products exactly and results compare
// with equality.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "collectives_util.h"
#include "lowering/collectives.h"
#include "runtime/compile_cache.h"
#include "runtime/device_queue.h"
#include "test_plugin.h"

namespace torchtpu {
namespace {

double reduce_ref(ReduceKind op, DType t, const std::vector<double>& vals,
                  const std::vector<double>& factors) {
  bool is_bool = t == DType::kBool;
  double acc = op == ReduceKind::kPremulSum ? vals[0] * factors[0] : vals[0];
  for (size_t i = 1; i < vals.size(); ++i) {
    double v = vals[i];
    switch (op) {
      case ReduceKind::kSum:
      case ReduceKind::kAvg: acc = is_bool ? (acc != 0 || v != 0) : acc + v; break;
      case ReduceKind::kPremulSum: acc += v * factors[i]; break;
      case ReduceKind::kMin: acc = std::min(acc, v); break;
      case ReduceKind::kMax: acc = std::max(acc, v); break;
      case ReduceKind::kProduct: acc = is_bool ? (acc != 0 && v != 0) : acc * v; break;
    }
  }
  if (op == ReduceKind::kAvg) {
    double n = static_cast<double>(vals.size());
    acc = base::is_floating(t) ? acc / n : std::trunc(acc / n);
  }
  return acc;
}

struct ReduceCase {
  ReduceKind op;
  DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<ReduceCase>& info) {
  return std::string(lowering::reduce_kind_name(info.param.op)) + "_" +
         base::dtype_name(info.param.dtype);
}

std::vector<ReduceCase> reduce_cases() {
  std::vector<ReduceCase> cases;
  for (ReduceKind op : {ReduceKind::kSum, ReduceKind::kAvg, ReduceKind::kMin, ReduceKind::kMax,
                        ReduceKind::kProduct, ReduceKind::kPremulSum}) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF64, DType::kI32, DType::kI64, DType::kI8,
                    DType::kBool}) {
      if (t == DType::kBool && (op == ReduceKind::kAvg || op == ReduceKind::kPremulSum)) continue;
      cases.push_back({op, t});
    }
  }
  return cases;
}

// Per-replica factor of premul_sum: 1, 2, ... (exact in every dtype).
double factor_of(int r) { return r + 1; }

// Runs a reducing collective (all_reduce or reduce_scatter) over `groups` and checks every
// replica's result; `scatter` selects reduce_scatter.
void check_reduction(ReduceKind op, DType t, const ReplicaGroups& groups, bool scatter) {
  const int64_t n = 12;
  TensorType type{t, {n}};
  auto module = scatter ? lowering::reduce_scatter_module(type, op, groups)
                        : lowering::all_reduce_module(type, op, groups);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  std::vector<TensorType> arg_types{type};
  if (op == ReduceKind::kPremulSum) arg_types.push_back(TensorType{t, {}});
  std::vector<std::vector<std::vector<double>>> args;
  for (int r = 0; r < 4; ++r) {
    args.push_back({input_of(r, n, t)});
    if (op == ReduceKind::kPremulSum) args.back().push_back({factor_of(r)});
  }
  auto results = run(*module, kWorld, args, arg_types, t);
  ASSERT_EQ(results.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    auto [group, pos] = group_of(groups, r);
    const int64_t chunk = scatter ? n / static_cast<int64_t>(group.size()) : n;
    const int64_t first = scatter ? static_cast<int64_t>(pos) * chunk : 0;
    ASSERT_EQ(static_cast<int64_t>(results[r].size()), chunk);
    for (int64_t i = 0; i < chunk; ++i) {
      std::vector<double> vals, factors;
      for (int64_t peer : group) {
        vals.push_back(args[peer][0][first + i]);
        factors.push_back(factor_of(static_cast<int>(peer)));
      }
      EXPECT_EQ(results[r][i], reduce_ref(op, t, vals, factors))
          << "replica " << r << " element " << i;
    }
  }
}

class AllReduce : public ::testing::TestWithParam<ReduceCase> {};
TEST_P(AllReduce, WholeWorld) {
  check_reduction(GetParam().op, GetParam().dtype, {{0, 1, 2, 3}}, false);
}
TEST_P(AllReduce, TwoGroupsOfTwo) {
  check_reduction(GetParam().op, GetParam().dtype, kPairs, false);
}
INSTANTIATE_TEST_SUITE_P(Ops, AllReduce, ::testing::ValuesIn(reduce_cases()), case_name);

class ReduceScatter : public ::testing::TestWithParam<ReduceCase> {};
TEST_P(ReduceScatter, WholeWorld) {
  check_reduction(GetParam().op, GetParam().dtype, {{0, 1, 2, 3}}, true);
}
TEST_P(ReduceScatter, TwoGroupsOfTwo) {
  check_reduction(GetParam().op, GetParam().dtype, kPairs, true);
}
INSTANTIATE_TEST_SUITE_P(Ops, ReduceScatter, ::testing::ValuesIn(reduce_cases()), case_name);

// Replicas listed in a non-sorted order within groups: positions follow the list.
TEST(AllReduce, GroupsInAnyOrder) {
  check_reduction(ReduceKind::kSum, DType::kF32, {{3, 0}, {1, 2}}, false);
  check_reduction(ReduceKind::kSum, DType::kF32, {{3, 0}, {1, 2}}, true);
}

// From kSplitAllReduceBytes up all_reduce is a reduce_scatter and an all_gather; a size
// that does not split evenly is padded.
TEST(AllReduce, LargeTensorsSplitIntoReduceScatterAndAllGather) {
  const int64_t n = lowering::kSplitAllReduceBytes / 4 + 3;
  TensorType type{DType::kF32, {n}};
  for (ReduceKind op : {ReduceKind::kSum, ReduceKind::kMax, ReduceKind::kPremulSum}) {
    auto module = lowering::all_reduce_module(type, op, kPairs);
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    EXPECT_NE(module->find("stablehlo.reduce_scatter"), std::string::npos);
    std::vector<TensorType> arg_types{type};
    if (op == ReduceKind::kPremulSum) arg_types.push_back(TensorType{DType::kF32, {}});
    std::vector<std::vector<std::vector<double>>> args;
    for (int r = 0; r < 4; ++r) {
      args.push_back({input_of(r, n, DType::kF32)});
      if (op == ReduceKind::kPremulSum) args.back().push_back({factor_of(r)});
    }
    auto results = run(*module, kWorld, args, arg_types, DType::kF32);
    ASSERT_EQ(results.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      auto [group, pos] = group_of(kPairs, r);
      int64_t wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> vals{args[group[0]][0][i], args[group[1]][0][i]};
        std::vector<double> factors{factor_of(static_cast<int>(group[0])),
                                    factor_of(static_cast<int>(group[1]))};
        wrong += results[r][i] != reduce_ref(op, DType::kF32, vals, factors);
      }
      EXPECT_EQ(wrong, 0) << lowering::reduce_kind_name(op) << " replica " << r;
    }
  }
}

// min and max propagate NaN from any rank, whichever operand position it reaches the
// combiner in (PyTorch's semantics).
TEST(AllReduce, MinMaxPropagateNaN) {
  TensorType type{DType::kF32, {3}};
  for (ReduceKind op : {ReduceKind::kMin, ReduceKind::kMax}) {
    auto module = lowering::all_reduce_module(type, op, {{0, 1, 2, 3}});
    ASSERT_TRUE(module.ok());
    const double nan = std::nan("");
    std::vector<std::vector<std::vector<double>>> args{
        {{nan, 1, 2}}, {{0, 1, 2}}, {{0, nan, 2}}, {{0, 1, 2}}};
    auto results = run(*module, kWorld, args, {type}, DType::kF32);
    ASSERT_EQ(results.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_TRUE(std::isnan(results[r][0])) << lowering::reduce_kind_name(op) << " " << r;
      EXPECT_TRUE(std::isnan(results[r][1])) << lowering::reduce_kind_name(op) << " " << r;
      EXPECT_EQ(results[r][2], 2.0);
    }
  }
}

class DataMovement : public ::testing::TestWithParam<DType> {};

TEST_P(DataMovement, AllGather) {
  DType t = GetParam();
  for (const ReplicaGroups& groups : {ReplicaGroups{{0, 1, 2, 3}}, kPairs}) {
    TensorType type{t, {2, 3}};
    auto module = lowering::all_gather_module(type, groups);
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    std::vector<std::vector<std::vector<double>>> args;
    for (int r = 0; r < 4; ++r) args.push_back({input_of(r, 6, t)});
    auto results = run(*module, kWorld, args, {type}, t);
    ASSERT_EQ(results.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      std::vector<double> expected;
      for (int64_t peer : group_of(groups, r).first) {
        expected.insert(expected.end(), args[peer][0].begin(), args[peer][0].end());
      }
      EXPECT_EQ(results[r], expected) << "replica " << r;
    }
  }
}

TEST_P(DataMovement, AllToAll) {
  DType t = GetParam();
  for (const ReplicaGroups& groups : {ReplicaGroups{{0, 1, 2, 3}}, kPairs}) {
    const int64_t rows = 4, cols = 3;
    TensorType type{t, {rows, cols}};
    auto module = lowering::all_to_all_module(type, groups);
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    std::vector<std::vector<std::vector<double>>> args;
    for (int r = 0; r < 4; ++r) args.push_back({input_of(r, rows * cols, t)});
    auto results = run(*module, kWorld, args, {type}, t);
    ASSERT_EQ(results.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      auto [group, pos] = group_of(groups, r);
      const int64_t chunk = rows / static_cast<int64_t>(group.size()) * cols;
      std::vector<double> expected;
      for (int64_t peer : group) {
        auto begin = args[peer][0].begin() + static_cast<int64_t>(pos) * chunk;
        expected.insert(expected.end(), begin, begin + chunk);
      }
      EXPECT_EQ(results[r], expected) << "replica " << r;
    }
  }
}

TEST_P(DataMovement, CollectivePermuteRingAndPartialPairs) {
  DType t = GetParam();
  TensorType type{t, {5}};
  std::vector<std::vector<std::vector<double>>> args;
  for (int r = 0; r < 4; ++r) args.push_back({input_of(r, 5, t)});
  // A ring: r sends to r+1.
  auto ring = lowering::collective_permute_module(type, 4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
  ASSERT_TRUE(ring.ok()) << ring.status().to_string();
  auto results = run(*ring, kWorld, args, {type}, t);
  ASSERT_EQ(results.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(results[r], args[(r + 3) % 4][0]) << "replica " << r;
  // One send/recv pair (2 -> 0): the others receive zeros.
  auto pair = lowering::collective_permute_module(type, 4, {{2, 0}});
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  results = run(*pair, kWorld, args, {type}, t);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0], args[2][0]);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(results[r], std::vector<double>(5, 0.0)) << r;
}

TEST_P(DataMovement, Broadcast) {
  DType t = GetParam();
  TensorType type{t, {3, 2}};
  std::vector<std::vector<std::vector<double>>> args;
  for (int r = 0; r < 4; ++r) args.push_back({input_of(r, 6, t)});
  for (int64_t root : {0, 2}) {
    auto module = lowering::broadcast_module(type, root, {{0, 1, 2, 3}});
    ASSERT_TRUE(module.ok()) << module.status().to_string();
    auto results = run(*module, kWorld, args, {type}, t);
    ASSERT_EQ(results.size(), 4u);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(results[r], args[root][0]) << "root " << root;
  }
  // Root at position 1 of each pair: replicas 1 and 3 send.
  auto module = lowering::broadcast_module(type, 1, kPairs);
  ASSERT_TRUE(module.ok()) << module.status().to_string();
  auto results = run(*module, kWorld, args, {type}, t);
  ASSERT_EQ(results.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(results[r], args[r < 2 ? 1 : 3][0]) << "replica " << r;
}

// The root's bits arrive unchanged: -0.0 and NaN stay what they were.
TEST(Broadcast, IsBitExact) {
  TensorType type{DType::kF32, {2}};
  auto module = lowering::broadcast_module(type, 3, {{0, 1, 2, 3}});
  ASSERT_TRUE(module.ok());
  std::vector<std::vector<std::vector<double>>> args(4, {{1.0, 2.0}});
  args[3] = {{-0.0, std::nan("")}};
  auto results = run(*module, kWorld, args, {type}, DType::kF32);
  ASSERT_EQ(results.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(results[r][0] == 0.0 && std::signbit(results[r][0])) << r;
    EXPECT_TRUE(std::isnan(results[r][1])) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DataMovement,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kI64, DType::kI8,
                                           DType::kBool),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(base::dtype_name(info.param));
                         });

// A group smaller than the client: the program is compiled over devices {2, 3} only and
// its replica ids are positions in that list.
TEST(Collectives, ProgramOverASubsetOfDevices) {
  TensorType type{DType::kF32, {4}};
  auto module = lowering::all_reduce_module(type, ReduceKind::kSum, lowering::whole_world(2));
  ASSERT_TRUE(module.ok());
  std::vector<std::vector<std::vector<double>>> args{{input_of(2, 4, DType::kF32)},
                                                     {input_of(3, 4, DType::kF32)}};
  auto results = run(*module, {2, 3}, args, {type}, DType::kF32);
  ASSERT_EQ(results.size(), 2u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(results[0][i], args[0][0][i] + args[1][0][i]);
    EXPECT_EQ(results[1][i], results[0][i]);
  }
}

TEST(Collectives, MalformedArgumentsAreErrors) {
  TensorType type{DType::kF32, {6}};
  auto overlap = lowering::all_reduce_module(type, ReduceKind::kSum, {{0, 1}, {1, 2}});
  ASSERT_FALSE(overlap.ok());
  EXPECT_NE(overlap.status().message().find("replica 1 is in two groups"), std::string::npos)
      << overlap.status().message();
  auto uneven = lowering::all_reduce_module(type, ReduceKind::kSum, {{0, 1}, {2}});
  EXPECT_FALSE(uneven.ok());
  auto gap = lowering::all_reduce_module(type, ReduceKind::kSum, {{0, 2}});
  ASSERT_FALSE(gap.ok());
  EXPECT_NE(gap.status().message().find("cover replicas [0, 2)"), std::string::npos);
  auto split = lowering::reduce_scatter_module(type, ReduceKind::kSum, {{0, 1, 2, 3}});
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("must split into 4 equal parts"), std::string::npos)
      << split.status().message();
  auto bool_avg =
      lowering::all_reduce_module(TensorType{DType::kBool, {2}}, ReduceKind::kAvg, {{0, 1}});
  ASSERT_FALSE(bool_avg.ok());
  EXPECT_NE(bool_avg.status().message().find("avg is not defined on bool"), std::string::npos);
  auto twice = lowering::collective_permute_module(type, 4, {{0, 1}, {0, 2}});
  EXPECT_FALSE(twice.ok());
  auto root = lowering::broadcast_module(type, 2, kPairs);
  EXPECT_FALSE(root.ok());
}

// Runtime: the cache keys replicated programs by their device list, and the disk tier
// reloads a replicated executable.
TEST(ReplicatedRuntime, CacheKeysOnDevicesAndReloadsFromDisk) {
  auto client = testing::test_client();
  auto module = lowering::all_reduce_module(TensorType{DType::kF32, {4}}, ReduceKind::kMax,
                                            lowering::whole_world(2));
  ASSERT_TRUE(module.ok());
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("torchtpu_collectives_test_" + std::to_string(::getpid()));
  {
    runtime::CompileCache cache(client, dir.string());
    EXPECT_NE(cache.key_of(*module, std::vector<int>{0, 1}),
              cache.key_of(*module, std::vector<int>{2, 3}));
    int64_t compiles = base::counter_value("num_compiles");
    auto a = cache.get_or_compile(*module, std::vector<int>{0, 1});
    auto b = cache.get_or_compile(*module, std::vector<int>{2, 3});
    auto c = cache.get_or_compile(*module, std::vector<int>{0, 1});
    ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().to_string();
    EXPECT_EQ(a->get(), c->get());
    EXPECT_NE(a->get(), b->get());
    EXPECT_EQ(base::counter_value("num_compiles"), compiles + 2);
    EXPECT_EQ((*b)->device_indices(), (std::vector<int>{2, 3}));
  }
  runtime::CompileCache reloaded(client, dir.string());
  int64_t disk_hits = base::counter_value("num_compile_cache_hits_disk");
  auto exe = reloaded.get_or_compile(*module, std::vector<int>{2, 3});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ(base::counter_value("num_compile_cache_hits_disk"), disk_hits + 1);
  std::vector<float> x{1, 5, 3, 0}, y{4, 2, 6, -1};
  auto bx = client->buffer_from_host(x.data(), DType::kF32, {4}, 2);
  auto by = client->buffer_from_host(y.data(), DType::kF32, {4}, 3);
  ASSERT_TRUE(bx.ok() && by.ok());
  auto outs = (*exe)->execute_replicated({{bx->get()}, {by->get()}});
  ASSERT_TRUE(outs.ok()) << outs.status().to_string();
  std::vector<float> got(4);
  ASSERT_TRUE((*outs)[1][0]->to_host(got.data(), 16).ok());
  EXPECT_EQ(got, (std::vector<float>{4, 5, 6, 0}));
  EXPECT_EQ((*outs)[1][0]->device_index(), 3);
  std::filesystem::remove_all(dir);
}

TEST(ReplicatedRuntime, MisuseIsAnError) {
  auto client = testing::test_client();
  auto module = lowering::all_reduce_module(TensorType{DType::kF32, {4}}, ReduceKind::kSum,
                                            lowering::whole_world(2));
  ASSERT_TRUE(module.ok());
  auto dup = client->compile(*module, std::vector<int>{1, 1});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("appears twice"), std::string::npos);
  auto exe = client->compile(*module, std::vector<int>{0, 1});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<float> x(4, 1.0f);
  auto b0 = client->buffer_from_host(x.data(), DType::kF32, {4}, 0);
  auto b2 = client->buffer_from_host(x.data(), DType::kF32, {4}, 2);
  ASSERT_TRUE(b0.ok() && b2.ok());
  auto one_list = (*exe)->execute_replicated({{b0->get()}});
  ASSERT_FALSE(one_list.ok());
  EXPECT_NE(one_list.status().message().find("got 1 argument lists"), std::string::npos);
  auto wrong_device = (*exe)->execute_replicated({{b0->get()}, {b2->get()}});
  ASSERT_FALSE(wrong_device.ok());
  EXPECT_NE(wrong_device.status().message().find("lives on device 2"), std::string::npos);
  auto single = (*exe)->execute({b0->get()});
  ASSERT_FALSE(single.ok());
  EXPECT_NE(single.status().message().find("execute_replicated"), std::string::npos);
}

}  // namespace
TEST(ReplicatedRuntime, DeviceQueueKeepsEachReplicasLastOutputApart) {
  // synchronize() waits for these: the CPU plugin does not order a replicated program with
  // later single-device work on the same device.
  auto client = testing::test_client();
  auto module = lowering::all_reduce_module(TensorType{DType::kF32, {4}}, ReduceKind::kSum,
                                            lowering::whole_world(2));
  ASSERT_TRUE(module.ok());
  auto exe = client->compile(*module, std::vector<int>{0, 1});
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<float> x(4, 1.0f);
  auto b0 = client->buffer_from_host(x.data(), DType::kF32, {4}, 0);
  auto b1 = client->buffer_from_host(x.data(), DType::kF32, {4}, 1);
  ASSERT_TRUE(b0.ok() && b1.ok());
  auto out = (*exe)->execute_replicated({{b0->get()}, {b1->get()}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(runtime::last_replicated_output(0), (*out)[0].back());
  EXPECT_EQ(runtime::last_replicated_output(1), (*out)[1].back());
  // Later single-device work moves the tail, not the replicated output.
  auto later = client->buffer_from_host(x.data(), DType::kF32, {4}, 0);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(runtime::queue_tail(0), *later);
  EXPECT_EQ(runtime::last_replicated_output(0), (*out)[0].back());
  std::vector<float> host(4);
  ASSERT_TRUE(runtime::last_replicated_output(0)->to_host(host.data(), 16).ok());
  EXPECT_EQ(host, std::vector<float>(4, 2.0f));
}

}  // namespace torchtpu
