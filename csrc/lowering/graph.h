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

// In a graph with shape buckets: result `result`'s dimension `dim` has the true size of
// size symbol `symbol`. The graph marks it (set_dimension_size) after lowering the node,
// since a lowering sizes results from static types: a slice of a static tensor up to a
// symbolic end, or a factory of a symbolic size, would otherwise come out as the whole
// bucket, padding included, for XLA.
struct ResultSize {
  int result = 0;
  int64_t dim = 0;
  int symbol = 0;
};

// In a graph with shape buckets: tensor argument `arg`'s dimension `dim`, whose true size
// is size symbol `symbol`, is made static before the node is lowered (padding zeroed,
// XLA no longer tracking the dim: Builder::static_along). For a product whose rows XLA
// would merge with a dynamic dim among them: its dot canonicalization then compacts the
// rows with a sort and a prefix sum per product, several times the product's own cost on
// the CPU. The node marks its result dims again with ResultSize.
struct StaticArgDim {
  int arg = 0;
  int64_t dim = 0;
  int symbol = 0;
};

struct GraphNode {
  std::string op;                          // "aten::add.Tensor"
  std::vector<OpArg> args;                 // schema order; tensor types filled in
  std::vector<int> tensor_refs;            // per arg: value id of a tensor arg, else -1
  std::vector<std::vector<int>> list_refs; // per arg: value ids of list items
  std::vector<GraphScalar> scalars;        // per arg: value of a kScalar arg
  std::vector<TensorType> out_types;       // one per defined output
  std::vector<int> out_ids;                // value ids of those outputs
  std::vector<ResultSize> result_sizes;    // dynamic dims of the results (shape buckets)
  std::vector<StaticArgDim> static_arg_dims;  // argument dims made static (shape buckets)
};

// Bounded dynamic shapes: input `input`'s dimension `dim` has a static bound (its bucket)
// and its true size is the runtime value of size symbol `symbol`. Such an input arrives
// COMPACT: a flat buffer of the bound's element count whose first (true element count)
// elements are the true tensor in row-major order — the layout XLA itself returns for
// dynamic results, so a graph's outputs feed the next graph without a copy.
struct DynamicDim {
  int input = 0;
  int64_t dim = 0;
  int symbol = 0;
};

// Output `output`'s dimension `dim` has a static bound and the true size of symbol
// `symbol`. Such an output leaves the program COMPACT, like a dynamic input: a flat static
// buffer whose prefix is the true tensor, so no result carries XLA's size metadata.
struct DynamicOutputDim {
  int output = 0;
  int64_t dim = 0;
  int symbol = 0;
};

struct GraphSpec {
  std::vector<TensorType> inputs;  // static (bucket-padded) types
  std::vector<GraphNode> nodes;
  std::vector<int> outputs;  // value ids
  std::vector<DynamicDim> dynamic_dims;
  std::vector<DynamicOutputDim> output_dynamic_dims;
  std::vector<int> numel_symbols;  // per input: symbol of its true element count, or -1
  int num_symbols = 0;  // i32 @main parameters (the first ones), one per size symbol
  // Graph inputs whose buffer output `donations[k].second` may reuse: the output is the
  // input's new value (an input mutation), so the old value is dead once it is written back.
  std::vector<std::pair<int, int>> donations;  // (input index, output index)
};

// `module_name` names the module (eager ops keep the table's own, "torchtpu").
base::StatusOr<LoweredGraph> lower_graph(const GraphSpec& graph,
                                         const std::string& module_name = "torchtpu_graph");

}  // namespace torchtpu::lowering
