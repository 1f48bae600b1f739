// The subset of XLA's FFI C API (openxla/xla `xla/ffi/api/c_api.h`) that host kernels use.
//
// No registry package we depend on ships that header (jaxlib does, but it is a benchmark-only
// dependency), so these are our own declarations, written from the public header and kept
// layout-exact: a kernel compiled against them is called by the XLA build inside the PJRT
// plugin. Only structs the handlers read are declared in full; the static_asserts pin
// every offset we rely on. The API is versioned (major 0); a handler reports the version
// it was written against when XLA asks for its metadata (see kernels/ffi_handler.h).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

struct XLA_FFI_Api;
struct XLA_FFI_Error;
struct XLA_FFI_ExecutionContext;

enum XLA_FFI_Extension_Type : int { XLA_FFI_Extension_Metadata = 1 };

struct XLA_FFI_Extension_Base {
  size_t struct_size;
  XLA_FFI_Extension_Type type;
  XLA_FFI_Extension_Base* next;
};

struct XLA_FFI_Api_Version {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int major_version;
  int minor_version;
};

enum XLA_FFI_Error_Code : int {
  XLA_FFI_Error_Code_INVALID_ARGUMENT = 3,
  XLA_FFI_Error_Code_INTERNAL = 13,
};

struct XLA_FFI_Error_Create_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const char* message;
  XLA_FFI_Error_Code errc;
};
using XLA_FFI_Error_Create = XLA_FFI_Error*(XLA_FFI_Error_Create_Args*);

enum XLA_FFI_DataType : int {
  XLA_FFI_DataType_S8 = 2,
  XLA_FFI_DataType_S32 = 4,
  XLA_FFI_DataType_S64 = 5,
  XLA_FFI_DataType_F32 = 11,
};

struct XLA_FFI_Buffer {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
};

enum XLA_FFI_ArgType : int { XLA_FFI_ArgType_BUFFER = 1 };
enum XLA_FFI_RetType : int { XLA_FFI_RetType_BUFFER = 1 };
enum XLA_FFI_AttrType : int { XLA_FFI_AttrType_SCALAR = 3 };

struct XLA_FFI_ByteSpan {
  const char* ptr;
  size_t len;
};

struct XLA_FFI_Scalar {
  XLA_FFI_DataType dtype;
  void* value;
};

enum XLA_FFI_ExecutionStage : int { XLA_FFI_ExecutionStage_EXECUTE = 3 };

struct XLA_FFI_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_ArgType* types;
  void** args;
};

struct XLA_FFI_Rets {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_RetType* types;
  void** rets;
};

// Sorted by name.
struct XLA_FFI_Attrs {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  int64_t size;
  XLA_FFI_AttrType* types;
  XLA_FFI_ByteSpan** names;
  void** attrs;
};

struct XLA_FFI_CallFrame {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  const XLA_FFI_Api* api;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_ExecutionStage stage;
  XLA_FFI_Args args;
  XLA_FFI_Rets rets;
  XLA_FFI_Attrs attrs;
};

using XLA_FFI_Handler = XLA_FFI_Error*(XLA_FFI_CallFrame*);

using XLA_FFI_Handler_Traits = uint32_t;

struct XLA_FFI_Metadata {
  size_t struct_size;
  XLA_FFI_Api_Version api_version;
  XLA_FFI_Handler_Traits traits;
};

struct XLA_FFI_Metadata_Extension {
  XLA_FFI_Extension_Base extension_base;
  XLA_FFI_Metadata* metadata;
};

struct XLA_FFI_Error_Destroy_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Error* error;
};
using XLA_FFI_Error_Destroy = void(XLA_FFI_Error_Destroy_Args*);

// A task XLA runs on its CPU thread pool (the one that runs the program's own work).
using XLA_FFI_Task = void(void* data);

struct XLA_FFI_ThreadPool_Schedule_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  XLA_FFI_Task* task;
  void* data;
};
using XLA_FFI_ThreadPool_Schedule = XLA_FFI_Error*(XLA_FFI_ThreadPool_Schedule_Args*);

struct XLA_FFI_ThreadPool_NumThreads_Args {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_ExecutionContext* ctx;
  int64_t* num_threads;
};
using XLA_FFI_ThreadPool_NumThreads = XLA_FFI_Error*(XLA_FFI_ThreadPool_NumThreads_Args*);

// XLA_FFI_Api up to the entry points handlers call; entries in between are opaque. Check
// struct_size before using an entry past error_destroy (older XLA builds lack them).
struct XLA_FFI_Api {
  size_t struct_size;
  XLA_FFI_Extension_Base* extension_start;
  XLA_FFI_Api_Version api_version;
  const void* internal_api;
  XLA_FFI_Error_Create* error_create;
  void* error_get_message;
  XLA_FFI_Error_Destroy* error_destroy;
  void* handler_register;
  void* stream_get;
  void* type_register;
  void* execution_context_get;
  void* state_set;
  void* state_get;
  void* device_memory_allocate;
  void* device_memory_free;
  XLA_FFI_ThreadPool_Schedule* thread_pool_schedule;
  XLA_FFI_ThreadPool_NumThreads* thread_pool_num_threads;
};

}  // extern "C"

static_assert(sizeof(XLA_FFI_Extension_Base) == 24);
static_assert(sizeof(XLA_FFI_Api_Version) == 24);
static_assert(offsetof(XLA_FFI_Error_Create_Args, errc) == 24);
static_assert(offsetof(XLA_FFI_Buffer, dims) == 40);
static_assert(sizeof(XLA_FFI_Args) == 40 && sizeof(XLA_FFI_Rets) == 40);
static_assert(sizeof(XLA_FFI_Attrs) == 48);
static_assert(offsetof(XLA_FFI_CallFrame, stage) == 32);
static_assert(offsetof(XLA_FFI_CallFrame, args) == 40);
static_assert(offsetof(XLA_FFI_CallFrame, rets) == 80);
static_assert(offsetof(XLA_FFI_CallFrame, attrs) == 120);
static_assert(offsetof(XLA_FFI_Metadata, api_version) == 8);
static_assert(offsetof(XLA_FFI_Metadata, traits) == 32);
static_assert(offsetof(XLA_FFI_Api, error_create) == 48);
static_assert(offsetof(XLA_FFI_Api, error_destroy) == 64);
static_assert(offsetof(XLA_FFI_Api, thread_pool_schedule) == 136);
static_assert(offsetof(XLA_FFI_Api, thread_pool_num_threads) == 144);
static_assert(sizeof(XLA_FFI_ThreadPool_Schedule_Args) == 40);
