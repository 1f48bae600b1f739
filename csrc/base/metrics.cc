#include "base/metrics.h"

#include <deque>
#include <mutex>

namespace torchtpu::base {
namespace {

struct Registry {
  std::mutex mu;
  // Slots never move (a deque grows at the end) and are never freed: Counters point at them.
  std::deque<std::atomic<int64_t>> slots;
  std::map<std::string, std::atomic<int64_t>*, std::less<>> counters;
  std::map<std::string, std::map<std::string, int64_t, std::less<>>, std::less<>> keyed;

  std::atomic<int64_t>* slot(std::string_view name) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = counters.find(name);
    if (it != counters.end()) return it->second;
    std::atomic<int64_t>* s = &slots.emplace_back(0);
    counters.emplace(std::string(name), s);
    return s;
  }
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: counters outlive static teardown
  return *r;
}

}  // namespace

Counter::Counter(std::string_view name) : slot_(registry().slot(name)) {}

void counter_add(std::string_view name, int64_t delta) {
  registry().slot(name)->fetch_add(delta, std::memory_order_relaxed);
}

int64_t keyed_counter_add(std::string_view family, std::string_view key, int64_t delta) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto fit = r.keyed.find(family);
  if (fit == r.keyed.end()) fit = r.keyed.emplace(std::string(family), decltype(fit->second){}).first;
  auto kit = fit->second.find(key);
  if (kit == fit->second.end()) kit = fit->second.emplace(std::string(key), 0).first;
  kit->second += delta;
  return kit->second;
}

int64_t counter_value(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.counters.find(name);
  return it == r.counters.end() ? 0 : it->second->load(std::memory_order_relaxed);
}

std::map<std::string, int64_t> counters_snapshot() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::map<std::string, int64_t> out;
  for (const auto& [name, slot] : r.counters) {
    int64_t v = slot->load(std::memory_order_relaxed);
    if (v != 0) out.emplace(name, v);
  }
  return out;
}

std::map<std::string, std::map<std::string, int64_t>> keyed_counters_snapshot() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::map<std::string, std::map<std::string, int64_t>> out;
  for (const auto& [family, keys] : r.keyed) out[family] = {keys.begin(), keys.end()};
  return out;
}

void reset_metrics() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& slot : r.slots) slot.store(0, std::memory_order_relaxed);
  r.keyed.clear();
}

}  // namespace torchtpu::base
