// Status and StatusOr: the error currency of the torch-free core.
//
// A Status is either OK or carries a code and a message shaped
// "<component>: <what failed>: <facts>[; what to do]". Errors are translated once at the
// edge (aten -> TORCH_CHECK / c10 errors, bindings -> Python exceptions).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace torchtpu::base {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kUnimplemented,
  kFailedPrecondition,
  kOutOfRange,
  kInternal,
  kUnavailable,
  kDeadlineExceeded,
  kResourceExhausted,  // out of memory
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status invalid_argument(std::string message);
Status not_found(std::string message);
Status unimplemented(std::string message);
Status failed_precondition(std::string message);
Status out_of_range(std::string message);
Status internal_error(std::string message);
Status unavailable(std::string message);
Status deadline_exceeded(std::string message);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT(runtime/explicit)
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT(runtime/explicit)

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace torchtpu::base

#define TORCHTPU_CONCAT_INNER(a, b) a##b
#define TORCHTPU_CONCAT(a, b) TORCHTPU_CONCAT_INNER(a, b)

// Returns early from the enclosing function when `expr` is not OK.
#define TORCHTPU_RETURN_IF_ERROR(expr)                         \
  do {                                                         \
    ::torchtpu::base::Status _torchtpu_status = (expr);        \
    if (!_torchtpu_status.ok()) return _torchtpu_status;       \
  } while (0)

#define TORCHTPU_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

// `TORCHTPU_ASSIGN_OR_RETURN(auto x, f());` binds x or returns f's error.
#define TORCHTPU_ASSIGN_OR_RETURN(lhs, expr) \
  TORCHTPU_ASSIGN_OR_RETURN_IMPL(TORCHTPU_CONCAT(_torchtpu_statusor_, __LINE__), lhs, expr)
