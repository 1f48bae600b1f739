#include "lowering/graph.h"

#include <map>
#include <optional>

namespace torchtpu::lowering {

base::StatusOr<LoweredGraph> lower_graph(const GraphSpec& graph) {
  Builder builder("torchtpu_graph");
  LoweredGraph out;
  std::map<int, Value> values;
  // Inputs first, in order, so parameter i of @main is graph input i. An input with
  // dynamic dims is a flat compact buffer (see graph.h) until it is reshaped below.
  std::vector<bool> compact(graph.inputs.size(), false);
  for (const DynamicDim& d : graph.dynamic_dims) {
    if (d.input < 0 || d.input >= static_cast<int>(graph.inputs.size()) || d.symbol < 0 ||
        d.symbol >= graph.num_symbols || d.dim < 0 || d.dim >= graph.inputs[d.input].rank()) {
      return base::invalid_argument("lowering: dynamic dim (input " + std::to_string(d.input) +
                                    ", dim " + std::to_string(d.dim) + ", symbol " +
                                    std::to_string(d.symbol) + ") is out of range");
    }
    compact[d.input] = true;
  }
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const TensorType& t = graph.inputs[i];
    TensorType param_type = compact[i] ? TensorType{t.dtype, {t.num_elements()}} : t;
    values[static_cast<int>(i)] = builder.param(param_type);
    GraphParam p;
    p.source = GraphParam::Source::kInput;
    p.input_index = static_cast<int>(i);
    p.dtype = t.dtype;
    out.params.push_back(p);
  }
  // Size symbols, then each compact input reshaped to its bounded dynamic shape. From here
  // on XLA tracks true sizes through every op; lowerings ask element_count() for counts.
  std::vector<Value> symbols;
  for (int s = 0; s < graph.num_symbols; ++s) {
    symbols.push_back(builder.param(TensorType{DType::kI32, {}}));
    GraphParam p;
    p.source = GraphParam::Source::kSymbol;
    p.input_index = s;
    p.dtype = DType::kI32;
    out.params.push_back(p);
  }
  builder.set_dynamic_sizes(graph.num_symbols > 0);
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    if (!compact[i]) continue;
    int numel = i < graph.numel_symbols.size() ? graph.numel_symbols[i] : -1;
    if (numel < 0 || numel >= graph.num_symbols) {
      return base::invalid_argument("lowering: dynamic input " + std::to_string(i) +
                                    " has no element-count symbol");
    }
    // The element count is implied by the dims' sizes; the symbol stays a parameter.
    std::vector<std::optional<Value>> sizes(graph.inputs[i].rank());
    for (const DynamicDim& d : graph.dynamic_dims) {
      if (d.input == static_cast<int>(i)) sizes[d.dim] = symbols[d.symbol];
    }
    Value& v = values[static_cast<int>(i)];
    v = builder.expand_compact(v, graph.inputs[i], sizes);
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
        for (const StaticArgDim& s : node.static_arg_dims) {
          if (s.arg != static_cast<int>(i)) continue;
          if (s.dim < 0 || s.dim >= v.rank() || s.symbol < 0 || s.symbol >= graph.num_symbols) {
            return base::invalid_argument("lowering: " + node.op + " static argument dim (arg " +
                                          std::to_string(s.arg) + ", dim " +
                                          std::to_string(s.dim) + ", symbol " +
                                          std::to_string(s.symbol) + ") is out of range");
          }
          v = builder.static_along(v, s.dim, builder.convert(symbols[s.symbol], DType::kI64),
                                   builder.zeros(TensorType{v.dtype(), {}}));
        }
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
    for (const ResultSize& r : node.result_sizes) {
      if (r.result < 0 || r.result >= static_cast<int>(results.size()) || r.symbol < 0 ||
          r.symbol >= graph.num_symbols || r.dim < 0 || r.dim >= results[r.result].rank()) {
        return base::invalid_argument("lowering: " + node.op + " result size (result " +
                                      std::to_string(r.result) + ", dim " + std::to_string(r.dim) +
                                      ", symbol " + std::to_string(r.symbol) + ") is out of range");
      }
      Value& v = values[node.out_ids[r.result]];
      v = builder.set_dimension_size(v, symbols[r.symbol], r.dim);
    }
    // Parameters the node declared itself: runtime scalars and generator states.
    for (const ParamBinding& b : ctx.bindings()) {
      GraphParam p;
      p.dtype = b.dtype;
      if (b.source == ParamBinding::Source::kScalar) {
        p.source = GraphParam::Source::kScalar;
        p.scalar = node.scalars.at(b.arg_index);
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
        output >= static_cast<int>(graph.outputs.size()) || compact[input]) {
      return base::invalid_argument("lowering: donation of input " + std::to_string(input) +
                                    " to output " + std::to_string(output) + " is out of range "
                                    "or names a dynamic input");
    }
    TORCHTPU_ASSIGN_OR_RETURN(Value v, lookup(graph.outputs[output], "output"));
    if (!(v.type == graph.inputs[input])) {
      return base::invalid_argument("lowering: input " + std::to_string(input) + " (" +
                                    graph.inputs[input].str() + ") cannot be donated to output " +
                                    std::to_string(output) + " (" + v.type.str() + ")");
    }
    builder.alias_param(static_cast<size_t>(input), static_cast<size_t>(output));
  }
  for (const DynamicOutputDim& d : graph.output_dynamic_dims) {
    if (d.output < 0 || d.output >= static_cast<int>(graph.outputs.size()) || d.symbol < 0 ||
        d.symbol >= graph.num_symbols) {
      return base::invalid_argument("lowering: dynamic output dim (output " +
                                    std::to_string(d.output) + ", dim " + std::to_string(d.dim) +
                                    ", symbol " + std::to_string(d.symbol) + ") is out of range");
    }
  }
  for (size_t k = 0; k < graph.outputs.size(); ++k) {
    TORCHTPU_ASSIGN_OR_RETURN(Value v, lookup(graph.outputs[k], "output"));
    std::vector<std::optional<Value>> sizes(v.rank());
    bool dynamic = false;
    for (const DynamicOutputDim& d : graph.output_dynamic_dims) {
      if (d.output != static_cast<int>(k)) continue;
      if (d.dim < 0 || d.dim >= v.rank()) {
        return base::invalid_argument("lowering: output " + std::to_string(k) + " (" +
                                      v.type.str() + ") has no dim " + std::to_string(d.dim));
      }
      sizes[d.dim] = symbols[d.symbol];
      dynamic = true;
    }
    if (dynamic) v = builder.compact(v, sizes);
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
