#include "runtime/kv_store.h"

#include <cstring>
#include <exception>

#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {
namespace {

PJRT_Error_Code to_pjrt_code(base::StatusCode code) {
  switch (code) {
    case base::StatusCode::kOk: return PJRT_Error_Code_OK;
    case base::StatusCode::kInvalidArgument: return PJRT_Error_Code_INVALID_ARGUMENT;
    case base::StatusCode::kNotFound: return PJRT_Error_Code_NOT_FOUND;
    case base::StatusCode::kUnimplemented: return PJRT_Error_Code_UNIMPLEMENTED;
    case base::StatusCode::kFailedPrecondition: return PJRT_Error_Code_FAILED_PRECONDITION;
    case base::StatusCode::kOutOfRange: return PJRT_Error_Code_OUT_OF_RANGE;
    case base::StatusCode::kInternal: return PJRT_Error_Code_INTERNAL;
    case base::StatusCode::kUnavailable: return PJRT_Error_Code_UNAVAILABLE;
    case base::StatusCode::kDeadlineExceeded: return PJRT_Error_Code_DEADLINE_EXCEEDED;
    case base::StatusCode::kResourceExhausted: return PJRT_Error_Code_RESOURCE_EXHAUSTED;
  }
  return PJRT_Error_Code_UNKNOWN;
}

// The plugin's error for `status`, built by the function the plugin passed in.
PJRT_Error* to_error(PJRT_CallbackError* callback_error, const base::Status& status) {
  if (status.ok()) return nullptr;
  return (*callback_error)(to_pjrt_code(status.code()), status.message().data(),
                           status.message().size());
}

// A copy of `value` the plugin frees with kv_value_deleter.
char* copy_out(const std::string& value) {
  char* out = new char[value.size() + 1];
  std::memcpy(out, value.data(), value.size());
  out[value.size()] = '\0';
  return out;
}

KeyValueStore* store_of(void* user_arg) { return static_cast<KeyValueStore*>(user_arg); }

base::Status no_store(const std::string& key) {
  return base::invalid_argument("runtime: key-value callback for '" + key +
                                "' called without a store (user_arg is null)");
}

// Runs `body` (returning Status), turning an exception of the store into a Status: the
// callbacks are called from the plugin's C code, which no exception may cross.
template <typename F>
base::Status guarded(const std::string& what, const std::string& key, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return base::unavailable("runtime: key-value store " + what + " of '" + key +
                             "' failed: " + e.what());
  } catch (...) {
    return base::unavailable("runtime: key-value store " + what + " of '" + key +
                             "' failed with an unknown exception");
  }
}

}  // namespace

base::Status validate(const MultiProcessConfig& config) {
  if (config.num_nodes < 1 || config.node_id < 0 || config.node_id >= config.num_nodes) {
    return base::invalid_argument("runtime: multi-process client: node " +
                                  std::to_string(config.node_id) + " of " +
                                  std::to_string(config.num_nodes) +
                                  " is not a place among the processes (expected 0 <= node < "
                                  "nodes, nodes >= 1)");
  }
  if (config.store == nullptr) {
    return base::invalid_argument(
        "runtime: multi-process client: no key-value store; the processes need one to "
        "exchange their devices");
  }
  for (int64_t d : config.local_device_ids) {
    if (d < 0) {
      return base::invalid_argument("runtime: multi-process client: local device id " +
                                    std::to_string(d) + " is negative");
    }
  }
  return base::Status::ok_status();
}

void kv_value_deleter(char* value) { delete[] value; }

namespace {

// The answer of a get or try_get callback: the plugin's error, or `value` handed over as a
// copy the plugin frees with kv_value_deleter.
template <typename Args>
PJRT_Error* answer_get(Args* args, const base::Status& status, const std::string& value) {
  if (!status.ok()) return to_error(args->callback_error, status);
  args->value = copy_out(value);
  args->value_size = value.size();
  args->value_deleter_callback = &kv_value_deleter;
  return nullptr;
}

}  // namespace

PJRT_Error* kv_get_callback(PJRT_KeyValueGetCallback_Args* args) {
  std::string key(args->key, args->key_size);
  std::string value;
  base::Status status = guarded("get", key, [&]() -> base::Status {
    KeyValueStore* store = store_of(args->user_arg);
    if (store == nullptr) return no_store(key);
    if (args->timeout_in_ms < 0) {
      return base::invalid_argument("runtime: key-value get of '" + key +
                                    "' with a negative timeout (" +
                                    std::to_string(args->timeout_in_ms) + " ms)");
    }
    auto got = store->get(key, std::chrono::milliseconds(args->timeout_in_ms));
    if (!got.ok()) return got.status();
    value = std::move(got).value();
    return base::Status::ok_status();
  });
  return answer_get(args, status, value);
}

PJRT_Error* kv_try_get_callback(PJRT_KeyValueTryGetCallback_Args* args) {
  std::string key(args->key, args->key_size);
  std::string value;
  base::Status status = guarded("try_get", key, [&]() -> base::Status {
    KeyValueStore* store = store_of(args->user_arg);
    if (store == nullptr) return no_store(key);
    auto got = store->try_get(key);
    if (!got.ok()) return got.status();
    if (!got->has_value()) {
      return base::not_found("runtime: key-value store has no key '" + key + "' (yet)");
    }
    value = std::move(**got);
    return base::Status::ok_status();
  });
  return answer_get(args, status, value);
}

PJRT_Error* kv_put_callback(PJRT_KeyValuePutCallback_Args* args) {
  std::string key(args->key, args->key_size);
  base::Status status = guarded("put", key, [&]() -> base::Status {
    KeyValueStore* store = store_of(args->user_arg);
    if (store == nullptr) return no_store(key);
    return store->put(key, std::string(args->value, args->value_size));
  });
  return to_error(args->callback_error, status);
}

}  // namespace torchtpu::runtime
