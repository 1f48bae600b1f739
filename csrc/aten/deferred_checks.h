// Data checks of compiled graphs (index bounds, asserts) and of eager calls that write
// nothing (torch._assert_async), read back at the next host read.
//
// A compiled graph's check results are one i1 vector output (a flag per check). Reading
// it right after the run would make every graph call wait for its program (a forward
// graph could not overlap the Python work that launches the backward). Instead they are
// queued here and read (one transfer per run) when the host reads anything
// (buffer_to_cpu: .cpu(), .item(), printing), waits (block_until_ready, synchronize), or
// when the queue is long. A failed check raises
// there — as CUDA reports a device-side assert at a later synchronization. An index out
// of range reads a clamped row meanwhile (XLA's gather semantics), never out of bounds.
// An eager call that writes nothing (_assert_async: TorchTitan's RoPE bounds check, once
// per attention layer) queues its check the same way, as CUDA's kernel does: nothing is
// left half-done by a late report.
#pragma once

#include <string>
#include <vector>

#include "lowering/lowering.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {

// Queues the check vector outputs[first] (one flag per message) of a program run. `origin`
// says what ran, for the error ("a compiled graph run earlier").
void defer_data_checks(const std::vector<runtime::BufferPtr>& outputs, size_t first,
                       const std::vector<lowering::CheckKind>& kinds,
                       const std::vector<std::string>& messages, const std::string& origin);
// Reads every queued check (blocking until computed) and raises the first that failed
// (IndexError or RuntimeError). The queue is empty afterwards, whether it raised or not.
void flush_data_checks();
// Number of checks queued and not read yet.
size_t num_pending_data_checks();
// Raises `message` as the Python exception of a failed check of kind `kind` (IndexError,
// LinAlgError or RuntimeError): how every data check reports, read at once or later.
[[noreturn]] void raise_check_failure(lowering::CheckKind kind, const std::string& message);

}  // namespace torchtpu::aten
