// A randomized run of the whole engine core against a simulated model runner.
//
// The runner keeps a fake KV store: computing position p of a request writes (token, p) into
// slot p % page_size of page_ids[p / page_size]. Before each step it checks that every
// position the request does not recompute already holds the right (token, position) — so
// prefix-cache hits, shared pages and recompute after preemption are checked for content,
// not just for counts. Sampled tokens are a function of the token history, so every
// request's output is known in advance whatever the scheduling did to it.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace torchtpu::serve
