// Storage of a `tpu` tensor: a PJRT buffer behind a c10::Storage.
//
// The DataPtr's context is a StorageState that owns the current buffer. Buffers are
// values, so an in-place op or a write through a view computes a new buffer for the whole
// storage and swaps it in (XLA may reuse the old one's memory when nothing else holds it:
// donation); every tensor and view sharing the storage sees
// the new value (PyTorch's aliasing semantics). A fresh allocation (torch.empty) has no
// buffer until first read (then zeros) or first write.
// Thread safety: like PyTorch tensors, a storage is not safe for concurrent writes (one
// of two threads' in-place ops on it may be lost), but its buffer (or pending value) is
// read and swapped under the state's lock, so such a race never frees a buffer twice,
// reads a torn pointer or a value no call wrote, and a write that gives its buffer up to
// XLA (write_part, StorageDonations) holds the lock until the new buffer is in: no reader
// takes a buffer being given up.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "runtime/buffer.h"

namespace torchtpu::aten {

struct PendingValue;  // fused_eager.h

struct StorageState {
  // What the storage holds at one instant: a buffer (null until first read or write), or,
  // in fused eager mode, the pending value a recorded graph computes. Never both: every
  // change below sets one and drops the other under the state's lock, so a reader on
  // another thread sees either the value before a write or the one after it.
  struct Value {
    runtime::BufferPtr buffer;
    std::shared_ptr<PendingValue> pending;
  };
  Value value() const {
    std::lock_guard<std::mutex> lock(mu_);
    return Value{buffer_, pending_};
  }
  // The current buffer: null until first read or write, and while the value is pending.
  runtime::BufferPtr buffer() const {
    std::lock_guard<std::mutex> lock(mu_);
    return buffer_;
  }
  std::shared_ptr<PendingValue> pending() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_;
  }
  // The value becomes `b` (a pending value is dropped: this write replaces it).
  // `zeros_only`: the buffer holds only the zeros a read of a never-written storage made
  // (ensure_buffer), or those bytes read as another dtype: no call has written it yet.
  void set_buffer(runtime::BufferPtr b, bool zeros_only = false);
  // Fused eager: the value becomes `v`, which a recorded graph computes (the buffer is
  // dropped). storage_state() runs that graph first, so every reader but the recorder
  // sees a buffer.
  void set_pending(std::shared_ptr<PendingValue> v);
  // `v`'s computed buffer `b` becomes the buffer, if `v` is still the storage's value (a
  // write recorded since keeps its own); a padded graph's output is the row-major prefix of
  // a bucket-sized buffer, and the storage then grows to hold it (its tensors view the
  // prefix). Returns the value after.
  Value resolve(const std::shared_ptr<PendingValue>& v, runtime::BufferPtr b);
  // The zeros a read of a never-written storage made become its buffer, if it still holds
  // nothing (another thread may have written meanwhile). Returns the value after.
  Value fill_if_empty(runtime::BufferPtr zeros);
  // `as`, the buffer `from` read as another dtype (the same bytes), replaces `from` if it
  // is still the buffer, so later reads in that dtype cost nothing.
  void keep_reinterpretation(const runtime::BufferPtr& from, runtime::BufferPtr as);
  // A write into part of the storage: the new buffer is `write(whole, donate)`, where
  // `whole` is the current buffer or a reinterpretation of it made for this write (the
  // caller's only copy, moved in). `donate` is true when nothing else holds `whole` (this
  // state and this call aside); the write may then give it up to XLA, and readers wait
  // until the new buffer is in.
  using PartWriter = std::function<runtime::BufferPtr(const runtime::BufferPtr& whole,
                                                      bool donate)>;
  void write_part(runtime::BufferPtr whole, const PartWriter& write);
  // A program's donation of the whole buffer: when `b` is the current buffer and its only
  // other holder is the caller's run, returns this state locked, so no reader takes the
  // buffer until the program's output is in (give_buffer_to). Returns an empty lock
  // otherwise, and when another thread holds the state: it never waits.
  std::unique_lock<std::mutex> lock_to_give_up(const runtime::BufferPtr& b);
  // The output of the program `b` was given up to becomes the buffer; `lock` (from
  // lock_to_give_up) is released.
  void give_buffer_to(std::unique_lock<std::mutex>& lock, runtime::BufferPtr output);
  bool zeros_only() const { return zeros_only_.load(); }  // read by fused eager's undo log

  int device_index = 0;
  int64_t nbytes = 0;

 private:
  mutable std::mutex mu_;
  runtime::BufferPtr buffer_;
  std::shared_ptr<PendingValue> pending_;
  std::atomic<bool> zeros_only_{false};
};

// The allocator registered for PrivateUse1 (tpu_allocator.h).
c10::Allocator* tpu_allocator();
// A DataPtr owning a new, bufferless StorageState of `nbytes` on `device_index`: what the
// allocator hands out.
c10::DataPtr new_storage_data_ptr(int device_index, int64_t nbytes);

// The storages whose whole buffers one program run gives up (ProgramArgs::donatable of an
// eager op or a compiled graph): each is locked from its check until its output is in.
class StorageDonations {
 public:
  // Whether `b`, read from `t` for the run (which holds one reference), is the whole
  // buffer of `t`'s storage held by nothing else; the storage is then locked.
  bool give_up(int input, const at::Tensor& t, const runtime::BufferPtr& b);
  // Input `input`'s storage, if given up, takes `output`.
  void take(int input, const runtime::BufferPtr& output);

 private:
  struct Held {
    int input;
    StorageState* state;
    std::unique_lock<std::mutex> lock;
  };
  c10::SmallVector<Held, 2> held_;
};

// What a tpu storage without a StorageState (not made by our allocator) says when used.
extern const char* const kNoStorageStateMessage;

// The StorageState behind a DataPtr of our allocator (also one that at::from_blob made
// from a tpu storage's data pointer), or null. Its value may be pending (fused eager).
StorageState* find_storage_state(const c10::DataPtr& dp);
// The live StorageState whose data pointer is `p`, or null (any other pointer).
StorageState* live_storage_state(const void* p);
// The StorageState of a tpu tensor, its pending value computed (fused eager) if it had one
// (another thread may record a new one since: readers of its buffer go through
// storage_buffer / read_tensor, which compute that too).
StorageState& storage_state(const at::Tensor& t);
// The same without computing a pending value: for the fused eager recorder only.
StorageState& recorded_storage_state(const at::Tensor& t);

// The storage's current buffer in t's dtype (zeros once if never written; bitcast, and
// kept so, if last written as another dtype): what every view of t reads from.
runtime::BufferPtr storage_buffer(const at::Tensor& t);
// The tensor's current value as a buffer of exactly its shape and dtype (materializes a
// view through a small cached program when the tensor is not the whole buffer).
runtime::BufferPtr read_tensor(const at::Tensor& t);
// The storage's whole buffer in `dtype` (zeros if it was never written, bitcast if it was
// written as another dtype; a pending value computed first).
runtime::BufferPtr storage_buffer(StorageState& s, c10::ScalarType dtype);
// Whether read_tensor(t) is its storage's buffer as it is (runs no program).
bool reads_as_is(const at::Tensor& t);
// Whether t addresses its whole storage in row-major order (its buffer, in any shape of
// t's element count, is t's value reshaped).
bool covers_storage(const at::Tensor& t);
// The same of `s`, t's storage: t's bytes are s's, row-major from offset 0.
bool is_whole_storage(const at::Tensor& t, const StorageState& s);
// Writes `value` (shape and dtype of `t`) into `t`, through its view if it is one.
void write_tensor(const at::Tensor& t, const runtime::BufferPtr& value);

// The same for a list (a list op's items): items that are views of one storage (not the
// whole of it) are read, or written in list order, by one program per storage.
std::vector<runtime::BufferPtr> read_tensors(c10::ArrayRef<at::Tensor> ts);
void write_tensors(c10::ArrayRef<at::Tensor> ts, const std::vector<runtime::BufferPtr>& values);

// Records a new byte count for the storage (resize_storage_bytes keeps the StorageImpl and
// the buffer in step).
void set_storage_nbytes(StorageState& s, int64_t nbytes);

// A new contiguous tpu tensor wrapping `buffer`.
at::Tensor wrap_buffer(runtime::BufferPtr buffer, c10::ScalarType dtype);
// A new contiguous tpu tensor of `sizes` on `device` whose value is pending (fused eager).
at::Tensor wrap_pending(std::shared_ptr<PendingValue> value, c10::ScalarType dtype,
                        c10::IntArrayRef sizes, int device);

// Scalar type mapping (raises for types the device does not hold).
base::DType to_dtype(c10::ScalarType t);
// The same, or nullopt for a dtype a tpu tensor cannot hold.
std::optional<base::DType> maybe_dtype(c10::ScalarType t);
c10::ScalarType to_scalar_type(base::DType t);

// Runs a storage program (from lowering/storage_programs.h), cached by its text.
std::vector<runtime::BufferPtr> run_program(const std::string& module_text,
                                            const std::vector<const runtime::Buffer*>& args,
                                            int device_index);

}  // namespace torchtpu::aten
