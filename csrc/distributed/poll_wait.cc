#include "distributed/poll_wait.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "base/metrics.h"

namespace torchtpu::distributed {
namespace {

// Waits that ended without sleeping (while polling), and those that went on to sleep.
const base::Counter kPolled("host_staged_waits_polled");
const base::Counter kSlept("host_staged_waits_slept");

base::StatusOr<int64_t> budget_from_env() {
  const char* v = std::getenv("TORCHTPU_DIST_POLL_US");
  if (v == nullptr || *v == '\0') return kDefaultPollMicros;
  char* end = nullptr;
  long long us = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || us < 0 || us > kMaxPollMicros) {
    return base::invalid_argument(
        std::string("tpu: TORCHTPU_DIST_POLL_US='") + v +
        "' is not a polling budget in microseconds (expected 0.." +
        std::to_string(kMaxPollMicros) + "; 0 turns polling off; default " +
        std::to_string(kDefaultPollMicros) + ")");
  }
  return static_cast<int64_t>(us);
}

const base::StatusOr<int64_t>& budget_status() {
  static const base::StatusOr<int64_t> budget = budget_from_env();
  return budget;
}

}  // namespace

base::Status check_poll_budget() { return budget_status().status(); }

std::chrono::microseconds poll_budget() {
  const auto& budget = budget_status();
  // Groups are refused at creation while the setting is invalid (check_poll_budget), so
  // no wait runs under it; the default keeps this total.
  return std::chrono::microseconds(budget.ok() ? budget.value() : kDefaultPollMicros);
}

bool poll_until(const std::function<bool()>& done, std::chrono::microseconds limit) {
  const auto budget = std::min(poll_budget(), limit);
  if (budget.count() <= 0) {
    if (done()) {
      kPolled.add();
      return true;
    }
    kSlept.add();
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    if (done()) {
      kPolled.add();
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::yield();
  }
  kSlept.add();
  return false;
}

}  // namespace torchtpu::distributed
