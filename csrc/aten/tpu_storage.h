// Storage of a `tpu` tensor: a PJRT buffer behind a c10::Storage.
//
// The DataPtr's context is a StorageState that owns the current buffer. Buffers are
// immutable values, so an in-place op or a write through a view computes a new buffer
// for the whole storage and swaps it in; every tensor and view sharing the storage sees
// the new value (PyTorch's aliasing semantics). A fresh allocation (torch.empty) has no
// buffer until first read (then zeros) or first write.
// Thread safety: like PyTorch tensors, a storage is not safe for concurrent writes.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>

#include "runtime/buffer.h"

namespace torchtpu::aten {

struct StorageState {
  runtime::BufferPtr buffer;  // null until first read or write
  int device_index = 0;
  int64_t nbytes = 0;
};

// The allocator registered for PrivateUse1 (tpu_allocator.h).
c10::Allocator* tpu_allocator();
// A DataPtr owning a new, bufferless StorageState of `nbytes` on `device_index`: what the
// allocator hands out.
c10::DataPtr new_storage_data_ptr(int device_index, int64_t nbytes);

// The StorageState behind a DataPtr of our allocator (also one that at::from_blob made
// from a tpu storage's data pointer), or null.
StorageState* find_storage_state(const c10::DataPtr& dp);
// The StorageState of a tpu tensor.
StorageState& storage_state(const at::Tensor& t);

// The storage's current buffer in t's dtype (zeros once if never written; bitcast, and
// kept so, if last written as another dtype): what every view of t reads from.
runtime::BufferPtr storage_buffer(const at::Tensor& t);
// The tensor's current value as a buffer of exactly its shape and dtype (materializes a
// view through a small cached program when the tensor is not the whole buffer).
runtime::BufferPtr read_tensor(const at::Tensor& t);
// Writes `value` (shape and dtype of `t`) into `t`, through its view if it is one.
void write_tensor(const at::Tensor& t, const runtime::BufferPtr& value);

// Records a new byte count for the storage (resize_storage_bytes keeps the StorageImpl and
// the buffer in step).
void set_storage_nbytes(StorageState& s, int64_t nbytes);

// A new contiguous tpu tensor wrapping `buffer`.
at::Tensor wrap_buffer(runtime::BufferPtr buffer, c10::ScalarType dtype);

// Scalar type mapping (raises for types the device does not hold).
base::DType to_dtype(c10::ScalarType t);
c10::ScalarType to_scalar_type(base::DType t);

// Runs a storage program (from lowering/storage_programs.h), cached by its text.
std::vector<runtime::BufferPtr> run_program(const std::string& module_text,
                                            const std::vector<const runtime::Buffer*>& args,
                                            int device_index);

}  // namespace torchtpu::aten
