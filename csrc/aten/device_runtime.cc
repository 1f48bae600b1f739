#include "aten/device_runtime.h"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "aten/status_error.h"
#include "kernels/gemm.h"
#include "kernels/host_kernels.h"
#include "lowering/host_gemm.h"
#include "runtime/gpu_allocator.h"
#include "runtime/host_malloc.h"
#include "runtime/memory_stats.h"
#include "runtime/plugin_registry.h"
#include "runtime/poll_wait.h"

namespace torchtpu::aten {
namespace {

struct State {
  std::mutex mu;
  std::vector<std::string> search_dirs;  // where installed plugins are looked for
  runtime::PluginChoice choice;
  std::shared_ptr<runtime::Client> client;
  std::unique_ptr<runtime::CompileCache> cache;
  base::Status init_error;
  bool tried = false;
  std::vector<std::string> host_kernels;  // custom-call targets the plugin accepted
  // Set by set_multi_process_config before the client starts.
  std::optional<runtime::MultiProcessConfig> multi_process;
};

State& state() {
  static State* s = new State();  // lives for the process: buffers may outlive statics
  return *s;
}

// Set in the child of a fork() made after the client started. The plugin's threads (its
// executors, the runtime's completion threads) are not copied by fork, so a device call
// there would wait forever; it raises instead, as CUDA does.
std::atomic<bool> g_forked_child{false};

void mark_forked_child() { g_forked_child.store(true); }

}  // namespace

void check_not_forked_child() {
  TORCH_CHECK(!g_forked_child.load(),
              "tpu: cannot use the tpu device in a forked subprocess: the parent process had "
              "started it, and its PJRT client's threads do not survive fork(). Use the "
              "'spawn' start method (torch.multiprocessing.set_start_method('spawn'), or "
              "DataLoader(..., multiprocessing_context='spawn')), or make forked workers "
              "return CPU tensors and move them to tpu in the parent");
}

namespace {

// The BLAS the running PyTorch exports (its CPU wheels link MKL and export the Fortran
// sgemm and MKL's per-thread thread count). Weak: a PyTorch without them leaves the host
// GEMM kernel unregistered and f32 products on XLA's dot.
extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
            const float*, const int*, const float*, const int*, const float*, float*,
            const int*) __attribute__((weak));
int MKL_Set_Num_Threads_Local(int) __attribute__((weak));  // mkl.h's C name
}

// Whether f32 products may run on the host GEMM kernel: a BLAS is there and
// TORCHTPU_HOST_GEMM is not 0 (1 or unset).
bool want_host_gemm() {
  const char* env = std::getenv("TORCHTPU_HOST_GEMM");
  if (env != nullptr && std::string(env) == "0") return false;
  if (env != nullptr && std::string(env) != "1") {
    LOG(WARNING) << "tpu: TORCHTPU_HOST_GEMM='" << env << "' is not 0 or 1; using 1";
  }
  return sgemm_ != nullptr;
}

// A plugin that cannot take a kernel still runs everything: the models that use one fall
// back to the StableHLO formulation (torchtpu.ops.has_host_kernel), and f32 products stay
// on XLA's dot unless the GEMM kernel is registered.
void register_host_kernels(const runtime::Plugin& plugin, std::vector<std::string>& out) {
  const bool gemm = want_host_gemm();
  if (gemm) kernels::set_blas({&sgemm_, MKL_Set_Num_Threads_Local});
  for (const kernels::HostKernel& k : kernels::host_kernels()) {
    if (!gemm && std::string(k.target) == kernels::kGemmTarget) continue;
    base::Status st =
        plugin.register_ffi_handler(k.target, "Host", reinterpret_cast<void*>(k.handler));
    if (st.ok()) {
      out.push_back(k.target);
      if (std::string(k.target) == kernels::kGemmTarget) lowering::set_host_gemm(true);
    } else {
      LOG(WARNING) << "tpu: host kernel " << k.target << " not registered: " << st.message();
    }
  }
}

// The XLA CPU plugins' XNNPACK dot path caches packed weights by buffer address. Eager mode
// frees temporaries (e.g. the transposed weight that F.linear reads) and the allocator hands
// the same address to the next layer's weights, so a later dot can run with a previous
// layer's packed weights: wrong results at random (a 30-layer Llama's logits were off by
// tens). XLA's own dot emitter has no such cache. An XLA plugin reads XLA_FLAGS once, when
// its client starts, before it can say which platform it runs; so the flag is added for a
// registered plugin whose platform is `cpu`, and a plugin given by path that turns out to
// be a CPU plugin gets a warning. A flag the user set in XLA_FLAGS stands. Compiled
// executables are keyed by XLA_FLAGS too, so none built with XNNPACK is reused.
constexpr char kXnnpackFlag[] = "xla_cpu_use_xnnpack";

bool xla_flags_name_xnnpack() {
  const char* flags = std::getenv("XLA_FLAGS");
  return flags != nullptr && std::string(flags).find(kXnnpackFlag) != std::string::npos;
}

void disable_xnnpack_dots() {
  if (xla_flags_name_xnnpack()) return;
  const char* flags = std::getenv("XLA_FLAGS");
  std::string value = flags ? flags : "";
  value += std::string(value.empty() ? "" : " ") + "--" + kXnnpackFlag + "=false";
  ::setenv("XLA_FLAGS", value.c_str(), 1);
}

void ensure_initialized(State& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.tried) return;
  s.tried = true;
  const char* env = std::getenv("TORCHTPU_PJRT_PLUGIN");
  auto choice = runtime::choose_plugin(env ? env : "", runtime::find_plugins(s.search_dirs));
  if (!choice.ok()) {
    s.init_error = choice.status();
    return;
  }
  s.choice = *choice;
  const runtime::KnownPlugin* known = runtime::find_known_plugin(s.choice.name);
  if (known != nullptr && known->platform == "cpu") disable_xnnpack_dots();
  auto plugin = runtime::Plugin::load(s.choice.path);
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
  if (const char* a = std::getenv("TORCHTPU_CPU_ASYNC"); a != nullptr && *a != '\0') {
    std::string v = a;
    if (v != "0" && v != "1") {
      s.init_error = base::invalid_argument(
          "tpu: TORCHTPU_CPU_ASYNC='" + v + "' is not 0 (a CPU plugin runs each program on "
          "the calling thread) or 1 (on its worker threads, the default)");
      return;
    }
    // A plugin given by path is asked (it may refuse the option: then it runs without);
    // a known one only if it acts on it.
    if (known == nullptr || known->takes_asynchronous) {
      options.cpu_asynchronous = v == "1";
    } else {
      LOG(WARNING) << "tpu: TORCHTPU_CPU_ASYNC=" << v << " is ignored: the " << known->name
                   << " plugin has no such option (lammps-jax-pjrt-cpu has)";
    }
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
  auto disk_max_bytes = runtime::disk_cache_max_bytes_from_env();
  if (!disk_max_bytes.ok()) {
    s.init_error = disk_max_bytes.status();
    return;
  }
  if (base::Status polling = runtime::check_poll_budget(); !polling.ok()) {
    s.init_error = polling;
    return;
  }
  auto malloc_policy = runtime::host_malloc_policy_from_env();
  if (!malloc_policy.ok()) {
    s.init_error = malloc_policy.status();
    return;
  }
  auto gpu_allocator = runtime::gpu_allocator_options_from_env();
  if (!gpu_allocator.ok()) {
    s.init_error = gpu_allocator.status();
    return;
  }
  options.gpu_allocator = *gpu_allocator;
  options.gpu_platform =
      known != nullptr && (known->platform == "cuda" || known->platform == "rocm");
  // A plugin that takes no store (the CPU plugins, a plugin given by path) never sees it:
  // Client::create passes it only as far as the registry's support says.
  options.multi_process = s.multi_process;
  options.multi_process_support = runtime::multi_process_support(known);
  auto c = runtime::Client::create(*plugin, options);
  if (!c.ok()) {
    s.init_error = c.status();
    return;
  }
  // The device's buffers are host memory only on a CPU plugin (runtime/host_malloc.h).
  if ((*c)->platform_name() == "cpu") {
    auto applied = runtime::apply_host_malloc_policy(*malloc_policy);
    if (!applied.ok()) {
      s.init_error = applied.status();
      return;
    }
  }
  s.client = *c;
  pthread_atfork(nullptr, nullptr, &mark_forked_child);
  if (s.client->platform_name() == "cpu" && !xla_flags_name_xnnpack()) {
    LOG(WARNING) << "tpu: the PJRT plugin " << s.choice.path << " is a CPU plugin not in the "
                 << "registry, so XNNPACK dots stay on (they can reuse stale packed weights: "
                 << "wrong results); start with XLA_FLAGS=--" << kXnnpackFlag << "=false";
  }
  if (s.client->platform_name() == "cpu") {
    register_host_kernels(**plugin, s.host_kernels);
    lowering::set_widen_half_products(true);
  }
  s.cache = std::make_unique<runtime::CompileCache>(s.client, capacity, *disk_max_bytes);
}

}  // namespace

void set_plugin_search_path(const std::vector<std::string>& dirs) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().search_dirs = dirs;
}

base::Status set_multi_process_config(runtime::MultiProcessConfig config) {
  TORCHTPU_RETURN_IF_ERROR(runtime::validate(config));
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.tried) {
    return base::failed_precondition(
        "tpu: the device has already started (its PJRT client exists), so it can no longer "
        "become a multi-process client; configure it before the first use of a tpu device "
        "(before any tpu tensor, torch.tpu call or init_process_group)");
  }
  s.multi_process = std::move(config);
  return base::Status::ok_status();
}

bool device_started() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.tried;
}

runtime::MultiProcessSupport chosen_plugin_multi_process_support() {
  State& s = state();
  std::vector<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.tried) return runtime::multi_process_support(runtime::find_known_plugin(s.choice.name));
    dirs = s.search_dirs;
  }
  const char* env = std::getenv("TORCHTPU_PJRT_PLUGIN");
  auto choice = runtime::choose_plugin(env ? env : "", runtime::find_plugins(dirs));
  if (!choice.ok()) return runtime::MultiProcessSupport::kNone;
  return runtime::multi_process_support(runtime::find_known_plugin(choice->name));
}

runtime::PluginChoice plugin_choice() {
  client();
  return state().choice;
}

std::vector<runtime::FoundPlugin> installed_plugins() {
  std::vector<std::string> dirs;
  {
    std::lock_guard<std::mutex> lock(state().mu);
    dirs = state().search_dirs;
  }
  return runtime::find_plugins(dirs);
}

runtime::Client& client() {
  check_not_forked_child();
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

base::StatusOr<DeviceMemory> device_memory(int device) {
  auto info = client().device_memory(device);
  if (info.ok() && info->bytes_limit) {
    int64_t limit = *info->bytes_limit;
    return DeviceMemory{limit, std::max<int64_t>(0, limit - info->bytes_in_use), 0};
  }
  if (client().platform_name() == "cpu") {
    auto host = runtime::host_memory_info();
    if (!host.has_value()) return base::unavailable("the OS did not report host memory");
    return DeviceMemory{host->total_bytes, host->available_bytes, host->swap_bytes};
  }
  return base::unimplemented(
      "the " + client().platform_name() + " plugin reports no memory limit for device " +
      std::to_string(device) + (info.ok() ? std::string() : " (" + info.status().message() + ")"));
}

void check_results_fit(int device, int64_t new_bytes, bool whole, const char* what) {
  // Only a run whose results could not fit pays for the question (the OS's figures).
  constexpr int64_t kAskMemoryAbove = int64_t{1} << 30;
  if (new_bytes <= kAskMemoryAbove) return;
  auto m = device_memory(device);
  if (!m.ok()) return;
  int64_t room = (whole ? m->total_bytes : m->free_bytes) + m->swap_bytes;
  if (new_bytes <= room) return;
  raise_status(base::Status(base::StatusCode::kResourceExhausted,
                            "tpu: " + std::string(what) + " " + std::to_string(new_bytes) +
                                " bytes, more than the device's " +
                                (whole ? "whole" : "free") + " memory (" +
                                std::to_string(whole ? m->total_bytes : m->free_bytes) +
                                " of " +
                                std::to_string(m->total_bytes) + " bytes" +
                                (m->swap_bytes > 0 ? ", and " + std::to_string(m->swap_bytes) +
                                                         " bytes of swap"
                                                   : std::string()) +
                                ")"),
               device);
}

bool platform_holds(base::DType t) {
  return t != base::DType::kC128 || client().platform_name() != "tpu";
}

bool in_forked_child() { return g_forked_child.load(); }

int device_count_or_zero() {
  State& s = state();
  // The client was made before the fork (and is never replaced); its mutex may have been
  // held by a thread fork did not copy.
  if (g_forked_child.load()) return s.client ? s.client->num_devices() : 0;
  ensure_initialized(s);
  return s.client ? s.client->num_devices() : 0;
}

}  // namespace torchtpu::aten
