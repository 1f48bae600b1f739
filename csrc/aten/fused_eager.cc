#include "aten/fused_eager.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <c10/util/accumulate.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "aten/compiled_op.h"
#include "aten/host_transfer.h"
#include "aten/pending_graph.h"
#include "aten/record_site.h"
#include "aten/storage_bytes.h"
#include "aten/tpu_generator.h"
#include "base/metrics.h"

namespace torchtpu::aten {
namespace {

std::atomic<int> g_mode{-1};  // -1: not read from the environment yet

int64_t max_ops() {
  static const int64_t n = [] {
    const char* v = std::getenv("TORCHTPU_FUSED_MAX_OPS");
    if (v == nullptr || *v == '\0') return int64_t{1024};
    char* end = nullptr;
    long long x = std::strtoll(v, &end, 10);
    TORCH_CHECK(end != v && *end == '\0' && x >= 1 && x <= 1000000, "tpu: TORCHTPU_FUSED_MAX_OPS='",
                v, "' is not an op count (expected 1..1000000; default 1024)");
    return static_cast<int64_t>(x);
  }();
  return n;
}

// One graph per device, made on first use and never destroyed (storages may outlive
// static destruction).
struct Graphs {
  std::mutex mu;
  std::vector<std::unique_ptr<PendingGraph>> by_device;
};
Graphs& graphs() {
  static auto* g = new Graphs();
  return *g;
}

PendingGraph& graph(int device) {
  Graphs& all = graphs();
  std::lock_guard<std::mutex> lock(all.mu);
  if (static_cast<size_t>(device) >= all.by_device.size()) all.by_device.resize(device + 1);
  auto& g = all.by_device[device];
  if (!g) g = std::make_unique<PendingGraph>(device);
  return *g;
}

std::vector<PendingGraph*> all_graphs() {
  Graphs& all = graphs();
  std::lock_guard<std::mutex> lock(all.mu);
  std::vector<PendingGraph*> out;
  for (const auto& g : all.by_device) {
    if (g) out.push_back(g.get());
  }
  return out;
}

// The type of the storage's value as the recorder sees it (pending or its buffer), or
// null when it has neither.
const lowering::TensorType* storage_type(const StorageState::Value& v,
                                         lowering::TensorType* scratch) {
  if (v.pending) return &v.pending->type;
  if (!v.buffer) return nullptr;
  *scratch = lowering::TensorType{v.buffer->dtype(), v.buffer->dims()};
  return scratch;
}

// Whether the recorder can read (or write) `t` in graph `g`: a storage whose value is
// pending in `g`, or any storage it can read a buffer of, in t's dtype and size.
bool recordable(const at::Tensor& t, const PendingGraph& g) {
  const StorageState& s = recorded_storage_state(t);
  if (s.device_index != g.device) return false;
  StorageState::Value v = s.value();
  lowering::TensorType scratch;
  const lowering::TensorType* type = storage_type(v, &scratch);
  if (type == nullptr) return true;  // bufferless: read_tensor fills zeros
  // A bool view of another dtype's bytes reads them lossily: such calls run op by op,
  // whose writes splice into the bytes (storage_bytes.h).
  if (!keeps_bytes(type->dtype, t.scalar_type())) return false;
  if (v.pending && v.pending->generation != g.generation) return true;  // computed: a buffer
  return type->dtype == to_dtype(t.scalar_type()) &&
         type->num_elements() * static_cast<int64_t>(t.element_size()) == s.nbytes;
}

class Recorder {
 public:
  explicit Recorder(PendingGraph& g) : g_(g) {}

  // The value id of `t`'s current value in the graph: its storage's whole value (pending
  // here, or a buffer the graph takes as an input), or a view read out of it when t is a
  // view or reads the storage in another shape (a saved activation read flattened by mm's
  // backward). So no program runs at the call, and none is keyed by a view's shape (a
  // slice `[:t]` of a new length t). A view that covers its whole storage (the slice
  // `[:n]` of an n-row window) is a view read all the same, so a graph reading a window
  // whole has the structure of one reading a part of it. A value an earlier graph
  // computed is materialized first: a padded graph's output grows its storage, and t
  // reads a prefix of it.
  int read(const at::Tensor& t) {
    StorageState& s = recorded_storage_state(t);
    const bool whole = is_whole_storage(t, s);
    int base = whole_value(s, t.scalar_type(),
                           whole ? std::optional<c10::IntArrayRef>(t.sizes()) : std::nullopt);
    if (!t.is_view() && whole &&
        c10::IntArrayRef(g_.type_of(base).dims) == t.sizes()) {
      return base;
    }
    return view_read(base, t);
  }

  // Makes value `id` (t's shape) the value of `t`, through its view if it is one.
  void write(const at::Tensor& t, int id, const std::shared_ptr<PendingValue>& value) {
    StorageState& s = recorded_storage_state(t);
    log_write(t, s);
    if (is_whole_storage(t, s)) {
      s.set_pending(value);
      return;
    }
    int base = whole_value(s, t.scalar_type());
    RecordedNode n;
    n.kind = RecordedNode::Kind::kViewWrite;
    n.refs = {base, id};
    n.sizes.assign(t.sizes().begin(), t.sizes().end());
    n.strides.assign(t.strides().begin(), t.strides().end());
    n.offset = t.storage_offset();
    n.params.push_back(offset_buffer(n.offset));
    lowering::TensorType type = g_.type_of(base);
    structure_view(n, type);
    int out = add_node(std::move(n), {type});
    s.set_pending(pending(out));
  }

  // Keeps s's value before a write (t's storage) while the graph holds a data check, for
  // a failed check to restore.
  void log_write(const at::Tensor& t, const StorageState& s) {
    if (!g_.checked) return;
    StorageState::Value v = s.value();
    const bool here = v.pending && v.pending->generation == g_.generation;
    g_.undo.push_back(UndoWrite{t.storage().getWeakStorageImpl(), g_.nodes.size(), v.buffer,
                                here ? nullptr : v.pending, here ? v.pending->id : -1,
                                !v.pending && (!v.buffer || s.zeros_only())});
  }

  int input(const runtime::BufferPtr& b) {
    auto it = g_.input_ids.find(b.get());
    if (it != g_.input_ids.end()) return it->second;
    int id = PendingGraph::input_id(static_cast<int>(g_.inputs.size()));
    g_.inputs.push_back(b);
    g_.input_ids.emplace(b.get(), id);
    g_.structure.push_back(-1);
    g_.structure.push_back(static_cast<int64_t>(b->dtype()));
    g_.structure.push_back(static_cast<int64_t>(b->dims().size()));
    g_.structure.insert(g_.structure.end(), b->dims().begin(), b->dims().end());
    return id;
  }

  int add_node(RecordedNode n, const std::vector<lowering::TensorType>& out_types) {
    n.first_out = static_cast<int>(g_.types.size());
    n.num_out = static_cast<int>(out_types.size());
    for (const lowering::TensorType& t : out_types) {
      g_.types.push_back(t);
      g_.values.emplace_back();
    }
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back().first_out;
  }

  // The PendingValue of value `id` (made on first request; the graph keeps a weak link).
  std::shared_ptr<PendingValue> pending(int id) {
    if (auto v = g_.values[id].lock()) return v;
    auto v = std::make_shared<PendingValue>();
    v->device = g_.device;
    v->generation = g_.generation;
    v->id = id;
    v->type = g_.types[id];
    g_.values[id] = v;
    return v;
  }

 private:
  int view_read(int base, const at::Tensor& t) {
    RecordedNode n;
    n.kind = RecordedNode::Kind::kViewRead;
    n.refs = {base};
    n.sizes.assign(t.sizes().begin(), t.sizes().end());
    n.strides.assign(t.strides().begin(), t.strides().end());
    n.offset = t.storage_offset();
    n.params.push_back(offset_buffer(n.offset));
    structure_view(n, g_.type_of(base));
    return add_node(std::move(n), {lowering::TensorType{to_dtype(t.scalar_type()), n.sizes}});
  }

  // The whole value of storage `s` (read as `dtype`; `sizes`, when given, those of a
  // tensor reading all of it, which zeros of a storage never written take).
  int whole_value(StorageState& s, c10::ScalarType dtype,
                  std::optional<c10::IntArrayRef> sizes = std::nullopt) {
    StorageState::Value v = s.value();
    if (v.pending && v.pending->generation == g_.generation) return v.pending->id;
    // Never written (torch.ones is empty + fill_): its zeros are a node of the graph, not
    // a buffer a program per size would fill. The storage keeps no buffer.
    const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
    if (!v.pending && !v.buffer && s.nbytes % item == 0) {
      RecordedNode n;
      n.kind = RecordedNode::Kind::kZeros;
      lowering::TensorType type{to_dtype(dtype), {static_cast<int64_t>(s.nbytes) / item}};
      if (sizes) type.dims.assign(sizes->begin(), sizes->end());
      std::vector<int64_t>& w = g_.structure;
      w.insert(w.end(), {-5, static_cast<int64_t>(type.dtype),
                         static_cast<int64_t>(type.dims.size())});
      w.insert(w.end(), type.dims.begin(), type.dims.end());
      return add_node(std::move(n), {type});
    }
    return input(storage_buffer(s, dtype));  // computes a value an earlier graph computed
  }

  void structure_view(const RecordedNode& n, const lowering::TensorType& base) {
    std::vector<int64_t>& w = g_.structure;
    w.push_back(n.kind == RecordedNode::Kind::kViewRead ? -2 : -3);
    w.insert(w.end(), n.refs.begin(), n.refs.end());
    w.push_back(static_cast<int64_t>(base.dtype));
    w.push_back(static_cast<int64_t>(n.sizes.size()));
    w.insert(w.end(), n.sizes.begin(), n.sizes.end());
    w.insert(w.end(), n.strides.begin(), n.strides.end());
  }

  // A view node's offset, the fused program's runtime parameter (not part of the
  // structure: `out[:, i] = x` for every i is one program).
  runtime::BufferPtr offset_buffer(int64_t offset) {
    return scalar_to_buffer(c10::Scalar(offset), base::DType::kI64, g_.device, false);
  }

  PendingGraph& g_;
};

const base::Counter g_recorded("num_fused_ops_recorded");

}  // namespace

const lowering::TensorType& PendingGraph::type_of(int id) const {
  if (id < 0) {
    static thread_local lowering::TensorType t;
    const runtime::BufferPtr& b = inputs.at(input_index(id));
    t = lowering::TensorType{b->dtype(), b->dims()};
    return t;
  }
  return types.at(id);
}

void PendingGraph::reset() {
  ++generation;
  inputs.clear();
  input_ids.clear();
  nodes.clear();
  types.clear();
  values.clear();
  structure.clear();
  checked = false;
  first_factory = last_repeat = -1;
  first_factory_site.reset();
  undo.clear();
}

void PendingGraph::truncate(const Mark& m) {
  nodes.erase(nodes.begin() + static_cast<std::ptrdiff_t>(m.nodes), nodes.end());
  types.resize(m.types);
  values.resize(m.types);
  for (size_t k = m.inputs; k < inputs.size(); ++k) input_ids.erase(inputs[k].get());
  inputs.resize(m.inputs);
  structure.resize(m.structure);
  if (first_factory >= static_cast<int>(m.nodes)) {
    first_factory = last_repeat = -1;
    first_factory_site.reset();
  }
  if (last_repeat >= static_cast<int>(m.nodes)) last_repeat = first_factory;
  while (!undo.empty() && undo.back().nodes > m.nodes) undo.pop_back();
}

void undo_since(PendingGraph& g, const Mark& m, const std::string& error) {
  Recorder rec(g);
  // Newest first: a storage written several times ends with its value before the first.
  for (auto it = g.undo.rbegin(); it != g.undo.rend() && it->nodes > m.nodes; ++it) {
    c10::intrusive_ptr<c10::StorageImpl> impl = it->storage.lock();
    StorageState* s = impl ? find_storage_state(impl->data_ptr()) : nullptr;
    if (s == nullptr) continue;  // freed since: nothing can read it
    std::shared_ptr<PendingValue> earlier = it->id >= 0 ? rec.pending(it->id) : it->earlier;
    if (earlier) {
      s->set_pending(std::move(earlier));
    } else {
      s->set_buffer(it->buffer, it->unwritten);
    }
    if (it->unwritten) {
      // Never written before the undone calls (torch.ones is empty + a recorded fill_):
      // it would read as zeros, a value no call gave it; it reads as failed instead.
      auto failed = std::make_shared<PendingValue>();
      failed->device = g.device;
      failed->generation = 0;  // no graph's (they count from 1): never read as pending
      failed->id = -1;
      failed->type = lowering::TensorType{base::DType::kU8, {static_cast<int64_t>(s->nbytes)}};
      failed->error = error;
      s->set_pending(std::move(failed));
    }
  }
  // What the undone calls computed: tensors they returned read as failed.
  for (size_t id = m.types; id < g.values.size(); ++id) {
    if (auto v = g.values[id].lock()) v->error = error;
  }
  g.truncate(m);
}

EagerMode eager_mode() {
  int m = g_mode.load(std::memory_order_relaxed);
  if (m >= 0) return static_cast<EagerMode>(m);
  const char* v = std::getenv("TORCHTPU_EAGER");
  EagerMode mode = EagerMode::kOpByOp;
  if (v != nullptr && *v != '\0') {
    TORCH_CHECK(std::strcmp(v, "fused") == 0 || std::strcmp(v, "op") == 0,
                "tpu: TORCHTPU_EAGER='", v, "' is not an eager mode (expected 'op', the "
                "default: each op runs at its call, or 'fused': ops are recorded and run as "
                "fused graphs)");
    if (std::strcmp(v, "fused") == 0) mode = EagerMode::kFused;
  }
  int expected = -1;
  g_mode.compare_exchange_strong(expected, static_cast<int>(mode));
  return static_cast<EagerMode>(g_mode.load());
}

void set_eager_mode(EagerMode mode) {
  if (mode == EagerMode::kOpByOp) flush_all_pending();
  g_mode.store(static_cast<int>(mode));
}

StorageState::Value materialize(StorageState& s, const std::shared_ptr<PendingValue>& v) {
  runtime::BufferPtr buffer;
  std::string error;
  {
    // v's buffer and error are written by whichever thread runs its graph, under the lock.
    PendingGraph& g = graph(v->device);
    std::lock_guard<std::recursive_mutex> lock(g.mu);
    if (!v->buffer && v->error.empty() && v->generation == g.generation) run_pending_graph(g);
    buffer = v->buffer;
    error = v->error;
  }
  TORCH_CHECK(buffer, "tpu: this tensor's value was to be computed by a fused eager graph "
              "that failed: ", error.empty() ? "it was not run" : error);
  return s.resolve(v, std::move(buffer));
}

void materialize(StorageState& s) {
  if (std::shared_ptr<PendingValue> v = s.pending()) materialize(s, v);
}

namespace {

// A loop's iteration is at least this many calls: a repeat sooner is a loop inside one
// (Adam's zeros per parameter at its first step, a mask per layer of a small model).
constexpr size_t kMinIterationCalls = 32;

// Whether a factory call (reading only storages never written: nanoGPT's arange of
// positions, a sampler's randn), made with autograd off (a generation loop, not a
// training step), begins a loop's next iteration: it repeats the graph's first factory
// call (the same op, results of the same dtypes and ranks, called from the same Python
// stack) at least kMinIterationCalls calls after its last repeat. A sooner repeat is
// noted as the last.
bool starts_next_iteration(PendingGraph& g, const CompiledOp& c, const RecordSite& site) {
  // No Python stack (the autograd engine's thread): no loop to tell.
  if (g.first_factory < 0 || record_site_empty(site)) return false;
  const CompiledOp& first = *g.nodes.at(static_cast<size_t>(g.first_factory)).op;
  if (first.name != c.name || first.out_types.size() != c.out_types.size()) return false;
  for (size_t k = 0; k < c.out_types.size(); ++k) {
    if (first.out_types[k].dtype != c.out_types[k].dtype ||
        first.out_types[k].dims.size() != c.out_types[k].dims.size()) {
      return false;
    }
  }
  if (!same_record_site(*g.first_factory_site, site)) return false;
  if (g.nodes.size() - static_cast<size_t>(g.last_repeat) >= kMinIterationCalls) return true;
  g.last_repeat = static_cast<int>(g.nodes.size());
  return false;
}

}  // namespace

bool record_call(const std::shared_ptr<const CompiledOp>& c, const c10::FunctionSchema& schema,
                 torch::jit::Stack* stack, const std::optional<at::Generator>& generator) {
  if (!recording_enabled()) return false;
  size_t num_args = schema.arguments().size();
  auto ivalues = torch::jit::last(*stack, num_args);
  // An op with data checks is recorded with where it was called from (before the lock:
  // capturing takes the interpreter's lock); its checks are read when the graph runs.
  std::shared_ptr<const RecordSite> site;
  if (c->has_checks()) site = capture_record_site();
  PendingGraph& g = graph(c->device);
  // A factory (its inputs storages no call wrote) called with autograd off is recorded
  // with its site too, when a loop's iteration could begin or end there.
  bool reads_nothing = !at::GradMode::is_enabled();
  for (const auto& [arg, item] : c->inputs) {
    if (!reads_nothing) break;
    const at::Tensor t =
        item < 0 ? ivalues[arg].toTensor() : present_tensor(ivalues[arg], item);
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) continue;
    StorageState::Value v = recorded_storage_state(t).value();
    reads_nothing = !v.buffer && !v.pending;
  }
  std::shared_ptr<const RecordSite> factory;
  if (reads_nothing) factory = site ? site : capture_record_site();
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  if (factory && starts_next_iteration(g, *c, *factory)) {
    // A loop that never reads a value (nanoGPT's generate: model, sampling, torch.cat)
    // would otherwise grow one graph over many iterations, cut at TORCHTPU_FUSED_MAX_OPS at
    // another place each time: graphs of new structures, each compiled. Run per iteration
    // instead, graphs of one structure whose shape class covers the lengths.
    run_pending_graph(g);
  }
  const Mark mark{g.nodes.size(), g.types.size(), g.inputs.size(), g.structure.size()};
  // Every tensor the call reads or writes must be one the graph can take.
  for (const auto& [arg, item] : c->inputs) {
    const at::Tensor t =
        item < 0 ? ivalues[arg].toTensor() : present_tensor(ivalues[arg], item);
    if (!recordable(t, g)) return false;
  }
  size_t next_out = 0;
  auto target_ok = [&](const at::Tensor& t, size_t k) {
    return recordable(t, g) && k < c->out_types.size() &&
           c10::IntArrayRef(c->out_types[k].dims) == t.sizes() &&
           c->out_types[k].dtype == to_dtype(t.scalar_type());
  };
  for (int arg : c->list_write_args) {
    const c10::List<at::Tensor> targets = ivalues[arg].toTensorList();
    for (size_t k = 0; k < targets.size(); ++k) {
      if (!target_ok(targets.get(k), next_out++)) return false;
    }
  }
  // An empty out= tensor with no bytes and no value (at::empty({0}) that a factory's
  // composite passes, torch.arange's) grows to its result's size, as the op-by-op call
  // resizes it. A failed data check of an earlier call does not undo the resize: the
  // tensor keeps its size and reads as failed, as the calls' other results do.
  auto grows = [&](const at::Tensor& t, size_t k) {
    if (k >= c->out_types.size() || t.numel() != 0 || t.storage().nbytes() != 0 ||
        t.is_view() || t.storage_offset() != 0 || c->has_checks() ||
        c10::IntArrayRef(c->out_types[k].dims) == t.sizes() ||
        c->out_types[k].dtype != to_dtype(t.scalar_type())) {
      return false;
    }
    const StorageState& s = recorded_storage_state(t);
    StorageState::Value v = s.value();
    return s.device_index == g.device && !v.pending && !v.buffer;
  };
  std::vector<std::pair<at::Tensor, size_t>> grown;
  for (size_t j = 0; j < c->return_defined.size(); ++j) {
    if (c->return_list_size[j] >= 0) {
      next_out += c->return_list_size[j];
    } else if (c->return_defined[j]) {
      int arg = c->return_to_arg[j];
      if (arg >= 0) {
        const at::Tensor& t = ivalues[arg].toTensor();
        if (grows(t, next_out)) {
          grown.emplace_back(t, next_out);
        } else if (!target_ok(t, next_out)) {
          return false;
        }
      }
      ++next_out;
    }
  }
  for (int arg : c->extra_write_args) {
    if (!target_ok(ivalues[arg].toTensor(), next_out++)) return false;
  }
  if (c->out_types.empty()) return false;  // nothing to compute (a list op on empty lists)

  Recorder rec(g);
  RecordedNode n;
  n.kind = RecordedNode::Kind::kOp;
  n.op = c;
  if (site) {
    n.mark = mark;
    n.site = std::move(site);
    g.checked = true;  // from here on, writes are logged for a failed check to undo
  }
  for (const auto& [arg, item] : c->inputs) {
    n.refs.push_back(
        rec.read(item < 0 ? ivalues[arg].toTensor() : present_tensor(ivalues[arg], item)));
  }
  for (const lowering::GraphParam& p : c->lowered.params) {
    if (p.source == lowering::GraphParam::Source::kScalar) {
      const c10::IValue& v = ivalues[p.arg];
      n.params.push_back(scalar_buffer(p.item < 0 ? v : v.toListRef()[p.item], p, c->device));
    } else if (p.source == lowering::GraphParam::Source::kRngState) {
      bool given = generator && generator->defined();
      n.params.push_back(next_rng_state_buffer(
          given ? *generator : default_generator(static_cast<c10::DeviceIndex>(c->device)),
          c->device));
    }
  }
  n.call_args.reserve(num_args);
  for (const c10::IValue& v : ivalues) {
    if (v.isTensor() && (!v.toTensor().defined() ||
                         v.toTensor().device().type() == c10::DeviceType::PrivateUse1)) {
      n.call_args.emplace_back();  // a graph value (a host scalar stays: a parameter)
    } else if (v.isTensorList() ||
               (v.isList() && v.toList().elementType()->isSubtypeOf(*c10::OptionalType::ofTensor()))) {
      std::vector<int64_t> present;
      // An absent index is None or an undefined tensor (x[1:, idx] passes [None, idx]).
      for (const c10::IValue& item : v.toListRef()) {
        present.push_back(item.isTensor() && item.toTensor().defined() ? 1 : 0);
      }
      n.call_args.emplace_back(std::move(present));
    } else {
      n.call_args.push_back(v);
    }
  }
  // (Last before the node: the op read its out= tensor at the size its signature has, and
  // nothing after can fail. The storage has no value: the resize runs nothing.)
  for (auto& [t, k] : grown) {
    const std::vector<int64_t>& dims = c->out_types[k].dims;
    resize_storage_bytes(t.storage().unsafeGetStorageImpl(),
                         c10::multiply_integers(dims) * static_cast<int64_t>(t.element_size()));
    t.unsafeGetTensorImpl()->set_sizes_contiguous(dims);
  }
  std::vector<int64_t>& w = g.structure;
  w.push_back(c->uid);
  w.push_back(static_cast<int64_t>(n.refs.size()));
  w.insert(w.end(), n.refs.begin(), n.refs.end());
  int first = rec.add_node(std::move(n), c->out_types);
  if (factory && g.first_factory < 0) {
    g.first_factory = g.last_repeat = static_cast<int>(g.nodes.size()) - 1;
    g.first_factory_site = std::move(factory);
  }
  g_recorded.add();

  // Results: as run_compiled writes them, with pending values.
  c10::SmallVector<c10::IValue, 4> results;
  int next = first;
  auto tensor_of = [&](int id, size_t k) {
    return wrap_pending(rec.pending(id), c->out_scalar_types[k], c->out_types[k].dims, c->device);
  };
  for (int arg : c->list_write_args) {
    const c10::List<at::Tensor> targets = ivalues[arg].toTensorList();
    for (size_t k = 0; k < targets.size(); ++k, ++next) {
      rec.write(targets.get(k), next, rec.pending(next));
    }
  }
  for (size_t j = 0; j < c->return_defined.size(); ++j) {
    if (c->return_list_size[j] >= 0) {
      c10::List<at::Tensor> items;
      for (int k = 0; k < c->return_list_size[j]; ++k, ++next) {
        items.push_back(tensor_of(next, next - first));
      }
      results.emplace_back(std::move(items));
      continue;
    }
    if (!c->return_defined[j]) {
      results.emplace_back(at::Tensor());
      continue;
    }
    int arg = c->return_to_arg[j];
    if (arg >= 0) {
      const at::Tensor& target = ivalues[arg].toTensor();
      rec.write(target, next, rec.pending(next));
      results.emplace_back(target);
    } else {
      results.emplace_back(tensor_of(next, next - first));
    }
    ++next;
  }
  for (int arg : c->extra_write_args) {
    rec.write(ivalues[arg].toTensor(), next, rec.pending(next));
    ++next;
  }
  torch::jit::drop(*stack, num_args);
  for (auto& r : results) stack->push_back(std::move(r));
  if (static_cast<int64_t>(g.nodes.size()) >= max_ops()) run_pending_graph(g);
  return true;
}

bool record_copy(const at::Tensor& src, const at::Tensor& dst) {
  // A conversion to another dtype (x.float(), x.to(torch.int32)), but not of complex
  // values to real ones (copy_ warns that it drops their imaginary parts).
  const bool converts = src.scalar_type() != dst.scalar_type();
  if (eager_mode() != EagerMode::kFused || src.sizes() != dst.sizes() ||
      src.device() != dst.device() || src.is_conj() || src.is_neg() || dst.is_conj() ||
      dst.is_neg() || (converts && src.is_complex() && !dst.is_complex())) {
    return false;
  }
  PendingGraph& g = graph(dst.device().index());
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  if (!recordable(src, g) || !recordable(dst, g)) return false;
  Recorder rec(g);
  int id = rec.read(src);
  StorageState& d = recorded_storage_state(dst);
  if (converts) {
    RecordedNode n;
    n.kind = RecordedNode::Kind::kConvert;
    n.refs = {id};
    lowering::TensorType type{to_dtype(dst.scalar_type()), g.type_of(id).dims};
    std::vector<int64_t>& w = g.structure;
    w.insert(w.end(), {-6, id, static_cast<int64_t>(type.dtype)});
    id = rec.add_node(std::move(n), {type});
  } else if (id < 0 && is_whole_storage(dst, d)) {
    // A buffer the graph would only pass through: dst takes it, as op by op does.
    rec.log_write(dst, d);
    d.set_buffer(g.inputs.at(PendingGraph::input_index(id)));
    return true;
  }
  rec.write(dst, id, id >= 0 ? rec.pending(id) : nullptr);
  g_recorded.add();
  if (static_cast<int64_t>(g.nodes.size()) >= max_ops()) run_pending_graph(g);
  return true;
}

void flush_pending(int device) {
  PendingGraph& g = graph(device);
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  if (!g.nodes.empty()) run_pending_graph(g);
}

void flush_all_pending() {
  for (PendingGraph* g : all_graphs()) {
    std::lock_guard<std::recursive_mutex> lock(g->mu);
    if (!g->nodes.empty()) run_pending_graph(*g);
  }
}

void run_checked_pending(int device) {
  if (eager_mode() != EagerMode::kFused || !recording_enabled()) return;
  PendingGraph& g = graph(device);
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  if (g.checked && !g.nodes.empty()) run_pending_graph(g);
}

int64_t num_pending_ops(int device) {
  PendingGraph& g = graph(device);
  std::lock_guard<std::recursive_mutex> lock(g.mu);
  return static_cast<int64_t>(g.nodes.size());
}

}  // namespace torchtpu::aten
