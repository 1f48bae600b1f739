// Event: RAII owner of a PJRT_Event (readiness of a buffer or a transfer).
// Thread safety: await() may be called from any thread; an Event is not copyable.
#pragma once

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

 private:
  std::shared_ptr<const Plugin> plugin_;
  PJRT_Event* raw_;
};

}  // namespace torchtpu::runtime
