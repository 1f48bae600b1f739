// The host kernels this build provides: typed XLA FFI handlers that the XLA CPU plugin runs
// as custom calls. A lowering may emit one only when the running plugin registered it
// (aten/device_runtime registers them for the "cpu" platform; other platforms get the
// StableHLO formulation instead).
#pragma once

#include <vector>

#include "kernels/xla_ffi.h"

namespace torchtpu::kernels {

struct HostKernel {
  const char* target;        // the custom call's call_target_name
  XLA_FFI_Handler* handler;  // typed FFI (custom call api_version 4)
};

const std::vector<HostKernel>& host_kernels();

}  // namespace torchtpu::kernels
