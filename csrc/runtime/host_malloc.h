// The host allocator policy for CPU plugins: on a CPU plugin the device's buffers are host
// memory that the plugin takes from glibc's malloc, and a training step frees and
// allocates hundreds of MiB of them. glibc's defaults serve each large block by a fresh
// mmap (every page of it then faults in, and munmap gives it back on free), trim the heap
// top after frees, and give threads arenas of their own; on a TorchTitan step that was 5-6
// CPU-s of page faults. The policy keeps freed host memory for reuse instead:
//
//   M_MMAP_MAX 0          every block from the heap, none mmap'd per allocation
//   M_TRIM_THRESHOLD -1   freed memory at the heap top is kept, not trimmed
//   M_TOP_PAD 256 MiB     the heap grows in large steps (address space; pages fault on use)
//   M_ARENA_MAX 1         threads share arenas from now on (one arena's free blocks serve
//                         the plugin's threads and the caller's alike); threads keep the
//                         arenas they have, and glibc ignores it once it has fixed its
//                         limit (more than 8 arenas made): GLIBC_TUNABLES sets it earlier
//
// The cost is resident memory: it stays at the process's peak of host allocations rather
// than shrinking after it. TORCHTPU_HOST_MALLOC chooses: unset or `retain` (the policy, on
// CPU plugins only) or `system` (glibc's defaults, or GLIBC_TUNABLES as the user set them).
//
// Thread safety: apply_host_malloc_policy may be called from any thread; the first call
// decides, later ones return what it did.
#pragma once

#include <string>

#include "base/status.h"

namespace torchtpu::runtime {

enum class HostMallocPolicy { kRetain, kSystem };

// The policy TORCHTPU_HOST_MALLOC asks for (kRetain when unset or empty); invalid_argument
// naming the variable, its value and the accepted values otherwise.
base::StatusOr<HostMallocPolicy> host_malloc_policy_from_env();

// Applies `policy` to glibc's malloc once per process (kSystem changes nothing). Returns
// the policy in force after the first call: later calls do not change it. internal_error
// when glibc rejects a setting.
base::StatusOr<HostMallocPolicy> apply_host_malloc_policy(HostMallocPolicy policy);

// "retain" or "system": the policy in force ("system" before any call).
std::string host_malloc_policy_name();

}  // namespace torchtpu::runtime
