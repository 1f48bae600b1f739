// The runtime's key-value store (runtime/kv_store.h) over a torch.distributed Store.
//
// What a multi-process PJRT client (an accelerator plugin's client over the devices of
// several processes) exchanges while it starts and runs: each key lives under `prefix` in
// the job's store (a TCPStore in practice), so the plugin's keys never meet torch's or
// ours. Binary values pass unchanged.
// Thread safety: every method may be called from any thread (the plugin calls from its
// own); c10d stores serialize their requests themselves.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <string>

#include "runtime/kv_store.h"

namespace torchtpu::distributed {

class StoreKeyValueStore : public runtime::KeyValueStore {
 public:
  // `prefix` is prepended to every key as `prefix + "/" + key` (PrefixStore's rule).
  StoreKeyValueStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix);

  // Waits with the store's own wait (a timeout of 0 checks once). DeadlineExceeded when the
  // key is still missing at the deadline; Unavailable when the store fails.
  base::StatusOr<std::string> get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  base::StatusOr<std::optional<std::string>> try_get(const std::string& key) override;
  base::Status put(const std::string& key, const std::string& value) override;

  const std::string& prefix() const { return prefix_; }

 private:
  std::string full_key(const std::string& key) const { return prefix_ + "/" + key; }
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
};

}  // namespace torchtpu::distributed
