// Collectives as StableHLO programs: one module per (collective, type, groups), compiled
// replicated over the devices of a group (runtime::Client::compile with a device list)
// and run on all of them in one execution.
//
// Every module describes one replica's part: `@main` takes that replica's operands and
// returns its result; replica ids in `groups` are positions in the program's device list
// (replica r runs on the r-th device). Groups partition the replicas [0, n): each replica
// appears in exactly one group and all groups have the same size. Ops are emitted in
// generic form without `channel_handle`, which makes XLA treat them as cross-replica
// collectives (the mode a program compiled with num_replicas = n and one partition uses).
//
// Reductions (ReduceKind):
//   - kSum, kMin, kMax, kProduct: the elementwise op; min/max of floats propagate NaN as
//     PyTorch does. On bool, sum and max are `or`, min and product are `and`.
//   - kAvg: the sum divided by the group size; integers divide truncating toward zero
//     (torch.div(..., rounding_mode="trunc")); bool has no average.
//   - kBand, kBor, kBxor: bitwise and / or / xor, on integer and bool tensors only; an
//     all_gather folded on each replica (XLA's CPU runtime refuses an all_reduce region
//     that is a bitwise op on integers). all_reduce only: reduce_scatter refuses them.
//   - kPremulSum: `@main` takes a second operand, the replica's factor (0-d, the tensor's
//     dtype), multiplies its tensor by it and sums: the program does not depend on the
//     factor's value, so one executable serves every factor. Not defined on bool.
// Errors (kInvalidArgument) name the collective and the facts: malformed groups, a dim 0
// that does not split evenly, an op the dtype has no meaning for.
//
// Each module has a value form (`*_value`) that emits the collective into an existing
// Builder, as compiled graphs need (their functional collectives, `_c10d_functional::*`,
// lower through these; functional_collectives.cc). The group's encoding in such a graph:
// see parse_replica_groups.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "lowering/hlo_builder.h"

namespace torchtpu::lowering {

enum class ReduceKind { kSum, kAvg, kMin, kMax, kProduct, kPremulSum, kBand, kBor, kBxor };
// "sum", "avg", ...
const char* reduce_kind_name(ReduceKind op);
// kBand, kBor or kBxor.
bool is_bitwise(ReduceKind op);

using ReplicaGroups = std::vector<std::vector<int64_t>>;
// One group of replicas [0, n).
ReplicaGroups whole_world(int64_t n);

// The text a compiled graph carries in place of a functional collective's group name once
// the group is resolved to the replicas of the graph's program: "tpu_replica_groups:0,1;2,3".
std::string encode_replica_groups(const ReplicaGroups& groups);
// Its inverse; kInvalidArgument for text in another form (a group name never resolved).
base::StatusOr<ReplicaGroups> parse_replica_groups(std::string_view text);
// "sum", "avg", "product", "min", "max", "band", "bor", "bxor" (PyTorch's functional
// collectives' names).
base::StatusOr<ReduceKind> parse_reduce_kind(std::string_view name);

// Value forms. `factor` is PREMUL_SUM's (a 0-d value of x's dtype) and only PREMUL_SUM's.
base::StatusOr<Value> all_reduce_value(Builder& b, Value x, ReduceKind op,
                                      const ReplicaGroups& groups,
                                      std::optional<Value> factor = std::nullopt);
base::StatusOr<Value> all_gather_value(Builder& b, Value x, const ReplicaGroups& groups,
                                      const std::optional<Dims>& result_dims = std::nullopt);
base::StatusOr<Value> reduce_scatter_value(Builder& b, Value x, ReduceKind op,
                                          const ReplicaGroups& groups,
                                          const std::optional<Dims>& result_dims = std::nullopt,
                                          std::optional<Value> factor = std::nullopt);
base::StatusOr<Value> all_to_all_value(Builder& b, Value x, const ReplicaGroups& groups,
                                      const std::optional<Dims>& result_dims = std::nullopt);
base::StatusOr<Value> broadcast_value(Builder& b, Value x, int64_t root,
                                     const ReplicaGroups& groups);

// (x[, factor]) -> the reduction of x over the replica's group, same type as x, which may
// take x's buffer (x is aliased to the result: a caller that donates x saves an
// allocation; without a donation XLA copies). From
// kSplitAllReduceBytes up it is a reduce_scatter and an all_gather of the flat value (padded
// to equal chunks), which the CPU plugin runs faster than its all_reduce at those sizes
// (bench/collectives_in_plugin.py).
inline constexpr int64_t kSplitAllReduceBytes = 16 << 20;
base::StatusOr<std::string> all_reduce_module(const TensorType& t, ReduceKind op,
                                              const ReplicaGroups& groups);
// The next three work on x's elements in row-major order (c10d's flat semantics) and
// return a value of `result_dims` (which must hold the result's element count), by default
// x's dims with dim 0 scaled.
//
// (x) -> the group's x concatenated in group order (default dims: dims[0] * group size).
base::StatusOr<std::string> all_gather_module(
    const TensorType& t, const ReplicaGroups& groups,
    const std::optional<Dims>& result_dims = std::nullopt);
// (x[, factor]) -> chunk k (x's elements split in group-size parts) of the reduction over
// the group, for the replica at position k of its group (default dims: dims[0] / size,
// which must then split evenly).
base::StatusOr<std::string> reduce_scatter_module(
    const TensorType& t, ReduceKind op, const ReplicaGroups& groups,
    const std::optional<Dims>& result_dims = std::nullopt);
// (x) -> for the replica at position k: chunk k (dim 0 split in group-size parts) of every
// group member's x, concatenated in group order (default dims: x's). Equal splits only; the
// distributed layer pads uneven splits to the largest one (see in_plugin_transport.h).
base::StatusOr<std::string> all_to_all_module(
    const TensorType& t, const ReplicaGroups& groups,
    const std::optional<Dims>& result_dims = std::nullopt);
// (x) -> the x of the replica that sends to this one; zeros for a replica no pair targets.
// Each replica is the source of at most one pair and the target of at most one pair.
base::StatusOr<std::string> collective_permute_module(
    const TensorType& t, int64_t num_replicas,
    const std::vector<std::pair<int64_t, int64_t>>& source_target_pairs);
// (x) -> the x of the replica at position `root` of this replica's group, bit for bit: an
// integer all_reduce sum of the value's bits where every other replica contributes zeros
// (the CPU plugin has no collective_broadcast).
base::StatusOr<std::string> broadcast_module(const TensorType& t, int64_t root,
                                             const ReplicaGroups& groups);

}  // namespace torchtpu::lowering
