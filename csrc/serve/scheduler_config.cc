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
  return base::Status::ok_status();
}

}  // namespace torchtpu::serve
