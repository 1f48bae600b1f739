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
// Thread safety: pure functions; `done` is called from the waiting thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

#include "base/metrics.h"
#include "base/status.h"

namespace torchtpu::runtime {

inline constexpr int64_t kDefaultPollMicros = 1000;
inline constexpr int64_t kMaxPollMicros = 1000000;

// The counters of one kind of wait: `<kind>_polled` and `<kind>_slept`.
struct WaitCounters {
  explicit WaitCounters(std::string_view kind);
  base::Counter polled;
  base::Counter slept;
};

// OK, or the error naming an invalid TORCHTPU_POLL_US.
base::Status check_poll_budget();

// The polling budget of this process.
std::chrono::microseconds poll_budget();

// Polls `done` until it returns true (then true) or the budget, or `limit` where that is
// shorter, is spent (then false: the caller sleeps in its own wait).
bool poll_until(const std::function<bool()>& done, const WaitCounters& counters,
                std::chrono::microseconds limit = std::chrono::microseconds::max());

}  // namespace torchtpu::runtime
