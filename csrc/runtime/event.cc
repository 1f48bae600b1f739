#include "runtime/event.h"

#include "runtime/pjrt_c.h"
#include "runtime/poll_wait.h"

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

base::Status Event::await(WaitHistory* history) {
  if (raw_ == nullptr) return base::Status();
  // The plugin's thread that makes the event ready is often done within microseconds;
  // polling first spares this thread a sleep and a wake-up (runtime/poll_wait.h).
  static const WaitCounters kDeviceWaits("device_waits");
  return wait_polling([this] { return ready_or_failed(); },
                      [this] {
                        PJRT_Event_Await_Args args{};
                        args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
                        args.event = raw_;
                        return consume_error(plugin_->api(), plugin_->api()->PJRT_Event_Await(&args),
                                             "PJRT_Event_Await");
                      },
                      kDeviceWaits, history);
}

bool Event::ready_or_failed() const {
  PJRT_Event_IsReady_Args args{};
  args.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  args.event = raw_;
  PJRT_Error* error = plugin_->api()->PJRT_Event_IsReady(&args);
  if (error == nullptr) return args.is_ready;
  (void)consume_error(plugin_->api(), error, "PJRT_Event_IsReady");
  return true;
}

base::StatusOr<bool> Event::is_ready() const {
  if (raw_ == nullptr) return true;
  PJRT_Event_IsReady_Args args{};
  args.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  args.event = raw_;
  TORCHTPU_RETURN_IF_ERROR(
      consume_error(plugin_->api(), plugin_->api()->PJRT_Event_IsReady(&args), "PJRT_Event_IsReady"));
  return args.is_ready;
}

namespace {

struct OnReady {
  std::shared_ptr<const Plugin> plugin;
  std::function<void(base::Status)> fn;
};

void on_ready_trampoline(PJRT_Error* error, void* user_arg) {
  std::unique_ptr<OnReady> r(static_cast<OnReady*>(user_arg));
  r->fn(consume_error(r->plugin->api(), error, "PJRT_Event (on ready)"));
}

}  // namespace

base::Status Event::on_ready(std::function<void(base::Status)> fn) {
  if (raw_ == nullptr) {
    fn(base::Status());
    return base::Status();
  }
  auto* r = new OnReady{plugin_, std::move(fn)};
  PJRT_Event_OnReady_Args args{};
  args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  args.event = raw_;
  args.callback = &on_ready_trampoline;
  args.user_arg = r;
  base::Status s =
      consume_error(plugin_->api(), plugin_->api()->PJRT_Event_OnReady(&args), "PJRT_Event_OnReady");
  if (!s.ok()) delete r;  // not registered: the callback will not run
  return s;
}

}  // namespace torchtpu::runtime
