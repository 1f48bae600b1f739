// Decodes one KV event batch payload (msgpack) as vLLM's publishers encode it: the batch a
// positional array [ts, events, data_parallel_rank?] (a map {"ts", "events", ...} is taken
// too), each event a map tagged by "type" (vLLM since it dropped msgspec's array_like from
// the event structs, and torchtpu) or a positional array whose first element is the tag
// (older vLLM). Unknown fields and event types are ignored; wrong types, truncated data or
// oversized containers are an error naming what was wrong, never a crash.
#pragma once

#include <string_view>
#include <vector>

#include "base/status.h"
#include "serve/kv_event.h"

namespace torchtpu::router {

struct DecodedBatch {
  double ts = 0;
  std::vector<serve::KvEvent> events;
  int64_t num_ignored_events = 0;  // unknown types
};

base::StatusOr<DecodedBatch> decode_kv_event_batch(std::string_view payload);

}  // namespace torchtpu::router
