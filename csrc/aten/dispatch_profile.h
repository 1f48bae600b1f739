// Where an eager op's host time goes, for bench/eager_overhead.py: the boxed kernel splits
// each call into phases and, while profiling is on, adds each phase's nanoseconds to a
// process-wide total. Off (the default) it costs one relaxed atomic load per call.
//
//   key       classifying the call into its signature and finding its program
//   bind      gathering the program's arguments (tensor buffers, scalars, generator state)
//   execute   the PJRT execute call, outputs wrapped as buffers
//   complete  data checks, results wrapped as tensors or written into mutable arguments
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace torchtpu::aten::dispatch_profile {

enum Phase { kKey, kBind, kExecute, kComplete, kNumPhases };

bool enabled();
void set_enabled(bool on);
// Totals since the last reset: "<phase>_ns" per phase and "calls".
std::map<std::string, int64_t> snapshot();
void reset();

void add(Phase phase, int64_t ns);
void add_call();

// Times consecutive phases of one call: mark(p) charges the time since the previous mark
// (or construction) to p. Does nothing while profiling is off.
class Timer {
 public:
  Timer() : on_(enabled()) {
    if (on_) {
      last_ = std::chrono::steady_clock::now();
      add_call();
    }
  }
  void mark(Phase phase) {
    if (!on_) return;
    auto now = std::chrono::steady_clock::now();
    add(phase, std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_).count());
    last_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace torchtpu::aten::dispatch_profile
