// SchedulerConfig: the sizes the serving engine core is built with.
#pragma once

#include <cstdint>

#include "base/status.h"

namespace torchtpu::serve {

struct SchedulerConfig {
  int32_t num_pages = 256;                // KV pool size, in pages
  int32_t page_size = 16;                 // tokens per page
  int32_t max_num_seqs = 16;              // running requests at most
  int32_t max_num_batched_tokens = 512;   // token budget of one step (prefill + decode)
  int32_t max_model_len = 2048;           // prompt + output tokens of one request at most
  bool enable_prefix_cache = true;

  // OK when every size is positive; otherwise names the first bad field.
  base::Status validate() const;
};

}  // namespace torchtpu::serve
