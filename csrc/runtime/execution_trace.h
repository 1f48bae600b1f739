// ExecutionTrace: an opt-in record of what each device runs (programs, host transfers),
// read by profilers (aten/tpu_profiler feeds it to torch.profiler through Kineto).
//
// PJRT's C API has no device clock, so a record's end is the time the plugin reports its
// output ready (the ready callback, system clock, nanoseconds) and its start is derived
// when the trace is taken: a device runs its work in order, so a program starts when it
// was enqueued or when the device's previous record ended, whichever is later. The error
// of both is the callback's latency (microseconds).
//
// Cost when no profiler runs: one relaxed atomic load per execution and per transfer; the
// thread-local label and correlation stack are plain pointer/vector writes.
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/buffer.h"

namespace torchtpu::runtime::trace {

enum class Kind { kProgram, kHostToDevice, kDeviceToHost };

struct Record {
  Kind kind = Kind::kProgram;
  std::string name;  // the label current when it was enqueued (an aten op, a graph), or empty
  int device = 0;
  int64_t enqueue_ns = 0;
  int64_t start_ns = 0;  // derived in take(): see the header comment
  int64_t end_ns = 0;
  int64_t bytes = 0;            // arguments + outputs for a program; the payload for a copy
  uint64_t correlation_id = 0;  // the profiler's id for the host op that enqueued it (0: none)
};

bool enabled();
// Starting discards any record left from an earlier trace.
void set_enabled(bool on);

// Names the work the current thread enqueues while it lives (the name must outlive it).
class Label {
 public:
  explicit Label(const char* name);
  ~Label();
  Label(const Label&) = delete;
  Label& operator=(const Label&) = delete;

 private:
  const char* previous_;
};

// The current thread's label (null when none is set).
const char* current_label();

// The profiler's correlation ids of the host ops running on this thread (a stack).
void push_correlation(uint64_t id);
void pop_correlation();

// Records `kind` on `device`, enqueued at `enqueue_ns` (now_ns() taken before the call
// that enqueued it: a CPU plugin running programs on the calling thread returns from it
// only once the program ran) and ending when `ready_on` is ready.
void record(Kind kind, int device, int64_t bytes, const Buffer& ready_on, int64_t enqueue_ns);
// Records work that ran synchronously from `enqueue_ns` until now (a blocking copy).
void record_completed(Kind kind, int device, int64_t bytes, int64_t enqueue_ns);

// Waits for every pending record, then returns all records in enqueue order, start times
// derived, and clears them.
std::vector<Record> take();

int64_t now_ns();

}  // namespace torchtpu::runtime::trace
