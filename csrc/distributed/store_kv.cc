#include "distributed/store_kv.h"

#include <c10/util/Exception.h>

namespace torchtpu::distributed {
namespace {

std::string as_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

base::Status store_failed(const std::string& what, const std::string& key, const char* why) {
  return base::unavailable("tpu: key-value store: " + what + " of '" + key +
                           "' failed: " + why);
}

}  // namespace

StoreKeyValueStore::StoreKeyValueStore(c10::intrusive_ptr<c10d::Store> store,
                                       std::string prefix)
    : store_(std::move(store)), prefix_(std::move(prefix)) {}

base::StatusOr<std::string> StoreKeyValueStore::get(const std::string& key,
                                                    std::chrono::milliseconds timeout) {
  const std::string k = full_key(key);
  try {
    bool present;
    if (timeout.count() <= 0) {
      // c10d reads a zero timeout as "wait forever"; the PJRT caller means "now".
      present = store_->check({k});
    } else {
      try {
        store_->wait({k}, timeout);
        present = true;
      } catch (const c10::DistStoreError&) {
        // The store's timeout (its message varies by store); confirm the key is missing.
        present = store_->check({k});
      }
    }
    if (!present) {
      return base::deadline_exceeded("tpu: key-value store: key '" + k +
                                     "' was not set within " +
                                     std::to_string(timeout.count()) +
                                     " ms (a process of the job has not published it: it "
                                     "did not start, failed, or uses another store)");
    }
    return as_string(store_->get(k));
  } catch (const std::exception& e) {
    return store_failed("get", k, e.what());
  }
}

base::StatusOr<std::optional<std::string>> StoreKeyValueStore::try_get(const std::string& key) {
  const std::string k = full_key(key);
  try {
    if (!store_->check({k})) return std::optional<std::string>();
    return std::optional<std::string>(as_string(store_->get(k)));
  } catch (const std::exception& e) {
    return store_failed("try_get", k, e.what());
  }
}

base::Status StoreKeyValueStore::put(const std::string& key, const std::string& value) {
  const std::string k = full_key(key);
  try {
    store_->set(k, std::vector<uint8_t>(value.begin(), value.end()));
    return base::Status::ok_status();
  } catch (const std::exception& e) {
    return store_failed("put", k, e.what());
  }
}

}  // namespace torchtpu::distributed
