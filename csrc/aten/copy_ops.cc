// Copies across devices and dtypes, scalar reads, and storage resizing.
#include "aten/copy_ops.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/ResizeCommon.h>

#include <algorithm>
#include <optional>

#include "aten/fused_eager.h"
#include "aten/host_transfer.h"
#include "aten/storage_bytes.h"
#include "aten/tpu_storage.h"
#include "lowering/storage_programs.h"
#include "runtime/execution_trace.h"

namespace torchtpu::aten {
namespace {

std::vector<int64_t> dims_of(const at::Tensor& t) { return {t.sizes().begin(), t.sizes().end()}; }

// `value` converted to dst's dtype and broadcast to dst's shape.
runtime::BufferPtr conform(const runtime::BufferPtr& value, const at::Tensor& dst) {
  base::DType want = to_dtype(dst.scalar_type());
  if (value->dtype() == want && value->dims() == dims_of(dst)) return value;
  lowering::TensorType src{value->dtype(), value->dims()};
  return run_program(lowering::convert_module(src, want, dims_of(dst)), {value.get()},
                     value->device_index())[0];
}

// A view (or a reshape) read to the host through its storage's whole buffer, sliced on the
// host, when that buffer is small or not much larger than the view; else nullopt (the view
// is read by a program). No program per view shape: a compiled graph padded to shape
// buckets returns views at the true size of bucket-shaped buffers, and reading each new
// size through a program would compile one per size.
std::optional<at::Tensor> read_view_through_host(const at::Tensor& self) {
  runtime::BufferPtr held = storage_buffer(self);
  std::vector<int64_t> sizes = dims_of(self);
  std::vector<int64_t> strides(self.strides().begin(), self.strides().end());
  if (held->dims() == sizes && lowering::is_whole_buffer_view(held->num_elements(), sizes,
                                                               strides, self.storage_offset())) {
    return std::nullopt;  // read as it is
  }
  int64_t view_bytes = self.numel() * static_cast<int64_t>(self.element_size());
  if (held->size_bytes() > std::max<int64_t>(4 * view_bytes, int64_t{1} << 20)) {
    return std::nullopt;
  }
  return buffer_to_cpu(*held).reshape(-1).as_strided(self.sizes(), self.strides(),
                                                      self.storage_offset());
}

// copy_'s shape rule, with the CPU's messages (ATen's copy_impl hands tpu copies to
// _copy_from before its TensorIterator would check): `self` must broadcast to dst's shape.
void check_broadcasts_to(const at::Tensor& self, const at::Tensor& dst) {
  if (at::is_expandable_to(self.sizes(), dst.sizes())) return;
  std::vector<int64_t> shape = at::infer_size(dst.sizes(), self.sizes());  // raises if apart
  TORCH_CHECK(false, "output with shape ", dst.sizes(), " doesn't match the broadcast shape ",
              c10::IntArrayRef(shape));
}

}  // namespace

at::Tensor resolved_clone(const at::Tensor& self) {
  runtime::BufferPtr value = read_tensor(self);
  bool conj = self.is_conj() && base::is_complex(value->dtype());
  if (conj || self.is_neg()) {
    lowering::TensorType t{value->dtype(), value->dims()};
    value = run_program(lowering::math_bits_module(t, conj, self.is_neg()), {value.get()},
                        value->device_index())[0];
  }
  return wrap_buffer(std::move(value), self.scalar_type());
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  (void)non_blocking;  // transfers are synchronous at the host boundary
  runtime::trace::Label label("aten::_copy_from");
  // The Conjugate and Negative keys route copies with a math bit to
  // copy_from_with_math_bits; code running with those keys excluded (AOTAutograd's
  // runtime replaying a graph's copy_ into a conj() input) reaches here with them set.
  if (self.is_conj() || self.is_neg() || dst.is_conj() || dst.is_neg()) {
    return copy_from_with_math_bits(self, dst, non_blocking);
  }
  check_broadcasts_to(self, dst);
  if (self.numel() == 0 && dst.numel() == 0) {
    // Nothing to move, but a host read all the same: a fused eager graph computing `self`
    // runs now, so a failed check of the op that made it is raised here, as op by op.
    if (self.device().is_privateuseone() && !dst.device().is_privateuseone()) {
      materialize(storage_state(self));
    }
    return dst;
  }
  if (self.is_complex() && !dst.is_complex()) {
    // PyTorch's copy_ warns here too, but only on its own (CPU/CUDA) path.
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
  }
  if (dst.device().is_privateuseone()) {
    // copy_'s own checks (ATen's copy_impl hands other devices to _copy_from before its
    // TensorIterator would make them): an expanded destination, a source overlapping it in
    // part (a full overlap returned before).
    at::assert_no_internal_overlap(dst);
    if (self.device().is_privateuseone()) at::assert_no_partial_overlap(dst, self);
    runtime::BufferPtr value;
    int device = dst.device().index();
    // Neither side has a math bit here (copy_from_with_math_bits resolves them).
    if (self.device().is_privateuseone()) {
      if (record_copy(self, dst)) return dst;  // fused eager: deferred like any op
      if (self.device() == dst.device() && self.scalar_type() == dst.scalar_type() &&
          self.numel() == dst.numel() && covers_storage(self) && covers_storage(dst) &&
          at::is_expandable_to(self.sizes(), dst.sizes())) {
        // Whole storage into whole storage, the same elements in the same order: dst's
        // storage takes self's buffer in whatever shape it holds, as a reshape would give
        // it (FSDP2 copies each sharded parameter into its unsharded storage so, twice a
        // step, and the graph then reads the parameter in the shape the optimizer wrote).
        write_tensor(dst, storage_buffer(self));
        return dst;
      }
      value = read_tensor(self);
      if (value->device_index() != device) {
        value = cpu_to_buffer(buffer_to_cpu(*value), device);  // staged through the host
      }
    } else {
      TORCH_CHECK(self.device().is_cpu(), "tpu: cannot copy from ", self.device(), " to tpu");
      value = cpu_to_buffer(self.to(dst.scalar_type()), device);
    }
    write_tensor(dst, conform(value, dst));
    return dst;
  }
  TORCH_CHECK(dst.device().is_cpu(), "tpu: cannot copy from tpu to ", dst.device());
  if (std::optional<at::Tensor> host = read_view_through_host(self)) {
    dst.copy_(*host);
    return dst;
  }
  if (dst.is_contiguous() && dst.scalar_type() == self.scalar_type() &&
      dst.sizes() == self.sizes()) {
    buffer_into_cpu(*read_tensor(self), dst);  // one copy, into the destination itself
    return dst;
  }
  at::Tensor host = buffer_to_cpu(*read_tensor(self));
  dst.copy_(host);
  return dst;
}

at::Tensor copy_from_with_math_bits(const at::Tensor& self, const at::Tensor& dst,
                                    bool non_blocking) {
  // Below the Conjugate and Negative keys from here on: every bit is handled explicitly.
  c10::impl::ExcludeDispatchKeyGuard guard(
      c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}));
  at::Tensor value = self;
  if (self.is_conj() || self.is_neg()) {
    value = self.device().is_privateuseone() ? resolved_clone(self)
                                             : self.resolve_conj().resolve_neg();
  }
  // `dst` stores the conjugate / negation of what it reads as.
  if (dst.is_conj() && value.is_complex()) value = at::conj_physical(value);
  if (dst.is_neg()) value = at::neg(value);
  at::Tensor plain = dst.alias();
  plain._set_conj(false);
  plain._set_neg(false);
  copy_from(value, plain, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  runtime::trace::Label label("aten::_local_scalar_dense");
  at::Tensor host = buffer_to_cpu(*read_tensor(self));
  return host.item();
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  // As PyTorch's CPU resize_: Preserve is refused (resize_as_ resolves it before calling
  // here); the sizes are set contiguous, then restrided to the requested format. The same
  // sizes change nothing but the format asked for (a transposed tensor keeps its strides).
  TORCH_CHECK(!memory_format || *memory_format != c10::MemoryFormat::Preserve,
              "Unsupported memory format", *memory_format);
  if (self.sizes() == size) {
    if (memory_format) self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
    return self;
  }
  int64_t numel = 1;
  for (int64_t s : size) {
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s, ": ", size);
    numel *= s;
  }
  int64_t item = static_cast<int64_t>(self.element_size());
  int64_t needed = (self.storage_offset() + numel) * item;
  // The storage's own size: its state's buffer may be larger (a fused graph padded to a
  // shape bucket leaves the bucket-sized buffer, whose prefix the storage is).
  int64_t old_nbytes = static_cast<int64_t>(self.storage().nbytes());
  if (needed > old_nbytes) {
    // Grow: keep the old contents and zero-fill the rest, like an allocation would.
    resize_storage_bytes(self.storage().unsafeGetStorageImpl(), needed);
  }
  self.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  if (memory_format) self.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);
  // Deterministic mode's fill of memory never written (NaN, or the largest integer), as
  // the CPU's resize_ fills what it adds.
  if (needed > old_nbytes && at::globalContext().deterministicAlgorithms() &&
      at::globalContext().deterministicFillUninitializedMemory()) {
    at::native::fill_resize_deterministic_(self, old_nbytes);
  }
  return self;
}

}  // namespace torchtpu::aten
