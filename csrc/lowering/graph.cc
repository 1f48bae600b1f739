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
             LoweredGraph& out, bool in_subgraph)
      : node_(node),
        index_(index),
        values_(values),
        builder_(builder),
        out_(out),
        in_subgraph_(in_subgraph) {}

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
    if (in_subgraph_) {
      // A state parameter would be one draw for every iteration of a loop, and one taken
      // from the generator whichever branch runs. (dynamo/split.py runs such control flow
      // eagerly; this is the lowering's own refusal.)
      fail(base::unimplemented("lowering: " + node_.op +
                               " draws random numbers inside a control-flow subgraph (cond, "
                               "while_loop, scan, map), which a compiled graph does not "
                               "support"));
      return builder_.zeros(TensorType{DType::kU64, {2}});
    }
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
  bool in_subgraph_;
  base::Status status_;
};

using NodeChecks = std::vector<std::pair<Check, int>>;  // with the node that required it

// Lowers a graph's nodes, and the subgraphs of its control-flow nodes as regions of
// stablehlo.case / stablehlo.while that read the values defined around them.
class GraphLowerer {
 public:
  GraphLowerer(Builder& builder, LoweredGraph& out) : builder_(builder), out_(out) {}

  // The node of `top` (the graph lowered, not a subgraph) whose lowering refused its call as
  // an unimplemented case, when lowering failed there; else -1.
  const GraphSpec* top = nullptr;
  int refused_node = -1;

  // Where a graph's nodes are lowered: the graph itself, or a control-flow node's subgraph
  // inside a region (a subgraph called in place takes its caller's scope).
  enum class Scope { kGraph, kSubgraph };

  // Lowers `graph`'s nodes into `values`, their data checks into `checks`.
  base::Status lower_nodes(const GraphSpec& graph, GraphValues& values, NodeChecks& checks,
                           Scope scope) {
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
      const GraphNode& node = graph.nodes[n];
      int index = static_cast<int>(n);
      std::vector<Value> results;
      if (node.op == kCondOp || node.op == kWhileOp || node.op == kScanOp ||
          node.op == kInvokeOp) {
        TORCHTPU_ASSIGN_OR_RETURN(results,
                                  control_flow(graph, node, index, values, checks, scope));
      } else {
        base::StatusOr<std::vector<Value>> lowered =
            lower_node(graph, node, index, values, checks, scope);
        if (!lowered.ok()) {
          // (A called subgraph lowers in its caller's scope, its nodes numbered its own way.)
          if (&graph == top && lowered.status().code() == base::StatusCode::kUnimplemented) {
            refused_node = index;
          }
          return lowered.status();
        }
        results = std::move(lowered).value();
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
    }
    return base::Status();
  }

 private:
  base::StatusOr<std::vector<Value>> lower_node(const GraphSpec& graph, const GraphNode& node,
                                                int index, GraphValues& values,
                                                NodeChecks& checks, Scope scope) {
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
    NodeSource source(node, index, values, builder_, out_, scope != Scope::kGraph);
    LoweringContext ctx(builder_, node.op, node.args, node.out_types, source);
    TORCHTPU_ASSIGN_OR_RETURN(std::vector<Value> results, (*fn)(ctx));
    if (!builder_.unsupported_error().empty()) {
      return base::unimplemented("lowering: " + node.op + " is not lowered for these dtypes (" +
                                 builder_.unsupported_error() + ")");
    }
    TORCHTPU_RETURN_IF_ERROR(source.status());
    TORCHTPU_RETURN_IF_ERROR(values.status());
    if (!builder_.misuse_error().empty()) {
      return base::internal_error("lowering: " + node.op + " built an invalid program: " +
                                  builder_.misuse_error());
    }
    for (const auto& c : ctx.checks()) checks.emplace_back(c, index);
    return results;
  }

  // A subgraph's data checks leave its region as a code: the distinct (message, kind) of
  // its checks are numbered from 1 (`groups`), and the code, computed inside the region,
  // is the number of the first group with a failed check, or 0.
  using CheckGroups = std::vector<std::pair<std::string, CheckKind>>;
  Value failure_code(const NodeChecks& inner, CheckGroups* groups) {
    groups->clear();
    std::vector<Value> held;  // per group: whether all its checks held
    for (const auto& [check, node] : inner) {
      std::pair<std::string, CheckKind> key{check.message, check.kind};
      size_t g = 0;
      while (g < groups->size() && (*groups)[g] != key) ++g;
      Value ok = builder_.all_of(check.ok);
      if (g == groups->size()) {
        groups->push_back(key);
        held.push_back(ok);
      } else {
        held[g] = builder_.binary("and", held[g], ok);
      }
    }
    Value code = builder_.constant_i64(0, DType::kI32);
    for (size_t g = held.size(); g-- > 0;) {
      code = builder_.select(held[g], code,
                             builder_.constant_i64(static_cast<int64_t>(g + 1), DType::kI32));
    }
    return code;
  }
  // The checks node `index` reports for a subgraph whose region handed out `code`: one per
  // group, failed when the code names it.
  void report(Value code, const CheckGroups& groups, int index, NodeChecks& checks) {
    for (size_t g = 0; g < groups.size(); ++g) {
      Value named = builder_.constant_i64(static_cast<int64_t>(g + 1), DType::kI32);
      checks.emplace_back(
          Check{builder_.compare(code, named, "NE"), groups[g].first, groups[g].second}, index);
    }
  }
  // A loop's code after one more iteration: the first failure is kept.
  Value first_failure(Value so_far, Value now) {
    return builder_.select(
        builder_.compare(so_far, builder_.constant_i64(0, DType::kI32), "NE"), so_far, now);
  }

  // The node's tensor arguments from `first` on, as graph values.
  std::vector<Value> tensor_args(const GraphNode& node, size_t first, GraphValues& values) {
    std::vector<Value> vs;
    for (size_t a = first; a < node.tensor_refs.size(); ++a) {
      if (node.tensor_refs[a] >= 0) vs.push_back(values.get(node.tensor_refs[a], node.op));
    }
    return vs;
  }

  // A control-flow node: cond, while_loop, scan (and map), invoke_subgraph. The data
  // checks of its subgraphs leave their regions as failure codes (failure_code): one extra
  // result per cond branch (0 from the branches not taken), one extra loop state for a
  // loop's body (its first failure kept).
  base::StatusOr<std::vector<Value>> control_flow(const GraphSpec& graph, const GraphNode& node,
                                                  int index, GraphValues& values,
                                                  NodeChecks& checks, Scope scope) {
    for (int r : node.regions) {
      if (r < 0 || r >= static_cast<int>(graph.regions.size())) {
        return base::invalid_argument("lowering: " + node.op + " names subgraph " +
                                      std::to_string(r) + " of " +
                                      std::to_string(graph.regions.size()));
      }
    }
    if (node.op == kScanOp) return scan(graph, node, index, values, checks);
    if (node.op == kInvokeOp) {
      if (node.regions.size() != 1) return base::invalid_argument("lowering: " + node.op +
                                                                  " needs one subgraph");
      base::Status status;
      NodeChecks inner;
      std::vector<Value> results =
          region(graph.regions[node.regions[0]], tensor_args(node, 0, values), node.out_types,
                 inner, &status, scope);
      TORCHTPU_RETURN_IF_ERROR(status);
      for (auto& [check, at] : inner) checks.emplace_back(std::move(check), index);
      return results;
    }
    if (node.regions.size() != 2 || node.args.empty()) {
      return base::invalid_argument("lowering: " + node.op +
                                    " needs two subgraphs and its tensor arguments");
    }
    base::Status status;
    if (node.op == kCondOp) {
      // The predicate: a constant (sizes decided it), or a tensor of one element of any
      // dtype, true when nonzero (as torch.cond reads it).
      Value pred;
      if (node.args[0].kind == ArgKind::kBool) {
        pred = builder_.constant(node.args[0].int_value != 0 ? 1 : 0, DType::kBool);
      } else {
        pred = values.get(node.tensor_refs[0], node.op);
        if (pred.type.num_elements() != 1) {
          return base::invalid_argument("lowering: a cond's predicate is " + pred.type.str() +
                                        ", not one element");
        }
        pred = builder_.convert(builder_.reshape(pred, {}), DType::kBool);
      }
      std::vector<Value> operands = tensor_args(node, 1, values);
      // Branch 0 when the predicate holds, else branch 1.
      Value branch = builder_.select(pred, builder_.constant_i64(0, DType::kI32),
                                     builder_.constant_i64(1, DType::kI32));
      // One failure code per branch after the outputs (0 from the branches not taken).
      size_t num_branches = node.regions.size();
      std::vector<TensorType> types = node.out_types;
      types.insert(types.end(), num_branches, TensorType{DType::kI32, {}});
      std::vector<CheckGroups> groups(num_branches);
      std::vector<Builder::RegionBody> branches;
      for (size_t b = 0; b < num_branches; ++b) {
        branches.push_back([&, b](Builder&, const std::vector<Value>&) {
          NodeChecks inner;
          std::vector<Value> outs = region(graph.regions[node.regions[b]], operands,
                                           node.out_types, inner, &status, Scope::kSubgraph);
          Value code = failure_code(inner, &groups[b]);
          for (size_t k = 0; k < num_branches; ++k) {
            outs.push_back(k == b ? code : builder_.constant_i64(0, DType::kI32));
          }
          return outs;
        });
      }
      std::vector<Value> results = builder_.case_of(branch, types, branches);
      TORCHTPU_RETURN_IF_ERROR(status);
      size_t num_outputs = node.out_types.size();
      for (size_t b = 0; b < num_branches; ++b) {
        report(results[num_outputs + b], groups[b], index, checks);
      }
      results.resize(num_outputs);
      return results;
    }
    std::vector<Value> all = tensor_args(node, 0, values);
    size_t carried = node.out_types.size();
    if (all.size() < carried) {
      return base::invalid_argument("lowering: a while_loop carries " + std::to_string(carried) +
                                    " values but has " + std::to_string(all.size()) + " inputs");
    }
    std::vector<Value> init(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(carried));
    std::vector<Value> invariant(all.begin() + static_cast<std::ptrdiff_t>(carried), all.end());
    auto inputs = [&](const std::vector<Value>& state) {
      std::vector<Value> in = state;
      in.insert(in.end(), invariant.begin(), invariant.end());
      return in;
    };
    const TensorType keep_going{DType::kBool, {}};
    // The loop state ends with the body's failure code so far.
    init.push_back(builder_.constant_i64(0, DType::kI32));
    auto without_code = [&](const std::vector<Value>& state) {
      return std::vector<Value>(state.begin(), state.end() - 1);
    };
    CheckGroups groups;
    std::vector<Value> results = builder_.while_loop(
        init,
        [&](Builder&, const std::vector<Value>& state) {
          NodeChecks inner;
          std::vector<Value> outs = region(graph.regions[node.regions[0]],
                                           inputs(without_code(state)), {keep_going}, inner,
                                           &status, Scope::kSubgraph);
          if (!inner.empty() && status.ok()) {
            status = base::unimplemented("lowering: a while_loop's condition checks its data (" +
                                         inner.front().first.message +
                                         "), which a compiled graph does not support");
          }
          return outs;
        },
        [&](Builder&, const std::vector<Value>& state) {
          NodeChecks inner;
          std::vector<Value> outs = region(graph.regions[node.regions[1]],
                                           inputs(without_code(state)), node.out_types, inner,
                                           &status, Scope::kSubgraph);
          outs.push_back(first_failure(state.back(), failure_code(inner, &groups)));
          return outs;
        });
    TORCHTPU_RETURN_IF_ERROR(status);
    report(results.back(), groups, index, checks);
    results.pop_back();
    return results;
  }

  // A scan: a while loop over the leading dim of its `xs`, the combine subgraph mapping
  // (carry..., one row of each xs..., loop-invariant inputs...) to (next carry..., one row
  // of each stacked output...). Arguments: the number of carried values and of xs (ints),
  // then the initial carry, the xs and the loop-invariant inputs. Results: the final carry,
  // then the stacked outputs.
  base::StatusOr<std::vector<Value>> scan(const GraphSpec& graph, const GraphNode& node,
                                          int index, GraphValues& values, NodeChecks& checks) {
    auto invalid = [&](const std::string& what) {
      return base::invalid_argument("lowering: " + node.op + " " + what);
    };
    if (node.regions.size() != 1 || node.args.size() < 2 ||
        node.args[0].kind != ArgKind::kInt || node.args[1].kind != ArgKind::kInt) {
      return invalid("needs one subgraph and the counts of its carry and xs");
    }
    if (node.args[0].int_value < 0 || node.args[1].int_value < 0) {
      return invalid("has negative counts");
    }
    const size_t num_carry = static_cast<size_t>(node.args[0].int_value);
    const size_t num_xs = static_cast<size_t>(node.args[1].int_value);
    std::vector<Value> all = tensor_args(node, 2, values);
    if (num_xs == 0 || all.size() < num_carry + num_xs || node.out_types.size() < num_carry) {
      return invalid("has " + std::to_string(all.size()) + " inputs and " +
                     std::to_string(node.out_types.size()) + " results for " +
                     std::to_string(num_carry) + " carried values and " +
                     std::to_string(num_xs) + " xs");
    }
    auto part = [&](size_t from, size_t count) {
      return std::vector<Value>(all.begin() + static_cast<std::ptrdiff_t>(from),
                                all.begin() + static_cast<std::ptrdiff_t>(from + count));
    };
    std::vector<Value> carry = part(0, num_carry), xs = part(num_carry, num_xs);
    std::vector<Value> invariant = part(num_carry + num_xs, all.size() - num_carry - num_xs);
    if (xs[0].rank() == 0) return invalid("scans a 0-d tensor");
    const int64_t length = xs[0].dims()[0];
    std::vector<TensorType> want;  // the combine subgraph's results
    for (size_t k = 0; k < node.out_types.size(); ++k) {
      const TensorType& t = node.out_types[k];
      if (k < num_carry) {
        want.push_back(t);
      } else if (t.rank() == 0 || t.dims[0] != length) {
        return invalid("output " + t.str() + " does not stack " + std::to_string(length) +
                       " rows");
      } else {
        want.push_back(TensorType{t.dtype, Dims(t.dims.begin() + 1, t.dims.end())});
      }
    }
    for (const Value& x : xs) {
      if (x.rank() == 0 || x.dims()[0] != length) {
        return invalid("scans " + x.type.str() + " beside a length of " + std::to_string(length));
      }
    }
    const Value zero = builder_.constant_i64(0, DType::kI64);
    auto starts = [&](const Value& i, int64_t rank) {
      std::vector<Value> v{i};
      v.insert(v.end(), static_cast<size_t>(rank - 1), zero);
      return v;
    };
    // State: the row index, the carry, the stacked outputs so far, the body's checks.
    std::vector<Value> init{zero};
    init.insert(init.end(), carry.begin(), carry.end());
    for (size_t k = num_carry; k < node.out_types.size(); ++k) {
      init.push_back(builder_.zeros(node.out_types[k]));
    }
    init.push_back(builder_.constant_i64(0, DType::kI32));
    base::Status status;
    CheckGroups groups;
    std::vector<Value> results = builder_.while_loop(
        init,
        [&](Builder&, const std::vector<Value>& state) {
          return std::vector<Value>{builder_.compare(
              state[0], builder_.constant_i64(length, DType::kI64), "LT")};
        },
        [&](Builder&, const std::vector<Value>& state) {
          const Value& i = state[0];
          std::vector<Value> inputs(state.begin() + 1,
                                    state.begin() + 1 + static_cast<std::ptrdiff_t>(num_carry));
          for (const Value& x : xs) {
            Dims row(x.dims().begin() + 1, x.dims().end());
            Dims one_row = x.dims();
            one_row[0] = 1;
            std::vector<Value> operands{x};
            for (const Value& st : starts(i, x.rank())) operands.push_back(st);
            Value slice = builder_.op("stablehlo.dynamic_slice", operands,
                                      TensorType{x.dtype(), one_row},
                                      "slice_sizes = " + i64_array(one_row));
            inputs.push_back(builder_.reshape(slice, row));
          }
          inputs.insert(inputs.end(), invariant.begin(), invariant.end());
          NodeChecks inner;
          std::vector<Value> outs = region(graph.regions[node.regions[0]], inputs, want, inner,
                                           &status, Scope::kSubgraph);
          std::vector<Value> next{builder_.add(i, builder_.constant_i64(1, DType::kI64))};
          next.insert(next.end(), outs.begin(),
                      outs.begin() + static_cast<std::ptrdiff_t>(num_carry));
          for (size_t k = num_carry; k < outs.size(); ++k) {
            const Value& stacked = state[1 + k];
            Dims one_row = stacked.dims();
            one_row[0] = 1;
            std::vector<Value> operands{stacked, builder_.reshape(outs[k], one_row)};
            for (const Value& st : starts(i, stacked.rank())) operands.push_back(st);
            next.push_back(
                builder_.op("stablehlo.dynamic_update_slice", operands, stacked.type));
          }
          next.push_back(first_failure(state.back(), failure_code(inner, &groups)));
          return next;
        });
    TORCHTPU_RETURN_IF_ERROR(status);
    report(results.back(), groups, index, checks);
    return std::vector<Value>(results.begin() + 1, results.end() - 1);
  }

  // Lowers subgraph `sub` at the builder's position (inside a region being built, or in
  // place: `scope`) with `inputs` as its inputs, its data checks into `checks` (their
  // values live in the region); returns its outputs, which must have types `want`. A
  // failure goes to `status` (the first one kept) and yields placeholders of those types.
  std::vector<Value> region(const GraphSpec& sub, const std::vector<Value>& inputs,
                            const std::vector<TensorType>& want, NodeChecks& checks,
                            base::Status* status, Scope scope) {
    auto placeholders = [&](base::Status s) {
      if (status->ok()) *status = std::move(s);
      std::vector<Value> vs;
      for (const TensorType& t : want) vs.push_back(builder_.zeros(t));
      return vs;
    };
    if (sub.inputs.size() != inputs.size()) {
      return placeholders(base::invalid_argument(
          "lowering: a subgraph takes " + std::to_string(sub.inputs.size()) + " inputs, given " +
          std::to_string(inputs.size())));
    }
    if (sub.num_symbols != 0 || !sub.donations.empty()) {
      return placeholders(base::invalid_argument(
          "lowering: a subgraph reads size values or donates inputs"));
    }
    GraphValues values(sub, builder_, out_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!(inputs[i].type == sub.inputs[i])) {
        return placeholders(base::invalid_argument(
            "lowering: subgraph input " + std::to_string(i) + " is " + sub.inputs[i].str() +
            ", given " + inputs[i].type.str()));
      }
      values.set(static_cast<int>(i), inputs[i]);
    }
    base::Status s = lower_nodes(sub, values, checks, scope);
    if (!s.ok()) return placeholders(std::move(s));
    std::vector<Value> outs;
    for (int id : sub.outputs) {
      if (!values.defined(id)) {
        return placeholders(base::internal_error(
            "lowering: a subgraph output reads value " + std::to_string(id) +
            ", which no node defines"));
      }
      outs.push_back(values.get(id, "subgraph output"));
    }
    if (outs.size() != want.size()) {
      return placeholders(base::invalid_argument(
          "lowering: a subgraph returns " + std::to_string(outs.size()) + " values, " +
          std::to_string(want.size()) + " expected"));
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      if (!(outs[k].type == want[k])) {
        return placeholders(base::invalid_argument(
            "lowering: subgraph output " + std::to_string(k) + " is " + outs[k].type.str() +
            ", " + want[k].str() + " expected (both branches of a cond, and a loop body and "
            "its state, must agree)"));
      }
    }
    return outs;
  }

  Builder& builder_;
  LoweredGraph& out_;
};

}  // namespace

base::StatusOr<LoweredGraph> lower_graph(const GraphSpec& graph, const std::string& module_name,
                                         int* refused_node) {
  Builder builder(module_name);
  LoweredGraph out;
  GraphValues values(graph, builder, out);
  NodeChecks checks;
  GraphLowerer lowerer(builder, out);
  lowerer.top = &graph;
  base::Status lowered = lowerer.lower_nodes(graph, values, checks, GraphLowerer::Scope::kGraph);
  if (refused_node != nullptr) *refused_node = lowerer.refused_node;
  TORCHTPU_RETURN_IF_ERROR(lowered);
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
    out.checks_guarded &= check.guarded;
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
