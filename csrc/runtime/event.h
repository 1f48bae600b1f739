// Event: RAII owner of a PJRT_Event (readiness of a buffer or a transfer).
// Thread safety: await() may be called from any thread; an Event is not copyable.
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "runtime/pjrt_api.h"
#include "runtime/poll_wait.h"

struct PJRT_Event;

namespace torchtpu::runtime {

class Event {
 public:
  Event(std::shared_ptr<const Plugin> plugin, PJRT_Event* raw);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Blocks until the event is ready, polling before it sleeps where `history` (of what
  // the event waits for; null: nothing known) says it is worth it (runtime/poll_wait.h);
  // returns the error the event carries, if any.
  base::Status await(WaitHistory* history = nullptr);
  // Whether the event is ready now (never blocks).
  base::StatusOr<bool> is_ready() const;
  // Calls `fn` with the event's status once it is ready: on a plugin thread, or before
  // returning when it already is. `fn` must not block.
  base::Status on_ready(std::function<void(base::Status)> fn);

 private:
  // One poll of a waiting thread: whether the event is ready, or IsReady failed (which
  // ends the polling; Await then reports the event's own error). Not counted as a PJRT
  // call (pjrt_calls_on_this_thread): how many polls a wait makes follows timing, not work.
  bool ready_or_failed() const;

  std::shared_ptr<const Plugin> plugin_;
  PJRT_Event* raw_;
};

}  // namespace torchtpu::runtime
