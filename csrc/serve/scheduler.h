// Scheduler: continuous batching over a paged KV cache (the shape of vLLM v1's scheduler).
//
// One step is schedule() -> the runner computes the scheduled tokens -> update(sampled).
// Each schedule() spends one token budget (max_num_batched_tokens) and admits at most
// max_num_seqs running requests:
//   1. decodes first (running requests with one token to compute), oldest admission first;
//      with speculative decoding (num_speculative_tokens > 0), a decode of a request that
//      opted in also carries up to that many drafted tokens (serve/ngram_proposer.h), never
//      more than could be kept (max_new_tokens) or than the budget has left;
//   2. then prefill work (the next chunk of each running request still prefilling, and
//      waiting requests, whose work is what the prefix cache does not supply: whole pages,
//      at least the last token is always recomputed so there is a position to sample from),
//      earliest deadline first. Each gets what is left of the budget, up to its whole
//      remainder (chunked prefill).
//
// Deadlines are on a token clock: the tokens scheduled so far, all requests together. A
// request's deadline is the clock at its arrival plus the tokens it would then compute
// itself, lowered while it waits as the prefix cache comes to supply more of its prompt
// (another request computed a prefix they share: it then goes ahead of cold prompts that
// arrived with it); it keeps it across preemption. So a short (or mostly cached) prompt
// goes ahead of a long one, but only while it arrived within the long one's own work of
// it: ties go to the earlier arrival.
//   Starvation bound: only work due no later than a request's deadline goes ahead of its
//   prefill (decodes aside), so nothing that arrives once the clock has passed its deadline
//   does (a deadline never goes below the clock at arrival). In tokens: until its first token, the clock advances by at most its own work at
//   arrival, plus what the requests present when the clock passes its deadline (or
//   admitted beside it while it waits for a shared prefix) still have to compute, each at
//   most max_model_len, plus one step's budget; pages and max_num_seqs permitting. In steps:
//   while it waits every step fills the budget except those where nothing else is left to
//   schedule, so that many tokens over max_num_batched_tokens bounds its steps.
//   Shared prefixes: a waiting request that shares its prompt's pages with a running
//   request still prefilling them, for at least half of what it would compute itself,
//   stays queued until those pages are cached (concurrent requests with one long system
//   prompt compute it once, not once each, as SGLang's in-batch prefix caching does), and
//   lends that request its deadline: the shared pages are computed no later than its own
//   turn would have computed them, so waiting for a prefix never takes longer than
//   computing it itself would, up to the one step it takes for the pages to be cached.
// Pages are allocated for exactly the tokens scheduled. When a running request needs a page
// and none is free, the prefix cache evicts first; then the most recently admitted running
// request is preempted (its pages are dropped and it goes back to the front of the queue,
// to be recomputed, outputs included). Nothing is admitted in a step that preempted.
//
// Progress: add_request rejects a request that could never fit (prompt + max_new_tokens
// over max_model_len, or more pages than the whole pool), so a request running alone always
// gets its pages, and every step while anything is unfinished schedules at least one token.
//
// Errors are Status (kInvalidArgument for bad input, kNotFound for unknown ids,
// kFailedPrecondition for calls out of order). Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "serve/page_allocator.h"
#include "serve/radix_cache.h"
#include "serve/request.h"
#include "serve/scheduler_config.h"

namespace torchtpu::serve {

struct ScheduledItem {
  std::string request_id;
  std::vector<TokenId> token_ids;  // tokens to compute this step (drafted ones last)
  int32_t start_pos = 0;           // position of token_ids[0] (= tokens already computed)
  std::vector<PageId> page_ids;    // the request's whole page table after allocation
  bool sample = false;             // this step reaches the last known token: sample one
  int32_t num_output_tokens = 0;   // output tokens so far
  // The last num_draft_tokens of token_ids are drafts (speculative decoding): the caller
  // samples at the last known token and at every draft, accepts a prefix of the drafts
  // and adds one token after them (update()).
  int32_t num_draft_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledItem> items;    // batch order
  std::vector<std::string> preempted;  // ids preempted during this schedule() call
  int32_t num_scheduled_tokens = 0;
};

// (request id, finish reason "stop" | "length")
using FinishedRequest = std::pair<std::string, std::string>;

class Scheduler {
 public:
  static base::StatusOr<std::unique_ptr<Scheduler>> create(const SchedulerConfig& config);

  // Queues a request. kInvalidArgument, saying why, when it can never run.
  // `speculative` opts the request into speculative decoding (when configured).
  base::Status add_request(const std::string& id, std::vector<TokenId> prompt_token_ids,
                           int32_t max_new_tokens, std::vector<TokenId> stop_token_ids,
                           bool ignore_eos, bool speculative = true);
  // Finishes an unfinished request as aborted; false if unknown or already finished.
  bool abort(const std::string& id);
  // Finishes an unfinished request from outside (a stop string seen by the caller) with
  // kFinishedStopped, kFinishedLength or kFinishedAborted; false if unknown or finished.
  bool finish(const std::string& id, RequestStatus status);

  // Plans one step. kFailedPrecondition if the previous step was not update()d.
  base::StatusOr<SchedulerOutput> schedule();
  // Applies the step planned by the last schedule(): every item counts as computed, and
  // `sampled` must hold the new tokens of each item with sample=true (items of requests
  // aborted since are skipped): one token, or for an item with d drafts, the a <= d drafts
  // the caller accepted (they must equal the first a drafts) and one token after them. The
  // tokens are appended in order until one stops the request (the rest are dropped); the
  // KV of rejected drafts is dropped and pages that held only rejected drafts are freed.
  // Returns the requests that finished, in batch order.
  base::StatusOr<std::vector<FinishedRequest>> update_tokens(
      const std::unordered_map<std::string, std::vector<TokenId>>& sampled);
  // update_tokens() with one token per sampled item (no drafts accepted).
  base::StatusOr<std::vector<FinishedRequest>> update(
      const std::unordered_map<std::string, TokenId>& sampled);

  bool has_unfinished() const { return !running_.empty() || !waiting_.empty(); }
  // A request known to the scheduler (finished ones stay until release()), or nullptr.
  const Request* find(const std::string& id) const;
  // Forgets a finished request's record; false if unknown or not finished.
  bool release(const std::string& id);

  const SchedulerConfig& config() const { return config_; }
  int32_t num_free_pages() const { return allocator_.num_free_pages(); }
  int32_t num_total_pages() const { return allocator_.num_total_pages(); }
  int32_t num_cached_pages() const { return cache_ ? cache_->num_cached_pages() : 0; }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  // Fraction of pages held by requests (cached pages that eviction could free count as
  // unused, as in vLLM's kv-cache usage).
  double kv_cache_usage() const;
  // In tokens, like vLLM's prefix_cache_queries / prefix_cache_hits: every admission queries
  // its whole token count and hits what the cache supplied.
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Tokens scheduled so far (prefill and decode, all requests): the clock deadlines use.
  int64_t token_clock() const { return clock_; }
  // schedule() calls so far.
  int64_t num_steps() const { return num_steps_; }
  // Drops every cached page no request uses; returns how many were freed.
  int32_t reset_prefix_cache() { return cache_ ? cache_->reset() : 0; }

  // KV events (kv_event.h): from this call on, the prefix cache's stores and evictions are
  // recorded, after one AllBlocksCleared (so a subscriber drops what it knew of an earlier
  // run of this replica). take_kv_events() hands over what was recorded since the last call,
  // in order. Nothing is recorded without the prefix cache or before this call.
  void enable_kv_events();
  std::vector<KvEvent> take_kv_events();

  const PageAllocator& allocator() const { return allocator_; }

 private:
  explicit Scheduler(const SchedulerConfig& config);

  struct PendingItem {
    std::string request_id;
    uint64_t arrival = 0;  // tells a request from a later one that reuses its id
    int32_t num_tokens = 0;
    bool sample = false;
    std::vector<TokenId> drafts;
  };

  Request* live(const std::string& id, uint64_t arrival);
  // Grows the page table to cover `num_tokens` tokens, evicting cached pages if needed.
  bool grow_page_table(Request* req, int32_t num_tokens);
  // Caches the request's computed full pages, then drops its references.
  void release_pages(Request* req);
  void preempt(Request* req);
  // Drafts for `req`'s next decode, at most `room` (empty when speculation is off for it).
  std::vector<TokenId> propose_drafts(const Request& req, int32_t room) const;
  // Frees the pages past what `req`'s known tokens need (those of rejected drafts).
  void trim_pages(Request* req);
  // Schedules `num_new` tokens of running `req`, preempting the newest running requests
  // while pages are short; false if `req` itself had to go.
  bool schedule_running(Request* req, int32_t num_new, SchedulerOutput& out, int32_t& budget);
  enum class Admission { kAdmitted, kDeferred, kNoPages };
  // Admits waiting `req` with what the prefix cache supplies, unless it should wait for a
  // running request's prefill (kDeferred) or its pages do not fit (kNoPages).
  Admission admit(Request* req, SchedulerOutput& out, int32_t& budget);
  void add_item(const Request& req, int32_t num_new, SchedulerOutput& out, int32_t& budget);
  // Takes a request's item (if any) out of the step being planned.
  void unschedule(const std::string& id, SchedulerOutput& out, int32_t& budget);
  // The running request whose prefill `req` (whose cache hit is `cached_tokens`) should
  // wait for, or nullptr.
  const Request* prefill_to_wait_for(const Request& req, int32_t cached_tokens) const;
  void finish_request(Request* req, RequestStatus status);
  ScheduledItem make_item(const Request& req, int32_t num_new_tokens) const;

  SchedulerConfig config_;
  std::vector<KvEvent> kv_events_;  // the cache's sink once enable_kv_events() ran (outlives it)
  PageAllocator allocator_;            // declared before cache_: the cache returns its
  std::unique_ptr<RadixCache> cache_;  // references on destruction; null when disabled
  std::unordered_map<std::string, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // admission order
  std::vector<PendingItem> pending_;
  uint64_t next_arrival_ = 0;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t clock_ = 0;
  int64_t num_steps_ = 0;
};

}  // namespace torchtpu::serve
