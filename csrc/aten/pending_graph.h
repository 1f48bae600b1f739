// The pending graph of one device in fused eager mode (fused_eager.h): what was recorded
// since it last ran, and running it.
//
// Data checks: an op with data checks (index bounds) is recorded like any other; its
// checks are results of the graph, read when it runs. A failed check undoes the failing
// op and everything recorded after it (`Mark`, `undo`): the storages they wrote get back
// the values they had before it, the graph before it runs, and the error is the op's,
// naming the Python line that called it (record_site.h).
//
// Value ids: graph inputs (buffers captured when an op read them) are -1, -2, ...;
// values the recorded nodes compute are 0, 1, ... The structure words (the cache key of
// the fused program) name every node's op signature and the ids it reads, every input's
// type, and at run time which values are outputs.
#pragma once

#include <c10/util/SmallVector.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include "aten/fused_eager.h"
#include "aten/record_site.h"
#include "lowering/lowering.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {

// The graph's size before a call was recorded: truncated to it, the graph is what it was
// before the call.
struct Mark {
  size_t nodes = 0, types = 0, inputs = 0, structure = 0;
};

struct RecordedNode {
  // kZeros: what a read of a storage no call has written gives (zeros of its dtype, as
  // many as its bytes hold), computed in the graph: no buffer and no program per size.
  // kConvert: a value in another dtype (copy_ across dtypes: x.float()), as
  // lowering::convert_module gives it op by op.
  enum class Kind { kOp, kViewRead, kViewWrite, kZeros, kConvert } kind = Kind::kOp;
  std::shared_ptr<const CompiledOp> op;  // kOp
  // kOp: the value each graph input of the op reads (CompiledOp::inputs order).
  // kViewRead: {base}; kViewWrite: {base, value}; kZeros: none; kConvert: {value}.
  c10::SmallVector<int, 4> refs;
  // kOp: the values of its scalar and generator parameters, in the order its own program
  // takes them (the fused program's parameters of this node come in the same order).
  // Views: the offset (a 0-d i64), a runtime parameter of the fused program.
  c10::SmallVector<runtime::BufferPtr, 2> params;
  // kOp: the call's arguments as ExportedNode::args holds them (fused_eager.h).
  std::vector<c10::IValue> call_args;
  // Views: as_strided(base, sizes, strides, offset) / as_strided_scatter(base, value, ...).
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  int first_out = 0;  // its results are values first_out, first_out + 1, ...
  int num_out = 0;
  // kOp with data checks: the graph before its call, and where it was called from.
  Mark mark;
  std::shared_ptr<const RecordSite> site;
};

// A storage's value before the graph wrote it, once the graph holds a data check: what a
// failed check restores.
struct UndoWrite {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  size_t nodes = 0;  // the graph's node count when the write was recorded
  runtime::BufferPtr buffer;
  std::shared_ptr<PendingValue> earlier;  // a value an earlier graph computed
  int id = -1;                            // >= 0: a value of this graph
  bool unwritten = false;  // no call had written the storage (it read as zeros)
};

class PendingGraph {
 public:
  explicit PendingGraph(int device) : device(device) {}

  // Recursive: running the graph can read storages whose values an older run computed.
  std::recursive_mutex mu;
  const int device;
  uint64_t generation = 1;  // bumped at every run: older PendingValues are computed
  std::vector<runtime::BufferPtr> inputs;
  std::unordered_map<const runtime::Buffer*, int> input_ids;
  std::vector<RecordedNode> nodes;
  std::vector<lowering::TensorType> types;          // per value id >= 0
  std::vector<std::weak_ptr<PendingValue>> values;  // per value id >= 0 (expired: dead)
  std::vector<int64_t> structure;
  bool checked = false;          // a recorded op has data checks
  // The first factory call recorded with autograd off (an op reading only storages no
  // call had written: arange, randn): its node, where it was called from (a loop's next
  // iteration calls it from the same place), and the graph's size at its last repeat.
  int first_factory = -1;
  std::shared_ptr<const RecordSite> first_factory_site;
  int last_repeat = -1;
  std::vector<UndoWrite> undo;   // writes recorded since the first data-checked op

  static int input_id(int k) { return -(k + 1); }
  static int input_index(int id) { return -id - 1; }
  const lowering::TensorType& type_of(int id) const;
  // Starts a new graph (the recorded one has run or was dropped).
  void reset();
  // Drops what was recorded since `m` (same generation: values before it stay pending).
  void truncate(const Mark& m);
};

// Undoes what was recorded since `m` (a failed data check's op and every call after it):
// storages written since get back their values before it, tensors those calls returned
// read as failed (`error`), and `g` is truncated to `m`.
void undo_since(PendingGraph& g, const Mark& m, const std::string& error);

// Runs `g` (its lock held): its outputs are the values some storage still holds, which
// take their buffers; `g` is reset. Nothing runs when no value is held and no data check
// is recorded. A fused program that cannot be built runs the nodes one by one instead. A
// failed data check raises its op's error after running the graph recorded before that
// op (see above).
void run_pending_graph(PendingGraph& g);

// Whether this thread records eager ops (false while the fused graph hook runs).
bool recording_enabled();

}  // namespace torchtpu::aten
