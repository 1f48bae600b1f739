#include "serve/ngram_proposer.h"

#include <algorithm>

namespace torchtpu::serve {

std::vector<TokenId> propose_ngram_drafts(const std::vector<TokenId>& prompt,
                                          const std::vector<TokenId>& output,
                                          const NgramConfig& config, int32_t max_tokens) {
  const auto np = static_cast<int64_t>(prompt.size());
  const int64_t len = np + static_cast<int64_t>(output.size());
  if (max_tokens <= 0 || config.min_n <= 0 || len < static_cast<int64_t>(config.min_n) + 1) {
    return {};
  }
  auto at = [&](int64_t i) { return i < np ? prompt[i] : output[i - np]; };
  // An occurrence ends at `end` < len - 1 (something follows it); its length is how many
  // tokens, backwards from `end`, equal the context's last ones. Ranked by length, then by
  // how many of max_tokens follow it (in a periodic context the latest occurrence sits just
  // before the end, with few tokens after it), then by recency.
  int64_t best_end = -1, best_n = 0, best_follow = 0;
  const TokenId last = at(len - 1);
  for (int64_t end = len - 2; end >= config.min_n - 1; --end) {
    if (at(end) != last) continue;
    int64_t n = 1;
    while (n < config.max_n && end - n >= 0 && at(end - n) == at(len - 1 - n)) ++n;
    const int64_t follow = std::min<int64_t>(max_tokens, len - 1 - end);
    if (n >= config.min_n && (n > best_n || (n == best_n && follow > best_follow))) {
      best_n = n;
      best_follow = follow;
      best_end = end;  // scanning backwards: ties keep the latest
      if (n == config.max_n && follow == max_tokens) break;
    }
  }
  if (best_end < 0) return {};
  std::vector<TokenId> drafts;
  const int64_t stop = std::min<int64_t>(len, best_end + 1 + max_tokens);
  for (int64_t i = best_end + 1; i < stop; ++i) drafts.push_back(at(i));
  return drafts;
}

}  // namespace torchtpu::serve
