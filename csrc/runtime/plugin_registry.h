// The PJRT plugins torchtpu knows, where each is found, and which one a process uses.
//
// Each known plugin is a Python distribution on the package registry that ships a PJRT
// plugin library at a fixed place inside its package (relative to a site-packages
// directory). find_plugins() looks for every known plugin in the directories it is given
// (Python passes its import path); choose_plugin() applies the selection rule:
//
//   1. TORCHTPU_PJRT_PLUGIN set to a known plugin's name (e.g. `jax-cuda12-pjrt`): that
//      plugin, which must be installed;
//   2. TORCHTPU_PJRT_PLUGIN set to anything else: a path to a plugin library, used as is;
//   3. unset: the first installed plugin among the defaults (the XLA CPU builds), in the
//      order of known_plugins() — the first is the project's measured default.
//
// Nothing here depends on what a plugin is called for its behaviour: what differs between
// plugin builds (API version, StableHLO version, FFI extension) is read from the loaded
// plugin itself (runtime::Plugin). The registry only decides which file to load.
// Thread safety: pure functions over immutable data.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace torchtpu::runtime {

struct KnownPlugin {
  std::string name;           // the distribution on PyPI, also the TORCHTPU_PJRT_PLUGIN name
  std::string relative_path;  // the library, relative to a site-packages directory
  std::string platform;       // what it runs on: "cpu", "cuda", "tpu"
  bool is_default = false;    // chosen without TORCHTPU_PJRT_PLUGIN when installed
  std::string provenance;     // who builds it, from which XLA
  // Whether it acts on the create option `asynchronous` (ClientOptions::cpu_asynchronous):
  // xla-cpu-pjrt ignores create options it does not know instead of refusing them.
  bool takes_asynchronous = false;
};

// Every known plugin; the default candidates first, in order of preference.
const std::vector<KnownPlugin>& known_plugins();
// The known plugin called `name`, or nullptr.
const KnownPlugin* find_known_plugin(const std::string& name);

struct FoundPlugin {
  const KnownPlugin* known = nullptr;
  std::string path;  // the library file that exists
};

// The known plugins present under `search_dirs` (the first directory holding one wins),
// in known_plugins() order.
std::vector<FoundPlugin> find_plugins(const std::vector<std::string>& search_dirs);

struct PluginChoice {
  std::string name;  // the known plugin's name, or "" for a path from TORCHTPU_PJRT_PLUGIN
  std::string path;
  std::string how;   // how it was chosen, for reports
};

// What a plugin needs to form one client over the devices of several processes (the
// key-value store of runtime/kv_store.h, passed to PJRT_Client_Create as callbacks).
enum class MultiProcessSupport {
  // Single-process only: the XLA CPU plugins, and any plugin given by path (what it takes
  // is unknown, and an unknown option fails its client creation).
  kNone,
  // The store callbacks alone: libtpu, which learns its place in the job from the TPU
  // host's environment, not from create options.
  kStore,
  // The store callbacks and the create options `node_id`, `num_nodes` (int64) and, where
  // the process takes a subset of its local devices, `visible_devices` (int64 list):
  // XLA's GPU plugins (CUDA, ROCm).
  kStoreAndNodeOptions,
};
// The support of a registered plugin, by its platform; kNone for nullptr (a path).
MultiProcessSupport multi_process_support(const KnownPlugin* plugin);
const char* multi_process_support_name(MultiProcessSupport support);

// Applies the selection rule above. `env` is TORCHTPU_PJRT_PLUGIN ("" when unset).
// Errors name what was asked for, what is installed and how to install a plugin.
base::StatusOr<PluginChoice> choose_plugin(const std::string& env,
                                           const std::vector<FoundPlugin>& found);

}  // namespace torchtpu::runtime
