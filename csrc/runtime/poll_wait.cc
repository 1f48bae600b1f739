#include "runtime/poll_wait.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

namespace torchtpu::runtime {
namespace {

constexpr char kEnv[] = "TORCHTPU_POLL_US";

base::StatusOr<int64_t> budget_from_env() {
  const char* v = std::getenv(kEnv);
  if (v == nullptr || *v == '\0') return kDefaultPollMicros;
  char* end = nullptr;
  long long us = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || us < 0 || us > kMaxPollMicros) {
    return base::invalid_argument(
        std::string("tpu: ") + kEnv + "='" + v +
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

WaitCounters::WaitCounters(std::string_view kind)
    : polled(std::string(kind) + "_polled"),
      slept(std::string(kind) + "_slept"),
      slept_at_once(std::string(kind) + "_slept_at_once") {}

base::Status check_poll_budget() { return budget_status().status(); }

std::chrono::microseconds poll_budget() {
  const auto& budget = budget_status();
  // Nothing waits under an invalid setting (the device and process groups check it first);
  // the default keeps this total.
  return std::chrono::microseconds(budget.ok() ? budget.value() : kDefaultPollMicros);
}

bool poll_until(const std::function<bool()>& done, const WaitCounters& counters,
                std::chrono::microseconds limit) {
  const auto budget = std::min(poll_budget(), limit);
  if (budget.count() <= 0) {
    if (done()) {
      counters.polled.add();
      return true;
    }
    counters.slept.add();
    return false;
  }
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    if (done()) {
      counters.polled.add();
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::yield();
  }
  counters.slept.add();
  return false;
}

base::Status wait_polling(const std::function<bool()>& done,
                          const std::function<base::Status()>& sleep,
                          const WaitCounters& counters, WaitHistory* history) {
  const auto start = std::chrono::steady_clock::now();
  bool ended = false;
  if (history == nullptr || history->worth_polling(poll_budget())) {
    ended = poll_until(done, counters);
  } else {
    counters.slept.add();
    counters.slept_at_once.add();
  }
  base::Status status = ended ? base::Status() : sleep();
  if (history != nullptr) history->note(std::chrono::steady_clock::now() - start);
  return status;
}

}  // namespace torchtpu::runtime
