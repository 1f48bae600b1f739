// Process-wide counters, read by torchtpu.debug.metrics() and report().
//
// Counters are named with their unit (`num_compiles`, `compile_time_us`,
// `transfer_to_device_bytes`). Keyed counters count per key (fallbacks per op).
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace torchtpu::base {

// Adds `delta` to counter `name`.
void counter_add(std::string_view name, int64_t delta = 1);
// Adds `delta` to the counter of `key` within the keyed family `family`.
// Returns the counter's new value (so callers can act on the first occurrence).
int64_t keyed_counter_add(std::string_view family, std::string_view key, int64_t delta = 1);

int64_t counter_value(std::string_view name);
std::map<std::string, int64_t> counters_snapshot();
std::map<std::string, std::map<std::string, int64_t>> keyed_counters_snapshot();
void reset_metrics();

}  // namespace torchtpu::base
