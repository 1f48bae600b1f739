// Running a pending graph (pending_graph.h): its structure finds a compiled fused program
// (or one is lowered through the lowering table and compiled), its captured inputs and
// recorded parameters feed it, and its outputs become the buffers of the values storages
// still hold.
#include <c10/util/Exception.h>

#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "aten/compiled_op.h"
#include "aten/deferred_checks.h"
#include "aten/device_runtime.h"
#include "aten/interrupts.h"
#include "aten/pending_graph.h"
#include "aten/program_executor.h"
#include "aten/record_site.h"
#include "aten/tpu_storage.h"
#include "aten/view_programs.h"
#include "base/lru_map.h"
#include "base/metrics.h"
#include "lowering/graph.h"
#include "lowering/storage_programs.h"
#include "runtime/execution_trace.h"

namespace torchtpu::aten {
namespace {

using lowering::ArgKind;
using lowering::GraphParam;
using lowering::OpArg;
using lowering::TensorType;

struct FusedProgram {
  std::vector<int64_t> structure;  // verified on a hash hit
  std::shared_ptr<const CompiledProgram> program;
  // Per program parameter that is not an input: (node, index into that node's params).
  std::vector<std::pair<int, int>> node_params;
  std::string failure;  // non-empty: the fused program could not be built (ops run alone)
};

std::mutex g_mu;  // guards g_cache
base::LruMap<uint64_t, std::shared_ptr<const FusedProgram>>* g_cache = nullptr;

const base::Counter g_graphs_run("num_fused_graphs_run");
const base::Counter g_graphs_compiled("num_fused_graphs_compiled");
const base::Counter g_ops_run("num_fused_ops_run");
const base::Counter g_fallback_graphs("num_fused_graphs_run_op_by_op");
const base::Counter g_checks_failed("num_fused_checks_failed");

std::mutex g_hook_mu;  // guards g_hook
std::shared_ptr<const FusedGraphHook> g_hook;
thread_local bool t_in_hook = false;
const base::Counter g_hook_graphs("num_fused_graphs_run_by_shape_class");

// The position among node `n`'s recorded params of its generator state, -1 when it draws
// no random numbers, -2 when it draws from several.
int rng_param(const RecordedNode& n) {
  int at = -1, k = 0;
  for (const GraphParam& p : n.op->lowered.params) {
    if (p.source == GraphParam::Source::kScalar || p.source == GraphParam::Source::kRngState) {
      if (p.source == GraphParam::Source::kRngState) at = at == -1 ? k : -2;
      ++k;
    }
  }
  return at;
}

// Whether the hook may take `g`: ops, view reads and writes, zeros and conversions. An op
// writing its argument writes a whole storage (a write into a view is a kViewWrite): its
// result is a value like any other, which the hook computes with the op's functional form.
// A random op's generator state (taken at its call) is an input of the exported graph.
bool exportable(const PendingGraph& g) {
  for (const RecordedNode& n : g.nodes) {
    if (n.kind != RecordedNode::Kind::kOp) continue;
    const CompiledOp& c = *n.op;
    if (!c.list_write_args.empty() || !c.extra_write_args.empty()) return false;
    if (rng_param(n) == -2) return false;
    // A host 0-dim tensor the user made (not a number PyTorch wrapped) promotes as a
    // tensor of its dtype; the shape class reads host scalars back as Python numbers,
    // which promote as numbers (x * float64 0.1 would be float32 there).
    for (const c10::IValue& v : n.call_args) {
      if (v.isTensor() && v.toTensor().device().is_cpu() && v.toTensor().dim() == 0 &&
          !v.toTensor().unsafeGetTensorImpl()->is_wrapped_number()) {
        return false;
      }
    }
  }
  return true;
}

// The buffer holding the value `t` returned for an output of type `type`: its storage's
// buffer when `t` is a row-major prefix of it (a padded graph's compact output: no
// program), else `t` read at its size.
runtime::BufferPtr output_buffer(const at::Tensor& t, const TensorType& type) {
  TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 &&
                  to_dtype(t.scalar_type()) == type.dtype &&
                  c10::IntArrayRef(type.dims) == t.sizes(),
              "tpu: internal: the fused graph hook returned a tensor of another type");
  if (t.storage_offset() == 0 && t.is_contiguous()) return storage_buffer(t);
  return read_tensor(t);
}

template <typename T>
void append_bits(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Appends an exact encoding of `v` to `out` (a tag, then the value's bits: -0.0 and 0.0,
// or two NaNs, differ, which at worst misses a key); false for a kind of value it does not
// encode.
bool encode_arg(const c10::IValue& v, std::string* out) {
  if (v.isNone()) {
    out->push_back('N');
  } else if (v.isBool()) {
    out->push_back(v.toBool() ? 'T' : 'F');
  } else if (v.isInt()) {
    out->push_back('I');
    append_bits(out, v.toInt());
  } else if (v.isDouble()) {
    out->push_back('D');
    append_bits(out, v.toDouble());
  } else if (v.isComplexDouble()) {
    out->push_back('C');
    append_bits(out, v.toComplexDouble());
  } else if (v.isString()) {
    out->push_back('S');
    append_bits(out, static_cast<int64_t>(v.toStringRef().size()));
    out->append(v.toStringRef());
  } else if (v.isDevice()) {
    out->push_back('V');
    append_bits(out, static_cast<int64_t>(v.toDevice().type()));
    append_bits(out, static_cast<int64_t>(v.toDevice().index()));
  } else if (v.isTensor() && v.toTensor().device().is_cpu() && v.toTensor().dim() == 0) {
    // A host scalar tensor (a Python number PyTorch wrapped, or one the user made, which
    // promotes otherwise): its dtype, the lazy conjugate and negative bits its bytes do
    // not show, and its bytes.
    const at::Tensor& t = v.toTensor();
    out->push_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? 'X' : 'Y');
    append_bits(out, static_cast<int64_t>(t.scalar_type()));
    out->push_back(static_cast<char>((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0)));
    out->append(static_cast<const char*>(t.const_data_ptr()), t.element_size());
  } else if (v.isList()) {
    out->push_back('L');
    append_bits(out, static_cast<int64_t>(v.toListRef().size()));
    for (const c10::IValue& item : v.toListRef()) {
      if (!encode_arg(item, out)) return false;
    }
  } else {
    return false;
  }
  return true;
}

// ExportedGraph::key of `g` with `outputs`, or "" (see there).
std::string graph_key(const PendingGraph& g, const std::vector<int>& outputs) {
  std::string key;
  key.reserve(g.structure.size() * sizeof(int64_t) + 512);
  append_bits(&key, static_cast<int64_t>(g.structure.size()));
  key.append(reinterpret_cast<const char*>(g.structure.data()),
             g.structure.size() * sizeof(int64_t));
  append_bits(&key, static_cast<int64_t>(outputs.size()));
  for (int o : outputs) append_bits(&key, o);
  for (const RecordedNode& n : g.nodes) {
    // A view's offset, not in the structure (a runtime parameter of the fused program), is
    // a constant of the hook's graph.
    if (n.kind == RecordedNode::Kind::kViewRead || n.kind == RecordedNode::Kind::kViewWrite) {
      append_bits(&key, n.offset);
    }
    append_bits(&key, static_cast<int64_t>(n.call_args.size()));
    for (const c10::IValue& v : n.call_args) {
      if (!encode_arg(v, &key)) return "";
    }
  }
  return key;
}

// The values of `outputs` computed by the hook, or nullopt when it declines.
std::optional<std::vector<runtime::BufferPtr>> run_by_hook(const PendingGraph& g,
                                                           const std::vector<int>& outputs) {
  std::shared_ptr<const FusedGraphHook> hook;
  {
    std::lock_guard<std::mutex> lock(g_hook_mu);
    hook = g_hook;
  }
  if (!hook || t_in_hook || outputs.empty() || !exportable(g)) return std::nullopt;
  ExportedGraph e;
  e.key = graph_key(g, outputs);
  for (const runtime::BufferPtr& b : g.inputs) e.inputs.push_back(wrap_buffer(b, to_scalar_type(b->dtype())));
  // Random ops' generator states (ui64[2], taken at their calls): inputs after the graph's.
  std::unordered_map<const RecordedNode*, int> rng_inputs;
  for (const RecordedNode& n : g.nodes) {
    if (n.kind != RecordedNode::Kind::kOp) continue;
    int k = rng_param(n);
    if (k < 0) continue;
    const runtime::BufferPtr& state = n.params.at(static_cast<size_t>(k));
    rng_inputs.emplace(&n, static_cast<int>(e.inputs.size()));
    e.inputs.push_back(wrap_buffer(state, to_scalar_type(state->dtype())));
  }
  e.nodes = [&g, &rng_inputs] {
    std::vector<ExportedNode> nodes;
    nodes.reserve(g.nodes.size());
    for (const RecordedNode& n : g.nodes) {
      ExportedNode x;
      x.first_out = n.first_out;
      x.num_out = n.num_out;
      if (n.kind == RecordedNode::Kind::kViewRead) {
        x.base = n.refs[0];
        x.sizes = n.sizes;
        x.strides = n.strides;
        x.offset = n.offset;
      } else if (n.kind == RecordedNode::Kind::kViewWrite) {
        // as_strided_scatter(self, src, size, stride, storage_offset): the base's new value
        x.op = "aten::as_strided_scatter";
        x.args = {c10::IValue(), c10::IValue(), c10::IValue(n.sizes), c10::IValue(n.strides),
                  c10::IValue(n.offset)};
        x.reads.push_back({0, -1, n.refs[0]});
        x.reads.push_back({1, -1, n.refs[1]});
      } else if (n.kind == RecordedNode::Kind::kConvert) {
        // _to_copy(self, *, dtype, layout, device, pin_memory, non_blocking, memory_format)
        x.op = "aten::_to_copy";
        x.args = {c10::IValue(),
                  c10::IValue(static_cast<int64_t>(to_scalar_type(g.types.at(n.first_out).dtype))),
                  c10::IValue(), c10::IValue(), c10::IValue(), c10::IValue(false), c10::IValue()};
        x.reads.push_back({0, -1, n.refs[0]});
      } else if (n.kind == RecordedNode::Kind::kZeros) {
        // zeros(size, *, dtype, layout, device, pin_memory)
        const TensorType& t = g.types.at(n.first_out);
        x.op = "aten::zeros";
        x.args = {c10::IValue(t.dims), c10::IValue(static_cast<int64_t>(to_scalar_type(t.dtype))),
                  c10::IValue(),
                  c10::IValue(c10::Device(c10::DeviceType::PrivateUse1,
                                          static_cast<c10::DeviceIndex>(g.device))),
                  c10::IValue()};
      } else {
        x.op = n.op->name;
        x.args = n.call_args;
        for (size_t k = 0; k < n.op->inputs.size(); ++k) {
          x.reads.push_back({n.op->inputs[k].first, n.op->inputs[k].second, n.refs[k]});
        }
        auto state = rng_inputs.find(&n);
        if (state != rng_inputs.end()) x.rng_input = state->second;
      }
      nodes.push_back(std::move(x));
    }
    return nodes;
  };
  e.outputs = outputs;
  for (const TensorType& t : g.types) {
    e.dims.push_back(t.dims);
    e.dtypes.push_back(to_scalar_type(t.dtype));
  }
  std::optional<std::vector<at::Tensor>> tensors;
  t_in_hook = true;
  try {
    tensors = (*hook)(e);
  } catch (...) {
    t_in_hook = false;
    throw;
  }
  t_in_hook = false;
  if (!tensors) return std::nullopt;
  TORCH_CHECK(tensors->size() == outputs.size(), "tpu: internal: the fused graph hook returned ",
              tensors->size(), " tensors for ", outputs.size(), " outputs");
  std::vector<runtime::BufferPtr> buffers;
  for (size_t k = 0; k < outputs.size(); ++k) {
    buffers.push_back(output_buffer((*tensors)[k], g.types.at(outputs[k])));
  }
  // Data checks: the hook's program queued them (run_pending_graph read what was queued
  // before). A failed one declines: the exact program runs and names the op that failed.
  if (g.checked) {
    try {
      flush_data_checks();
    } catch (const c10::Error&) {
      return std::nullopt;
    }
  }
  g_hook_graphs.add();
  return buffers;
}

uint64_t hash_words(const std::vector<int64_t>& words) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t w : words) {
    h ^= static_cast<uint64_t>(w);
    h *= 1099511628211ull;
  }
  return h ^ (h >> 29);
}

OpArg tensor_arg(const TensorType& t) {
  OpArg a;
  a.kind = ArgKind::kTensor;
  a.type = t;
  return a;
}

OpArg ints_arg(const std::vector<int64_t>& v) {
  OpArg a;
  a.kind = ArgKind::kIntList;
  a.ints = v;
  return a;
}

OpArg runtime_int_arg() {
  OpArg a;
  a.kind = ArgKind::kScalar;
  a.scalar_category = lowering::ScalarCategory::kInt;
  return a;
}

// The graph (value ids renumbered: inputs 0.., then node values) and its lowering.
std::shared_ptr<FusedProgram> build(const PendingGraph& g, const std::vector<int>& outputs,
                                    std::vector<int64_t> structure) {
  auto fused = std::make_shared<FusedProgram>();
  fused->structure = std::move(structure);
  const int num_inputs = static_cast<int>(g.inputs.size());
  auto id_of = [num_inputs](int v) { return v < 0 ? PendingGraph::input_index(v) : num_inputs + v; };
  lowering::GraphSpec spec;
  for (const runtime::BufferPtr& b : g.inputs) spec.inputs.push_back(TensorType{b->dtype(), b->dims()});
  for (const RecordedNode& n : g.nodes) {
    lowering::GraphNode node;
    if (n.kind == RecordedNode::Kind::kOp) {
      node.op = n.op->name;
      node.args = n.op->args;
      node.tensor_refs.assign(node.args.size(), -1);
      node.list_refs.resize(node.args.size());
      for (size_t k = 0; k < n.op->inputs.size(); ++k) {
        const auto& [arg, item] = n.op->inputs[k];
        if (item < 0) {
          node.tensor_refs[arg] = id_of(n.refs[k]);
        } else {
          node.list_refs[arg].push_back(id_of(n.refs[k]));
        }
      }
      node.out_types = n.op->out_types;
    } else if (n.kind == RecordedNode::Kind::kConvert) {
      node.op = "aten::_to_copy";
      node.args.push_back(tensor_arg(g.type_of(n.refs[0])));
      node.tensor_refs.assign(node.args.size(), -1);
      node.list_refs.resize(node.args.size());
      node.tensor_refs[0] = id_of(n.refs[0]);
      node.out_types.push_back(g.types[n.first_out]);
    } else if (n.kind == RecordedNode::Kind::kZeros) {
      node.op = "aten::zeros";
      node.args.push_back(ints_arg(g.types[n.first_out].dims));
      node.tensor_refs.assign(node.args.size(), -1);
      node.list_refs.resize(node.args.size());
      node.out_types.push_back(g.types[n.first_out]);
    } else {
      bool read = n.kind == RecordedNode::Kind::kViewRead;
      node.op = read ? "aten::as_strided" : "aten::as_strided_scatter";
      node.args.push_back(tensor_arg(g.type_of(n.refs[0])));
      if (!read) node.args.push_back(tensor_arg(g.type_of(n.refs[1])));
      node.args.push_back(ints_arg(n.sizes));
      node.args.push_back(ints_arg(n.strides));
      node.args.push_back(runtime_int_arg());  // the offset: the node's parameter
      node.tensor_refs.assign(node.args.size(), -1);
      node.list_refs.resize(node.args.size());
      node.tensor_refs[0] = id_of(n.refs[0]);
      if (!read) node.tensor_refs[1] = id_of(n.refs[1]);
      node.out_types.push_back(g.types[n.first_out]);
    }
    for (int k = 0; k < n.num_out; ++k) node.out_ids.push_back(id_of(n.first_out + k));
    spec.nodes.push_back(std::move(node));
  }
  for (int v : outputs) spec.outputs.push_back(id_of(v));
  auto lowered = lowering::lower_graph(spec, "torchtpu_fused");
  if (!lowered.ok()) {
    fused->failure = lowered.status().message();
    return fused;
  }
  // Node k's parameters in the fused program come in the order its own program takes them.
  std::vector<int> seen(g.nodes.size(), 0);
  for (const GraphParam& p : lowered->params) {
    if (p.source == GraphParam::Source::kScalar || p.source == GraphParam::Source::kRngState) {
      fused->node_params.emplace_back(p.node, seen.at(p.node)++);
    } else {
      fused->node_params.emplace_back(-1, -1);
    }
  }
  auto program = compile_program(std::move(lowered).value(), g.device);
  if (!program.ok()) {
    fused->failure = "the plugin rejected the fused program: " + program.status().message();
    return fused;
  }
  fused->program = *program;
  g_graphs_compiled.add();
  return fused;
}

class FusedArgs : public ProgramArgs {
 public:
  FusedArgs(const PendingGraph& g, const FusedProgram& f) : g_(g), f_(f) {}
  runtime::BufferPtr input(size_t, int index) override { return g_.inputs.at(index); }
  runtime::BufferPtr scalar(size_t param, const GraphParam&) override { return node_param(param); }
  runtime::BufferPtr rng_state(size_t param, const GraphParam&) override {
    return node_param(param);
  }

 private:
  runtime::BufferPtr node_param(size_t param) {
    const auto& [node, k] = f_.node_params.at(param);
    return g_.nodes.at(node).params.at(k);
  }
  const PendingGraph& g_;
  const FusedProgram& f_;
};

// One node's parameters for its own program: its inputs' buffers, its recorded params.
class NodeArgs : public ProgramArgs {
 public:
  NodeArgs(const RecordedNode& n, const std::vector<runtime::BufferPtr>& inputs)
      : n_(n), inputs_(inputs) {}
  runtime::BufferPtr input(size_t, int index) override { return inputs_.at(index); }
  runtime::BufferPtr scalar(size_t, const GraphParam&) override { return n_.params.at(next_++); }
  runtime::BufferPtr rng_state(size_t, const GraphParam&) override {
    return n_.params.at(next_++);
  }

 private:
  const RecordedNode& n_;
  const std::vector<runtime::BufferPtr>& inputs_;
  size_t next_ = 0;
};

// A data check that failed in a graph run: the node whose op required it.
struct CheckFailure {
  int node = -1;
  lowering::CheckKind kind = lowering::CheckKind::kIndexError;
  std::string message;
};

// The first failed check among a program's results (its outputs first), or nullopt; the
// check results are dropped from `results`.
std::optional<CheckFailure> read_checks(const lowering::LoweredGraph& lowered,
                                        std::vector<runtime::BufferPtr>* results) {
  size_t n = lowered.output_types.size();
  int k = first_failed_check(*results, n, lowered.check_messages.size());
  results->resize(n);
  if (k < 0) return std::nullopt;
  return CheckFailure{lowered.check_nodes.at(k), lowered.check_kinds.at(k),
                      lowered.check_messages.at(k)};
}

// Runs the nodes one by one (each op its own program, as op by op): the values of `wanted`,
// or the first failed check (`failure` set, nothing returned).
std::vector<runtime::BufferPtr> run_op_by_op(const PendingGraph& g, const std::vector<int>& wanted,
                                             std::optional<CheckFailure>* failure) {
  g_fallback_graphs.add();
  std::vector<runtime::BufferPtr> values(g.types.size());
  auto value = [&](int id) -> const runtime::BufferPtr& {
    return id < 0 ? g.inputs.at(PendingGraph::input_index(id)) : values.at(id);
  };
  for (const RecordedNode& n : g.nodes) {
    if (n.kind == RecordedNode::Kind::kViewRead) {
      values[n.first_out] = view_read(*value(n.refs[0]), n.sizes, n.strides, n.offset);
      continue;
    }
    if (n.kind == RecordedNode::Kind::kViewWrite) {
      values[n.first_out] =
          view_write(*value(n.refs[0]), *value(n.refs[1]), n.sizes, n.strides, n.offset);
      continue;
    }
    if (n.kind == RecordedNode::Kind::kZeros) {
      values[n.first_out] =
          run_program(lowering::zeros_module(g.types[n.first_out]), {}, g.device).at(0);
      continue;
    }
    if (n.kind == RecordedNode::Kind::kConvert) {
      const runtime::BufferPtr& v = value(n.refs[0]);
      const TensorType& to = g.types[n.first_out];
      values[n.first_out] = run_program(
          lowering::convert_module(TensorType{v->dtype(), v->dims()}, to.dtype, to.dims),
          {v.get()}, g.device).at(0);
      continue;
    }
    runtime::trace::Label label(n.op->name.c_str());
    std::vector<runtime::BufferPtr> inputs;
    for (int ref : n.refs) inputs.push_back(value(ref));
    NodeArgs args(n, inputs);
    std::vector<runtime::BufferPtr> out =
        run_program(n.op->program(), args, CheckMode::kReturned);
    if ((*failure = read_checks(n.op->program().lowered, &out))) {
      (*failure)->node = static_cast<int>(&n - g.nodes.data());
      return {};
    }
    for (int k = 0; k < n.num_out; ++k) values[n.first_out + k] = out.at(k);
  }
  std::vector<runtime::BufferPtr> result;
  for (int id : wanted) result.push_back(values.at(id));
  return result;
}

// A failed check of node `f.node`: its op and the calls recorded after it are undone, the
// graph recorded before it runs, and the op's error is raised, naming where it was called.
[[noreturn]] void fail_at(PendingGraph& g, const CheckFailure& f) {
  g_checks_failed.add();
  const RecordedNode& n = g.nodes.at(f.node);
  std::string op = n.op->name;
  std::string where = n.site ? format_record_site(*n.site) : "";
  Mark mark = n.mark;
  undo_since(g, mark, op + " failed a data check: " + f.message);
  run_pending_graph(g);
  raise_check_failure(
      f.kind, f.message + "\n(fused eager: " + op + " was recorded " +
                  (where.empty() ? std::string("off the Python thread") : "at\n" + where) +
                  "\nand its check read when its graph ran; it and the ops recorded after it "
                  "were undone: the tensors they wrote hold their values from before it)");
}

}  // namespace

bool recording_enabled() { return !t_in_hook; }

void set_fused_graph_hook(FusedGraphHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mu);
  g_hook = hook ? std::make_shared<const FusedGraphHook>(std::move(hook)) : nullptr;
}

void run_pending_graph(PendingGraph& g) {
  // Outputs: the values some storage still holds.
  std::vector<int> outputs;
  std::vector<std::shared_ptr<PendingValue>> held;
  for (size_t id = 0; id < g.values.size(); ++id) {
    if (auto v = g.values[id].lock()) {
      outputs.push_back(static_cast<int>(id));
      held.push_back(std::move(v));
    }
  }
  // A graph whose values nobody holds still runs for its data checks.
  if (g.nodes.empty() || (outputs.empty() && !g.checked)) {
    g.reset();
    return;
  }
  // Checks compiled graphs queued earlier report first, this graph still pending.
  if (g.checked) flush_data_checks();
  std::vector<int64_t> structure = g.structure;
  structure.push_back(-4);
  structure.insert(structure.end(), outputs.begin(), outputs.end());
  uint64_t h = hash_words(structure);
  std::shared_ptr<const FusedProgram> fused;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_cache == nullptr) {
      g_cache = new base::LruMap<uint64_t, std::shared_ptr<const FusedProgram>>(
          compile_cache().capacity());
      compile_cache().add_holder([](size_t n) {
        std::lock_guard<std::mutex> lock(g_mu);
        g_cache->shrink_to(n);
      });
    }
    if (auto* hit = g_cache->find(h); hit != nullptr && (*hit)->structure == structure) {
      fused = *hit;
    }
  }
  if (!fused) {
    // Not compiled for these exact sizes: its shape class may run it padded to buckets.
    std::optional<std::vector<runtime::BufferPtr>> by_hook;
    try {
      by_hook = run_by_hook(g, outputs);
    } catch (const std::exception& e) {
      // Ctrl-C in the hook's Python code leaves the graph pending, unchanged: a later read
      // runs it again. Any other failure of the padded run leaves it to the exact program.
      if (is_interrupt(e)) throw;
      // (Once: the exact program is cached, so only a new size of the graph tries again.)
      std::string what = e.what();
      TORCH_WARN_ONCE("tpu: a fused graph could not run padded to shape buckets (",
                      what.substr(0, what.find('\n')), "); it runs at its exact sizes");
    }
    if (by_hook) {
      g_graphs_run.add();
      g_ops_run.add(static_cast<int64_t>(g.nodes.size()));
      for (size_t k = 0; k < held.size(); ++k) held[k]->buffer = std::move(by_hook->at(k));
      g.reset();
      return;
    }
    std::shared_ptr<const FusedProgram> built = build(g, outputs, structure);
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto* present = g_cache->find(h)) {
      *present = built;
    } else {
      g_cache->insert(h, built);
    }
    fused = built;
  }
  std::vector<runtime::BufferPtr> buffers;
  std::optional<CheckFailure> failure;
  try {
    if (fused->program) {
      runtime::trace::Label label("tpu fused eager graph");
      FusedArgs args(g, *fused);
      buffers = run_program(*fused->program, args, CheckMode::kReturned);
      failure = read_checks(fused->program->lowered, &buffers);
    } else {
      buffers = run_op_by_op(g, outputs, &failure);
    }
  } catch (const std::exception& e) {
    for (auto& v : held) v->error = e.what();
    g.reset();
    throw;
  }
  if (failure) {
    held.clear();
    fail_at(g, *failure);
  }
  g_graphs_run.add();
  g_ops_run.add(static_cast<int64_t>(g.nodes.size()));
  for (size_t k = 0; k < held.size(); ++k) held[k]->buffer = std::move(buffers.at(k));
  g.reset();
}

}  // namespace torchtpu::aten
