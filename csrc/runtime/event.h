// Event: RAII owner of a PJRT_Event (readiness of a buffer or a transfer).
// Thread safety: await() may be called from any thread; an Event is not copyable.
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "runtime/pjrt_api.h"

struct PJRT_Event;

namespace torchtpu::runtime {

class Event {
 public:
  Event(std::shared_ptr<const Plugin> plugin, PJRT_Event* raw);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Blocks until the event is ready; returns the error the event carries, if any.
  base::Status await();
  // Whether the event is ready now (never blocks).
  base::StatusOr<bool> is_ready() const;
  // Calls `fn` with the event's status once it is ready: on a plugin thread, or before
  // returning when it already is. `fn` must not block.
  base::Status on_ready(std::function<void(base::Status)> fn);

 private:
  std::shared_ptr<const Plugin> plugin_;
  PJRT_Event* raw_;
};

}  // namespace torchtpu::runtime
