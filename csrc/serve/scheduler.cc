#include "serve/scheduler.h"

#include <algorithm>
#include <unordered_set>

#include "base/check.h"
#include "serve/ngram_proposer.h"

namespace torchtpu::serve {

namespace {

int32_t pages_for(int32_t num_tokens, int32_t page_size) {
  return (num_tokens + page_size - 1) / page_size;
}

}  // namespace

base::StatusOr<std::unique_ptr<Scheduler>> Scheduler::create(const SchedulerConfig& config) {
  TORCHTPU_RETURN_IF_ERROR(config.validate());
  return std::unique_ptr<Scheduler>(new Scheduler(config));
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), allocator_(config.num_pages) {
  if (config_.enable_prefix_cache) {
    cache_ = std::make_unique<RadixCache>(config_.page_size, &allocator_);
  }
}

base::Status Scheduler::add_request(const std::string& id, std::vector<TokenId> prompt_token_ids,
                                    int32_t max_new_tokens, std::vector<TokenId> stop_token_ids,
                                    bool ignore_eos, bool speculative) {
  const std::string what = "serve: add_request '" + id + "'";
  if (id.empty()) return base::invalid_argument("serve: add_request: empty request id");
  auto known = requests_.find(id);
  if (known != requests_.end() && !known->second->finished()) {
    return base::invalid_argument(what + ": a request with this id is still unfinished");
  }
  if (prompt_token_ids.empty()) {
    return base::invalid_argument(what + ": empty prompt (need at least one token)");
  }
  for (TokenId t : prompt_token_ids) {
    if (t < 0) {
      return base::invalid_argument(what + ": negative token id " + std::to_string(t) +
                                    " in the prompt");
    }
  }
  if (max_new_tokens < 1) {
    return base::invalid_argument(what + ": max_new_tokens must be at least 1 (got " +
                                  std::to_string(max_new_tokens) + ")");
  }
  const int64_t total = static_cast<int64_t>(prompt_token_ids.size()) + max_new_tokens;
  if (total > config_.max_model_len) {
    return base::invalid_argument(
        what + ": prompt (" + std::to_string(prompt_token_ids.size()) +
        " tokens) + max_new_tokens (" + std::to_string(max_new_tokens) +
        ") exceeds max_model_len (" + std::to_string(config_.max_model_len) +
        "); shorten the prompt or lower max_new_tokens");
  }
  const int64_t pages_needed = (total + config_.page_size - 1) / config_.page_size;
  if (pages_needed > config_.num_pages) {
    return base::invalid_argument(
        what + ": prompt + max_new_tokens (" + std::to_string(total) + " tokens) needs " +
        std::to_string(pages_needed) + " KV pages but the whole pool has " +
        std::to_string(config_.num_pages) + " (page_size " + std::to_string(config_.page_size) +
        "); it could never run: shorten it or give the engine more KV pages");
  }
  auto req = std::make_unique<Request>();
  req->id = id;
  req->prompt_token_ids = std::move(prompt_token_ids);
  req->max_new_tokens = max_new_tokens;
  req->stop_token_ids = std::move(stop_token_ids);
  req->ignore_eos = ignore_eos;
  req->speculative = speculative;
  req->arrival = next_arrival_++;
  const int32_t cached =
      cache_ ? cache_->match(req->prompt_token_ids, req->num_tokens() - 1).num_tokens : 0;
  req->deadline = clock_ + (req->num_tokens() - cached);
  req->queued_step = num_steps_;
  req->queued_clock = clock_;
  waiting_.push_back(req.get());
  requests_[id] = std::move(req);
  return base::Status::ok_status();
}

void Scheduler::enable_kv_events() {
  if (!cache_) return;
  kv_events_.push_back(KvEvent::cleared());
  cache_->set_event_sink(&kv_events_);
}

std::vector<KvEvent> Scheduler::take_kv_events() {
  std::vector<KvEvent> out;
  out.swap(kv_events_);
  return out;
}

const Request* Scheduler::find(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

Request* Scheduler::live(const std::string& id, uint64_t arrival) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return nullptr;
  Request* req = it->second.get();
  if (req->arrival != arrival || req->finished()) return nullptr;
  return req;
}

bool Scheduler::release(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || !it->second->finished()) return false;
  requests_.erase(it);
  return true;
}

double Scheduler::kv_cache_usage() const {
  const int32_t evictable = cache_ ? cache_->num_evictable_pages() : 0;
  const int32_t used = allocator_.num_used_pages() - evictable;
  return static_cast<double>(used) / allocator_.num_total_pages();
}

bool Scheduler::grow_page_table(Request* req, int32_t num_tokens) {
  const int32_t missing =
      pages_for(num_tokens, config_.page_size) - static_cast<int32_t>(req->page_table.size());
  if (missing <= 0) return true;
  if (allocator_.num_free_pages() < missing && cache_) {
    cache_->evict(missing - allocator_.num_free_pages());
  }
  auto pages = allocator_.allocate(missing);
  if (!pages.ok()) return false;
  req->page_table.insert(req->page_table.end(), pages->begin(), pages->end());
  return true;
}

void Scheduler::release_pages(Request* req) {
  // Computed full pages stay useful to later requests (and to this one's recompute).
  if (cache_ && req->num_computed_tokens > 0) {
    cache_->insert(req->all_token_ids(), req->num_computed_tokens, req->page_table);
  }
  for (PageId p : req->page_table) {
    TORCHTPU_CHECK(allocator_.decref(p).ok(), "request page was free");
  }
  req->page_table.clear();
}

void Scheduler::preempt(Request* req) {
  TORCHTPU_CHECK(!running_.empty() && running_.back() == req, "preempt the newest request");
  running_.pop_back();
  release_pages(req);
  req->draft_token_ids.clear();
  req->num_computed_tokens = 0;
  req->status = RequestStatus::kPreempted;
  ++req->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(req);
}

std::vector<TokenId> Scheduler::propose_drafts(const Request& req, int32_t room) const {
  if (config_.num_speculative_tokens <= 0 || !req.speculative) return {};
  // Drafts past the last token max_new_tokens allows could never be kept: the step adds
  // one token after the accepted drafts.
  room = std::min({room, config_.num_speculative_tokens,
                   req.max_new_tokens - req.num_output_tokens() - 1});
  return propose_ngram_drafts(req.prompt_token_ids, req.output_token_ids,
                              {config_.prompt_lookup_min, config_.prompt_lookup_max}, room);
}

void Scheduler::trim_pages(Request* req) {
  const auto keep = static_cast<size_t>(pages_for(req->num_tokens(), config_.page_size));
  while (req->page_table.size() > keep) {
    // Past every computed token, so never in the prefix cache: the request's alone.
    TORCHTPU_CHECK(allocator_.decref(req->page_table.back()).ok(), "draft page was free");
    req->page_table.pop_back();
  }
}

void Scheduler::finish_request(Request* req, RequestStatus status) {
  auto in_running = std::find(running_.begin(), running_.end(), req);
  if (in_running != running_.end()) {
    running_.erase(in_running);
  } else {
    auto in_waiting = std::find(waiting_.begin(), waiting_.end(), req);
    TORCHTPU_CHECK(in_waiting != waiting_.end(), "an unfinished request is queued");
    waiting_.erase(in_waiting);
  }
  release_pages(req);
  req->draft_token_ids.clear();
  req->status = status;
}

bool Scheduler::abort(const std::string& id) {
  return finish(id, RequestStatus::kFinishedAborted);
}

bool Scheduler::finish(const std::string& id, RequestStatus status) {
  TORCHTPU_CHECK(is_finished(status), "finish needs a finished status");
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->finished()) return false;
  finish_request(it->second.get(), status);
  return true;
}

const Request* Scheduler::prefill_to_wait_for(const Request& req, int32_t cached_tokens) const {
  const int32_t uncached = req.num_tokens() - cached_tokens;
  for (const Request* other : running_) {
    if (other->num_computed_tokens >= other->num_prompt_tokens()) continue;  // all cached
    // Whole pages of `req`'s prompt that `other`'s prompt shares, short of req's last token.
    const int32_t limit = std::min({req.num_prompt_tokens(), other->num_prompt_tokens(),
                                    req.num_tokens() - 1});
    int32_t common = 0;
    while (common < limit && req.prompt_token_ids[common] == other->prompt_token_ids[common]) {
      ++common;
    }
    const int32_t shared = common / config_.page_size * config_.page_size;
    // Worth waiting for when `other` still has to compute at least half of what `req`
    // would otherwise compute itself.
    const int32_t gain = shared - std::max(cached_tokens, other->num_computed_tokens);
    if (gain > 0 && 2 * gain >= uncached) return other;
  }
  return nullptr;
}

ScheduledItem Scheduler::make_item(const Request& req, int32_t num_new_tokens) const {
  ScheduledItem item;
  item.request_id = req.id;
  item.start_pos = req.num_computed_tokens;
  item.token_ids.reserve(num_new_tokens);
  for (int32_t pos = item.start_pos; pos < item.start_pos + num_new_tokens; ++pos) {
    item.token_ids.push_back(pos < req.num_tokens()
                                 ? req.token_at(pos)
                                 : req.draft_token_ids.at(pos - req.num_tokens()));
  }
  item.page_ids = req.page_table;
  item.sample = item.start_pos + num_new_tokens >= req.num_tokens();
  item.num_output_tokens = req.num_output_tokens();
  item.num_draft_tokens = std::max(0, item.start_pos + num_new_tokens - req.num_tokens());
  return item;
}

bool Scheduler::schedule_running(Request* req, int32_t num_new, SchedulerOutput& out,
                                 int32_t& budget) {
  while (!grow_page_table(req, req->num_computed_tokens + num_new)) {
    // Free and recompute: the newest admission goes back to the front of the queue, and
    // its item leaves this step if it had one.
    Request* victim = running_.back();
    unschedule(victim->id, out, budget);
    preempt(victim);
    out.preempted.push_back(victim->id);
    if (victim == req) return false;
  }
  add_item(*req, num_new, out, budget);
  return true;
}

Scheduler::Admission Scheduler::admit(Request* req, SchedulerOutput& out, int32_t& budget) {
  TORCHTPU_CHECK(req->page_table.empty() && req->num_computed_tokens == 0,
                 "a waiting request holds no pages");
  const int32_t num_tokens = req->num_tokens();
  PrefixMatch hit;
  if (cache_) {
    // At most num_tokens - 1: the last token is always computed so it can be sampled from.
    // Matched again after ordering: admissions earlier in this step may have evicted pages.
    hit = cache_->match(req->all_token_ids(), num_tokens - 1);
    // Asked again too: a request admitted earlier in this step may be computing them.
    if (prefill_to_wait_for(*req, hit.num_tokens) != nullptr) return Admission::kDeferred;
    // Our references lock the matched pages against the eviction grow_page_table may do.
    for (PageId p : hit.pages) TORCHTPU_CHECK(allocator_.incref(p).ok(), "cached page free");
  }
  req->page_table = hit.pages;
  const int32_t num_new = std::min(num_tokens - hit.num_tokens, budget);
  if (!grow_page_table(req, hit.num_tokens + num_new)) {
    for (PageId p : req->page_table) TORCHTPU_CHECK(allocator_.decref(p).ok(), "page free");
    req->page_table.clear();
    return Admission::kNoPages;
  }
  if (cache_) {
    prefix_cache_queries_ += num_tokens;
    prefix_cache_hits_ += hit.num_tokens;
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), req));
  req->num_computed_tokens = hit.num_tokens;
  req->num_cached_tokens = hit.num_tokens;
  req->status = RequestStatus::kRunning;
  running_.push_back(req);
  add_item(*req, num_new, out, budget);
  return Admission::kAdmitted;
}

void Scheduler::add_item(const Request& req, int32_t num_new, SchedulerOutput& out,
                         int32_t& budget) {
  out.items.push_back(make_item(req, num_new));
  const ScheduledItem& item = out.items.back();
  const int32_t known = num_new - item.num_draft_tokens;
  if (known > 1 || req.num_output_tokens() == 0) {
    requests_.at(req.id)->prefill_chunks.emplace_back(num_steps_, known);
  }
  std::vector<TokenId> drafts(item.token_ids.end() - item.num_draft_tokens,
                              item.token_ids.end());
  pending_.push_back({req.id, req.arrival, num_new, item.sample, std::move(drafts)});
  budget -= num_new;
}

void Scheduler::unschedule(const std::string& id, SchedulerOutput& out, int32_t& budget) {
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].request_id != id) continue;
    budget += pending_[i].num_tokens;
    auto& chunks = requests_.at(id)->prefill_chunks;
    if (!chunks.empty() && chunks.back().first == num_steps_) chunks.pop_back();
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    out.items.erase(out.items.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

base::StatusOr<SchedulerOutput> Scheduler::schedule() {
  if (!pending_.empty()) {
    return base::failed_precondition(
        "serve: schedule: the previous step (" + std::to_string(pending_.size()) +
        " items) was not applied; call update() with its sampled tokens first");
  }
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;

  // 1. Decodes: running requests with one token to compute, oldest admission first.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request* req = running_[i];
    if (req->num_tokens() - req->num_computed_tokens == 1) {
      req->draft_token_ids = propose_drafts(*req, budget - 1);
      if (!schedule_running(req, 1 + static_cast<int32_t>(req->draft_token_ids.size()), out,
                            budget)) {
        req->draft_token_ids.clear();
      }
    }
  }

  // 2. Prefill work, earliest deadline first (scheduler.h): running requests' next chunks
  //    and waiting requests. A waiting request that waits for a running request's prefill
  //    lends it its deadline, so the pages it waits for come no later than its own turn.
  struct Candidate {
    Request* req;
    int64_t deadline;
  };
  std::vector<Candidate> candidates;
  std::unordered_map<const Request*, int64_t> lent;
  for (Request* req : waiting_) {
    const int32_t cached =
        cache_ ? cache_->match(req->all_token_ids(), req->num_tokens() - 1).num_tokens : 0;
    // Pages cached since it arrived (another request computed its shared prefix) leave it
    // less to do: its deadline comes down with that work.
    req->deadline = std::min(req->deadline, req->queued_clock + req->num_tokens() - cached);
    if (!cache_) continue;
    if (const Request* leader = prefill_to_wait_for(*req, cached)) {
      auto [it, added] = lent.emplace(leader, req->deadline);
      if (!added) it->second = std::min(it->second, req->deadline);
    }
  }
  for (Request* req : running_) {
    if (req->num_tokens() - req->num_computed_tokens <= 1) continue;
    auto it = lent.find(req);
    candidates.push_back(
        {req, it == lent.end() ? req->deadline : std::min(req->deadline, it->second)});
  }
  for (Request* req : waiting_) candidates.push_back({req, req->deadline});
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.deadline != b.deadline) return a.deadline < b.deadline;
                     return a.req->arrival < b.req->arrival;
                   });
  // Admission stops at the first waiting request that cannot get its pages (admitting a
  // later one would take pages it waits for) and in a step that had to preempt; a request
  // deferred on purpose does not stop it.
  bool admitting = true;
  for (const Candidate& c : candidates) {
    Request* req = c.req;
    if (budget <= 0) break;
    if (req->status == RequestStatus::kRunning) {
      const int32_t num_new = std::min(req->num_tokens() - req->num_computed_tokens, budget);
      schedule_running(req, num_new, out, budget);
    } else if (admitting && out.preempted.empty() &&
               static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
      // Not running and nothing preempted this step: `req` is still in the waiting queue.
      admitting = admit(req, out, budget) != Admission::kNoPages;
    }
  }

  out.num_scheduled_tokens = config_.max_num_batched_tokens - budget;
  clock_ += out.num_scheduled_tokens;
  ++num_steps_;
  TORCHTPU_CHECK(!has_unfinished() || !out.items.empty() || !out.preempted.empty(),
                 "a step with unfinished requests schedules something");
  return out;
}

base::StatusOr<std::vector<FinishedRequest>> Scheduler::update(
    const std::unordered_map<std::string, TokenId>& sampled) {
  std::unordered_map<std::string, std::vector<TokenId>> tokens;
  for (const auto& [id, token] : sampled) tokens[id] = {token};
  return update_tokens(tokens);
}

base::StatusOr<std::vector<FinishedRequest>> Scheduler::update_tokens(
    const std::unordered_map<std::string, std::vector<TokenId>>& sampled) {
  // Check everything before changing anything, so a bad call leaves the state as it was.
  std::unordered_map<std::string, const PendingItem*> sampled_items;
  for (const PendingItem& item : pending_) {
    if (!item.sample) continue;
    sampled_items[item.request_id] = &item;
    if (live(item.request_id, item.arrival) != nullptr && !sampled.count(item.request_id)) {
      return base::invalid_argument("serve: update: no sampled token for request '" +
                                    item.request_id +
                                    "', which the last schedule() marked sample=True");
    }
  }
  for (const auto& [id, tokens] : sampled) {
    auto it = sampled_items.find(id);
    if (it == sampled_items.end()) {
      return base::invalid_argument("serve: update: got a token for request '" + id +
                                    "', which the last schedule() did not mark sample=True");
    }
    const std::vector<TokenId>& drafts = it->second->drafts;
    if (tokens.empty() || tokens.size() > drafts.size() + 1) {
      return base::invalid_argument(
          "serve: update: request '" + id + "' got " + std::to_string(tokens.size()) +
          " tokens; expected 1 to " + std::to_string(drafts.size() + 1) +
          " (the accepted drafts of its " + std::to_string(drafts.size()) +
          " and one token after them)");
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0) {
        return base::invalid_argument("serve: update: negative token id " +
                                      std::to_string(tokens[i]) + " for request '" + id + "'");
      }
      if (i + 1 < tokens.size() && tokens[i] != drafts[i]) {
        return base::invalid_argument(
            "serve: update: request '" + id + "': token " + std::to_string(i) + " (" +
            std::to_string(tokens[i]) + ") is not draft " + std::to_string(i) + " (" +
            std::to_string(drafts[i]) + "); only the last token may differ from the drafts");
      }
    }
  }

  std::vector<FinishedRequest> finished;
  for (const PendingItem& item : pending_) {
    Request* req = live(item.request_id, item.arrival);
    if (req == nullptr) continue;  // aborted or finished from outside since schedule()
    const auto num_drafts = static_cast<int32_t>(item.drafts.size());
    req->draft_token_ids.clear();
    if (!item.sample) {
      req->num_computed_tokens += item.num_tokens;
    } else {
      const std::vector<TokenId>& tokens = sampled.at(item.request_id);
      // The KV of the known tokens and of the accepted drafts is right; the rest is not.
      req->num_computed_tokens += item.num_tokens - num_drafts +
                                  static_cast<int32_t>(tokens.size()) - 1;
      if (req->first_token_step < 0) {
        req->first_token_step = num_steps_ - 1;
        req->first_token_clock = clock_;
      }
      bool stopped = false;
      for (TokenId token : tokens) {
        if ((stopped = req->append_and_check_stop(token))) break;
      }
      if (stopped) {
        finish_request(req, req->status);
        finished.emplace_back(req->id, finish_reason(req->status));
        continue;
      }
      if (num_drafts > 0) trim_pages(req);
      // A decode step fills at most a page or two; they are cached at finish.
      if (item.num_tokens - num_drafts == 1) continue;
    }
    // A prefill chunk finished: cache its full pages now, so requests that share the prompt
    // hit while this one still runs.
    if (cache_) cache_->insert(req->all_token_ids(), req->num_computed_tokens, req->page_table);
  }
  pending_.clear();
  return finished;
}

}  // namespace torchtpu::serve
