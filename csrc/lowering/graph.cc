#include "lowering/graph.h"

#include <map>
#include <utility>

namespace torchtpu::lowering {
namespace {

// The values of one graph being lowered: inputs become @main parameters where they are
// first read, node results are recorded as they are made.
class GraphValues {
 public:
  GraphValues(const GraphSpec& graph, Builder& builder, LoweredGraph& out)
      : graph_(graph), builder_(builder), out_(out) {}

  // Value `id`, declaring an input's parameter on its first read. Unknown ids are the
  // lowering's bug (an internal error), reported through the builder.
  Value get(int id, const std::string& op) {
    auto it = values_.find(id);
    if (it != values_.end()) return it->second;
    if (id >= 0 && id < static_cast<int>(graph_.inputs.size())) return declare_input(id);
    if (status_.ok()) {
      status_ = base::internal_error("lowering: graph node " + op + " reads value " +
                                     std::to_string(id) + " before it is defined");
    }
    return builder_.zeros(TensorType{DType::kF32, {}});
  }
  // The parameter index of input `input`, or -1 when nothing read it.
  int param_of(int input) const {
    auto it = input_params_.find(input);
    return it == input_params_.end() ? -1 : it->second;
  }
  bool defined(int id) const {
    return values_.count(id) > 0 || (id >= 0 && id < static_cast<int>(graph_.inputs.size()));
  }
  void set(int id, Value v) { values_[id] = std::move(v); }
  const base::Status& status() const { return status_; }

 private:
  Value declare_input(int i) {
    const TensorType& t = graph_.inputs[i];
    input_params_[i] = static_cast<int>(out_.params.size());
    Value v = builder_.param(t);
    GraphParam p;
    p.source = GraphParam::Source::kInput;
    p.input_index = i;
    p.dtype = t.dtype;
    out_.params.push_back(p);
    values_[i] = v;
    return v;
  }

  const GraphSpec& graph_;
  Builder& builder_;
  LoweredGraph& out_;
  std::map<int, Value> values_;
  std::map<int, int> input_params_;
  base::Status status_;
};

// What node `index` of the graph reads: its tensor arguments are graph values; its scalars
// and generator state are new parameters attributed to the node.
class NodeSource : public ValueSource {
 public:
  NodeSource(const GraphNode& node, int index, GraphValues& values, Builder& builder,
             LoweredGraph& out)
      : node_(node), index_(index), values_(values), builder_(builder), out_(out) {}

  Value tensor(size_t arg, int item) override {
    int id = -1;
    if (item < 0 && arg < node_.tensor_refs.size()) id = node_.tensor_refs[arg];
    if (item >= 0 && arg < node_.list_refs.size() &&
        item < static_cast<int>(node_.list_refs[arg].size())) {
      id = node_.list_refs[arg][item];
    }
    if (id < 0) {
      fail(base::internal_error("lowering: graph node " + node_.op + " argument " +
                                std::to_string(arg) + " is an unbound tensor"));
      return builder_.zeros(item < 0 ? node_.args.at(arg).type
                                     : node_.args.at(arg).list_types.at(item));
    }
    return values_.get(id, node_.op);
  }

  Value scalar(size_t arg, int item, DType t, ScalarCast cast) override {
    Value v = builder_.param(TensorType{t, {}});
    GraphParam p;
    p.source = GraphParam::Source::kScalar;
    p.node = index_;
    p.arg = static_cast<int>(arg);
    p.item = item;
    p.dtype = t;
    p.cast = cast;
    if (arg < node_.scalars.size()) p.scalar = node_.scalars[arg];
    out_.params.push_back(p);
    return v;
  }

  Value rng_state() override {
    if (node_.rng_ref >= 0) {
      return builder_.op("stablehlo.bitcast_convert", {values_.get(node_.rng_ref, node_.op)},
                         TensorType{DType::kU64, {2}});
    }
    Value v = builder_.param(TensorType{DType::kU64, {2}});
    GraphParam p;
    p.source = GraphParam::Source::kRngState;
    p.node = index_;
    p.dtype = DType::kU64;
    out_.params.push_back(p);
    return v;
  }

  const base::Status& status() const { return status_; }

 private:
  void fail(base::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  const GraphNode& node_;
  int index_;
  GraphValues& values_;
  Builder& builder_;
  LoweredGraph& out_;
  base::Status status_;
};

}  // namespace

base::StatusOr<LoweredGraph> lower_graph(const GraphSpec& graph, const std::string& module_name) {
  Builder builder(module_name);
  LoweredGraph out;
  GraphValues values(graph, builder, out);
  std::vector<std::pair<Check, int>> checks;  // with the node that required it
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const GraphNode& node = graph.nodes[n];
    const LoweringFn* fn = find_lowering(node.op);
    if (fn == nullptr) {
      return base::unimplemented("lowering: " + node.op + " has no lowering");
    }
    TORCHTPU_RETURN_IF_ERROR(check_complex_support(node.op, node.args, node.out_types));
    for (const GraphScalar& s : node.scalars) {
      if (s.symbol >= graph.num_symbols) {
        return base::invalid_argument("lowering: " + node.op + " reads size value " +
                                      std::to_string(s.symbol) + " of " +
                                      std::to_string(graph.num_symbols));
      }
    }
    NodeSource source(node, static_cast<int>(n), values, builder, out);
    LoweringContext ctx(builder, node.op, node.args, node.out_types, source);
    TORCHTPU_ASSIGN_OR_RETURN(std::vector<Value> results, (*fn)(ctx));
    if (!builder.unsupported_error().empty()) {
      return base::unimplemented("lowering: " + node.op + " is not lowered for these dtypes (" +
                                 builder.unsupported_error() + ")");
    }
    TORCHTPU_RETURN_IF_ERROR(source.status());
    TORCHTPU_RETURN_IF_ERROR(values.status());
    if (!builder.misuse_error().empty()) {
      return base::internal_error("lowering: " + node.op + " built an invalid program: " +
                                  builder.misuse_error());
    }
    if (results.size() != node.out_ids.size()) {
      return base::internal_error("lowering: " + node.op + " returned " +
                                  std::to_string(results.size()) + " values (expected " +
                                  std::to_string(node.out_ids.size()) + ")");
    }
    for (size_t k = 0; k < results.size(); ++k) {
      if (!(results[k].type == node.out_types[k])) {
        return base::internal_error("lowering: " + node.op + " result " + std::to_string(k) +
                                    " has type " + results[k].type.str() + " (expected " +
                                    node.out_types[k].str() + ")");
      }
      values.set(node.out_ids[k], results[k]);
    }
    for (const auto& c : ctx.checks()) checks.emplace_back(c, static_cast<int>(n));
  }
  std::vector<Value> results;
  for (const auto& [input, output] : graph.donations) {
    if (input < 0 || input >= static_cast<int>(graph.inputs.size()) || output < 0 ||
        output >= static_cast<int>(graph.outputs.size())) {
      return base::invalid_argument("lowering: donation of input " + std::to_string(input) +
                                    " to output " + std::to_string(output) + " is out of range");
    }
    if (!(graph.inputs[input] == values.get(graph.outputs[output], "output").type)) {
      return base::invalid_argument(
          "lowering: input " + std::to_string(input) + " (" + graph.inputs[input].str() +
          ") cannot be donated to output " + std::to_string(output) + " (" +
          values.get(graph.outputs[output], "output").type.str() + ")");
    }
    // An input no node read has no parameter, so nothing to alias (its output is new).
    int param = values.param_of(input);
    if (param >= 0) builder.alias_param(static_cast<size_t>(param), static_cast<size_t>(output));
  }
  for (size_t k = 0; k < graph.outputs.size(); ++k) {
    if (!values.defined(graph.outputs[k])) {
      return base::internal_error("lowering: graph output " + std::to_string(k) + " reads value " +
                                  std::to_string(graph.outputs[k]) + ", which no node defines");
    }
    Value v = values.get(graph.outputs[k], "output");
    results.push_back(v);
    out.output_types.push_back(v.type);
  }
  std::vector<Value> flags;
  for (const auto& [check, node] : checks) {
    flags.push_back(builder.reshape(check.ok, {1}));
    out.check_messages.push_back(check.message);
    out.check_kinds.push_back(check.kind);
    out.check_nodes.push_back(node);
  }
  if (!flags.empty()) {
    results.push_back(flags.size() == 1 ? flags[0] : builder.concatenate(flags, 0));
  }
  if (!builder.misuse_error().empty()) {
    return base::internal_error("lowering: a graph built an invalid program: " +
                                builder.misuse_error());
  }
  out.text = builder.finish(results);
  return out;
}

}  // namespace torchtpu::lowering
