#include "runtime/buffer.h"

#include "base/metrics.h"
#include "runtime/event.h"
#include "runtime/execution_trace.h"
#include "runtime/memory_stats.h"
#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {

Buffer::Buffer(std::shared_ptr<const Plugin> plugin, PJRT_Buffer* raw, base::DType dtype,
               std::vector<int64_t> dims, int device_index)
    : Buffer(std::move(plugin), raw, dtype,
             std::make_shared<const std::vector<int64_t>>(std::move(dims)), device_index) {}

Buffer::Buffer(std::shared_ptr<const Plugin> plugin, PJRT_Buffer* raw, base::DType dtype,
               std::shared_ptr<const std::vector<int64_t>> dims, int device_index)
    : plugin_(std::move(plugin)),
      raw_(raw),
      dtype_(dtype),
      dims_(std::move(dims)),
      device_index_(device_index) {
  for (int64_t d : *dims_) num_elements_ *= d;
  note_buffer_created(device_index_, size_bytes());
}

Buffer::~Buffer() {
  note_buffer_destroyed(device_index_, size_bytes());
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = raw_;
  (void)consume_error(plugin_->api(), plugin_->api()->PJRT_Buffer_Destroy(&args), "PJRT_Buffer_Destroy");
}

base::Status Buffer::to_host(void* dst, int64_t dst_bytes) const {
  if (dst_bytes < size_bytes()) {
    return base::invalid_argument("runtime: host destination too small (expected " +
                                  std::to_string(size_bytes()) + " bytes, got " +
                                  std::to_string(dst_bytes) + ")");
  }
  if (size_bytes() == 0) return base::Status();
  int64_t start_ns = trace::enabled() ? trace::now_ns() : 0;
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = raw_;
  args.dst = dst;
  args.dst_size = static_cast<size_t>(size_bytes());
  TORCHTPU_RETURN_IF_ERROR(consume_error(
      plugin_->api(), plugin_->api()->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer"));
  Event done(plugin_, args.event);
  TORCHTPU_RETURN_IF_ERROR(done.await(waits_.get()));
  trace::record_completed(trace::Kind::kDeviceToHost, device_index_, size_bytes(), start_ns);
  base::counter_add("num_transfers_to_host");
  base::counter_add("transfer_to_host_bytes", size_bytes());
  return base::Status();
}

base::StatusOr<std::unique_ptr<Event>> Buffer::ready_event() const {
  PJRT_Buffer_ReadyEvent_Args args{};
  args.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  args.buffer = raw_;
  TORCHTPU_RETURN_IF_ERROR(consume_error(
      plugin_->api(), plugin_->api()->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent"));
  return std::make_unique<Event>(plugin_, args.event);
}

base::StatusOr<const void*> Buffer::host_address() const {
  PJRT_Buffer_UnsafePointer_Args args{};
  args.struct_size = PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE;
  args.buffer = raw_;
  TORCHTPU_RETURN_IF_ERROR(consume_error(
      plugin_->api(), plugin_->api()->PJRT_Buffer_UnsafePointer(&args),
      "PJRT_Buffer_UnsafePointer"));
  return reinterpret_cast<const void*>(args.buffer_pointer);
}

base::Status Buffer::await_ready() const {
  PJRT_Buffer_ReadyEvent_Args args{};
  args.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  args.buffer = raw_;
  TORCHTPU_RETURN_IF_ERROR(consume_error(
      plugin_->api(), plugin_->api()->PJRT_Buffer_ReadyEvent(&args), "PJRT_Buffer_ReadyEvent"));
  Event ready(plugin_, args.event);
  return ready.await(waits_.get());
}

}  // namespace torchtpu::runtime
