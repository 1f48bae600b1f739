// Process-wide counters, read by torchtpu.debug.metrics() and report().
//
// Counters are named with their unit (`num_compiles`, `compile_time_us`,
// `transfer_to_device_bytes`). Keyed counters count per key (fallbacks per op).
// Hot paths (every eager op, every execution) hold a `Counter`: a fixed slot whose add()
// is one relaxed atomic add, with no lock and no name lookup; counter_add() finds the
// same slot by name, for code that runs rarely.
// Thread safety: all functions may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace torchtpu::base {

class Counter {
 public:
  // Registers `name` (two Counters of one name share a slot).
  explicit Counter(std::string_view name);
  void add(int64_t delta = 1) const { slot_->fetch_add(delta, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t>* slot_;
};

// Adds `delta` to counter `name`.
void counter_add(std::string_view name, int64_t delta = 1);
// Adds `delta` to the counter of `key` within the keyed family `family`.
// Returns the counter's new value (so callers can act on the first occurrence).
int64_t keyed_counter_add(std::string_view family, std::string_view key, int64_t delta = 1);

int64_t counter_value(std::string_view name);
// Counters that are not zero.
std::map<std::string, int64_t> counters_snapshot();
std::map<std::string, std::map<std::string, int64_t>> keyed_counters_snapshot();
void reset_metrics();

// Nanoseconds on the steady clock, for durations that timing counters accumulate.
inline int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace torchtpu::base
