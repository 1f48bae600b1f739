#include "base/metrics.h"

#include <mutex>

namespace torchtpu::base {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, int64_t, std::less<>> counters;
  std::map<std::string, std::map<std::string, int64_t, std::less<>>, std::less<>> keyed;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: counters outlive static teardown
  return *r;
}

}  // namespace

void counter_add(std::string_view name, int64_t delta) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.counters.find(name);
  if (it == r.counters.end()) it = r.counters.emplace(std::string(name), 0).first;
  it->second += delta;
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
  return it == r.counters.end() ? 0 : it->second;
}

std::map<std::string, int64_t> counters_snapshot() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return std::map<std::string, int64_t>(r.counters.begin(), r.counters.end());
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
  r.counters.clear();
  r.keyed.clear();
}

}  // namespace torchtpu::base
