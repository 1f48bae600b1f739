// A key-value store shared by the processes of one job, and the PJRT callbacks over it.
//
// Accelerator plugins (XLA's CUDA/ROCm plugin, libtpu) form one client over the devices of
// several processes when PJRT_Client_Create is given a key-value store as callbacks: each
// process publishes its local topology (and later collective ids) under keys and reads the
// others'. This header is that store's interface as the runtime sees it, and the adapters
// that turn it into PJRT_KeyValue{Get,TryGet,Put}Callback functions. The runtime knows no
// implementation; the distributed layer provides one over torch.distributed's Store.
//
// Which plugins take the store, and with which create options, is decided by
// multi_process_support() (plugin_registry.h); the XLA CPU plugins never receive it.
// Thread safety: a KeyValueStore must be safe to call from any thread (the plugin calls the
// callbacks from its own threads, concurrently).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

struct PJRT_KeyValueGetCallback_Args;
struct PJRT_KeyValueTryGetCallback_Args;
struct PJRT_KeyValuePutCallback_Args;
struct PJRT_Error;

namespace torchtpu::runtime {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // The value under `key`, waiting up to `timeout` for another process to put it. A
  // DeadlineExceeded status when it does not appear in time; Unavailable when the store
  // cannot be reached.
  virtual base::StatusOr<std::string> get(const std::string& key,
                                          std::chrono::milliseconds timeout) = 0;
  // The value under `key` if present now, std::nullopt if not; never waits for a put.
  virtual base::StatusOr<std::optional<std::string>> try_get(const std::string& key) = 0;
  // Sets `key` to `value` (binary data) for every process of the job.
  virtual base::Status put(const std::string& key, const std::string& value) = 0;
};

// What makes a client multi-process: this process's place among the job's processes and
// the store they share.
struct MultiProcessConfig {
  int node_id = 0;    // this process, 0..num_nodes-1
  int num_nodes = 1;  // processes that form the client together
  std::shared_ptr<KeyValueStore> store;
  // Local devices this process takes (a plugin's `visible_devices`); empty: all of them.
  std::vector<int64_t> local_device_ids;
};

// Checks a config before any plugin sees it: node range, a store, device ids >= 0.
base::Status validate(const MultiProcessConfig& config);

// The PJRT callbacks over a KeyValueStore, which travels as the callbacks' `user_arg` (a
// KeyValueStore*, kept alive by the caller for the client's lifetime). Values handed to the
// plugin are allocated with new[] and come with kv_value_deleter, which the plugin calls
// once it copied them. Errors go back through the args' callback_error with a PJRT error
// code: DEADLINE_EXCEEDED for a get that timed out, NOT_FOUND for a try_get of a missing
// key, UNAVAILABLE for a store that failed, INVALID_ARGUMENT for a missing store.
PJRT_Error* kv_get_callback(PJRT_KeyValueGetCallback_Args* args);
PJRT_Error* kv_try_get_callback(PJRT_KeyValueTryGetCallback_Args* args);
PJRT_Error* kv_put_callback(PJRT_KeyValuePutCallback_Args* args);
// Frees a value kv_get_callback or kv_try_get_callback returned.
void kv_value_deleter(char* value);

}  // namespace torchtpu::runtime
