#include "runtime/event.h"

#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {

Event::Event(std::shared_ptr<const Plugin> plugin, PJRT_Event* raw)
    : plugin_(std::move(plugin)), raw_(raw) {}

Event::~Event() {
  if (raw_ == nullptr) return;
  PJRT_Event_Destroy_Args args{};
  args.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  args.event = raw_;
  (void)consume_error(plugin_->api(), plugin_->api()->PJRT_Event_Destroy(&args), "PJRT_Event_Destroy");
}

base::Status Event::await() {
  if (raw_ == nullptr) return base::Status();
  PJRT_Event_Await_Args args{};
  args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  args.event = raw_;
  return consume_error(plugin_->api(), plugin_->api()->PJRT_Event_Await(&args), "PJRT_Event_Await");
}

}  // namespace torchtpu::runtime
