// Scheduler: budgets, chunked prefill, decode-before-admission, earliest deadline first (with
// its starvation bound), prefix hits and in-flight prefix dedupe, preemption,
// aborts, stop conditions and the errors for calls that can never work.
#include <gtest/gtest.h>

#include <numeric>

#include "serve/scheduler.h"

namespace torchtpu::serve {
namespace {

std::vector<TokenId> iota_tokens(int32_t n, TokenId first = 100) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

SchedulerConfig small_config() {
  SchedulerConfig c;
  c.num_pages = 16;
  c.page_size = 4;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 8;
  c.max_model_len = 64;
  c.enable_prefix_cache = true;
  return c;
}

std::unique_ptr<Scheduler> make(const SchedulerConfig& c) {
  auto s = Scheduler::create(c);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(s).value();
}

SchedulerOutput step(Scheduler& s) {
  auto out = s.schedule();
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  return std::move(out).value();
}

// Feeds `token` to every item that asks for a sample.
std::vector<FinishedRequest> apply(Scheduler& s, const SchedulerOutput& out, TokenId token = 7) {
  std::unordered_map<std::string, TokenId> sampled;
  for (const auto& item : out.items) {
    if (item.sample) sampled[item.request_id] = token;
  }
  auto finished = s.update(sampled);
  EXPECT_TRUE(finished.ok()) << finished.status().to_string();
  return std::move(finished).value();
}

// Runs until nothing is unfinished; returns the number of steps.
int run_to_completion(Scheduler& s, int max_steps = 1000) {
  int steps = 0;
  while (s.has_unfinished() && steps < max_steps) {
    apply(s, step(s));
    ++steps;
  }
  EXPECT_FALSE(s.has_unfinished()) << "no progress after " << max_steps << " steps";
  return steps;
}

TEST(ServeScheduler, RejectsBadConfig) {
  SchedulerConfig c = small_config();
  c.page_size = 0;
  auto s = Scheduler::create(c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("page_size must be positive"), std::string::npos);
}

TEST(ServeScheduler, RejectsRequestsThatCanNeverRun) {
  SchedulerConfig c = small_config();
  c.num_pages = 4;  // 16 token slots in the whole pool
  auto s = make(c);
  base::Status too_big = s->add_request("big", iota_tokens(10), 10, {}, false);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.message().find("needs 5 KV pages but the whole pool has 4"),
            std::string::npos)
      << too_big.message();
  base::Status too_long = s->add_request("long", iota_tokens(60), 10, {}, false);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("exceeds max_model_len (64)"), std::string::npos);
  EXPECT_FALSE(s->add_request("empty", {}, 4, {}, false).ok());
  EXPECT_FALSE(s->add_request("zero", iota_tokens(3), 0, {}, false).ok());
  EXPECT_FALSE(s->add_request("neg", {1, -2}, 3, {}, false).ok());
  EXPECT_FALSE(s->add_request("", iota_tokens(3), 3, {}, false).ok());
  ASSERT_TRUE(s->add_request("fits", iota_tokens(10), 6, {}, false).ok());  // exactly 4 pages
  base::Status dup = s->add_request("fits", iota_tokens(3), 3, {}, false);
  EXPECT_NE(dup.message().find("still unfinished"), std::string::npos);
  EXPECT_EQ(s->num_waiting(), 1);
  run_to_completion(*s);
  EXPECT_EQ(s->find("fits")->num_output_tokens(), 6);
  // Once finished, the id may be used again.
  EXPECT_TRUE(s->add_request("fits", iota_tokens(3), 3, {}, false).ok());
}

TEST(ServeScheduler, ChunkedPrefillRespectsTheTokenBudget) {
  auto s = make(small_config());  // budget 8
  const auto prompt = iota_tokens(20);
  ASSERT_TRUE(s->add_request("a", prompt, 4, {}, false).ok());
  const int32_t starts[] = {0, 8, 16};
  const int32_t sizes[] = {8, 8, 4};
  const size_t pages[] = {2, 4, 5};
  for (int i = 0; i < 3; ++i) {
    SchedulerOutput out = step(*s);
    ASSERT_EQ(out.items.size(), 1u);
    const ScheduledItem& item = out.items[0];
    EXPECT_EQ(item.start_pos, starts[i]);
    EXPECT_EQ(static_cast<int32_t>(item.token_ids.size()), sizes[i]);
    EXPECT_EQ(item.token_ids[0], prompt[starts[i]]);
    EXPECT_EQ(item.page_ids.size(), pages[i]);
    EXPECT_EQ(item.sample, i == 2);  // only the last chunk reaches the end of the prompt
    EXPECT_EQ(out.num_scheduled_tokens, sizes[i]);
    EXPECT_EQ(s->num_free_pages(), 16 - static_cast<int32_t>(pages[i]));
    apply(*s, out);
  }
  SchedulerOutput decode = step(*s);
  ASSERT_EQ(decode.items.size(), 1u);
  EXPECT_EQ(decode.items[0].token_ids, std::vector<TokenId>{7});
  EXPECT_EQ(decode.items[0].start_pos, 20);
  EXPECT_EQ(decode.items[0].num_output_tokens, 1);
  EXPECT_TRUE(decode.items[0].sample);
  EXPECT_EQ(decode.items[0].page_ids.size(), 6u);  // position 20 opens page 5
}

TEST(ServeScheduler, DecodesRunBeforeAdmissionAndShareTheBudget) {
  auto s = make(small_config());  // budget 8
  ASSERT_TRUE(s->add_request("a", iota_tokens(4), 8, {}, false).ok());
  apply(*s, step(*s));  // a's prefill
  ASSERT_TRUE(s->add_request("b", iota_tokens(20, 300), 4, {}, false).ok());
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_EQ(out.items[0].request_id, "a");
  EXPECT_EQ(out.items[0].token_ids.size(), 1u);
  EXPECT_EQ(out.items[1].request_id, "b");
  EXPECT_EQ(out.items[1].token_ids.size(), 7u);  // what the decode left of the budget
  EXPECT_FALSE(out.items[1].sample);
  EXPECT_EQ(out.num_scheduled_tokens, 8);
  EXPECT_EQ(s->num_running(), 2);
}

TEST(ServeScheduler, MaxNumSeqsBoundsTheRunningSet) {
  SchedulerConfig c = small_config();
  c.max_num_seqs = 2;
  c.max_num_batched_tokens = 64;
  auto s = make(c);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(s->add_request(id, iota_tokens(3), 2, {}, false).ok());
  }
  SchedulerOutput out = step(*s);
  EXPECT_EQ(out.items.size(), 2u);
  EXPECT_EQ(s->num_running(), 2);
  EXPECT_EQ(s->num_waiting(), 1);
  apply(*s, out);
  run_to_completion(*s);
}

TEST(ServeScheduler, PrefixHitSkipsComputedTokensAndReusesPages) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 64;
  auto s = make(c);
  const auto prompt = iota_tokens(12);
  ASSERT_TRUE(s->add_request("a", prompt, 2, {}, false).ok());
  SchedulerOutput first = step(*s);
  const std::vector<PageId> pages_a = first.items[0].page_ids;
  apply(*s, first);
  run_to_completion(*s);
  EXPECT_EQ(s->prefix_cache_queries(), 12);
  EXPECT_EQ(s->prefix_cache_hits(), 0);
  // a's 13 computed tokens left 3 full pages in the cache.
  EXPECT_EQ(s->num_cached_pages(), 3);
  EXPECT_EQ(s->num_free_pages(), 13);

  auto prompt_b = prompt;
  prompt_b.resize(10);
  prompt_b.insert(prompt_b.end(), {1, 2, 3, 4});  // shares 10 tokens: 2 full pages
  ASSERT_TRUE(s->add_request("b", prompt_b, 2, {}, false).ok());
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 1u);
  EXPECT_EQ(out.items[0].start_pos, 8);
  EXPECT_EQ(out.items[0].token_ids, std::vector<TokenId>(prompt_b.begin() + 8, prompt_b.end()));
  EXPECT_EQ(std::vector<PageId>(out.items[0].page_ids.begin(), out.items[0].page_ids.begin() + 2),
            std::vector<PageId>(pages_a.begin(), pages_a.begin() + 2));
  EXPECT_EQ(s->prefix_cache_queries(), 12 + 14);
  EXPECT_EQ(s->prefix_cache_hits(), 8);
  EXPECT_EQ(s->find("b")->num_cached_tokens, 8);
  apply(*s, out);
  run_to_completion(*s);
}

TEST(ServeScheduler, FullPromptHitStillComputesTheLastToken) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 64;
  auto s = make(c);
  const auto prompt = iota_tokens(8);
  ASSERT_TRUE(s->add_request("a", prompt, 1, {}, false).ok());
  run_to_completion(*s);
  ASSERT_TRUE(s->add_request("b", prompt, 1, {}, false).ok());
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 1u);
  // The whole prompt is cached, but the last page is recomputed so there is a position to
  // sample from (and no one writes into a shared page).
  EXPECT_EQ(out.items[0].start_pos, 4);
  EXPECT_EQ(out.items[0].token_ids.size(), 4u);
  EXPECT_TRUE(out.items[0].sample);
  EXPECT_EQ(s->prefix_cache_hits(), 4);
  apply(*s, out);
  EXPECT_FALSE(s->has_unfinished());
}

TEST(ServeScheduler, ConcurrentRequestsHitOnceAPrefillCompletes) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 64;
  auto s = make(c);
  const auto system_prompt = iota_tokens(8);
  ASSERT_TRUE(s->add_request("a", system_prompt, 10, {}, false).ok());
  apply(*s, step(*s));  // a's prefill is done; a keeps running
  EXPECT_EQ(s->num_cached_pages(), 2);
  auto prompt_b = system_prompt;
  prompt_b.insert(prompt_b.end(), {5, 6, 7});
  ASSERT_TRUE(s->add_request("b", prompt_b, 2, {}, false).ok());
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_EQ(out.items[1].request_id, "b");
  EXPECT_EQ(out.items[1].start_pos, 8);
  EXPECT_EQ(out.items[1].page_ids[0], out.items[0].page_ids[0]);
  EXPECT_EQ(out.items[1].page_ids[1], out.items[0].page_ids[1]);
  EXPECT_EQ(s->allocator().ref_count(out.items[0].page_ids[0]), 3);  // a, b and the tree
  apply(*s, out);
  run_to_completion(*s);
}

TEST(ServeScheduler, RequestsSharingAPrefixInFlightComputeItOnce) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 32;
  auto s = make(c);
  const auto shared = iota_tokens(12);
  auto prompt_a = shared, prompt_b = shared;
  prompt_a.push_back(1);
  prompt_b.push_back(2);
  ASSERT_TRUE(s->add_request("a", prompt_a, 4, {}, false).ok());
  ASSERT_TRUE(s->add_request("b", prompt_b, 4, {}, false).ok());
  ASSERT_TRUE(s->add_request("c", iota_tokens(14, 500), 4, {}, false).ok());
  // b would compute the 3 pages a is computing now: it waits, and c passes it.
  SchedulerOutput first = step(*s);
  ASSERT_EQ(first.items.size(), 2u);
  EXPECT_EQ(first.items[0].request_id, "a");
  EXPECT_EQ(first.items[1].request_id, "c");
  EXPECT_EQ(s->num_waiting(), 1);
  apply(*s, first);
  // a's prompt is cached now: b gets its 3 pages from the cache and computes one token.
  SchedulerOutput second = step(*s);
  ASSERT_EQ(second.items.size(), 3u);
  EXPECT_EQ(second.items[2].request_id, "b");
  EXPECT_EQ(second.items[2].start_pos, 12);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(second.items[2].page_ids[i], first.items[0].page_ids[i]);
  EXPECT_EQ(s->prefix_cache_hits(), 12);
  apply(*s, second);
  run_to_completion(*s);
}

TEST(ServeScheduler, AFollowerWhosePrefixGotCachedGoesAheadOfColdPrompts) {
  auto s = make(small_config());  // budget 8, pages of 4
  const auto shared = iota_tokens(8);
  auto leader = shared, follower = shared;
  const auto q1 = iota_tokens(4, 700), q2 = iota_tokens(4, 800);
  leader.insert(leader.end(), q1.begin(), q1.end());
  follower.insert(follower.end(), q2.begin(), q2.end());
  ASSERT_TRUE(s->add_request("leader", leader, 2, {}, false).ok());
  ASSERT_TRUE(s->add_request("cold", iota_tokens(12, 300), 2, {}, false).ok());
  ASSERT_TRUE(s->add_request("follower", follower, 2, {}, false).ok());
  // All three are due at 12; the leader computes the shared 8 tokens, the follower waits.
  SchedulerOutput first = step(*s);
  ASSERT_EQ(first.items.size(), 1u);
  EXPECT_EQ(first.items[0].request_id, "leader");
  apply(*s, first);
  // The shared pages are cached: the follower has 4 tokens left, due at 4, ahead of the cold
  // prompt that arrived before it (and of the leader's own 4).
  SchedulerOutput second = step(*s);
  ASSERT_EQ(second.items.size(), 2u);
  EXPECT_EQ(second.items[0].request_id, "follower");
  EXPECT_EQ(second.items[0].start_pos, 8);
  EXPECT_EQ(s->find("follower")->deadline, 4);
  EXPECT_EQ(second.items[1].request_id, "leader");
  apply(*s, second);
  run_to_completion(*s);
}

TEST(ServeScheduler, ShortestPrefillGoesFirst) {
  auto s = make(small_config());  // budget 8
  ASSERT_TRUE(s->add_request("long", iota_tokens(20), 2, {}, false).ok());
  ASSERT_TRUE(s->add_request("short", iota_tokens(3, 300), 2, {}, false).ok());
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_EQ(out.items[0].request_id, "short");
  EXPECT_TRUE(out.items[0].sample);  // its whole prompt: its first token comes now
  EXPECT_EQ(out.items[1].request_id, "long");
  EXPECT_EQ(out.items[1].token_ids.size(), 5u);
  apply(*s, out);
  run_to_completion(*s);
}

TEST(ServeScheduler, ALongPromptGoesAheadOfWhatArrivesAfterItsDeadline) {
  auto s = make(small_config());  // budget 8
  ASSERT_TRUE(s->add_request("long", iota_tokens(20), 1, {}, false).ok());
  EXPECT_EQ(s->find("long")->deadline, 20);  // token clock 0 + its 20 tokens
  int passed = 0;
  for (int i = 0; i < 10; ++i) {
    // A new 8-token request every step would take the whole budget, shortest first.
    ASSERT_TRUE(s->add_request("short" + std::to_string(i), iota_tokens(8, 300 + 10 * i), 1,
                               {}, false).ok());
    SchedulerOutput out = step(*s);
    apply(*s, out);
    bool got_tokens = false;
    for (const auto& item : out.items) got_tokens |= item.request_id == "long";
    if (got_tokens) break;
    ++passed;
  }
  // The shorts queued at clock 0 and 8 are due at 8 and 16, before the long prompt; the one
  // queued at clock 16 is due at 24, after it, and waits.
  EXPECT_EQ(passed, 2);
  const Request* long_req = s->find("long");
  ASSERT_FALSE(long_req->prefill_chunks.empty());
  EXPECT_EQ(long_req->prefill_chunks[0], std::make_pair(int64_t{2}, 8));
  EXPECT_EQ(long_req->queued_step, 0);
  run_to_completion(*s);
  EXPECT_EQ(long_req->first_token_step, 4);  // chunks at steps 2, 3 and 4 (8 + 8 + 4)
}

TEST(ServeScheduler, AShortSharedPrefixDoesNotHoldARequestBack) {
  SchedulerConfig c = small_config();
  c.max_num_batched_tokens = 32;
  auto s = make(c);
  auto prompt_a = iota_tokens(16), prompt_b = iota_tokens(4);
  const auto tail = iota_tokens(12, 900);
  prompt_b.insert(prompt_b.end(), tail.begin(), tail.end());
  ASSERT_TRUE(s->add_request("a", prompt_a, 2, {}, false).ok());
  ASSERT_TRUE(s->add_request("b", prompt_b, 2, {}, false).ok());
  // One shared page of sixteen tokens: b computes its prompt now rather than wait.
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_EQ(out.items[1].request_id, "b");
  EXPECT_EQ(out.items[1].start_pos, 0);
  apply(*s, out);
  run_to_completion(*s);
}

TEST(ServeScheduler, PreemptsTheNewestRequestWhenPagesRunOutAndRecomputesIt) {
  SchedulerConfig c = small_config();
  c.num_pages = 5;
  c.max_num_batched_tokens = 64;
  c.enable_prefix_cache = false;
  auto s = make(c);
  // Each needs 4 pages at the end (4 prompt + 12 output tokens); both cannot fit at once.
  ASSERT_TRUE(s->add_request("a", iota_tokens(4, 0), 12, {}, false).ok());
  ASSERT_TRUE(s->add_request("b", iota_tokens(4, 50), 12, {}, false).ok());
  bool saw_preemption = false;
  int steps = 0;
  while (s->has_unfinished() && steps < 200) {
    SchedulerOutput out = step(*s);
    if (!out.preempted.empty()) {
      saw_preemption = true;
      EXPECT_EQ(out.preempted, std::vector<std::string>{"b"});  // the newest admission
      EXPECT_EQ(s->find("b")->status, RequestStatus::kPreempted);
      EXPECT_EQ(s->num_waiting(), 1);
      for (const auto& item : out.items) EXPECT_NE(item.request_id, "b");
    }
    // After preemption b is recomputed from the start, its outputs included.
    for (const auto& item : out.items) {
      if (item.request_id == "b" && saw_preemption && item.start_pos == 0) {
        EXPECT_GT(item.token_ids.size(), 4u);
        EXPECT_EQ(item.token_ids[4], 7);  // its first output token, recomputed
      }
    }
    std::unordered_map<std::string, TokenId> sampled;
    for (const auto& item : out.items) {
      if (item.sample) sampled[item.request_id] = 7;
    }
    ASSERT_TRUE(s->update(sampled).ok());
    ++steps;
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_GE(s->num_preemptions(), 1);
  EXPECT_EQ(s->find("a")->num_output_tokens(), 12);
  EXPECT_EQ(s->find("b")->num_output_tokens(), 12);
  EXPECT_EQ(s->find("b")->status, RequestStatus::kFinishedLength);
  EXPECT_EQ(s->num_free_pages(), 5);
}

TEST(ServeScheduler, AbortFreesPagesOfRunningAndWaitingRequests) {
  SchedulerConfig c = small_config();
  c.enable_prefix_cache = false;
  auto s = make(c);
  ASSERT_TRUE(s->add_request("a", iota_tokens(6), 8, {}, false).ok());
  apply(*s, step(*s));
  EXPECT_EQ(s->num_free_pages(), 14);
  ASSERT_TRUE(s->add_request("b", iota_tokens(6), 8, {}, false).ok());
  EXPECT_TRUE(s->abort("a"));
  EXPECT_EQ(s->num_free_pages(), 16);
  EXPECT_EQ(s->find("a")->status, RequestStatus::kFinishedAborted);
  EXPECT_FALSE(s->abort("a"));
  EXPECT_FALSE(s->abort("nobody"));
  EXPECT_TRUE(s->abort("b"));  // still waiting
  EXPECT_FALSE(s->has_unfinished());
  EXPECT_TRUE(s->release("a"));
  EXPECT_EQ(s->find("a"), nullptr);
}

TEST(ServeScheduler, AbortBetweenScheduleAndUpdateSkipsTheItem) {
  auto s = make(small_config());
  ASSERT_TRUE(s->add_request("a", iota_tokens(4), 8, {}, false).ok());
  ASSERT_TRUE(s->add_request("b", iota_tokens(4, 40), 8, {}, false).ok());
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 2u);
  EXPECT_TRUE(s->abort("a"));
  auto finished = s->update({{"b", 3}});  // no token for the aborted request is fine
  ASSERT_TRUE(finished.ok()) << finished.status().to_string();
  EXPECT_TRUE(s->find("a")->output_token_ids.empty());
  EXPECT_EQ(s->find("b")->output_token_ids, std::vector<TokenId>{3});
}

TEST(ServeScheduler, StopTokenFinishesAndStaysInTheOutput) {
  auto s = make(small_config());
  ASSERT_TRUE(s->add_request("a", iota_tokens(4), 8, {2, 9}, false).ok());
  ASSERT_TRUE(s->add_request("eos_ignored", iota_tokens(4), 3, {9}, true).ok());
  apply(*s, step(*s), 5);
  auto finished = apply(*s, step(*s), 9);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0], FinishedRequest("a", "stop"));
  EXPECT_EQ(s->find("a")->output_token_ids, (std::vector<TokenId>{5, 9}));
  finished = apply(*s, step(*s), 9);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0], FinishedRequest("eos_ignored", "length"));
  EXPECT_EQ(s->find("eos_ignored")->num_output_tokens(), 3);
}

TEST(ServeScheduler, FinishFromOutsideReleasesPagesButKeepsCachedOnes) {
  auto s = make(small_config());
  ASSERT_TRUE(s->add_request("a", iota_tokens(9), 20, {}, false).ok());
  apply(*s, step(*s));
  apply(*s, step(*s));
  EXPECT_TRUE(s->finish("a", RequestStatus::kFinishedStopped));
  EXPECT_EQ(s->find("a")->status, RequestStatus::kFinishedStopped);
  EXPECT_FALSE(s->finish("a", RequestStatus::kFinishedStopped));
  // 9 computed tokens: 2 full pages stay cached until the cache is reset.
  EXPECT_EQ(s->num_free_pages() + s->num_cached_pages(), 16);
  EXPECT_EQ(s->num_cached_pages(), 2);
  EXPECT_DOUBLE_EQ(s->kv_cache_usage(), 0.0);  // cached pages no request holds are free to use
  EXPECT_EQ(s->reset_prefix_cache(), 2);
  EXPECT_EQ(s->num_free_pages(), 16);
}

TEST(ServeScheduler, UpdateChecksItsInputAndCallOrder) {
  auto s = make(small_config());
  ASSERT_TRUE(s->add_request("a", iota_tokens(4), 8, {}, false).ok());
  SchedulerOutput out = step(*s);
  auto again = s->schedule();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), base::StatusCode::kFailedPrecondition);
  auto missing = s->update({});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no sampled token for request 'a'"),
            std::string::npos);
  auto extra = s->update({{"a", 1}, {"zzz", 1}});
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("'zzz'"), std::string::npos);
  // A rejected update changed nothing: the right one still applies.
  EXPECT_EQ(s->find("a")->num_computed_tokens, 0);
  ASSERT_TRUE(s->update({{"a", 1}}).ok());
  EXPECT_EQ(s->find("a")->num_computed_tokens, 4);
  EXPECT_GT(s->kv_cache_usage(), 0.0);
}

}  // namespace
}  // namespace torchtpu::serve
