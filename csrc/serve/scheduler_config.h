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
  // Speculative decoding with n-gram drafts (0: off): each decode step of a request that
  // opted in also computes up to this many drafted tokens, proposed from the longest
  // earlier match of its last prompt_lookup_min..prompt_lookup_max tokens.
  int32_t num_speculative_tokens = 0;
  int32_t prompt_lookup_min = 2;
  int32_t prompt_lookup_max = 4;

  // OK when every size is positive (and the speculative sizes consistent); otherwise names
  // the first bad field.
  base::Status validate() const;
};

}  // namespace torchtpu::serve
