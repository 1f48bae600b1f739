// The one place that includes the PJRT C API header. The header comes from the
// `xla-cpu-pjrt` wheel at build time (never committed); this wrapper keeps the include
// private to the runtime library.
#pragma once

#include <cstddef>

#include "pjrt_c_api.h"  // IWYU pragma: export
