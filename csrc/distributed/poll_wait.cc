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

int64_t budget_from_env() {
  const char* v = std::getenv("TORCHTPU_DIST_POLL_US");
  if (v == nullptr || *v == '\0') return kDefaultPollMicros;
  char* end = nullptr;
  long long us = std::strtoll(v, &end, 10);
  // An unreadable value keeps the default rather than failing a collective.
  if (end == v || *end != '\0' || us < 0) return kDefaultPollMicros;
  return std::min<long long>(us, kMaxPollMicros);
}

}  // namespace

std::chrono::microseconds poll_budget() {
  static const std::chrono::microseconds budget(budget_from_env());
  return budget;
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
