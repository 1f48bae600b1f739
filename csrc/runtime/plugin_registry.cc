#include "runtime/plugin_registry.h"

#include <sys/stat.h>

namespace torchtpu::runtime {
namespace {

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string installed_names(const std::vector<FoundPlugin>& found) {
  if (found.empty()) return "none";
  std::string out;
  for (const FoundPlugin& f : found) out += (out.empty() ? "" : ", ") + f.known->name;
  return out;
}

std::string known_names() {
  std::string out;
  for (const KnownPlugin& k : known_plugins()) out += (out.empty() ? "" : ", ") + k.name;
  return out;
}

}  // namespace

const std::vector<KnownPlugin>& known_plugins() {
  // The order of the defaults is the measured preference (docs/architecture.md, "PJRT
  // plugins"); the accelerators are chosen only by name.
  static const std::vector<KnownPlugin>* plugins = new std::vector<KnownPlugin>{
      {"lammps-jax-pjrt-cpu", "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so", "cpu", true,
       "OpenXLA's CPU plugin built by the lammps-jax project from XLA commit 91888df6 "
       "(jaxlib 0.11.2's XLA), Apache-2.0",
       /*takes_asynchronous=*/true},
      {"xla-cpu-pjrt", "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so", "cpu", true,
       "OpenXLA's CPU plugin as published by The OpenXLA Authors (release 0.0.1; "
       "PJRT C API 0.81, StableHLO 1.13.3)"},
      {"jax-cuda12-pjrt", "jax_plugins/xla_cuda12/xla_cuda_plugin.so", "cuda", false,
       "JAX's CUDA 12 plugin, published by the JAX team with each jaxlib"},
      {"jax-cuda13-pjrt", "jax_plugins/xla_cuda13/xla_cuda_plugin.so", "cuda", false,
       "JAX's CUDA 13 plugin, published by the JAX team with each jaxlib"},
      {"libtpu", "libtpu/libtpu.so", "tpu", false, "Google's Cloud TPU runtime"},
  };
  return *plugins;
}

const KnownPlugin* find_known_plugin(const std::string& name) {
  for (const KnownPlugin& k : known_plugins()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

std::vector<FoundPlugin> find_plugins(const std::vector<std::string>& search_dirs) {
  std::vector<FoundPlugin> found;
  for (const KnownPlugin& k : known_plugins()) {
    for (const std::string& dir : search_dirs) {
      if (dir.empty()) continue;
      std::string path = dir + (dir.back() == '/' ? "" : "/") + k.relative_path;
      if (is_regular_file(path)) {
        found.push_back(FoundPlugin{&k, path});
        break;
      }
    }
  }
  return found;
}

MultiProcessSupport multi_process_support(const KnownPlugin* plugin) {
  if (plugin == nullptr) return MultiProcessSupport::kNone;
  if (plugin->platform == "cuda" || plugin->platform == "rocm") {
    return MultiProcessSupport::kStoreAndNodeOptions;
  }
  if (plugin->platform == "tpu") return MultiProcessSupport::kStore;
  return MultiProcessSupport::kNone;
}

const char* multi_process_support_name(MultiProcessSupport support) {
  switch (support) {
    case MultiProcessSupport::kNone: return "none";
    case MultiProcessSupport::kStore: return "store";
    case MultiProcessSupport::kStoreAndNodeOptions: return "store_and_node_options";
  }
  return "none";
}

base::StatusOr<PluginChoice> choose_plugin(const std::string& env,
                                           const std::vector<FoundPlugin>& found) {
  if (!env.empty()) {
    if (const KnownPlugin* k = find_known_plugin(env)) {
      for (const FoundPlugin& f : found) {
        if (f.known == k) return PluginChoice{k->name, f.path, "TORCHTPU_PJRT_PLUGIN=" + env};
      }
      return base::not_found("runtime: TORCHTPU_PJRT_PLUGIN=" + env + " names a plugin that " +
                             "is not installed (looked for " + k->relative_path +
                             " on the Python path; installed: " + installed_names(found) +
                             "); " +
                             (k->is_default ? std::string("scripts/setup.sh installs it")
                                            : "pip install " + k->name));
    }
    // Not a known name: a path. A known plugin's file keeps its name in reports.
    for (const FoundPlugin& f : found) {
      if (f.path == env) return PluginChoice{f.known->name, f.path, "TORCHTPU_PJRT_PLUGIN path"};
    }
    return PluginChoice{"", env, "TORCHTPU_PJRT_PLUGIN path"};
  }
  for (const FoundPlugin& f : found) {
    if (f.known->is_default) return PluginChoice{f.known->name, f.path, "default"};
  }
  return base::failed_precondition(
      "runtime: no PJRT plugin found: none of the default plugins is installed (installed: " +
      installed_names(found) + "); run scripts/setup.sh (it installs the default " +
      known_plugins().front().name + "), or set TORCHTPU_PJRT_PLUGIN to a plugin's name (" +
      known_names() + ") or to the path of a PJRT plugin .so");
}

}  // namespace torchtpu::runtime
