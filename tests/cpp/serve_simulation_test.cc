// A randomized run of the whole engine core against a simulated model runner.
//
// The runner keeps a fake KV store: computing position p of a request writes (token, p) into
// slot p % page_size of page_ids[p / page_size]. Before each step it checks that every
// position the request does not recompute already holds the right (token, position) — so
// prefix-cache hits, shared pages and recompute after preemption are checked for content,
// not just for counts. Sampled tokens are a function of the token history, so every
// request's output is known in advance whatever the scheduling did to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "serve/scheduler.h"

namespace torchtpu::serve {
namespace {

constexpr TokenId kVocab = 40;
constexpr TokenId kStopToken = 0;

TokenId next_token(const std::vector<TokenId>& history, uint32_t salt) {
  uint64_t h = 1469598103934665603ull ^ salt;
  for (size_t i = history.size() >= 3 ? history.size() - 3 : 0; i < history.size(); ++i) {
    h = (h ^ static_cast<uint64_t>(history[i])) * 1099511628211ull;
  }
  h = (h ^ history.size()) * 1099511628211ull;
  return static_cast<TokenId>((h >> 17) % kVocab);
}

struct Spec {
  std::vector<TokenId> prompt;
  int32_t max_new_tokens = 0;
  bool use_stop = false;
  uint32_t salt = 0;
};

// What the request must produce: sampled tokens until a stop token or max_new_tokens.
std::vector<TokenId> expected_output(const Spec& spec) {
  std::vector<TokenId> history = spec.prompt, out;
  while (static_cast<int32_t>(out.size()) < spec.max_new_tokens) {
    TokenId t = next_token(history, spec.salt);
    history.push_back(t);
    out.push_back(t);
    if (spec.use_stop && t == kStopToken) break;
  }
  return out;
}

void run_simulation(uint32_t seed, bool enable_prefix_cache) {
  SCOPED_TRACE("seed " + std::to_string(seed) + (enable_prefix_cache ? " cached" : " uncached"));
  std::mt19937 rng(seed);
  SchedulerConfig c;
  c.num_pages = 24;
  c.page_size = 4;
  c.max_num_seqs = 6;
  c.max_num_batched_tokens = 24;
  c.max_model_len = 80;
  c.enable_prefix_cache = enable_prefix_cache;
  auto created = Scheduler::create(c);
  ASSERT_TRUE(created.ok());
  Scheduler& s = **created;

  // A few shared "system prompts" so the prefix cache has something to find.
  std::vector<std::vector<TokenId>> prefixes;
  for (int i = 0; i < 3; ++i) {
    std::vector<TokenId> p(4 + rng() % 20);
    for (auto& t : p) t = 1 + rng() % (kVocab - 1);
    prefixes.push_back(p);
  }
  const int kNumRequests = 300;
  std::map<std::string, Spec> specs;
  std::vector<std::string> order;
  for (int i = 0; i < kNumRequests; ++i) {
    Spec spec;
    if (rng() % 3 != 0) spec.prompt = prefixes[rng() % prefixes.size()];
    const int32_t extra = 1 + rng() % 30;
    for (int32_t j = 0; j < extra; ++j) spec.prompt.push_back(1 + rng() % (kVocab - 1));
    spec.max_new_tokens = 1 + rng() % 40;
    spec.use_stop = rng() % 2 == 0;
    spec.salt = rng();
    if (static_cast<int32_t>(spec.prompt.size()) + spec.max_new_tokens > c.max_model_len) {
      spec.max_new_tokens = c.max_model_len - static_cast<int32_t>(spec.prompt.size());
    }
    const std::string id = "r" + std::to_string(i);
    specs[id] = spec;
    order.push_back(id);
  }
  // One request that can never fit is rejected and changes nothing.
  EXPECT_FALSE(s.add_request("huge", std::vector<TokenId>(70, 1), 30, {}, false).ok());

  // The fake KV store: (page, slot) -> (token, position).
  std::map<std::pair<PageId, int32_t>, std::pair<TokenId, int32_t>> kv;
  std::set<std::string> aborted;
  size_t next = 0;
  int steps = 0;
  int64_t preempted_seen = 0;
  while ((next < order.size() || s.has_unfinished()) && steps < 20000) {
    // Requests arrive a few at a time, faster than the pool can hold them.
    for (int k = rng() % 4; k > 0 && next < order.size(); --k, ++next) {
      const Spec& spec = specs[order[next]];
      std::vector<TokenId> stops;
      if (spec.use_stop) stops.push_back(kStopToken);
      ASSERT_TRUE(s.add_request(order[next], spec.prompt, spec.max_new_tokens, stops, false).ok());
    }
    // Now and then a client goes away.
    if (rng() % 25 == 0 && next > 0) {
      const std::string& victim = order[rng() % next];
      if (s.abort(victim)) aborted.insert(victim);
    }
    auto out_or = s.schedule();
    ASSERT_TRUE(out_or.ok()) << out_or.status().to_string();
    const SchedulerOutput& out = *out_or;
    preempted_seen += static_cast<int64_t>(out.preempted.size());
    if (s.has_unfinished()) {
      ASSERT_FALSE(out.items.empty() && out.preempted.empty());
    }
    ASSERT_LE(out.num_scheduled_tokens, c.max_num_batched_tokens);
    ASSERT_LE(static_cast<int32_t>(out.items.size()), c.max_num_seqs);
    int32_t total = 0;
    std::unordered_map<std::string, TokenId> sampled;
    for (const ScheduledItem& item : out.items) {
      const Request* req = s.find(item.request_id);
      ASSERT_NE(req, nullptr);
      const auto all = req->all_token_ids();
      total += static_cast<int32_t>(item.token_ids.size());
      const int32_t end = item.start_pos + static_cast<int32_t>(item.token_ids.size());
      ASSERT_GE(static_cast<int32_t>(item.page_ids.size()) * c.page_size, end);
      // Everything before start_pos must already be in the pages (cache hits included).
      for (int32_t p = 0; p < item.start_pos; ++p) {
        auto it = kv.find({item.page_ids[p / c.page_size], p % c.page_size});
        ASSERT_TRUE(it != kv.end()) << item.request_id << " position " << p << " never computed";
        ASSERT_EQ(it->second, std::make_pair(all[p], p)) << item.request_id << " position " << p;
      }
      // Compute: write only into pages no one else holds (cached pages are read-only).
      for (int32_t p = item.start_pos; p < end; ++p) {
        ASSERT_EQ(item.token_ids[p - item.start_pos], all[p]);
        const PageId page = item.page_ids[p / c.page_size];
        ASSERT_EQ(s.allocator().ref_count(page), 1) << "writing into a shared page " << page;
        kv[{page, p % c.page_size}] = {all[p], p};
      }
      ASSERT_EQ(item.sample, end == req->num_tokens());
      if (item.sample) sampled[item.request_id] = next_token(all, specs[item.request_id].salt);
    }
    ASSERT_EQ(total, out.num_scheduled_tokens);
    ASSERT_TRUE(s.update(sampled).ok());

    // Reference counts add up: every held page is held by running requests or the tree.
    int64_t refs = 0, holders = s.num_cached_pages();
    for (PageId p = 0; p < s.num_total_pages(); ++p) refs += s.allocator().ref_count(p);
    for (const auto& [id, spec] : specs) {
      const Request* req = s.find(id);
      if (req != nullptr) holders += static_cast<int64_t>(req->page_table.size());
    }
    ASSERT_EQ(refs, holders);
    ++steps;
  }
  ASSERT_FALSE(s.has_unfinished()) << "no progress after " << steps << " steps";
  EXPECT_EQ(preempted_seen, s.num_preemptions());
  EXPECT_GT(s.num_preemptions(), 0) << "the pool was meant to be too small for the load";

  for (const auto& [id, spec] : specs) {
    const Request* req = s.find(id);
    ASSERT_NE(req, nullptr);
    if (aborted.count(id)) {
      EXPECT_EQ(req->status, RequestStatus::kFinishedAborted);
      continue;
    }
    EXPECT_EQ(req->output_token_ids, expected_output(spec)) << id;
    EXPECT_TRUE(req->status == RequestStatus::kFinishedStopped ||
                req->status == RequestStatus::kFinishedLength);
  }
  if (enable_prefix_cache) {
    EXPECT_GT(s.prefix_cache_hits(), 0);
    EXPECT_LE(s.prefix_cache_hits(), s.prefix_cache_queries());
  }
  // Every page comes back: free, or kept by the cache until it is reset.
  EXPECT_EQ(s.num_free_pages() + s.num_cached_pages(), s.num_total_pages());
  s.reset_prefix_cache();
  EXPECT_EQ(s.num_free_pages(), s.num_total_pages());
  EXPECT_EQ(s.num_running(), 0);
  EXPECT_EQ(s.num_waiting(), 0);
}

TEST(ServeSimulation, EveryRequestCompletesAndEveryPageReturnsWithPrefixCache) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) run_simulation(seed, true);
}

TEST(ServeSimulation, EveryRequestCompletesAndEveryPageReturnsWithoutPrefixCache) {
  for (uint32_t seed : {5u, 6u}) run_simulation(seed, false);
}

// The shared-prefix benchmark's workload in steps: `groups` groups of `per_group` prompts,
// each a group's long system prompt then its own question, sent group after group by
// `concurrency` closed-loop clients (a new request as soon as one finishes) in a shuffled
// order, as the benchmark sends them: cold requests of groups not yet seen arrive while
// warm ones of other groups run.
struct SharedPrefixRun {
  // Per request: steps from queued to first token (the runner computes a step, its prefill
  // chunks and decodes together, in one forward pass, so these are forward passes too).
  std::vector<int64_t> ttft_steps;
  std::vector<int64_t> ttft_tokens;  // tokens scheduled (all requests) meanwhile
  std::vector<int64_t> own_tokens;   // tokens the request would compute itself at arrival
  // Modeled time to first token (step_cost() summed over the steps it spanned).
  std::vector<int64_t> ttft_cost;
  int64_t total_tokens = 0;          // tokens computed in all
  int64_t max_present = 0;           // requests in the scheduler at once, at most
  // A lower bound on the mean modeled TTFT that no schedule beats (first_token_bound()),
  // and whether every group has a request among the first ones (then later requests
  // all find their prefix computed or under way, and the bound is close).
  double mean_ttft_bound = 0;
  bool every_group_first = false;
};

constexpr int32_t kPerGroup = 8, kPrefixLen = 1024, kQuestionLen = 64;
constexpr int32_t kOutputLen = 16, kConcurrency = 8;

// A step's time as the runner spends it, in token-equivalents: its tokens padded to a power
// of two (the runner's batch buckets) plus a fixed cost per forward pass (its compiled calls
// and the host work around them: tens of prefill tokens' worth on the CPU plugin). Linear
// in tokens, as measured there: one, two or four 512-token prefill chunks in one ragged step
// cost the same CPU time per token, so batching cold prefills together saves nothing.
// Attention's growth with the context is left out (it weighs on both runs alike).
constexpr int64_t kStepOverheadTokens = 32;
int64_t step_cost(int32_t num_tokens) {
  int64_t padded = 1;
  while (padded < num_tokens) padded *= 2;
  return kStepOverheadTokens + padded;
}

// What no schedule beats with the prefix cache on, in step_cost() units (at least one per
// token computed). The first kConcurrency requests arrive together, cold: before any request
// of the j-th group (in the order their prefixes complete) samples, j prefixes and its own
// question have been computed, so its TTFT is at least j * kPrefixLen + kQuestionLen, and
// the sum is least with the largest groups first. Every later request computes at least
// its question in a step of its own. The mean over all requests of those bounds.
double first_token_bound(const std::vector<std::vector<TokenId>>& prompts,
                         bool* every_group_first) {
  std::map<std::vector<TokenId>, int64_t> first_wave;  // prefix -> its requests
  for (int r = 0; r < kConcurrency && r < static_cast<int>(prompts.size()); ++r) {
    ++first_wave[std::vector<TokenId>(prompts[r].begin(), prompts[r].begin() + kPrefixLen)];
  }
  std::set<std::vector<TokenId>> groups;
  for (const auto& p : prompts) groups.emplace(p.begin(), p.begin() + kPrefixLen);
  *every_group_first = groups.size() == first_wave.size();
  std::vector<int64_t> sizes;
  for (const auto& [prefix, count] : first_wave) sizes.push_back(count);
  std::sort(sizes.rbegin(), sizes.rend());
  double sum = 0;
  int64_t waves = 0;
  for (size_t j = 0; j < sizes.size(); ++j) {
    sum += static_cast<double>(sizes[j] * ((static_cast<int64_t>(j) + 1) * kPrefixLen +
                                           kQuestionLen));
    waves += sizes[j];
  }
  sum += static_cast<double>((static_cast<int64_t>(prompts.size()) - waves) *
                             step_cost(kQuestionLen));
  return sum / static_cast<double>(prompts.size());
}

SchedulerConfig shared_prefix_config(bool enable_prefix_cache) {
  SchedulerConfig c;
  c.num_pages = kConcurrency * 1280 / 16;  // the engine's default: max_num_seqs x max_model_len
  c.page_size = 16;
  c.max_num_seqs = kConcurrency;
  c.max_num_batched_tokens = 512;
  c.max_model_len = 1280;
  c.enable_prefix_cache = enable_prefix_cache;
  return c;
}

SharedPrefixRun run_shared_prefix(bool enable_prefix_cache, int32_t groups) {
  SharedPrefixRun run;
  auto created = Scheduler::create(shared_prefix_config(enable_prefix_cache));
  EXPECT_TRUE(created.ok());
  if (!created.ok()) return run;
  Scheduler& s = **created;
  std::mt19937 rng(7);
  std::vector<std::vector<TokenId>> prompts;
  for (int g = 0; g < groups; ++g) {
    std::vector<TokenId> prefix(kPrefixLen);
    for (auto& t : prefix) t = 1 + rng() % 30000;
    for (int q = 0; q < kPerGroup; ++q) {
      prompts.push_back(prefix);
      for (int i = 0; i < kQuestionLen; ++i) prompts.back().push_back(1 + rng() % 30000);
    }
  }
  std::shuffle(prompts.begin(), prompts.end(), rng);  // as the benchmark sends them
  const int n = static_cast<int>(prompts.size());
  run.mean_ttft_bound = first_token_bound(prompts, &run.every_group_first);
  run.ttft_steps.assign(n, -1);
  run.ttft_tokens.assign(n, -1);
  run.own_tokens.assign(n, 0);
  run.ttft_cost.assign(n, -1);
  std::vector<int64_t> queued_step(n), queued_clock(n), queued_cost(n);
  int next = 0, in_flight = 0;
  int64_t step = 0, clock = 0, cost = 0;
  while ((next < n || s.has_unfinished()) && step < 100000) {
    for (; in_flight < kConcurrency && next < n; ++next, ++in_flight) {
      const std::string id = std::to_string(next);
      EXPECT_TRUE(s.add_request(id, prompts[next], kOutputLen, {}, true).ok());
      queued_step[next] = step;
      queued_clock[next] = clock;
      queued_cost[next] = cost;
      const Request* req = s.find(id);
      run.own_tokens[next] = req->deadline - req->queued_clock;
    }
    run.max_present = std::max<int64_t>(run.max_present, s.num_running() + s.num_waiting());
    auto out = s.schedule();
    EXPECT_TRUE(out.ok());
    if (!out.ok()) return run;
    std::unordered_map<std::string, TokenId> sampled;
    for (const ScheduledItem& item : out->items) {
      if (!item.sample) continue;
      sampled[item.request_id] = 1;
      const int r = std::stoi(item.request_id);
      if (run.ttft_steps[r] < 0) {
        run.ttft_steps[r] = step - queued_step[r] + 1;
        run.ttft_tokens[r] = clock + out->num_scheduled_tokens - queued_clock[r];
        run.ttft_cost[r] = cost + step_cost(out->num_scheduled_tokens) - queued_cost[r];
      }
    }
    clock += out->num_scheduled_tokens;
    cost += step_cost(out->num_scheduled_tokens);
    ++step;
    auto finished = s.update(sampled);
    EXPECT_TRUE(finished.ok());
    if (!finished.ok()) return run;
    for (const auto& [id, reason] : *finished) {
      const Request* req = s.find(id);
      // The scheduler's own timeline says what the driver saw.
      const int r = std::stoi(id);
      EXPECT_EQ(req->first_token_step - req->queued_step, run.ttft_steps[r] - 1) << id;
      EXPECT_EQ(req->first_token_clock - req->queued_clock, run.ttft_tokens[r]) << id;
      int32_t prefilled = 0;
      for (const auto& [chunk_step, tokens] : req->prefill_chunks) {
        EXPECT_GE(chunk_step, req->queued_step);
        EXPECT_LE(chunk_step, req->first_token_step);
        prefilled += tokens;
      }
      EXPECT_EQ(prefilled, req->num_prompt_tokens() - req->num_cached_tokens) << id;
      EXPECT_TRUE(s.release(id));
      --in_flight;
    }
  }
  EXPECT_FALSE(s.has_unfinished());
  EXPECT_EQ(s.token_clock(), clock);
  EXPECT_EQ(s.num_steps(), step);
  run.total_tokens = clock;
  return run;
}

int64_t percentile(std::vector<int64_t> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

double mean(const std::vector<int64_t>& v) {
  double sum = 0;
  for (int64_t x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}

void check_shared_prefix(int32_t groups) {
  SCOPED_TRACE(std::to_string(groups) + " groups");
  const SharedPrefixRun on = run_shared_prefix(true, groups);
  const SharedPrefixRun off = run_shared_prefix(false, groups);
  ASSERT_EQ(on.ttft_steps.size(), off.ttft_steps.size());
  for (const SharedPrefixRun* r : {&on, &off}) {
    std::printf("%d groups, prefix cache %s: TTFT time mean %.0f median %lld p99 %lld; TTFT "
                "steps mean %.1f median %lld p99 %lld; TTFT tokens mean %.0f max %lld; tokens "
                "computed %lld\n",
                groups, r == &on ? "on " : "off", mean(r->ttft_cost),
                static_cast<long long>(percentile(r->ttft_cost, 0.5)),
                static_cast<long long>(percentile(r->ttft_cost, 0.99)), mean(r->ttft_steps),
                static_cast<long long>(percentile(r->ttft_steps, 0.5)),
                static_cast<long long>(percentile(r->ttft_steps, 0.99)), mean(r->ttft_tokens),
                static_cast<long long>(percentile(r->ttft_tokens, 1.0)),
                static_cast<long long>(r->total_tokens));
  }
  const double speedup = mean(off.ttft_cost) / mean(on.ttft_cost);
  const double best = mean(off.ttft_cost) / on.mean_ttft_bound;
  std::printf("%d groups: mean TTFT time off/on %.2fx; the bound on any schedule's mean with "
              "the cache on is %.0f (off/bound %.2fx)\n",
              groups, speedup, on.mean_ttft_bound, best);
  const SchedulerConfig c = shared_prefix_config(true);
  for (size_t i = 0; i < on.ttft_steps.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    ASSERT_GT(on.ttft_steps[i], 0);
    // The bound of scheduler.h: until its first token the tokens scheduled (its own
    // included) are at most twice its own work, plus what the others present then still
    // had to compute, plus a step's budget.
    const int64_t bound = 2 * on.own_tokens[i] + (on.max_present - 1) * c.max_model_len +
                          c.max_num_batched_tokens;
    EXPECT_LE(on.ttft_tokens[i], bound);
    // No request waits for a shared prefix longer than computing its whole prompt alone:
    // what the cache-off run gives each request, at the same load, in steps and in time.
    EXPECT_LE(on.ttft_steps[i], percentile(off.ttft_steps, 1.0));
    EXPECT_LE(on.ttft_cost[i], percentile(off.ttft_cost, 1.0));
  }
  for (double q : {0.5, 0.99}) {
    EXPECT_LE(percentile(on.ttft_steps, q), percentile(off.ttft_steps, q)) << q;
    EXPECT_LE(percentile(on.ttft_cost, q), percentile(off.ttft_cost, q)) << q;
  }
  // The mean: the cold prefixes of the first requests, computed one after another as they
  // must be, hold most of it. When every group is among them the bound is close, and the
  // scheduler stays within half again of what any schedule could do.
  if (on.every_group_first) {
    EXPECT_LE(mean(on.ttft_cost), 1.5 * on.mean_ttft_bound);
  }
  EXPECT_GT(speedup, 2.4);
  // The prefix is computed about once per group, not once per request.
  EXPECT_LT(on.total_tokens * 3, off.total_tokens);
}

// The benchmark's default (8 groups) and the 4 groups of a shorter run.
TEST(ServeSimulation, SharedPrefixWithColdGroupsHasNoTailWorseThanWithoutTheCache) {
  for (int32_t groups : {4, 8}) check_shared_prefix(groups);
}

}  // namespace
}  // namespace torchtpu::serve
