#include "aten/device_runtime.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "kernels/host_kernels.h"

namespace torchtpu::aten {
namespace {

struct State {
  std::mutex mu;
  std::string default_plugin;
  std::shared_ptr<runtime::Client> client;
  std::unique_ptr<runtime::CompileCache> cache;
  base::Status init_error;
  bool tried = false;
  std::vector<std::string> host_kernels;  // custom-call targets the plugin accepted
};

State& state() {
  static State* s = new State();  // lives for the process: buffers may outlive statics
  return *s;
}

// A plugin that cannot take a kernel still runs everything: the models that use one fall
// back to the StableHLO formulation (torchtpu.ops.has_host_kernel).
void register_host_kernels(const runtime::Plugin& plugin, std::vector<std::string>& out) {
  for (const kernels::HostKernel& k : kernels::host_kernels()) {
    base::Status st =
        plugin.register_ffi_handler(k.target, "Host", reinterpret_cast<void*>(k.handler));
    if (st.ok()) {
      out.push_back(k.target);
    } else {
      LOG(WARNING) << "tpu: host kernel " << k.target << " not registered: " << st.message();
    }
  }
}

void ensure_initialized(State& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.tried) return;
  s.tried = true;
  const char* env = std::getenv("TORCHTPU_PJRT_PLUGIN");
  std::string path = env && *env ? env : s.default_plugin;
  if (path.empty()) {
    s.init_error = base::failed_precondition(
        "tpu: no PJRT plugin configured; import torchtpu (it finds the xla-cpu-pjrt plugin) "
        "or set TORCHTPU_PJRT_PLUGIN=<path to a PJRT plugin .so>");
    return;
  }
  auto plugin = runtime::Plugin::load(path);
  if (!plugin.ok()) {
    s.init_error = plugin.status();
    return;
  }
  runtime::ClientOptions options;
  if (const char* n = std::getenv("TORCHTPU_NUM_DEVICES")) {
    char* end = nullptr;
    long v = std::strtol(n, &end, 10);
    if (end == n || *end != '\0' || v < 1 || v > 64) {
      s.init_error = base::invalid_argument(std::string("tpu: TORCHTPU_NUM_DEVICES='") + n +
                                            "' is not a device count (expected 1..64)");
      return;
    }
    options.cpu_device_count = static_cast<int>(v);
  }
  size_t capacity = runtime::CompileCache::kDefaultMemoryCapacity;
  if (const char* n = std::getenv("TORCHTPU_EXECUTABLE_CACHE_SIZE")) {
    char* end = nullptr;
    long long v = std::strtoll(n, &end, 10);
    if (end == n || *end != '\0' || v < 16 || v > 1000000) {
      s.init_error = base::invalid_argument(
          std::string("tpu: TORCHTPU_EXECUTABLE_CACHE_SIZE='") + n +
          "' is not an executable count (expected 16..1000000; default " +
          std::to_string(capacity) + ")");
      return;
    }
    capacity = static_cast<size_t>(v);
  }
  auto c = runtime::Client::create(*plugin, options);
  if (!c.ok()) {
    s.init_error = c.status();
    return;
  }
  s.client = *c;
  if (s.client->platform_name() == "cpu") register_host_kernels(**plugin, s.host_kernels);
  s.cache = std::make_unique<runtime::CompileCache>(s.client, capacity);
}

}  // namespace

void set_default_plugin_path(const std::string& path) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().default_plugin = path;
}

runtime::Client& client() {
  State& s = state();
  ensure_initialized(s);
  TORCH_CHECK(s.client != nullptr, s.init_error.message());
  return *s.client;
}

std::vector<std::string> registered_host_kernels() {
  client();
  return state().host_kernels;
}

runtime::CompileCache& compile_cache() {
  client();
  return *state().cache;
}

int device_count_or_zero() {
  State& s = state();
  ensure_initialized(s);
  return s.client ? s.client->num_devices() : 0;
}

}  // namespace torchtpu::aten
