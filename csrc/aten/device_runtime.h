// The process-wide PJRT client behind the `tpu` device, created on first use.
//
// Plugin: TORCHTPU_PJRT_PLUGIN if set, else the default path the Python package passes in
// (the XLA CPU plugin from the xla-cpu-pjrt wheel). Device count on the CPU plugin:
// TORCHTPU_NUM_DEVICES (default 1).
// Thread safety: client() and compile_cache() may be called from any thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/client.h"
#include "runtime/compile_cache.h"

namespace torchtpu::aten {

// Sets the plugin used when TORCHTPU_PJRT_PLUGIN is unset. Must precede first use.
void set_default_plugin_path(const std::string& path);

// The client; raises a c10::Error with the runtime's message if it cannot be created.
runtime::Client& client();
runtime::CompileCache& compile_cache();
// Custom-call targets of host kernels (csrc/kernels) the plugin registered: all of them on
// the CPU platform when its plugin has the PJRT FFI extension, none elsewhere.
std::vector<std::string> registered_host_kernels();
// Device count without raising: 0 when the plugin cannot be loaded.
int device_count_or_zero();

}  // namespace torchtpu::aten
