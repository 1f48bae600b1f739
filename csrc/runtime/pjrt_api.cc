#include "runtime/pjrt_api.h"

#include <dlfcn.h>

#include <sstream>

#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {

namespace {
thread_local int64_t t_pjrt_calls = 0;
}  // namespace

int64_t pjrt_calls_on_this_thread() { return t_pjrt_calls; }

base::Status consume_error(const PJRT_Api* api, PJRT_Error* error, const char* what) {
  ++t_pjrt_calls;
  if (error == nullptr) return base::Status();
  PJRT_Error_Message_Args msg{};
  msg.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  msg.error = error;
  api->PJRT_Error_Message(&msg);
  std::string text(msg.message, msg.message_size);

  PJRT_Error_GetCode_Args code_args{};
  code_args.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code_args.error = error;
  base::StatusCode code = base::StatusCode::kInternal;
  if (api->PJRT_Error_GetCode(&code_args) == nullptr) {
    switch (code_args.code) {
      case PJRT_Error_Code_INVALID_ARGUMENT: code = base::StatusCode::kInvalidArgument; break;
      case PJRT_Error_Code_NOT_FOUND: code = base::StatusCode::kNotFound; break;
      case PJRT_Error_Code_UNIMPLEMENTED: code = base::StatusCode::kUnimplemented; break;
      case PJRT_Error_Code_FAILED_PRECONDITION:
        code = base::StatusCode::kFailedPrecondition;
        break;
      case PJRT_Error_Code_OUT_OF_RANGE: code = base::StatusCode::kOutOfRange; break;
      case PJRT_Error_Code_UNAVAILABLE: code = base::StatusCode::kUnavailable; break;
      case PJRT_Error_Code_DEADLINE_EXCEEDED:
        code = base::StatusCode::kDeadlineExceeded;
        break;
      case PJRT_Error_Code_RESOURCE_EXHAUSTED:
        code = base::StatusCode::kResourceExhausted;
        break;
      default: break;
    }
  }
  PJRT_Error_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  destroy.error = error;
  api->PJRT_Error_Destroy(&destroy);
  return base::Status(code, std::string("runtime: ") + what + " failed: " + text);
}

namespace {

std::string named_value_to_string(const PJRT_NamedValue& v) {
  switch (v.type) {
    case PJRT_NamedValue_kString: return std::string(v.string_value, v.value_size);
    case PJRT_NamedValue_kInt64: return std::to_string(v.int64_value);
    case PJRT_NamedValue_kFloat: return std::to_string(v.float_value);
    case PJRT_NamedValue_kBool: return v.bool_value ? "true" : "false";
    case PJRT_NamedValue_kInt64List: {
      std::ostringstream os;
      for (size_t i = 0; i < v.value_size; ++i) os << (i ? "." : "") << v.int64_array_value[i];
      return os.str();
    }
  }
  return "?";
}

// The FFI extension (openxla/xla `xla/pjrt/c/pjrt_c_api_ffi_extension.h`, version 2+):
// the wheel's pjrt_c_api.h does not include it, so these are our declarations of the
// part we call, layout-exact.
struct FfiRegisterHandlerArgs {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
};
static_assert(offsetof(FfiRegisterHandlerArgs, traits) == 48);

struct FfiExtension {
  PJRT_Extension_Base base;
  void* type_id_register;
  void* user_data_add;
  PJRT_Error* (*register_handler)(FfiRegisterHandlerArgs* args);
};
static_assert(offsetof(FfiExtension, register_handler) == 40);

}  // namespace

base::StatusOr<std::shared_ptr<const Plugin>> Plugin::load(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return base::not_found("runtime: cannot load PJRT plugin '" + path + "': " +
                           (why ? why : "unknown dlopen error") +
                           "; set TORCHTPU_PJRT_PLUGIN to a PJRT plugin .so or a known "
                           "plugin's name (torchtpu.debug.plugins() lists them)");
  }
  using GetApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    return base::not_found("runtime: '" + path + "' is not a PJRT plugin: it exports no GetPjrtApi");
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) return base::internal_error("runtime: GetPjrtApi returned null in " + path);

  auto plugin = std::shared_ptr<Plugin>(new Plugin());
  plugin->api_ = api;
  plugin->path_ = path;
  plugin->api_major_ = api->pjrt_api_version.major_version;
  plugin->api_minor_ = api->pjrt_api_version.minor_version;
  if (plugin->api_major_ != PJRT_API_MAJOR) {
    return base::failed_precondition(
        "runtime: PJRT plugin " + path + " speaks C API major version " +
        std::to_string(plugin->api_major_) + " (expected " + std::to_string(PJRT_API_MAJOR) +
        "); use a plugin built against PJRT C API " + std::to_string(PJRT_API_MAJOR) + ".x");
  }
  // Calls into slots past the plugin's struct size would read garbage: the plugin must
  // provide at least every slot this build uses (all of them are older than 0.60).
  if (api->struct_size < offsetof(PJRT_Api, PJRT_Executable_DeserializeAndLoad) + sizeof(void*)) {
    return base::failed_precondition("runtime: PJRT plugin " + path +
                                     " is too old (its PJRT_Api struct is " +
                                     std::to_string(api->struct_size) + " bytes)");
  }

  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  TORCHTPU_RETURN_IF_ERROR(consume_error(api, api->PJRT_Plugin_Initialize(&init),
                                         "PJRT_Plugin_Initialize"));

  PJRT_Plugin_Attributes_Args attrs{};
  attrs.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  TORCHTPU_RETURN_IF_ERROR(consume_error(api, api->PJRT_Plugin_Attributes(&attrs),
                                         "PJRT_Plugin_Attributes"));
  for (size_t i = 0; i < attrs.num_attributes; ++i) {
    const PJRT_NamedValue& v = attrs.attributes[i];
    plugin->attributes_[std::string(v.name, v.name_size)] = named_value_to_string(v);
  }
  return std::shared_ptr<const Plugin>(plugin);
}

std::string Plugin::identity() const {
  std::string id = path_ + "|api=" + std::to_string(api_major_) + "." + std::to_string(api_minor_);
  for (const char* key : {"xla_version", "stablehlo_current_version"}) {
    auto it = attributes_.find(key);
    if (it != attributes_.end()) id += std::string("|") + key + "=" + it->second;
  }
  return id;
}

namespace {

// The plugin's FFI extension with a register_handler slot, or nullptr.
const FfiExtension* ffi_extension(const PJRT_Api* api) {
  for (const PJRT_Extension_Base* e = api->extension_start; e != nullptr; e = e->next) {
    if (e->type != PJRT_Extension_Type_FFI) continue;
    if (e->struct_size < sizeof(FfiExtension)) return nullptr;  // one without handlers
    return reinterpret_cast<const FfiExtension*>(e);
  }
  return nullptr;
}

}  // namespace

bool Plugin::has_ffi_extension() const { return ffi_extension(api_) != nullptr; }

base::Status Plugin::register_ffi_handler(const std::string& target,
                                          const std::string& platform, void* handler) const {
  const FfiExtension* ffi = ffi_extension(api_);
  if (ffi == nullptr) {
    return base::unimplemented("runtime: PJRT plugin " + path_ +
                               " cannot register custom-call handlers (it has no PJRT FFI "
                               "extension with register_handler)");
  }
  FfiRegisterHandlerArgs args{};
  args.struct_size = sizeof(args);
  args.target_name = target.data();
  args.target_name_size = target.size();
  args.handler = handler;
  args.platform_name = platform.data();
  args.platform_name_size = platform.size();
  return consume_error(api_, ffi->register_handler(&args),
                       ("PJRT_FFI_Register_Handler(" + target + ")").c_str());
}

}  // namespace torchtpu::runtime
