// Polling before sleeping, for the waits of a host-staged collective's chain of threads.
//
// A host-staged collective passes through three threads: the caller, which waits for its
// Work; the group's queue thread, which waits for Gloo's; and Gloo's worker. A thread that
// sleeps in a futex must be woken and then scheduled again, and on a loaded machine with
// few cores that scheduling delay costs more than a small exchange itself; two such waits
// more than a plain Gloo collective has made a 1 KB exchange take several times as long.
// A waiter therefore first polls (yielding the core to any runnable thread between polls)
// for a bounded time, and only then sleeps. The budget is TORCHTPU_DIST_POLL_US
// microseconds (default kDefaultPollMicros, at most kMaxPollMicros; 0 turns polling off),
// read once per process; a group is refused at creation while it is invalid. Counted: host_staged_waits_polled (ended without sleeping) and
// host_staged_waits_slept.
//
// Thread safety: pure functions; `done` is called from the waiting thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "base/status.h"

namespace torchtpu::distributed {

inline constexpr int64_t kDefaultPollMicros = 1000;
inline constexpr int64_t kMaxPollMicros = 1000000;

// OK, or the error naming an invalid TORCHTPU_DIST_POLL_US (checked when a group is made).
base::Status check_poll_budget();

// The polling budget of this process.
std::chrono::microseconds poll_budget();

// Polls `done` until it returns true (then true) or the budget, or `limit` where that is
// shorter, is spent (then false: the caller sleeps in its own wait).
bool poll_until(const std::function<bool()>& done,
                std::chrono::microseconds limit = std::chrono::microseconds::max());

}  // namespace torchtpu::distributed
