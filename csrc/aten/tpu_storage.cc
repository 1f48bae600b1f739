#include "aten/tpu_storage.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "aten/device_runtime.h"
#include "aten/fused_eager.h"
#include "aten/host_transfer.h"
#include "aten/status_error.h"
#include "aten/storage_bytes.h"
#include "aten/tpu_allocator.h"
#include "aten/tpu_guard.h"
#include "aten/view_programs.h"
#include "lowering/storage_programs.h"
#include "runtime/device_queue.h"
#include "runtime/execution_trace.h"

namespace torchtpu::aten {
namespace {

// Every live StorageState, so a DataPtr that lost its context (at::from_blob over a tpu
// storage's data pointer, as PyTorch's storage writer does) still finds its state. Never
// destroyed: storages may outlive static destruction.
struct LiveStates {
  std::mutex mu;
  std::unordered_set<const void*> states;
};
LiveStates& live() {
  static auto* l = new LiveStates();
  return *l;
}

void delete_state(void* ctx) {
  auto* state = static_cast<StorageState*>(ctx);
  {
    std::lock_guard<std::mutex> lock(live().mu);
    live().states.erase(ctx);
  }
  note_storage_freed(state, state->device_index, state->nbytes);
  delete state;
}

c10::DataPtr make_data_ptr(StorageState* state) {
  // The data pointer is the state itself: unique and non-null, never dereferenced as data.
  return c10::DataPtr(state, state, &delete_state,
                      c10::Device(c10::DeviceType::PrivateUse1, state->device_index));
}

StorageState* new_state(int device_index, int64_t nbytes) {
  auto* state = new StorageState();
  state->device_index = device_index;
  state->nbytes = nbytes;
  {
    std::lock_guard<std::mutex> lock(live().mu);
    live().states.insert(state);
  }
  note_storage_allocated(state, device_index, nbytes);
  return state;
}

// The storage's buffer; one that was allocated but never written is first filled with
// zeros of the reader's dtype. A value another thread recorded since the caller's
// storage_state() (fused eager) is computed here: a reader never sees a storage without
// a value just because a write was in flight.
runtime::BufferPtr ensure_buffer(StorageState& s, c10::ScalarType dtype) {
  StorageState::Value v = s.value();
  runtime::BufferPtr zeros;
  for (;;) {
    if (v.buffer) return v.buffer;
    if (v.pending) {
      v = materialize(s, v.pending);
      continue;
    }
    if (!zeros) {
      // Bytes when the reader's elements do not fill the storage (every byte is kept).
      int64_t item = c10::elementSize(dtype);
      lowering::TensorType t{to_dtype(dtype), {s.nbytes / item}};
      if (s.nbytes % item != 0) t = lowering::TensorType{base::DType::kU8, {s.nbytes}};
      zeros = run_program(lowering::zeros_module(t), {}, s.device_index)[0];
    }
    v = s.fill_if_empty(zeros);
  }
}

// Whether (sizes, strides) address their elements in row-major order with no gaps (size-1
// dims' strides do not matter): lowering::is_whole_buffer_view's rule, on the tensor's own
// arrays, so the common case allocates nothing.
bool row_major(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

// Whether `b` is t's value as it is: t reads the whole buffer in its shape, row-major.
bool is_value_of(const at::Tensor& t, const runtime::Buffer& b) {
  return t.storage_offset() == 0 && b.dtype() == to_dtype(t.scalar_type()) &&
         c10::IntArrayRef(b.dims()) == t.sizes() && row_major(t.sizes(), t.strides());
}

}  // namespace

const char* const kNoStorageStateMessage =
    "tpu: this storage has no tpu state: it was not made by torchtpu's allocator. It is a "
    "slice (storage[a:b]) of a tpu storage, or a tensor imported (DLPack, from_blob) from a "
    "pointer inside one (the export of a view with a storage offset), and a tpu storage cannot "
    "alias part of another. Use a tensor view instead (torch.empty(0, dtype=torch.uint8, "
    "device='tpu').set_(storage)[a:b]), or export view.clone()";

c10::Allocator* tpu_allocator() { return tpu_device_allocator(); }

c10::DataPtr new_storage_data_ptr(int device_index, int64_t nbytes) {
  return make_data_ptr(new_state(device_index, nbytes));
}

StorageState* find_storage_state(const c10::DataPtr& dp) {
  if (void* ctx = dp.get_context(); ctx != nullptr && dp.get_deleter() == &delete_state) {
    return static_cast<StorageState*>(ctx);
  }
  return live_storage_state(dp.get());
}

StorageState* live_storage_state(const void* p) {
  if (p == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(live().mu);
  return live().states.count(p) ? static_cast<StorageState*>(const_cast<void*>(p)) : nullptr;
}

StorageState& storage_state(const at::Tensor& t) {
  StorageState& s = recorded_storage_state(t);
  materialize(s);
  return s;
}

StorageState& recorded_storage_state(const at::Tensor& t) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1,
              "tpu: expected a tpu tensor, got one on ", t.device());
  StorageState* s = find_storage_state(t.storage().data_ptr());
  TORCH_CHECK(s != nullptr, kNoStorageStateMessage);
  return *s;
}

std::optional<base::DType> maybe_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Bool: return base::DType::kBool;
    case c10::ScalarType::Char: return base::DType::kI8;
    case c10::ScalarType::Byte: return base::DType::kU8;
    case c10::ScalarType::Short: return base::DType::kI16;
    case c10::ScalarType::Int: return base::DType::kI32;
    case c10::ScalarType::Long: return base::DType::kI64;
    case c10::ScalarType::Half: return base::DType::kF16;
    case c10::ScalarType::BFloat16: return base::DType::kBF16;
    case c10::ScalarType::Float: return base::DType::kF32;
    case c10::ScalarType::Double: return base::DType::kF64;
    case c10::ScalarType::UInt16: return base::DType::kU16;
    case c10::ScalarType::UInt32: return base::DType::kU32;
    case c10::ScalarType::UInt64: return base::DType::kU64;
    case c10::ScalarType::ComplexFloat: return base::DType::kC64;
    case c10::ScalarType::ComplexDouble: return base::DType::kC128;
    default: return std::nullopt;
  }
}

base::DType to_dtype(c10::ScalarType t) {
  std::optional<base::DType> d = maybe_dtype(t);
  TORCH_CHECK_NOT_IMPLEMENTED(d.has_value(), "tpu: dtype ", t,
                              " is not supported on the tpu device (supported: bool, int8, "
                              "uint8, int16, uint16, int32, uint32, int64, uint64, float16, "
                              "bfloat16, float32, float64, complex64, complex128)");
  return *d;
}

c10::ScalarType to_scalar_type(base::DType t) {
  switch (t) {
    case base::DType::kBool: return c10::ScalarType::Bool;
    case base::DType::kI8: return c10::ScalarType::Char;
    case base::DType::kU8: return c10::ScalarType::Byte;
    case base::DType::kI16: return c10::ScalarType::Short;
    case base::DType::kI32: return c10::ScalarType::Int;
    case base::DType::kI64: return c10::ScalarType::Long;
    case base::DType::kF16: return c10::ScalarType::Half;
    case base::DType::kBF16: return c10::ScalarType::BFloat16;
    case base::DType::kF32: return c10::ScalarType::Float;
    case base::DType::kF64: return c10::ScalarType::Double;
    case base::DType::kU16: return c10::ScalarType::UInt16;
    case base::DType::kU32: return c10::ScalarType::UInt32;
    case base::DType::kU64: return c10::ScalarType::UInt64;
    case base::DType::kC64: return c10::ScalarType::ComplexFloat;
    case base::DType::kC128: return c10::ScalarType::ComplexDouble;
  }
  return c10::ScalarType::Undefined;
}

std::vector<runtime::BufferPtr> run_program(const std::string& module_text,
                                            const std::vector<const runtime::Buffer*>& args,
                                            int device_index) {
  auto exe = compile_cache().get_or_compile(module_text, device_index);
  TORCH_CHECK(exe.ok(), exe.status().message());
  // The zeros of a large storage never written (fused eager reads one an op overwrites).
  check_results_fit(device_index, (*exe)->output_bytes());
  // Inside an op the program carries the op's name; alone (a view copy, a read) its own.
  const char* outer = runtime::trace::current_label();
  runtime::trace::Label label(outer != nullptr ? outer : "tpu storage program");
  auto out = (*exe)->execute(args);
  if (!out.ok()) raise_status(out.status(), device_index);
  return std::move(out).value();
}

runtime::BufferPtr storage_buffer(const at::Tensor& t) {
  check_not_forked_child();
  StorageState& s = storage_state(t);
  runtime::BufferPtr b = ensure_buffer(s, t.scalar_type());
  // A storage last written as another dtype (bytes from torch.load) is read bitcast, and
  // keeps the bitcast value: the same bytes, so later reads in this dtype (every forward
  // of a loaded model) cost nothing.
  if (b->dtype() != to_dtype(t.scalar_type())) {
    c10::IntArrayRef sizes = t.sizes();
    c10::IntArrayRef strides = t.strides();
    // Shaped like the reader when it reads the whole storage, so its reads need nothing.
    int64_t numel = s.nbytes / static_cast<int64_t>(t.element_size());
    bool whole = t.storage_offset() == 0 && t.numel() == numel && row_major(sizes, strides) &&
                 numel * static_cast<int64_t>(t.element_size()) == b->size_bytes();
    std::vector<int64_t> dims(sizes.begin(), sizes.end());
    runtime::BufferPtr as = storage_bytes_as(b, s.device_index, t.scalar_type(),
                                             whole ? &dims : nullptr);
    if (keeps_bytes(b->dtype(), t.scalar_type())) s.keep_reinterpretation(b, as);
    return as;
  }
  return b;
}

bool reads_as_is(const at::Tensor& t) {
  runtime::BufferPtr b = storage_state(t).buffer();
  return b && is_value_of(t, *b);
}

runtime::BufferPtr read_tensor(const at::Tensor& t) {
  check_not_forked_child();  // the parent's buffers are waited for by threads fork did not copy
  StorageState& s = storage_state(t);
  c10::IntArrayRef sizes = t.sizes();
  c10::IntArrayRef strides = t.strides();
  // The common case: the tensor is its storage's buffer, as it is.
  if (runtime::BufferPtr b = s.buffer(); b && is_value_of(t, *b)) return b;
  runtime::BufferPtr held = storage_buffer(t);
  const runtime::Buffer& buf = *held;
  if (t.storage_offset() == 0 && t.numel() == buf.num_elements() && row_major(sizes, strides)) {
    if (c10::IntArrayRef(buf.dims()) == sizes) return held;
    return view_reshape(buf, sizes);
  }
  return view_read(buf, sizes, strides, t.storage_offset());
}

namespace {

// Items of a list grouped by storage (and dtype), first appearance first; a group's items
// keep their list order.
std::vector<std::vector<size_t>> by_storage(c10::ArrayRef<at::Tensor> ts,
                                            const std::vector<bool>& eligible) {
  std::vector<std::vector<size_t>> groups;
  std::vector<std::pair<StorageState*, c10::ScalarType>> keys;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!eligible[i]) continue;
    std::pair<StorageState*, c10::ScalarType> key{&storage_state(ts[i]), ts[i].scalar_type()};
    size_t g = std::find(keys.begin(), keys.end(), key) - keys.begin();
    if (g == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

std::vector<at::Tensor> pick(c10::ArrayRef<at::Tensor> ts, const std::vector<size_t>& idx) {
  std::vector<at::Tensor> out;
  for (size_t i : idx) out.push_back(ts[i]);
  return out;
}

}  // namespace

bool covers_storage(const at::Tensor& t) { return is_whole_storage(t, storage_state(t)); }

// (Every byte: a 3-element int16 view of a 7-byte storage does not cover it, and its value
// as the storage's buffer would drop the last byte.)
bool is_whole_storage(const at::Tensor& t, const StorageState& s) {
  return t.storage_offset() == 0 &&
         t.numel() * static_cast<int64_t>(t.element_size()) == s.nbytes &&
         row_major(t.sizes(), t.strides());
}

std::vector<runtime::BufferPtr> read_tensors(c10::ArrayRef<at::Tensor> ts) {
  std::vector<runtime::BufferPtr> out(ts.size());
  // Items that are their storage's buffer as it is need no program; the others (windows,
  // strided views, whole storages read in another shape) on the first such item's device are
  // read together by one program over their storages, each storage one parameter.
  std::vector<size_t> need;
  std::vector<runtime::BufferPtr> bases;
  std::vector<std::pair<StorageState*, c10::ScalarType>> keys;
  std::vector<size_t> base_of;
  for (size_t i = 0; i < ts.size(); ++i) {
    const at::Tensor& t = ts[i];
    if (t.numel() == 0 || (!need.empty() && t.device() != ts[need[0]].device())) continue;
    StorageState& s = storage_state(t);
    runtime::BufferPtr held = storage_buffer(t);
    if (t.storage_offset() == 0 && t.numel() == held->num_elements() &&
        c10::IntArrayRef(held->dims()) == t.sizes() && row_major(t.sizes(), t.strides())) {
      out[i] = std::move(held);
      continue;
    }
    std::pair<StorageState*, c10::ScalarType> key{&s, t.scalar_type()};
    size_t b = std::find(keys.begin(), keys.end(), key) - keys.begin();
    if (b == keys.size()) {
      keys.push_back(key);
      bases.push_back(std::move(held));
    }
    need.push_back(i);
    base_of.push_back(b);
  }
  if (need.size() >= 2) {
    std::vector<const runtime::Buffer*> raw;
    for (const runtime::BufferPtr& b : bases) raw.push_back(b.get());
    std::vector<runtime::BufferPtr> values = views_read(raw, pick(ts, need), base_of);
    for (size_t k = 0; k < need.size(); ++k) out[need[k]] = std::move(values[k]);
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!out[i]) out[i] = read_tensor(ts[i]);
  }
  return out;
}

void StorageState::set_buffer(runtime::BufferPtr b, bool zeros_only) {
  std::shared_ptr<PendingValue> dropped;
  std::lock_guard<std::mutex> lock(mu_);
  zeros_only_.store(zeros_only);
  buffer_.swap(b);
  pending_.swap(dropped);
}  // the old buffer (`b`) and pending value are released after the lock

void StorageState::set_pending(std::shared_ptr<PendingValue> v) {
  runtime::BufferPtr dropped;
  std::lock_guard<std::mutex> lock(mu_);
  zeros_only_.store(false);
  pending_.swap(v);
  buffer_.swap(dropped);
}

StorageState::Value StorageState::resolve(const std::shared_ptr<PendingValue>& v,
                                          runtime::BufferPtr b) {
  std::shared_ptr<PendingValue> dropped;
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t before = nbytes;
  if (pending_ == v) {
    if (b->size_bytes() > nbytes) nbytes = b->size_bytes();
    buffer_.swap(b);
    pending_.swap(dropped);
  }
  Value now{buffer_, pending_};
  const int64_t after = nbytes;
  lock.unlock();
  if (after != before) note_storage_resized(this, device_index, before, after);
  return now;
}

StorageState::Value StorageState::fill_if_empty(runtime::BufferPtr zeros) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!buffer_ && !pending_) {
    zeros_only_.store(true);
    buffer_ = std::move(zeros);
  }
  return Value{buffer_, pending_};
}

void StorageState::keep_reinterpretation(const runtime::BufferPtr& from, runtime::BufferPtr as) {
  std::lock_guard<std::mutex> lock(mu_);
  if (buffer_ == from) buffer_.swap(as);
}  // `as`, now `from`, is released after the lock

// A write splicing a view into `whole` gives it up (view_write's donate_base) when it is
// held only by this state and the call, or only by the call (a reinterpretation made for
// the write): XLA then writes the view in place. Any other holder (a value read earlier,
// a cache, another storage) keeps it, and XLA copies the whole base (a 10-element write
// into a 1 GiB storage copied the GiB, and held two). With the lock held nothing can take
// a new reference meanwhile; a write that copies lets readers in while it runs.
void StorageState::write_part(runtime::BufferPtr whole, const PartWriter& write) {
  std::shared_ptr<PendingValue> dropped;  // a value recorded while this write ran: replaced
  std::unique_lock<std::mutex> lock(mu_);
  runtime::forget_tail(whole.get());  // as lock_to_give_up: the queue takes it no more
  bool donate = whole.use_count() == (buffer_.get() == whole.get() ? 2 : 1);
  if (!donate) lock.unlock();
  runtime::BufferPtr next = write(whole, donate);
  whole.reset();
  if (!lock.owns_lock()) lock.lock();
  zeros_only_.store(false);
  buffer_.swap(next);
  pending_.swap(dropped);
  lock.unlock();
}  // `next`, now the old buffer, is released after the lock

std::unique_lock<std::mutex> StorageState::lock_to_give_up(const runtime::BufferPtr& b) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return lock;
  if (buffer_.get() != b.get()) {
    lock.unlock();
    return lock;
  }
  // The device queue holds its tail weakly: forgotten first, a stream query or barrier
  // can no longer take the buffer, and one that took it already shows in the count.
  runtime::forget_tail(b.get());
  if (buffer_.use_count() != 2) lock.unlock();
  return lock;
}

void StorageState::give_buffer_to(std::unique_lock<std::mutex>& lock, runtime::BufferPtr output) {
  zeros_only_.store(false);
  buffer_.swap(output);
  lock.unlock();
}  // `output`, now the old buffer, is released after the lock

bool StorageDonations::give_up(int input, const at::Tensor& t, const runtime::BufferPtr& b) {
  // Not storage_state(): a value another thread recorded meanwhile (fused eager) would be
  // computed here, under the locks this run holds. Such a storage holds no buffer, so
  // lock_to_give_up does not give it up.
  StorageState& s = recorded_storage_state(t);
  for (const Held& h : held_) {
    if (h.state == &s) return false;  // locked by this run already (never locked twice)
  }
  if (!is_whole_storage(t, s)) return false;
  std::unique_lock<std::mutex> lock = s.lock_to_give_up(b);
  if (!lock.owns_lock()) return false;
  held_.push_back(Held{input, &s, std::move(lock)});
  return true;
}

void StorageDonations::take(int input, const runtime::BufferPtr& output) {
  for (Held& h : held_) {
    if (h.input == input && h.lock.owns_lock()) h.state->give_buffer_to(h.lock, output);
  }
}

namespace {

// Whether a write through a `dtype` view splices into the storage's buffer (held as
// `held`) read as `dtype`: not when that reading would not give the bytes back (a bool
// view of another dtype's bytes) or cannot be made (bytes that are no whole elements of
// `dtype`).
bool splices_in_dtype(const StorageState& s, base::DType held, c10::ScalarType dtype) {
  return keeps_bytes(held, dtype) && s.nbytes % static_cast<int64_t>(c10::elementSize(dtype)) == 0;
}

// A partial write of `value` through view `t`: the storage's buffer it splices into, the
// part and where it goes. In t's dtype, or (splices_in_dtype false) in bytes: the view's
// geometry in bytes, the value's bytes.
struct Splice {
  runtime::BufferPtr base, part;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};

Splice splice(StorageState& s, const at::Tensor& t, const runtime::BufferPtr& value) {
  Splice sp{nullptr, value, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
            std::vector<int64_t>(t.strides().begin(), t.strides().end()), t.storage_offset()};
  c10::ScalarType as = t.scalar_type();
  runtime::BufferPtr held = ensure_buffer(s, as);  // (released at return: donatable)
  if (!splices_in_dtype(s, held->dtype(), as)) {
    const int64_t item = static_cast<int64_t>(t.element_size());
    for (int64_t& stride : sp.strides) stride *= item;
    sp.sizes.push_back(item);
    sp.strides.push_back(1);
    sp.offset *= item;
    as = c10::ScalarType::Byte;
    sp.part = storage_bytes_as(value, s.device_index, as, &sp.sizes);
  }
  sp.base = storage_bytes_as(held, s.device_index, as);
  return sp;
}

}  // namespace

void write_tensors(c10::ArrayRef<at::Tensor> ts, const std::vector<runtime::BufferPtr>& values) {
  if (ts.empty()) return;
  run_checked_pending(ts[0].device().index());
  std::vector<bool> partial(ts.size());
  std::vector<StorageState*> states(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    states[i] = &storage_state(ts[i]);
    TORCH_CHECK(values[i]->dtype() == to_dtype(ts[i].scalar_type()),
                "tpu: internal: writing a ", base::dtype_name(values[i]->dtype()), " value into a ",
                ts[i].scalar_type(), " tensor");
    partial[i] = !is_whole_storage(ts[i], *states[i]);
  }
  // A storage that an item covers whole is written item by item, in list order, like any
  // storage of one item; the others take their items' writes in one program, in order.
  std::vector<bool> batched(ts.size());
  for (const std::vector<size_t>& g : by_storage(ts, partial)) {
    StorageState& s = *states[g[0]];
    bool whole_too = false;
    for (size_t i = 0; i < ts.size(); ++i) whole_too |= !partial[i] && states[i] == &s;
    c10::ScalarType dtype = ts[g[0]].scalar_type();
    if (g.size() < 2 || whole_too ||
        !splices_in_dtype(s, ensure_buffer(s, dtype)->dtype(), dtype)) {
      continue;
    }
    std::vector<runtime::BufferPtr> vs;
    for (size_t i : g) {
      vs.push_back(values[i]);
      batched[i] = true;
    }
    std::vector<at::Tensor> views = pick(ts, g);
    // (One statement apart: a temporary of ensure_buffer's alive in the call would count
    // as another holder and keep the write from donating the buffer.)
    runtime::BufferPtr base = storage_bytes_as(ensure_buffer(s, dtype), s.device_index, dtype);
    s.write_part(std::move(base),
                 [&](const runtime::BufferPtr& whole, bool donate) {
                   return views_write(*whole, vs, views, donate);
                 });
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!batched[i]) write_tensor(ts[i], values[i]);
  }
}

runtime::BufferPtr storage_buffer(StorageState& s, c10::ScalarType dtype) {
  check_not_forked_child();
  runtime::BufferPtr held = ensure_buffer(s, dtype);
  runtime::BufferPtr b = storage_bytes_as(held, s.device_index, dtype);
  if (keeps_bytes(held->dtype(), dtype)) s.keep_reinterpretation(held, b);  // the same bytes
  return b;
}

void write_tensor(const at::Tensor& t, const runtime::BufferPtr& value) {
  StorageState& s = storage_state(t);
  TORCH_CHECK(value->dtype() == to_dtype(t.scalar_type()),
              "tpu: internal: writing a ", base::dtype_name(value->dtype()), " value into a ",
              t.scalar_type(), " tensor");
  const bool whole = is_whole_storage(t, s);
  // Fused eager: a failed check undoes no such write, so a pending graph holding checks
  // runs first; not for a first value of a whole storage (`torch.tensor(list, device=)`):
  // nothing before it is overwritten. (The value read in a scope of its own: a buffer it
  // held would count as another holder and keep the write from donating it.)
  bool first_value = false;
  if (whole) {
    StorageState::Value before = s.value();
    first_value = !before.buffer && !before.pending;
  }
  if (!first_value) run_checked_pending(t.device().index());
  if (whole) {
    s.set_buffer(value);  // the whole storage: the value becomes its buffer
    return;
  }
  // (The base made apart from the call, as in write_tensors.)
  Splice sp = splice(s, t, value);
  runtime::BufferPtr base = std::move(sp.base);
  s.write_part(std::move(base),
               [&](const runtime::BufferPtr& whole, bool donate) {
                 return view_write(*whole, *sp.part, sp.sizes, sp.strides, sp.offset, donate);
               });
}

void set_storage_nbytes(StorageState& s, int64_t nbytes) {
  note_storage_resized(&s, s.device_index, s.nbytes, nbytes);
  s.nbytes = nbytes;
}

at::Tensor wrap_buffer(runtime::BufferPtr buffer, c10::ScalarType dtype) {
  auto* state = new_state(buffer->device_index(), buffer->size_bytes());
  std::vector<int64_t> sizes = buffer->dims();
  state->set_buffer(std::move(buffer));
  int64_t nbytes = state->nbytes;
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, make_data_ptr(state),
                       tpu_allocator(), /*resizable=*/true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

at::Tensor wrap_pending(std::shared_ptr<PendingValue> value, c10::ScalarType dtype,
                        c10::IntArrayRef sizes, int device) {
  int64_t numel = 1;
  for (int64_t d : sizes) numel *= d;
  auto* state = new_state(device, numel * static_cast<int64_t>(c10::elementSize(dtype)));
  state->set_pending(std::move(value));
  c10::Storage storage(c10::Storage::use_byte_size_t(), state->nbytes, make_data_ptr(state),
                       tpu_allocator(), /*resizable=*/true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

}  // namespace torchtpu::aten
