// Loading a PJRT plugin and turning its errors into Status.
//
// A Plugin is a dlopen'ed PJRT C API implementation (XLA CPU, XLA CUDA, libtpu). It is
// loaded once per process and never unloaded (plugins do not support unloading).
// Thread safety: a loaded Plugin is immutable and may be shared by all threads.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "base/status.h"

struct PJRT_Api;
struct PJRT_Error;

namespace torchtpu::runtime {

class Plugin {
 public:
  // Loads the shared library at `path`, resolves `GetPjrtApi`, checks the API version and
  // initializes the plugin.
  static base::StatusOr<std::shared_ptr<const Plugin>> load(const std::string& path);

  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major() const { return api_major_; }
  int api_minor() const { return api_minor_; }
  // Plugin attributes rendered as strings (`xla_version`, `stablehlo_current_version`...).
  const std::map<std::string, std::string>& attributes() const { return attributes_; }
  // A string that identifies this plugin build, part of every executable cache key.
  std::string identity() const;
  // Whether the plugin has the PJRT FFI extension with handler registration (what host
  // kernels need); read from the plugin's extension chain, not assumed from its build.
  bool has_ffi_extension() const;
  // Registers a typed XLA FFI handler (an `XLA_FFI_Handler*`) as the custom-call target
  // `target` for `platform` (XLA's name: "Host" for CPU) through the plugin's FFI
  // extension. Unimplemented when the plugin has no such extension.
  base::Status register_ffi_handler(const std::string& target, const std::string& platform,
                                    void* handler) const;

 private:
  Plugin() = default;
  const PJRT_Api* api_ = nullptr;
  std::string path_;
  int api_major_ = 0;
  int api_minor_ = 0;
  std::map<std::string, std::string> attributes_;
};

// Converts (and destroys) a PJRT error. Returns OK for nullptr. `what` names the call,
// e.g. "PJRT_Client_Compile", and prefixes the plugin's own message.
base::Status consume_error(const PJRT_Api* api, PJRT_Error* error, const char* what);
// PJRT calls this thread has made (each goes through consume_error): what the dispatch
// budget test counts per eager op.
int64_t pjrt_calls_on_this_thread();

}  // namespace torchtpu::runtime
