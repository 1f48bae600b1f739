#include "aten/dispatch_profile.h"

#include <atomic>

namespace torchtpu::aten::dispatch_profile {
namespace {

std::atomic<bool> g_enabled{false};
std::atomic<int64_t> g_phase_ns[kNumPhases];
std::atomic<int64_t> g_calls{0};
const char* const kNames[kNumPhases] = {"key_ns", "bind_ns", "execute_ns", "complete_ns"};

}  // namespace

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void add(Phase phase, int64_t ns) { g_phase_ns[phase].fetch_add(ns, std::memory_order_relaxed); }
void add_call() { g_calls.fetch_add(1, std::memory_order_relaxed); }

std::map<std::string, int64_t> snapshot() {
  std::map<std::string, int64_t> out;
  for (int p = 0; p < kNumPhases; ++p) out[kNames[p]] = g_phase_ns[p].load(std::memory_order_relaxed);
  out["calls"] = g_calls.load(std::memory_order_relaxed);
  return out;
}

void reset() {
  for (auto& ns : g_phase_ns) ns.store(0, std::memory_order_relaxed);
  g_calls.store(0, std::memory_order_relaxed);
}

}  // namespace torchtpu::aten::dispatch_profile
