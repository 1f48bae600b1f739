#include "serve/scheduler_config.h"

#include <string>

namespace torchtpu::serve {

base::Status SchedulerConfig::validate() const {
  struct Field {
    const char* name;
    int32_t value;
  };
  const Field fields[] = {{"num_pages", num_pages},
                          {"page_size", page_size},
                          {"max_num_seqs", max_num_seqs},
                          {"max_num_batched_tokens", max_num_batched_tokens},
                          {"max_model_len", max_model_len}};
  for (const Field& f : fields) {
    if (f.value <= 0) {
      return base::invalid_argument(std::string("serve: scheduler config: ") + f.name +
                                    " must be positive (got " + std::to_string(f.value) + ")");
    }
  }
  auto bad = [](const std::string& what) {
    return base::invalid_argument("serve: scheduler config: " + what);
  };
  if (num_speculative_tokens < 0) {  // the step's budget caps drafts too
    return bad("num_speculative_tokens must be >= 0 (got " +
               std::to_string(num_speculative_tokens) + ")");
  }
  if (num_speculative_tokens > 0 &&
      (prompt_lookup_min < 1 || prompt_lookup_max < prompt_lookup_min)) {
    return bad("prompt_lookup_min and prompt_lookup_max must satisfy 1 <= min <= max (got " +
               std::to_string(prompt_lookup_min) + ", " + std::to_string(prompt_lookup_max) +
               ")");
  }
  return base::Status::ok_status();
}

}  // namespace torchtpu::serve
