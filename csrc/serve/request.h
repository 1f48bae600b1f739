// Request: one generation request as the scheduler sees it (token ids only, no text).
//
// Lifecycle: WAITING -> RUNNING -> (PREEMPTED -> back in the waiting queue -> RUNNING)* ->
// FINISHED_STOPPED | FINISHED_LENGTH | FINISHED_ABORTED. A preempted request keeps its output
// tokens; on re-admission they are recomputed as part of its prompt ("recompute"
// preemption, as in vLLM), so its page table and computed-token count start again from the
// prefix cache.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "serve/page_allocator.h"
#include "serve/radix_cache.h"

namespace torchtpu::serve {

enum class RequestStatus {
  kWaiting,
  kRunning,
  kPreempted,  // in the waiting queue again, at its front
  kFinishedStopped,
  kFinishedLength,
  kFinishedAborted,
};

const char* request_status_name(RequestStatus status);
// The reason string of a finished status: "stop", "length" or "abort" ("" otherwise).
const char* finish_reason(RequestStatus status);
bool is_finished(RequestStatus status);

struct Request {
  std::string id;
  std::vector<TokenId> prompt_token_ids;
  std::vector<TokenId> output_token_ids;
  int32_t max_new_tokens = 0;
  std::vector<TokenId> stop_token_ids;
  // When set, stop tokens do not finish the request: only max_new_tokens (or a finish from
  // outside) does. Benchmarks use it to get a fixed output length.
  bool ignore_eos = false;
  // Speculative decoding for this request (when the scheduler has it configured).
  bool speculative = true;
  // Drafted tokens of the step being planned (past the last known token); cleared when the
  // step is applied or the request leaves the running set.
  std::vector<TokenId> draft_token_ids;

  RequestStatus status = RequestStatus::kWaiting;
  // Order of arrival; also tells this request from a later one that reuses its id.
  uint64_t arrival = 0;
  // Tokens whose KV is in the pages (confirmed by update(); a scheduled step counts once the
  // runner has run it).
  int32_t num_computed_tokens = 0;
  // Tokens the prefix cache supplied at the last admission.
  int32_t num_cached_tokens = 0;
  int32_t num_preemptions = 0;
  // Prefill priority (see scheduler.h): the scheduler's token clock at arrival plus the
  // tokens the request would then have computed itself, or fewer once the prefix cache
  // supplies more of its prompt while it waits. Kept across preemption.
  int64_t deadline = 0;
  // Timeline, in scheduler steps (schedule() calls, the first is 0): queued, every step that
  // gave it prompt tokens (step, tokens; decodes are not listed), first token sampled (-1
  // until then). The token clock at arrival and at the first token says how much work, of
  // all requests, its wait spanned.
  int64_t queued_step = 0;
  std::vector<std::pair<int64_t, int32_t>> prefill_chunks;
  int64_t first_token_step = -1;
  int64_t queued_clock = 0;
  int64_t first_token_clock = -1;
  // page_table[i] holds the KV of tokens [i * page_size, (i + 1) * page_size).
  std::vector<PageId> page_table;

  int32_t num_prompt_tokens() const { return static_cast<int32_t>(prompt_token_ids.size()); }
  int32_t num_output_tokens() const { return static_cast<int32_t>(output_token_ids.size()); }
  int32_t num_tokens() const { return num_prompt_tokens() + num_output_tokens(); }
  TokenId token_at(int32_t pos) const {
    return pos < num_prompt_tokens() ? prompt_token_ids[pos]
                                     : output_token_ids[pos - num_prompt_tokens()];
  }
  // Prompt followed by output: what a recompute after preemption must cover.
  std::vector<TokenId> all_token_ids() const;
  bool finished() const { return is_finished(status); }
  // Appends a sampled token and says whether it ends the request (and sets the status).
  bool append_and_check_stop(TokenId token);
};

}  // namespace torchtpu::serve
