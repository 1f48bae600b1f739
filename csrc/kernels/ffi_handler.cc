#include "kernels/ffi_handler.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

namespace torchtpu::kernels::ffi {
namespace {

const void* find_attr(const XLA_FFI_CallFrame* frame, std::string_view name,
                      XLA_FFI_DataType dtype) {
  const XLA_FFI_Attrs& attrs = frame->attrs;
  for (int64_t i = 0; i < attrs.size; ++i) {
    const XLA_FFI_ByteSpan* n = attrs.names[i];
    if (std::string_view(n->ptr, n->len) != name) continue;
    if (attrs.types[i] != XLA_FFI_AttrType_SCALAR) return nullptr;
    auto* scalar = static_cast<const XLA_FFI_Scalar*>(attrs.attrs[i]);
    return scalar->dtype == dtype ? scalar->value : nullptr;
  }
  return nullptr;
}

// Shared by the caller and the pool tasks of one parallel_for. A task may start after the
// caller has returned (the pool was busy); it then finds no work left, so it never touches
// `body`, and it owns its reference to this state.
struct ParallelWork {
  const std::function<void(int64_t)>* body;
  int64_t n;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};

  void run() {
    for (int64_t i; (i = next.fetch_add(1)) < n;) {
      (*body)(i);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

void run_task(void* data) {
  auto* work = static_cast<std::shared_ptr<ParallelWork>*>(data);
  (*work)->run();
  delete work;
}

void destroy(const XLA_FFI_CallFrame* frame, XLA_FFI_Error* e) {
  XLA_FFI_Error_Destroy_Args args{};
  args.struct_size = sizeof(args);
  args.error = e;
  frame->api->error_destroy(&args);
}

}  // namespace

int64_t pool_threads(const XLA_FFI_CallFrame* frame) {
  const XLA_FFI_Api* api = frame->api;
  if (api->struct_size < offsetof(XLA_FFI_Api, thread_pool_num_threads) + sizeof(void*)) return 0;
  int64_t threads = 0;
  XLA_FFI_ThreadPool_NumThreads_Args args{};
  args.struct_size = sizeof(args);
  args.ctx = frame->ctx;
  args.num_threads = &threads;
  if (XLA_FFI_Error* e = api->thread_pool_num_threads(&args)) {
    destroy(frame, e);
    return 0;
  }
  return threads;
}

void parallel_for(const XLA_FFI_CallFrame* frame, int64_t n,
                  const std::function<void(int64_t)>& body) {
  auto work = std::make_shared<ParallelWork>();
  work->body = &body;
  work->n = n;
  int64_t helpers = std::min(pool_threads(frame), n - 1);
  for (int64_t t = 0; t < helpers; ++t) {
    XLA_FFI_ThreadPool_Schedule_Args args{};
    args.struct_size = sizeof(args);
    args.ctx = frame->ctx;
    args.task = &run_task;
    args.data = new std::shared_ptr<ParallelWork>(work);
    if (XLA_FFI_Error* e = frame->api->thread_pool_schedule(&args)) {
      delete static_cast<std::shared_ptr<ParallelWork>*>(args.data);
      destroy(frame, e);
      break;
    }
  }
  work->run();
  while (work->done.load(std::memory_order_acquire) < n) std::this_thread::yield();
}

bool answer_metadata(XLA_FFI_CallFrame* frame) {
  for (XLA_FFI_Extension_Base* e = frame->extension_start; e != nullptr; e = e->next) {
    if (e->type != XLA_FFI_Extension_Metadata) continue;
    XLA_FFI_Metadata* m = reinterpret_cast<XLA_FFI_Metadata_Extension*>(e)->metadata;
    m->api_version.major_version = kApiMajor;
    m->api_version.minor_version = kApiMinor;
    m->traits = 0;
    return true;
  }
  return false;
}

XLA_FFI_Error* error(const XLA_FFI_CallFrame* frame, const std::string& message,
                     XLA_FFI_Error_Code code) {
  XLA_FFI_Error_Create_Args args{};
  args.struct_size = sizeof(args);
  args.message = message.c_str();  // copied by XLA
  args.errc = code;
  return frame->api->error_create(&args);
}

const XLA_FFI_Buffer* arg(const XLA_FFI_CallFrame* frame, int64_t i) {
  if (i < 0 || i >= frame->args.size || frame->args.types[i] != XLA_FFI_ArgType_BUFFER) {
    return nullptr;
  }
  return static_cast<const XLA_FFI_Buffer*>(frame->args.args[i]);
}

const XLA_FFI_Buffer* ret(const XLA_FFI_CallFrame* frame, int64_t i) {
  if (i < 0 || i >= frame->rets.size || frame->rets.types[i] != XLA_FFI_RetType_BUFFER) {
    return nullptr;
  }
  return static_cast<const XLA_FFI_Buffer*>(frame->rets.rets[i]);
}

std::optional<int64_t> int_attr(const XLA_FFI_CallFrame* frame, std::string_view name) {
  const void* v = find_attr(frame, name, XLA_FFI_DataType_S64);
  if (v == nullptr) return std::nullopt;
  return *static_cast<const int64_t*>(v);
}

std::optional<float> float_attr(const XLA_FFI_CallFrame* frame, std::string_view name) {
  const void* v = find_attr(frame, name, XLA_FFI_DataType_F32);
  if (v == nullptr) return std::nullopt;
  return *static_cast<const float*>(v);
}

std::string describe(const XLA_FFI_Buffer* buffer) {
  std::string s;
  switch (buffer->dtype) {
    case XLA_FFI_DataType_F32: s = "f32"; break;
    case XLA_FFI_DataType_S64: s = "s64"; break;
    case XLA_FFI_DataType_S32: s = "s32"; break;
    default: s = "dtype" + std::to_string(static_cast<int>(buffer->dtype)); break;
  }
  s += "[";
  for (int64_t i = 0; i < buffer->rank; ++i) {
    s += (i ? "," : "") + std::to_string(buffer->dims[i]);
  }
  return s + "]";
}

}  // namespace torchtpu::kernels::ffi
