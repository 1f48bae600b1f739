// Polling before sleeping, for waits whose other side is another thread of this process.
//
// A thread that sleeps in a futex must be woken and then scheduled again. On a loaded
// machine with few cores, or on a virtual machine whose idle cores wake slowly, that costs
// tens of microseconds: more than what is waited for when it is small. Two waits are of
// this kind: a program on a CPU plugin (its worker pool runs any program above XLA's
// "cheap" threshold, so the caller of a synced 64x64 add sleeps and is woken for a few
// microseconds of work), and a host-staged collective (the caller, the group's queue thread
// and Gloo's worker). A waiter therefore first polls, yielding the core to any runnable
// thread between polls, for a bounded time, and only then sleeps. The budget is
// TORCHTPU_POLL_US microseconds (default kDefaultPollMicros, at most kMaxPollMicros; 0
// turns polling off), read once per process; the device refuses to start, and a process
// group to be made, while it is invalid. Each kind of wait counts the waits that ended
// while polling and those that went on to sleep (WaitCounters).
//
// Polling is only worth it for what arrives within the budget: a wait for a program that
// runs for milliseconds would spend the whole budget on a core the program's own threads
// could use, and then sleep anyway. So a wait for a program's results remembers how long
// the last wait for that program took (WaitHistory, one per executable), and sleeps at
// once when that exceeded the budget; every wait is timed, so a program that has become
// quick to arrive is polled for again at its next wait.
//
// Thread safety: pure functions; `done` is called from the waiting thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

#include "base/metrics.h"
#include "base/status.h"

namespace torchtpu::runtime {

inline constexpr int64_t kDefaultPollMicros = 1000;
inline constexpr int64_t kMaxPollMicros = 1000000;

// The counters of one kind of wait: `<kind>_polled` (ended while polling), `<kind>_slept`
// (went on to sleep), and among those `<kind>_slept_at_once` (did not poll: the last wait
// for the same source outlasted the budget).
struct WaitCounters {
  explicit WaitCounters(std::string_view kind);
  base::Counter polled;
  base::Counter slept;
  base::Counter slept_at_once;
};

// How long the last wait for one source's results took (start to ready).
class WaitHistory {
 public:
  // Whether the last wait ended within `budget` (or none was timed yet).
  bool worth_polling(std::chrono::microseconds budget) const {
    return last_ns_.load(std::memory_order_relaxed) <=
           std::chrono::duration_cast<std::chrono::nanoseconds>(budget).count();
  }
  void note(std::chrono::nanoseconds waited) {
    last_ns_.store(waited.count(), std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> last_ns_{0};
};

// OK, or the error naming an invalid TORCHTPU_POLL_US.
base::Status check_poll_budget();

// The polling budget of this process.
std::chrono::microseconds poll_budget();

// Polls `done` until it returns true (then true) or the budget, or `limit` where that is
// shorter, is spent (then false: the caller sleeps in its own wait).
bool poll_until(const std::function<bool()>& done, const WaitCounters& counters,
                std::chrono::microseconds limit = std::chrono::microseconds::max());

// A wait for something whose readiness `done` polls and `sleep` blocks on: polls first
// when `history` (may be null: always) says it is worth it, then sleeps unless polling
// ended it, and times the whole wait into `history`. Returns what `sleep` returns, or OK.
base::Status wait_polling(const std::function<bool()>& done,
                          const std::function<base::Status()>& sleep,
                          const WaitCounters& counters, WaitHistory* history);

}  // namespace torchtpu::runtime
