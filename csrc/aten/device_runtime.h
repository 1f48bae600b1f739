// The process-wide PJRT client behind the `tpu` device, created on first use.
//
// Plugin: chosen by the plugin registry (runtime/plugin_registry.h) among the plugins
// installed under the search path the Python package passes in (its import path):
// TORCHTPU_PJRT_PLUGIN (a known plugin's name or a path) if set, else the default XLA CPU
// plugin. Device count on the CPU plugin: TORCHTPU_NUM_DEVICES (default 1).
// Thread safety: client() and compile_cache() may be called from any thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/client.h"
#include "runtime/compile_cache.h"
#include "runtime/kv_store.h"
#include "runtime/plugin_registry.h"

namespace torchtpu::aten {

// Sets the directories installed plugins are looked for in. Must precede first use.
void set_plugin_search_path(const std::vector<std::string>& dirs);
// Which plugin runs and how it was chosen; raises like client() when none could be loaded.
runtime::PluginChoice plugin_choice();
// The known plugins installed under the search path; loads none.
std::vector<runtime::FoundPlugin> installed_plugins();

// The client; raises a c10::Error with the runtime's message if it cannot be created.
runtime::Client& client();
runtime::CompileCache& compile_cache();
// Custom-call targets of host kernels (csrc/kernels) the plugin registered: all of them on
// the CPU platform when its plugin has the PJRT FFI extension, none elsewhere.
std::vector<std::string> registered_host_kernels();
// Whether the plugin's platform holds element type `t`: TPUs have no complex128.
bool platform_holds(base::DType t);
// Device count without raising: 0 when the plugin cannot be loaded.
int device_count_or_zero();

// A device's memory: the plugin's figures where it reports a limit (accelerators), else the
// host's where device memory is host memory (the CPU plugin; swap beside it). An error
// saying why when neither is known (an accelerator plugin that reports no limit).
struct DeviceMemory {
  int64_t total_bytes = 0;
  int64_t free_bytes = 0;
  int64_t swap_bytes = 0;  // host swap behind a CPU plugin's device memory; 0 elsewhere
};
base::StatusOr<DeviceMemory> device_memory(int device);
// Raises out-of-memory (torch.OutOfMemoryError) when a program about to run on `device`
// makes `new_bytes` of results (or a new storage takes them: the allocator asks too) that
// exceed the device's free memory, swap included on a
// CPU plugin (a run that fits by swapping still runs): there the plugin would write every
// byte and the OS's out-of-memory killer end the process. Asks only past 1 GiB. `whole`:
// against its whole memory instead, a figure that does not change, for a program the ranks
// of a group run together (each checks before they meet; they must all agree). `what`
// names the bytes in the error ("a program's results take", "a new storage takes").
void check_results_fit(int device, int64_t new_bytes, bool whole = false,
                       const char* what = "a program's results take");
// Whether this process is the child of a fork() made after the client started; client()
// raises there (the plugin's threads were not copied).
bool in_forked_child();
// Raises that error in such a child: a read of a buffer the parent made (a tensor's value
// to the host) would wait forever for the plugin's threads.
void check_not_forked_child();

// Makes the client, when it starts, one over the devices of several processes
// (runtime/kv_store.h) if its plugin takes a key-value store; a plugin that does not (the
// CPU plugins) starts as usual. FailedPrecondition once the device has started.
base::Status set_multi_process_config(runtime::MultiProcessConfig config);
// Whether the client has been started (or its start attempted).
bool device_started();
// What the plugin that would run (or runs) takes to form a multi-process client; loads none.
runtime::MultiProcessSupport chosen_plugin_multi_process_support();

}  // namespace torchtpu::aten
