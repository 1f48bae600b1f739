// A tpu storage as PyTorch sees it: untyped bytes. Its buffer has one dtype (the last
// writer's); these read the same bytes as another dtype and resize the byte count.
//
// Reinterpretation is a bitcast on the device (little-endian, as PyTorch's CPU storages
// lay out bytes), so torch.load's byte storages, `view(dtype)`-style readers and
// UntypedStorage copies see exactly the bytes that were written. Bool reads as
// `byte != 0` and writes as 0/1 bytes.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/core/StorageImpl.h>

#include <vector>

#include "aten/tpu_storage.h"

namespace torchtpu::aten {

// A storage's whole buffer `held` (on `device_index`) as a buffer of `dtype`: of shape
// `dims` when given (their product must be its bytes / itemsize), else flat; `held`
// itself when it already has that dtype. Raises when its byte count is not a multiple of
// the dtype's size.
runtime::BufferPtr storage_bytes_as(const runtime::BufferPtr& held, int device_index,
                                    c10::ScalarType dtype,
                                    const std::vector<int64_t>* dims = nullptr);

// Whether `dtype`'s reading of bytes held as `held` gives them back: every reading but a
// bool one of another dtype's bytes (its non-zero bytes read as true, stored as 1). A
// storage keeps only such readings as its buffer; a part written through a bool view of
// another dtype is spliced into its bytes.
bool keeps_bytes(base::DType held, c10::ScalarType dtype);

// Sets the storage's byte count to `nbytes`: the first min(old, new) bytes are kept, new
// bytes are zero. Updates the StorageImpl and the state together.
void resize_storage_bytes(c10::StorageImpl* impl, int64_t nbytes);

}  // namespace torchtpu::aten
