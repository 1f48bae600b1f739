// Graph mode only: PyTorch's functional collectives (`_c10d_functional::*`, what
// torch.distributed._functional_collectives, DTensor, tensor parallelism and FSDP2 put in
// compiled graphs) as collectives of the graph's own program.
//
// A graph holding them is compiled replicated over the devices of the ranks that run it
// (python/torchtpu/dynamo/collectives.py, which also rewrites each group name into the
// replica groups of that program: parse_replica_groups). Results are the collective's
// values: `wait_tensor` is the identity, since a program's results are complete when it
// is. Ops outside this list, a reduce op without a lowering, or uneven all_to_all splits
// are unimplemented here; the compiler then runs the graph's collectives through the
// backend between compiled pieces instead (counted).
#include <string>

#include "lowering/collectives.h"
#include "lowering/families.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {
namespace {

using Result = base::StatusOr<std::vector<Value>>;

base::StatusOr<ReplicaGroups> groups_arg(LoweringContext& c, size_t i) {
  return parse_replica_groups(c.string_arg(i));
}

// The group size an op states (all_gather/reduce_scatter's `group_size`) must be the
// resolved group's.
base::Status check_group_size(LoweringContext& c, int64_t stated, const ReplicaGroups& groups) {
  if (stated == static_cast<int64_t>(groups[0].size())) return base::Status::ok_status();
  return base::invalid_argument("lowering: " + c.op_name() + ": group_size " +
                                std::to_string(stated) + " but the group has " +
                                std::to_string(groups[0].size()) + " ranks");
}

// all_reduce(Tensor input, str reduce_op, Any group_name)
Result lower_all_reduce(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReduceKind op, parse_reduce_kind(c.string_arg(1)));
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 2));
  TORCHTPU_ASSIGN_OR_RETURN(Value r, all_reduce_value(c.b(), c.tensor(0), op, groups));
  return std::vector<Value>{r};
}

// all_reduce_coalesced(Tensor[] inputs, str reduce_op, Any group_name)
Result lower_all_reduce_coalesced(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReduceKind op, parse_reduce_kind(c.string_arg(1)));
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 2));
  std::vector<Value> out;
  for (Value x : c.tensor_list(0)) {
    TORCHTPU_ASSIGN_OR_RETURN(Value r, all_reduce_value(c.b(), x, op, groups));
    out.push_back(r);
  }
  return out;
}

// all_gather_into_tensor(Tensor input, int group_size, Any group_name): the inputs
// concatenated along dim 0 in group order.
Result lower_all_gather(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 2));
  TORCHTPU_RETURN_IF_ERROR(check_group_size(c, c.int_arg(1), groups));
  TORCHTPU_ASSIGN_OR_RETURN(Value r,
                            all_gather_value(c.b(), c.tensor(0), groups, c.out_type().dims));
  return std::vector<Value>{r};
}

// all_gather_into_tensor_coalesced(Tensor[] inputs, int group_size, Any group_name)
Result lower_all_gather_coalesced(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 2));
  TORCHTPU_RETURN_IF_ERROR(check_group_size(c, c.int_arg(1), groups));
  std::vector<Value> xs = c.tensor_list(0), out;
  for (size_t i = 0; i < xs.size(); ++i) {
    TORCHTPU_ASSIGN_OR_RETURN(Value r,
                              all_gather_value(c.b(), xs[i], groups, c.out_type(i).dims));
    out.push_back(r);
  }
  return out;
}

// reduce_scatter_tensor(Tensor input, str reduce_op, int group_size, Any group_name):
// chunk k of dim 0 of the reduction for the rank at position k.
Result lower_reduce_scatter(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReduceKind op, parse_reduce_kind(c.string_arg(1)));
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 3));
  TORCHTPU_RETURN_IF_ERROR(check_group_size(c, c.int_arg(2), groups));
  TORCHTPU_ASSIGN_OR_RETURN(
      Value r, reduce_scatter_value(c.b(), c.tensor(0), op, groups, c.out_type().dims));
  return std::vector<Value>{r};
}

// reduce_scatter_tensor_coalesced(Tensor[] inputs, str reduce_op, int group_size, Any group_name)
Result lower_reduce_scatter_coalesced(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReduceKind op, parse_reduce_kind(c.string_arg(1)));
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 3));
  TORCHTPU_RETURN_IF_ERROR(check_group_size(c, c.int_arg(2), groups));
  std::vector<Value> xs = c.tensor_list(0), out;
  for (size_t i = 0; i < xs.size(); ++i) {
    TORCHTPU_ASSIGN_OR_RETURN(Value r,
                              reduce_scatter_value(c.b(), xs[i], op, groups, c.out_type(i).dims));
    out.push_back(r);
  }
  return out;
}

// all_to_all_single(Tensor input, SymInt[] output_split_sizes, SymInt[] input_split_sizes,
// Any group_name): equal splits only (empty lists, or every split the same).
Result lower_all_to_all_single(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 3));
  const int64_t n = static_cast<int64_t>(groups[0].size());
  const TensorType& in = c.tensor_type(0);
  for (size_t arg : {size_t{1}, size_t{2}}) {
    const Dims& splits = c.int_list(arg);
    if (splits.empty()) continue;
    bool equal = static_cast<int64_t>(splits.size()) == n && in.rank() > 0;
    for (int64_t s : splits) equal &= in.rank() > 0 && s * n == in.dims[0];
    if (!equal) {
      return base::unimplemented("lowering: " + c.op_name() + ": split sizes " +
                                 i64_list(splits) + " are not " + std::to_string(n) +
                                 " equal parts of " + in.str() +
                                 "; uneven splits run through the backend");
    }
  }
  TORCHTPU_ASSIGN_OR_RETURN(Value r,
                            all_to_all_value(c.b(), c.tensor(0), groups, c.out_type().dims));
  return std::vector<Value>{r};
}

// broadcast(Tensor input, int src, Any group_name): `src` is a rank of the group.
Result lower_broadcast(LoweringContext& c) {
  TORCHTPU_ASSIGN_OR_RETURN(ReplicaGroups groups, groups_arg(c, 2));
  TORCHTPU_ASSIGN_OR_RETURN(Value r, broadcast_value(c.b(), c.tensor(0), c.int_arg(1), groups));
  return std::vector<Value>{r};
}

// wait_tensor(Tensor tensor): a program's results are complete when it is.
Result lower_wait_tensor(LoweringContext& c) { return std::vector<Value>{c.tensor(0)}; }

}  // namespace

void register_functional_collective_lowerings() {
  register_lowering({"_c10d_functional::all_reduce"}, lower_all_reduce);
  register_lowering({"_c10d_functional::all_reduce_coalesced"}, lower_all_reduce_coalesced);
  register_lowering({"_c10d_functional::all_gather_into_tensor"}, lower_all_gather);
  register_lowering({"_c10d_functional::all_gather_into_tensor_coalesced"},
                    lower_all_gather_coalesced);
  register_lowering({"_c10d_functional::reduce_scatter_tensor"}, lower_reduce_scatter);
  register_lowering({"_c10d_functional::reduce_scatter_tensor_coalesced"},
                    lower_reduce_scatter_coalesced);
  register_lowering({"_c10d_functional::all_to_all_single"}, lower_all_to_all_single);
  register_lowering({"_c10d_functional::broadcast"}, lower_broadcast);
  register_lowering({"_c10d_functional::wait_tensor"}, lower_wait_tensor);
}

}  // namespace torchtpu::lowering
