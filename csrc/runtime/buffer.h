// Buffer: RAII owner of one PJRT_Buffer on one device.
//
// A Buffer is immutable once created (PJRT buffers are values); in-place semantics are
// built above it by swapping buffers. Destroying a Buffer while an execution that reads
// it is still pending is safe: PJRT defers the free until the use completes.
// Thread safety: const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "runtime/pjrt_api.h"
#include "runtime/poll_wait.h"

struct PJRT_Buffer;

namespace torchtpu::runtime {

class Event;

class Buffer {
 public:
  Buffer(std::shared_ptr<const Plugin> plugin, PJRT_Buffer* raw, base::DType dtype,
         std::vector<int64_t> dims, int device_index);
  // With dims shared among buffers of one shape (an executable's outputs): no allocation.
  Buffer(std::shared_ptr<const Plugin> plugin, PJRT_Buffer* raw, base::DType dtype,
         std::shared_ptr<const std::vector<int64_t>> dims, int device_index);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  base::DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return *dims_; }
  int device_index() const { return device_index_; }
  int64_t num_elements() const { return num_elements_; }
  int64_t size_bytes() const { return num_elements_ * base::dtype_size_bytes(dtype_); }

  // Copies the whole buffer into `dst` (dense, row-major), blocking until done.
  // `dst_bytes` must be at least size_bytes().
  base::Status to_host(void* dst, int64_t dst_bytes) const;
  // Blocks until the buffer's contents are computed.
  base::Status await_ready() const;
  // The address of the buffer's contents (PJRT_Buffer_UnsafePointer). Only where device
  // memory is host memory (the CPU plugin: dense, row-major) may it be read, and only
  // after await_ready(), while the buffer lives. Spares a read the plugin's copy, which
  // wakes its worker threads.
  base::StatusOr<const void*> host_address() const;
  // An event that becomes ready when the buffer's contents are computed.
  base::StatusOr<std::unique_ptr<Event>> ready_event() const;

  // Runtime-internal: the raw handle, for Executable. Never stored outside runtime/.
  PJRT_Buffer* raw() const { return raw_; }
  // The program that computed this buffer times the waits for its results (an
  // executable's outputs; set before the buffer is shared): waits poll while they are
  // short (runtime/poll_wait.h).
  void set_wait_history(std::shared_ptr<WaitHistory> history) { waits_ = std::move(history); }

 private:
  std::shared_ptr<const Plugin> plugin_;
  PJRT_Buffer* raw_;
  base::DType dtype_;
  std::shared_ptr<const std::vector<int64_t>> dims_;
  int64_t num_elements_ = 1;
  int device_index_;
  std::shared_ptr<WaitHistory> waits_;
};

using BufferPtr = std::shared_ptr<Buffer>;

}  // namespace torchtpu::runtime
