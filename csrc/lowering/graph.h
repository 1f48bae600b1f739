// Graph lowering: a whole graph of aten ops (from torch.compile's FX graph, or one eager
// op) -> one StableHLO module, through the lowering table.
//
// Values are numbered: graph inputs are 0..inputs.size()-1, every node's defined outputs
// get the ids listed in its out_ids. An input becomes a @main parameter where a node first
// reads it (an input nobody reads is no parameter). Scalars that are data stay runtime
// parameters (GraphParam says which node's argument), so the module text depends only on
// the graph's structure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {

struct GraphNode {
  std::string op;                          // "aten::add.Tensor"
  std::vector<OpArg> args;                 // schema order; tensor types filled in
  std::vector<int> tensor_refs;            // per arg: value id of a tensor arg, else -1
  std::vector<std::vector<int>> list_refs; // per arg: value ids of list items
  std::vector<GraphScalar> scalars;        // per arg: value of a kScalar arg
  std::vector<TensorType> out_types;       // one per defined output
  std::vector<int> out_ids;                // value ids of those outputs
  // Value id of an int64[2] generator state (seed, offset) the node's random draws read
  // instead of a state of its own: a recomputed random op replays its forward's draws.
  int rng_ref = -1;
  // A control-flow node (the k*Op names below) names its subgraphs here, as indices into
  // the enclosing GraphSpec's `regions`: a cond's true and false branch, a while loop's
  // condition and body, a scan's combine function, a called subgraph. Its arguments: a
  // cond's predicate (a tensor of one element, or a kBool constant) then its operands,
  // each branch's inputs; a while loop's state then its loop-invariant inputs, both
  // regions' inputs; a scan's counts, carry, xs and loop-invariant inputs (the combine
  // function takes the carry, one row of each xs, the invariant inputs); a call's operands.
  std::vector<int> regions;
};

// Op names of the control-flow nodes: torch.cond, torch's while_loop, and torch's scan
// (and map, a scan without a carry; args: the counts of carried values and of xs as ints,
// then the initial carry, the xs and the loop-invariant inputs; one subgraph).
inline constexpr const char* kCondOp = "higher_order::cond";
inline constexpr const char* kWhileOp = "higher_order::while_loop";
inline constexpr const char* kScanOp = "higher_order::scan";
// torch.compiler.nested_compile_region's call of a subgraph (args: its operands): the
// subgraph's nodes are lowered in place, as if written at the call.
inline constexpr const char* kInvokeOp = "higher_order::invoke_subgraph";

struct GraphSpec {
  std::vector<TensorType> inputs;  // static types (a padded graph's: its bucket shapes)
  std::vector<GraphNode> nodes;
  std::vector<int> outputs;  // value ids
  // Runtime size values the graph reads as scalars (GraphScalar::symbol): in a graph
  // padded to shape buckets, the true sizes behind its masks and counts.
  int num_symbols = 0;
  // Graph inputs whose buffer output `donations[k].second` may reuse: the output is the
  // input's new value (an input mutation), so the old value is dead once it is written back.
  std::vector<std::pair<int, int>> donations;  // (input index, output index)
  // Whether the buckets pass padded the graph: its static sizes are shape buckets, so a
  // size a data check's message names is a bucket's, not the tensor's.
  bool padded = false;
  // Subgraphs of the control-flow nodes (GraphNode::regions). A subgraph has no
  // donations and reads no size values; random draws are refused inside a cond or loop.
  std::vector<GraphSpec> regions;
};

// `module_name` names the module (eager ops keep the table's own, "torchtpu"). When lowering
// fails because a node's lowering does not take its call (an unimplemented case: a dtype
// or mode it leaves to the CPU in eager mode), `refused_node` gets that node's index
// (nodes of subgraphs excepted), else -1.
base::StatusOr<LoweredGraph> lower_graph(const GraphSpec& graph,
                                         const std::string& module_name = "torchtpu_graph",
                                         int* refused_node = nullptr);

}  // namespace torchtpu::lowering
