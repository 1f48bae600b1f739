// The allocator registered for PrivateUse1, and the memory statistics PyTorch reads
// through it (torch.tpu.memory_*, torch.accelerator.memory_*).
//
// A tpu storage is a StorageState whose buffer appears on first write; the allocator only
// creates states, so there is no cache of blocks to manage. Statistics:
// - allocated / active / requested bytes: byte counts of live tpu storages, as PyTorch
//   counts a CUDA tensor's memory (`x.untyped_storage().nbytes()`), split into the small
//   (< 1 MiB) and large pools by size;
// - reserved bytes and segments: bytes and number of live PJRT buffers on the device
//   (runtime/memory_stats.h): storages' buffers, results in flight and cached scalars;
//   aggregate only. A storage not yet written holds no buffer, so reserved can be below
//   allocated.
// Thread safety: all functions may be called from any thread.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

#include <cstdint>

namespace torchtpu::aten {

c10::DeviceAllocator* tpu_device_allocator();

// Called by tpu_storage when a StorageState (`storage`, its data pointer) is created,
// changes size, or is destroyed; with the profiler's memory profiling on, each is also a
// memory event of the device (torch.profiler's profile_memory=True).
void note_storage_allocated(const void* storage, int device_index, int64_t nbytes);
void note_storage_resized(const void* storage, int device_index, int64_t old_nbytes,
                          int64_t new_nbytes);
void note_storage_freed(const void* storage, int device_index, int64_t nbytes);
// Called when an allocation or a program's results did not fit on the device (num_ooms).
void note_out_of_memory(int device_index);

}  // namespace torchtpu::aten
