// The multi-process client's key-value store as the runtime passes it to a PJRT plugin: the
// callback adapters (runtime/kv_store.h) called as a plugin calls them, the rule that
// decides which plugins receive the store (plan_multi_process), and client creation on the
// real XLA CPU plugin with a store configured.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "lowering/hlo_builder.h"
#include "runtime/kv_store.h"
#include "runtime/pjrt_c.h"
#include "test_plugin.h"

namespace torchtpu {
namespace {

using base::DType;

// An in-memory store that counts its calls; get waits on a condition variable.
class MemoryStore : public runtime::KeyValueStore {
 public:
  base::StatusOr<std::string> get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++calls_;
    if (!cv_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
      return base::deadline_exceeded("memory store: no key '" + key + "' after " +
                                     std::to_string(timeout.count()) + " ms");
    }
    return values_[key];
  }
  base::StatusOr<std::optional<std::string>> try_get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    auto it = values_.find(key);
    if (it == values_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  base::Status put(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++calls_;
      values_[key] = value;
    }
    cv_.notify_all();
    return base::Status::ok_status();
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
  int calls_ = 0;
};

// A store whose every call throws, as a c10d store does when its server is gone.
class ThrowingStore : public runtime::KeyValueStore {
 public:
  base::StatusOr<std::string> get(const std::string&, std::chrono::milliseconds) override {
    throw std::runtime_error("connection reset");
  }
  base::StatusOr<std::optional<std::string>> try_get(const std::string&) override {
    throw std::runtime_error("connection reset");
  }
  base::Status put(const std::string&, const std::string&) override {
    throw std::runtime_error("connection reset");
  }
};

// What a plugin's PJRT_CallbackError does: records the error it is asked to make.
struct RecordedError {
  PJRT_Error_Code code;
  std::string message;
};
thread_local RecordedError* last_error = nullptr;

PJRT_Error* record_error(PJRT_Error_Code code, const char* message, size_t size) {
  last_error = new RecordedError{code, std::string(message, size)};
  return reinterpret_cast<PJRT_Error*>(last_error);
}
PJRT_CallbackError callback_error = &record_error;

// Takes the error a callback returned (null for none).
std::unique_ptr<RecordedError> take(PJRT_Error* error) {
  EXPECT_EQ(reinterpret_cast<RecordedError*>(error), error == nullptr ? nullptr : last_error);
  return std::unique_ptr<RecordedError>(reinterpret_cast<RecordedError*>(error));
}

PJRT_Error* put(runtime::KeyValueStore* store, const std::string& key, const std::string& value) {
  PJRT_KeyValuePutCallback_Args args{};
  args.struct_size = PJRT_KeyValuePutCallback_Args_STRUCT_SIZE;
  args.key = key.data();
  args.key_size = key.size();
  args.value = value.data();
  args.value_size = value.size();
  args.callback_error = &callback_error;
  args.user_arg = store;
  return runtime::kv_put_callback(&args);
}

// `key` must outlive the args (they point into it).
PJRT_KeyValueGetCallback_Args get_args(runtime::KeyValueStore* store, const std::string& key,
                                       int timeout_ms) {
  PJRT_KeyValueGetCallback_Args args{};
  args.struct_size = PJRT_KeyValueGetCallback_Args_STRUCT_SIZE;
  args.key = key.data();
  args.key_size = key.size();
  args.timeout_in_ms = timeout_ms;
  args.callback_error = &callback_error;
  args.user_arg = store;
  return args;
}

PJRT_KeyValueTryGetCallback_Args try_get_args(runtime::KeyValueStore* store,
                                              const std::string& key) {
  PJRT_KeyValueTryGetCallback_Args args{};
  args.struct_size = PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE;
  args.key = key.data();
  args.key_size = key.size();
  args.callback_error = &callback_error;
  args.user_arg = store;
  return args;
}

TEST(KvStoreCallbacks, PutThenGetRoundTripsBinaryValues) {
  MemoryStore store;
  const std::string key = "gpu:local_topology/cuda/0";
  const std::string value("\x00\x01topology\xff", 11);
  EXPECT_EQ(take(put(&store, key, value)), nullptr);

  auto args = get_args(&store, key, 1000);
  EXPECT_EQ(take(runtime::kv_get_callback(&args)), nullptr);
  ASSERT_NE(args.value, nullptr);
  EXPECT_EQ(std::string(args.value, args.value_size), value);
  ASSERT_EQ(args.value_deleter_callback, &runtime::kv_value_deleter);
  args.value_deleter_callback(args.value);

  auto t = try_get_args(&store, key);
  EXPECT_EQ(take(runtime::kv_try_get_callback(&t)), nullptr);
  EXPECT_EQ(std::string(t.value, t.value_size), value);
  t.value_deleter_callback(t.value);
}

TEST(KvStoreCallbacks, GetWaitsForAPutFromAnotherThread) {
  MemoryStore store;
  const std::string key = "late";
  std::thread writer([&] { EXPECT_EQ(take(put(&store, key, "v")), nullptr); });
  auto args = get_args(&store, key, 60000);
  EXPECT_EQ(take(runtime::kv_get_callback(&args)), nullptr);
  writer.join();
  EXPECT_EQ(std::string(args.value, args.value_size), "v");
  args.value_deleter_callback(args.value);
}

TEST(KvStoreCallbacks, GetTimeoutIsDeadlineExceeded) {
  MemoryStore store;
  const std::string key = "never_set";
  auto args = get_args(&store, key, 10);
  auto error = take(runtime::kv_get_callback(&args));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, PJRT_Error_Code_DEADLINE_EXCEEDED);
  EXPECT_NE(error->message.find("never_set"), std::string::npos) << error->message;
  EXPECT_NE(error->message.find("10 ms"), std::string::npos) << error->message;
  EXPECT_EQ(args.value, nullptr);
  EXPECT_EQ(args.value_deleter_callback, nullptr);
}

TEST(KvStoreCallbacks, TryGetOfAMissingKeyIsNotFound) {
  MemoryStore store;
  const std::string key = "missing";
  auto t = try_get_args(&store, key);
  auto error = take(runtime::kv_try_get_callback(&t));
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->code, PJRT_Error_Code_NOT_FOUND);
  EXPECT_NE(error->message.find("'missing'"), std::string::npos) << error->message;
}

TEST(KvStoreCallbacks, StoreExceptionsAndMissingStoreBecomeErrors) {
  ThrowingStore throwing;
  auto failed = take(put(&throwing, "k", "v"));
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->code, PJRT_Error_Code_UNAVAILABLE);
  EXPECT_NE(failed->message.find("connection reset"), std::string::npos) << failed->message;
  const std::string key = "k";
  auto args = get_args(&throwing, key, 10);
  auto get_failed = take(runtime::kv_get_callback(&args));
  ASSERT_NE(get_failed, nullptr);
  EXPECT_EQ(get_failed->code, PJRT_Error_Code_UNAVAILABLE);

  auto none = take(put(nullptr, "k", "v"));
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->code, PJRT_Error_Code_INVALID_ARGUMENT);
  EXPECT_NE(none->message.find("without a store"), std::string::npos) << none->message;
}

TEST(KvStoreCallbacks, ValueDeleterFreesWhatGetAllocated) {
  // Each value the plugin receives is its own allocation, freed by the deleter it comes
  // with; under AddressSanitizer a leak or double free here fails the test.
  MemoryStore store;
  EXPECT_EQ(take(put(&store, "k", std::string(1 << 20, 'x'))), nullptr);
  const std::string key = "k";
  for (int i = 0; i < 4; ++i) {
    auto args = get_args(&store, key, 1000);
    ASSERT_EQ(take(runtime::kv_get_callback(&args)), nullptr);
    ASSERT_EQ(args.value_size, size_t{1} << 20);
    EXPECT_EQ(args.value[args.value_size], '\0');
    args.value_deleter_callback(args.value);
  }
}

runtime::MultiProcessConfig config_of(std::shared_ptr<runtime::KeyValueStore> store) {
  runtime::MultiProcessConfig config;
  config.node_id = 1;
  config.num_nodes = 2;
  config.store = std::move(store);
  config.local_device_ids = {3};
  return config;
}

TEST(MultiProcessPlan, OnlyAcceleratorPluginsGetTheStore) {
  runtime::ClientOptions options;
  options.multi_process = config_of(std::make_shared<MemoryStore>());

  for (const runtime::KnownPlugin& k : runtime::known_plugins()) {
    options.multi_process_support = runtime::multi_process_support(&k);
    auto plan = runtime::plan_multi_process(options);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    if (k.platform == "cpu") {
      EXPECT_FALSE(plan->store_callbacks) << k.name;
      EXPECT_TRUE(plan->options.empty()) << k.name;
    } else if (k.platform == "cuda") {
      EXPECT_TRUE(plan->store_callbacks) << k.name;
      ASSERT_EQ(plan->options.size(), 3u) << k.name;
      EXPECT_EQ(plan->options[0].name, "node_id");
      EXPECT_EQ(plan->options[0].values, std::vector<int64_t>{1});
      EXPECT_EQ(plan->options[1].name, "num_nodes");
      EXPECT_EQ(plan->options[1].values, std::vector<int64_t>{2});
      EXPECT_EQ(plan->options[2].name, "visible_devices");
      EXPECT_TRUE(plan->options[2].is_list);
      EXPECT_EQ(plan->options[2].values, std::vector<int64_t>{3});
    } else if (k.platform == "tpu") {
      EXPECT_TRUE(plan->store_callbacks) << k.name;
      EXPECT_TRUE(plan->options.empty()) << k.name;
    }
  }
  // A plugin given by path: unknown options would fail its creation, so it gets none.
  options.multi_process_support = runtime::multi_process_support(nullptr);
  auto by_path = runtime::plan_multi_process(options);
  ASSERT_TRUE(by_path.ok());
  EXPECT_FALSE(by_path->store_callbacks);
}

TEST(MultiProcessPlan, BadConfigIsAnErrorBeforeAnyPluginSeesIt) {
  runtime::ClientOptions options;
  options.multi_process_support = runtime::MultiProcessSupport::kStoreAndNodeOptions;
  options.multi_process = config_of(std::make_shared<MemoryStore>());
  options.multi_process->node_id = 2;
  auto plan = runtime::plan_multi_process(options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("node 2 of 2"), std::string::npos);
  options.multi_process = config_of(nullptr);
  EXPECT_FALSE(runtime::plan_multi_process(options).ok());
}

std::shared_ptr<const runtime::Plugin> cpu_plugin() {
  static std::shared_ptr<const runtime::Plugin> plugin = [] {
    auto p = runtime::Plugin::load(testing::test_plugin_path());
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    return *p;
  }();
  return plugin;
}

TEST(MultiProcessClient, CpuPluginStartsAsUsualAndNeverTouchesTheStore) {
  auto store = std::make_shared<MemoryStore>();
  runtime::ClientOptions options;
  options.cpu_device_count = 2;
  options.multi_process = config_of(store);
  options.multi_process_support =
      runtime::multi_process_support(runtime::find_known_plugin("xla-cpu-pjrt"));
  ASSERT_EQ(options.multi_process_support, runtime::MultiProcessSupport::kNone);
  auto client = runtime::Client::create(cpu_plugin(), options);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  EXPECT_FALSE((*client)->multi_process());
  EXPECT_EQ((*client)->num_devices(), 2);
  EXPECT_EQ((*client)->num_global_devices(), 2);
  EXPECT_EQ((*client)->device_id(1), 1);
  EXPECT_EQ((*client)->compile_options_for({1}), runtime::compile_options(1));
  EXPECT_EQ(store->calls(), 0);
}

TEST(GpuAllocatorOptions, SentOnlyToAGpuPlatform) {
  // No GPU here: the real XLA CPU plugin shows both sides, accepting a client without the
  // options and naming the option it does not take when they are sent.
  runtime::ClientOptions options;
  options.gpu_allocator.preallocate = false;
  options.gpu_allocator.memory_fraction = 0.5;
  // A CPU plugin's registry platform is not a GPU: the options stay home.
  auto client = runtime::Client::create(cpu_plugin(), options);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  client->reset();
  // Sent (as for a GPU platform), the CPU plugin names the option it does not take: each
  // is a real create option, not dropped on the way.
  runtime::ClientOptions one;
  one.gpu_platform = true;
  one.gpu_allocator.preallocate = false;
  auto refused = runtime::Client::create(cpu_plugin(), one);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("preallocate"), std::string::npos)
      << refused.status().message();
  one.gpu_allocator = {};
  one.gpu_allocator.memory_fraction = 0.5;
  refused = runtime::Client::create(cpu_plugin(), one);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("memory_fraction"), std::string::npos)
      << refused.status().message();
}

TEST(MultiProcessClient, ProgramsCompileByDeviceIdWhenTheClientHasAStore) {
  // The CPU plugin ignores the callbacks, so a client given them is a real plugin's view of
  // well-formed create arguments, and its programs compile through the by-id options a
  // multi-process client uses (device ids are indices on one process).
  auto store = std::make_shared<MemoryStore>();
  runtime::ClientOptions options;
  options.cpu_device_count = 2;
  options.multi_process = config_of(store);
  options.multi_process_support = runtime::MultiProcessSupport::kStore;
  auto client = runtime::Client::create(cpu_plugin(), options);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  EXPECT_TRUE((*client)->multi_process());
  EXPECT_EQ((*client)->compile_options_for({1}), runtime::compile_options_by_id({1}));

  lowering::Builder b;
  auto x = b.param(lowering::TensorType{DType::kF32, {3}});
  std::string module = b.finish({b.add(x, x)});
  auto exe = (*client)->compile(module, 1);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<float> in = {1, 2, 3};
  auto buf = (*client)->buffer_from_host(in.data(), DType::kF32, {3}, 1);
  ASSERT_TRUE(buf.ok()) << buf.status().to_string();
  auto out = (*exe)->execute({buf->get()});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0]->device_index(), 1);
  std::vector<float> result(3);
  ASSERT_TRUE((*out)[0]->to_host(result.data(), sizeof(float) * 3).ok());
  EXPECT_EQ(result, (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(store->calls(), 0);
}

}  // namespace
}  // namespace torchtpu
