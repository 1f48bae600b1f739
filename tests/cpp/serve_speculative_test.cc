// Speculative decoding in the scheduler: n-gram drafts, their budget and caps, applying a
// verification (accepted prefix + one token), releasing the pages of rejected drafts, stop
// tokens among accepted drafts, and the errors for a verification that cannot be right.
#include <gtest/gtest.h>

#include <numeric>

#include "serve/ngram_proposer.h"
#include "serve/scheduler.h"

namespace torchtpu::serve {
namespace {

TEST(NgramProposer, TakesWhatFollowedTheLongestEarlierMatch) {
  NgramConfig c{1, 3};
  // Suffix [2, 3]: at 1..2 (followed by 9) and 5..6 (followed by 4, 5); suffix [1, 2, 3]
  // only at 0..2, the longest: its followers are proposed.
  std::vector<TokenId> prompt = {1, 2, 3, 9, 8, 2, 3, 4, 5, 1, 2, 3};
  EXPECT_EQ(propose_ngram_drafts(prompt, {}, c, 3), (std::vector<TokenId>{9, 8, 2}));
  // The same context split between prompt and output.
  std::vector<TokenId> head(prompt.begin(), prompt.begin() + 7);
  std::vector<TokenId> tail(prompt.begin() + 7, prompt.end());
  EXPECT_EQ(propose_ngram_drafts(head, tail, c, 3), (std::vector<TokenId>{9, 8, 2}));
  // At most max_tokens, and no further than the context goes.
  EXPECT_EQ(propose_ngram_drafts(prompt, {}, c, 1), (std::vector<TokenId>{9}));
  EXPECT_EQ(propose_ngram_drafts({5, 6, 5}, {}, c, 4), (std::vector<TokenId>{6, 5}));
}

TEST(NgramProposer, PrefersTheLatestOfEquallyLongMatchesAndNeedsMinN) {
  // [7, 8] occurs at 0..1 (then 1) and 3..4 (then 2): the latest wins.
  std::vector<TokenId> ctx = {7, 8, 1, 7, 8, 2, 7, 8};
  EXPECT_EQ(propose_ngram_drafts(ctx, {}, {2, 4}, 2), (std::vector<TokenId>{2, 7}));
  // Only a one-token match exists; min_n 2 refuses it.
  EXPECT_TRUE(propose_ngram_drafts({4, 5, 6, 4}, {}, {2, 4}, 3).empty());
  EXPECT_EQ(propose_ngram_drafts({4, 5, 6, 4}, {}, {1, 4}, 3), (std::vector<TokenId>{5, 6, 4}));
  EXPECT_TRUE(propose_ngram_drafts({1, 2, 3}, {}, {1, 4}, 3).empty());
  EXPECT_TRUE(propose_ngram_drafts({1, 1}, {}, {1, 4}, 0).empty());
}

SchedulerConfig spec_config(int32_t k = 3) {
  SchedulerConfig c;
  c.num_pages = 16;
  c.page_size = 4;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 16;
  c.max_model_len = 64;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
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

TEST(ServeSpeculative, ConfigIsChecked) {
  SchedulerConfig c = spec_config();
  c.num_speculative_tokens = -1;
  EXPECT_FALSE(Scheduler::create(c).ok());
  c = spec_config();
  c.prompt_lookup_min = 3;
  c.prompt_lookup_max = 2;
  auto bad = Scheduler::create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("1 <= min <= max"), std::string::npos);
}

// A repeating prompt: the decode carries drafts; accepting some advances the computed
// tokens past them; the pages held only by rejected drafts are freed at once.
TEST(ServeSpeculative, AcceptedDraftsAreComputedAndRejectedPagesFreed) {
  auto s = make(spec_config());
  // 1 2 3 4 1 2 3: the suffix "1 2 3" occurred at the start, followed by 4 1 2 3.
  ASSERT_TRUE(s->add_request("a", {1, 2, 3, 4, 1, 2, 3}, 20, {}, false).ok());
  SchedulerOutput out = step(*s);
  ASSERT_EQ(out.items.size(), 1u);
  EXPECT_EQ(out.items[0].num_draft_tokens, 0);  // the prompt's prefill
  ASSERT_TRUE(s->update_tokens({{"a", {4}}}).ok());
  // Context 1 2 3 4 1 2 3 4: the last token and drafts 1 2 3.
  out = step(*s);
  ASSERT_EQ(out.items.size(), 1u);
  const ScheduledItem& item = out.items[0];
  EXPECT_EQ(item.token_ids, (std::vector<TokenId>{4, 1, 2, 3}));
  EXPECT_EQ(item.num_draft_tokens, 3);
  EXPECT_EQ(item.start_pos, 7);
  EXPECT_TRUE(item.sample);
  EXPECT_EQ(out.num_scheduled_tokens, 4);
  EXPECT_EQ(item.page_ids.size(), 3u);  // positions 7..10
  const int32_t free_before = s->num_free_pages();
  // Accept draft 1 only, then 9: the output grows by two, positions 7 and 8 are computed,
  // and the page of positions 8..11 stays (position 9 is next); nothing past it was held.
  ASSERT_TRUE(s->update_tokens({{"a", {1, 9}}}).ok());
  const Request* a = s->find("a");
  EXPECT_EQ(a->output_token_ids, (std::vector<TokenId>{4, 1, 9}));
  EXPECT_EQ(a->num_computed_tokens, 9);
  EXPECT_EQ(a->page_table.size(), 3u);
  EXPECT_EQ(s->num_free_pages(), free_before);
  // Drafts that reach a page of their own: rejecting them all frees it at once.
  ASSERT_TRUE(s->add_request("b", {5, 6, 7, 5, 6}, 20, {}, false, true).ok());
  out = step(*s);
  ASSERT_TRUE(s->update_tokens({{"a", {7}}, {"b", {7}}}).ok());
  out = step(*s);
  const ScheduledItem* bi = nullptr;
  std::unordered_map<std::string, std::vector<TokenId>> verdict;
  for (const auto& it : out.items) {
    if (it.request_id == "b") bi = &it;
    verdict[it.request_id] = {it.token_ids.back() + 1000};  // rejects every draft
  }
  ASSERT_NE(bi, nullptr);
  EXPECT_EQ(bi->token_ids, (std::vector<TokenId>{7, 5, 6, 7}));  // positions 5..8
  EXPECT_EQ(bi->page_ids.size(), 3u);
  const int32_t free_mid = s->num_free_pages();
  ASSERT_TRUE(s->update_tokens(verdict).ok());
  EXPECT_EQ(s->find("b")->num_computed_tokens, 6);
  EXPECT_EQ(s->find("b")->page_table.size(), 2u);  // 7 tokens known: 2 pages
  EXPECT_EQ(s->num_free_pages(), free_mid + 1);
}

TEST(ServeSpeculative, DraftsStopAtMaxNewTokensAndTheBudget) {
  SchedulerConfig c = spec_config(6);
  c.max_num_batched_tokens = 4;
  auto s = make(c);
  ASSERT_TRUE(s->add_request("a", {1, 2, 1, 2}, 3, {}, false).ok());  // prefill in one step
  step(*s);
  ASSERT_TRUE(s->update_tokens({{"a", {1}}}).ok());
  SchedulerOutput out = step(*s);
  // Two more tokens may come: one draft and the token after it.
  EXPECT_EQ(out.items[0].num_draft_tokens, 1);
  ASSERT_TRUE(s->update_tokens({{"a", {2, 1}}}).ok());
  EXPECT_EQ(s->find("a")->status, RequestStatus::kFinishedLength);
  // The budget bounds drafts too: 4 tokens, so the last one and at most 3 drafts.
  ASSERT_TRUE(s->add_request("b", {3, 4, 3, 4, 3, 4, 3, 4}, 20, {}, false).ok());
  step(*s);  // two prefill chunks of 4
  ASSERT_TRUE(s->update_tokens({}).ok());
  step(*s);
  ASSERT_TRUE(s->update_tokens({{"b", {3}}}).ok());
  out = step(*s);
  EXPECT_EQ(out.items[0].token_ids.size(), 4u);
  EXPECT_EQ(out.items[0].num_draft_tokens, 3);
}

TEST(ServeSpeculative, AStopTokenAmongAcceptedDraftsEndsTheRequestThere) {
  auto s = make(spec_config());
  ASSERT_TRUE(s->add_request("c", {5, 6, 0, 3, 5}, 20, {0}, false).ok());
  step(*s);
  ASSERT_TRUE(s->update_tokens({{"c", {6}}}).ok());
  SchedulerOutput out = step(*s);  // context 5 6 0 3 5 6: drafts 0 3 5
  ASSERT_EQ(out.items[0].num_draft_tokens, 3);
  auto finished = s->update_tokens({{"c", {0, 3, 5, 8}}});
  ASSERT_TRUE(finished.ok());
  ASSERT_EQ(finished->size(), 1u);
  EXPECT_EQ((*finished)[0], FinishedRequest("c", "stop"));
  EXPECT_EQ(s->find("c")->output_token_ids, (std::vector<TokenId>{6, 0}));
  EXPECT_EQ(s->num_free_pages() + s->num_cached_pages(), 16);
}

TEST(ServeSpeculative, AVerificationThatCannotBeRightChangesNothing) {
  auto s = make(spec_config());
  ASSERT_TRUE(s->add_request("a", {1, 2, 3, 1, 2}, 20, {}, false).ok());
  step(*s);
  ASSERT_TRUE(s->update_tokens({{"a", {3}}}).ok());
  SchedulerOutput out = step(*s);  // drafts 1 2 3
  ASSERT_EQ(out.items[0].num_draft_tokens, 3);
  auto wrong = s->update_tokens({{"a", {1, 7, 5}}});  // 7 is not draft 1
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("token 1 (7) is not draft 1 (2)"), std::string::npos);
  auto many = s->update_tokens({{"a", {1, 2, 3, 4, 5}}});
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("expected 1 to 4"), std::string::npos);
  EXPECT_FALSE(s->update_tokens({{"a", {}}}).ok());
  EXPECT_EQ(s->find("a")->num_computed_tokens, 5);
  ASSERT_TRUE(s->update_tokens({{"a", {1, 2, 3, 4}}}).ok());  // all drafts and a bonus token
  EXPECT_EQ(s->find("a")->num_computed_tokens, 9);
  EXPECT_EQ(s->find("a")->output_token_ids, (std::vector<TokenId>{3, 1, 2, 3, 4}));
}

TEST(ServeSpeculative, ARequestThatOptedOutGetsNoDrafts) {
  auto s = make(spec_config());
  ASSERT_TRUE(s->add_request("a", {1, 2, 1, 2}, 20, {}, false, /*speculative=*/false).ok());
  step(*s);
  ASSERT_TRUE(s->update_tokens({{"a", {1}}}).ok());
  SchedulerOutput out = step(*s);
  EXPECT_EQ(out.items[0].num_draft_tokens, 0);
  EXPECT_EQ(out.items[0].token_ids.size(), 1u);
}

}  // namespace
}  // namespace torchtpu::serve
