// Graph lowering: a whole graph of aten ops (from torch.compile's FX graph) -> one
// StableHLO module, through the same lowering table eager mode uses.
//
// Values are numbered: graph inputs are 0..inputs.size()-1, every node's defined outputs
// get the ids listed in its out_ids. Scalars that are data stay runtime parameters (their
// values travel in GraphParam), so the module text depends only on the graph's structure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "lowering/lowering.h"

namespace torchtpu::lowering {

struct GraphScalar {
  ScalarCategory category = ScalarCategory::kFloat;
  double float_value = 0;  // kFloat; kComplex: the real part
  double imag_value = 0;   // kComplex: the imaginary part
  int64_t int_value = 0;  // exact for kInt and kBool
  int symbol = -1;         // >= 0: the value is runtime size value `symbol`
};

struct GraphNode {
  std::string op;                          // "aten::add.Tensor"
  std::vector<OpArg> args;                 // schema order; tensor types filled in
  std::vector<int> tensor_refs;            // per arg: value id of a tensor arg, else -1
  std::vector<std::vector<int>> list_refs; // per arg: value ids of list items
  std::vector<GraphScalar> scalars;        // per arg: value of a kScalar arg
  std::vector<TensorType> out_types;       // one per defined output
  std::vector<int> out_ids;                // value ids of those outputs
};

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
};

// Where the runtime value of one @main parameter comes from.
struct GraphParam {
  enum class Source { kInput, kScalar, kRngState } source = Source::kInput;
  int input_index = -1;  // kInput
  GraphScalar scalar;    // kScalar (scalar.symbol >= 0: the runtime size of that symbol)
  DType dtype = DType::kF32;
};

struct LoweredGraph {
  std::string text;
  std::vector<GraphParam> params;
  std::vector<TensorType> output_types;
  std::vector<std::string> check_messages;  // results after the outputs, one i1 each
  std::vector<CheckKind> check_kinds;
};

base::StatusOr<LoweredGraph> lower_graph(const GraphSpec& graph);

}  // namespace torchtpu::lowering
