#include "lowering/graph.h"

#include <map>

namespace torchtpu::lowering {

base::StatusOr<LoweredGraph> lower_graph(const GraphSpec& graph) {
  Builder builder("torchtpu_graph");
  LoweredGraph out;
  std::map<int, Value> values;
  // Inputs first, in order, so parameter i of @main is graph input i.
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    values[static_cast<int>(i)] = builder.param(graph.inputs[i]);
    GraphParam p;
    p.source = GraphParam::Source::kInput;
    p.input_index = static_cast<int>(i);
    p.dtype = graph.inputs[i].dtype;
    out.params.push_back(p);
  }
  auto lookup = [&](int id, const std::string& op) -> base::StatusOr<Value> {
    auto it = values.find(id);
    if (it == values.end()) {
      return base::internal_error("lowering: graph node " + op + " reads value " +
                                  std::to_string(id) + " before it is defined");
    }
    return it->second;
  };
  std::vector<Check> checks;
  for (const GraphNode& node : graph.nodes) {
    const LoweringFn* fn = find_lowering(node.op);
    if (fn == nullptr) {
      return base::unimplemented("lowering: " + node.op + " has no lowering (in a compiled graph)");
    }
    TORCHTPU_RETURN_IF_ERROR(check_complex_support(node.op, node.args, node.out_types));
    LoweringContext ctx(builder, node.op, node.args, node.out_types);
    for (size_t i = 0; i < node.args.size(); ++i) {
      if (i < node.tensor_refs.size() && node.tensor_refs[i] >= 0) {
        TORCHTPU_ASSIGN_OR_RETURN(Value v, lookup(node.tensor_refs[i], node.op));
        ctx.bind_tensor(i, v);
      }
      if (i < node.list_refs.size() && !node.list_refs[i].empty()) {
        std::vector<Value> items;
        for (int id : node.list_refs[i]) {
          TORCHTPU_ASSIGN_OR_RETURN(Value v, lookup(id, node.op));
          items.push_back(v);
        }
        ctx.bind_tensor_list(i, items);
      }
    }
    TORCHTPU_ASSIGN_OR_RETURN(std::vector<Value> results, (*fn)(ctx));
    if (!builder.unsupported_error().empty()) {
      return base::unimplemented("lowering: " + node.op + " is not lowered for these dtypes (" +
                                 builder.unsupported_error() + ")");
    }
    if (!builder.misuse_error().empty()) {
      return base::internal_error("lowering: " + node.op + " built an invalid program in a "
                                  "graph: " + builder.misuse_error());
    }
    if (results.size() != node.out_ids.size()) {
      return base::internal_error("lowering: " + node.op + " returned " +
                                  std::to_string(results.size()) + " values in a graph (expected " +
                                  std::to_string(node.out_ids.size()) + ")");
    }
    for (size_t k = 0; k < results.size(); ++k) {
      if (!(results[k].type == node.out_types[k])) {
        return base::internal_error("lowering: " + node.op + " result " + std::to_string(k) +
                                    " has type " + results[k].type.str() + " (expected " +
                                    node.out_types[k].str() + ")");
      }
      values[node.out_ids[k]] = results[k];
    }
    // Parameters the node declared itself: runtime scalars and generator states.
    for (const ParamBinding& b : ctx.bindings()) {
      GraphParam p;
      p.dtype = b.dtype;
      if (b.source == ParamBinding::Source::kScalar) {
        p.source = GraphParam::Source::kScalar;
        p.scalar = node.scalars.at(b.arg_index);
        if (p.scalar.symbol >= graph.num_symbols) {
          return base::invalid_argument("lowering: " + node.op + " reads size value " +
                                        std::to_string(p.scalar.symbol) + " of " +
                                        std::to_string(graph.num_symbols));
        }
      } else if (b.source == ParamBinding::Source::kRngState) {
        p.source = GraphParam::Source::kRngState;
      } else if (b.source == ParamBinding::Source::kScalarListItem) {
        return base::unimplemented("lowering: graph node " + node.op + " takes a Scalar[] "
                                   "argument, which compiled graphs do not pass yet");
      } else {
        return base::internal_error("lowering: graph node " + node.op + " argument " +
                                    std::to_string(b.arg_index) + " is an unbound tensor");
      }
      out.params.push_back(p);
    }
    for (const auto& c : ctx.checks()) checks.push_back(c);
  }
  std::vector<Value> results;
  for (const auto& [input, output] : graph.donations) {
    if (input < 0 || input >= static_cast<int>(graph.inputs.size()) || output < 0 ||
        output >= static_cast<int>(graph.outputs.size())) {
      return base::invalid_argument("lowering: donation of input " + std::to_string(input) +
                                    " to output " + std::to_string(output) + " is out of range");
    }
    TORCHTPU_ASSIGN_OR_RETURN(Value v, lookup(graph.outputs[output], "output"));
    if (!(v.type == graph.inputs[input])) {
      return base::invalid_argument("lowering: input " + std::to_string(input) + " (" +
                                    graph.inputs[input].str() + ") cannot be donated to output " +
                                    std::to_string(output) + " (" + v.type.str() + ")");
    }
    builder.alias_param(static_cast<size_t>(input), static_cast<size_t>(output));
  }
  for (size_t k = 0; k < graph.outputs.size(); ++k) {
    TORCHTPU_ASSIGN_OR_RETURN(Value v, lookup(graph.outputs[k], "output"));
    results.push_back(v);
    out.output_types.push_back(v.type);
  }
  for (const Check& check : checks) {
    results.push_back(check.ok);
    out.check_messages.push_back(check.message);
    out.check_kinds.push_back(check.kind);
  }
  if (!builder.misuse_error().empty()) {
    return base::internal_error("lowering: a graph built an invalid program: " +
                                builder.misuse_error());
  }
  out.text = builder.finish(results);
  return out;
}

}  // namespace torchtpu::lowering
