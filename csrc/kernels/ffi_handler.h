// What every typed-FFI handler needs: answering XLA's metadata query, reading buffers and
// scalar attributes from a call frame, and returning errors XLA reports to the caller.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/parallel_for.h"
#include "kernels/xla_ffi.h"

namespace torchtpu::kernels::ffi {

// The FFI API version our declarations follow (xla_ffi.h).
inline constexpr int kApiMajor = 0;
inline constexpr int kApiMinor = 1;

// XLA calls a handler once at registration with a metadata extension instead of
// operands. Returns true (after filling in the version) when `frame` is that call.
bool answer_metadata(XLA_FFI_CallFrame* frame);

// An error XLA hands back to the caller of the executable.
XLA_FFI_Error* error(const XLA_FFI_CallFrame* frame, const std::string& message,
                     XLA_FFI_Error_Code code = XLA_FFI_Error_Code_INVALID_ARGUMENT);

// Operand `i` / result `i` as a buffer; nullptr when out of range or not a buffer.
const XLA_FFI_Buffer* arg(const XLA_FFI_CallFrame* frame, int64_t i);
const XLA_FFI_Buffer* ret(const XLA_FFI_CallFrame* frame, int64_t i);

// Scalar attributes by name; nullopt when absent or of another type.
std::optional<int64_t> int_attr(const XLA_FFI_CallFrame* frame, std::string_view name);
std::optional<float> float_attr(const XLA_FFI_CallFrame* frame, std::string_view name);

// Threads in XLA's CPU pool, or 0 when the running XLA has none to offer.
int64_t pool_threads(const XLA_FFI_CallFrame* frame);

// Calls body(i) for every i in [0, n), spread over XLA's CPU thread pool and the calling
// thread (which always takes part, so a busy or single-thread pool only slows it down);
// all on the calling thread when the running XLA offers no pool. Returns when every call
// has returned.
void parallel_for(const XLA_FFI_CallFrame* frame, int64_t n,
                  const std::function<void(int64_t)>& body);
// parallel_for over `frame`'s pool as a kernel's ParallelFor.
inline ParallelFor pool_parallel_for(const XLA_FFI_CallFrame* frame) {
  return [frame](int64_t n, const std::function<void(int64_t)>& body) {
    parallel_for(frame, n, body);
  };
}

// "f32[2,3]" for messages.
std::string describe(const XLA_FFI_Buffer* buffer);

}  // namespace torchtpu::kernels::ffi
