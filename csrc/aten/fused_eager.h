// Fused eager mode (TORCHTPU_EAGER=fused, or torchtpu.set_eager_mode("fused")): eager ops
// are recorded into a pending graph per device instead of running one by one. A graph runs
// when something needs a value it computes (any read of a storage whose value is pending:
// a host read, an op that cannot be deferred, a copy), at synchronize, at an event or
// stream query, and when it reaches TORCHTPU_FUSED_MAX_OPS ops (default 1024). It is lowered
// through the lowering table into one module (the same lowerings as op by op and
// torch.compile) and cached by its structure: the ops' signatures, which value each reads,
// the inputs' types and which values are still alive at the run. Scalars, generator
// states and views' offsets are runtime parameters, so a training loop finds its graphs in
// the cache step after step. Values no live tensor holds are not outputs: XLA fuses them away.
//
// Semantics are eager's: a result is a tensor at once (its storage's value pending),
// views and in-place ops work on storages as op by op (a read or write through a view of a
// pending value is an as_strided / as_strided_scatter node), and errors PyTorch raises at
// the call (shapes, dtypes) come from the meta kernels at the call, since a signature is
// validated when it is first seen. An op with data checks (index bounds) is recorded too,
// with the Python stack of its call; its checks are results of the graph, read when it
// runs. A failed check raises the op's error there (at the latest at the next host read),
// naming the op and where it was called, after undoing it and every call recorded after
// it: their writes are undone, the graph before it runs, and the tensors they returned
// read as failed. So the state is eager's at the failed call; only the error comes later.
// A graph not compiled for its exact sizes goes to the fused graph hook first (below):
// its shape class may run it padded to shape buckets, so that a loop whose lengths vary
// compiles one program per bucket. If a fused graph's module cannot be lowered or
// compiled (a torchtpu bug), its ops run one by one instead, each error naming its op.
//
// Thread safety: every function may be called from any thread; a device's graph is
// recorded and run under its own lock.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aten/tpu_storage.h"
#include "lowering/lowering.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {

struct CompiledOp;

enum class EagerMode { kOpByOp, kFused };
// TORCHTPU_EAGER at first use ("fused", or "op" / unset: op by op) unless set since.
EagerMode eager_mode();
// Switches mode; leaving fused mode runs every pending graph first.
void set_eager_mode(EagerMode mode);

// A value a recorded graph computes, shared by the storages whose value it is.
struct PendingValue {
  int device = 0;
  uint64_t generation = 0;  // which recorded graph of its device computes it
  int id = 0;               // its value id in that graph
  lowering::TensorType type;
  runtime::BufferPtr buffer;  // set once the graph has run
  std::string error;          // set when the graph failed
};

// Gives `s` its buffer: runs the graph computing its pending value if it has not run.
void materialize(StorageState& s);
// The same for the pending value `v` the caller saw in `s` (raises when its graph failed):
// `v`'s buffer becomes s's unless a write recorded since replaced `v`. Returns s's value
// after (a buffer, or a newer pending value). Safe with a recorder on another thread.
StorageState::Value materialize(StorageState& s, const std::shared_ptr<PendingValue>& v);

// Records the call on `stack` (its arguments on top, classified and compiled as `c`) into
// its device's pending graph, pushing its results. Returns false without touching the
// stack when the call cannot be deferred; the caller then runs it op by op.
bool record_call(const std::shared_ptr<const CompiledOp>& c, const c10::FunctionSchema& schema,
                 torch::jit::Stack* stack, const std::optional<at::Generator>& generator);

// A pending graph as the shape-class hook sees it (value ids as in pending_graph.h: inputs
// -1, -2, ..., node values 0, 1, ...).
struct ExportedNode {
  // "aten::add.Tensor", or "" for a view read: as_strided(base, sizes, strides, offset).
  // An op writing its argument ("aten::fill_.Scalar") wrote a whole storage: its result is
  // a new value, its functional form's. A storage no call wrote reads as "aten::zeros", a
  // copy across dtypes is "aten::_to_copy", a write into a view of a value (the storage's
  // new value) "aten::as_strided_scatter" with its offset as an int.
  std::string op;
  // The schema arguments, each tensor None and each tensor list a list of 0/1 (present).
  std::vector<c10::IValue> args;
  // Per tensor the op reads: (argument, item among the present ones or -1, value id).
  std::vector<std::array<int, 3>> reads;
  int base = 0;  // view read
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  int first_out = 0;
  int num_out = 0;
  // A random op: the input holding the generator state it draws from (ui64[2]), or -1.
  int rng_input = -1;
};
struct ExportedGraph {
  // The graph exactly, as bytes (its structure words, which values are outputs, every
  // recorded argument's value and every view's offset): equal keys are equal graphs at
  // equal sizes. Empty when an
  // argument is of a kind the key does not encode; the hook then keys the graph itself.
  std::string key;
  std::vector<at::Tensor> inputs;
  // Builds the node list, during the hook call only: a graph whose key the hook has seen
  // needs none.
  std::function<std::vector<ExportedNode>()> nodes;
  std::vector<int> outputs;  // the value ids whose values the run must return
  std::vector<std::vector<int64_t>> dims;  // per value id >= 0: its sizes
  std::vector<c10::ScalarType> dtypes;     // per value id >= 0: its dtype
};
// Runs an exported graph another way (shape buckets, dynamo/buckets/shape_class.py): returns
// one tensor per output, or nullopt to run it as a fused program of its exact sizes. It is
// called without fused recording on its thread (its own eager ops run op by op), for graphs
// of ops (those writing a whole storage too, random ops with their generator states as
// inputs), view reads and writes, zeros and conversions (fused_run.cc `exportable`).
using FusedGraphHook = std::function<std::optional<std::vector<at::Tensor>>(const ExportedGraph&)>;
void set_fused_graph_hook(FusedGraphHook hook);

// Records dst.copy_(src) between tensors of one device and one shape, into their device's
// pending graph: dst's value becomes src's, converted to dst's dtype (not complex values
// to real ones), through dst's view if it is one. Returns false, recording nothing, when
// not in fused mode or the copy cannot be deferred; the caller then copies at once.
bool record_copy(const at::Tensor& src, const at::Tensor& dst);

// Runs the pending graph of `device`, or of every device.
void flush_pending(int device);
void flush_all_pending();
// Runs the pending graph of `device` if it holds a data check not read yet (fused mode):
// called before a write that is not recorded (an op that runs at its call), so that a
// failed check has only recorded writes to undo.
void run_checked_pending(int device);
// Ops recorded on `device` and not run yet.
int64_t num_pending_ops(int device);

}  // namespace torchtpu::aten
