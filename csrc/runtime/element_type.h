// Mapping between base::DType and PJRT_Buffer_Type (runtime-internal).
#pragma once

#include "base/dtype.h"
#include "base/status.h"
#include "runtime/pjrt_c.h"

namespace torchtpu::runtime {

PJRT_Buffer_Type to_pjrt_type(base::DType t);
base::StatusOr<base::DType> from_pjrt_type(PJRT_Buffer_Type t);

}  // namespace torchtpu::runtime
