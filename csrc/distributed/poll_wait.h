// The waits of a host-staged collective's chain of threads (the caller, which waits for
// its Work; the group's queue thread, which waits for Gloo's; Gloo's worker) poll before
// they sleep, as every wait on another thread of this process does (runtime/poll_wait.h).
// Counted as host_staged_waits_polled / host_staged_waits_slept.
#pragma once

#include <chrono>
#include <functional>

#include "runtime/poll_wait.h"

namespace torchtpu::distributed {

inline const runtime::WaitCounters& host_staged_waits() {
  static const runtime::WaitCounters counters("host_staged_waits");
  return counters;
}

inline bool poll_until(const std::function<bool()>& done,
                       std::chrono::microseconds limit = std::chrono::microseconds::max()) {
  return runtime::poll_until(done, host_staged_waits(), limit);
}

using runtime::check_poll_budget;

}  // namespace torchtpu::distributed
