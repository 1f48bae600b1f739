// N-gram (prompt lookup) drafts for speculative decoding: a request's own context often
// repeats itself (code being edited, a document being summarized, quoted input), so the
// tokens that followed an earlier occurrence of its last few tokens are a cheap guess at
// what comes next. The model then verifies all of them in one forward step.
#pragma once

#include <cstdint>
#include <vector>

#include "serve/radix_cache.h"  // TokenId

namespace torchtpu::serve {

struct NgramConfig {
  int32_t min_n = 2;  // shortest suffix that counts as a match
  int32_t max_n = 4;  // longest suffix compared
};

// The context is `prompt` followed by `output`. Finds the earlier occurrence of the
// context's last n tokens with the largest n in [min_n, max_n] (among those, one followed by
// the most tokens, up to max_tokens, and the latest of these: recent text predicts better)
// and returns up to `max_tokens` tokens that followed it. Empty when no suffix of min_n
// tokens occurs earlier, or max_tokens <= 0. O(context length * max_n), no allocation
// beyond the result.
std::vector<TokenId> propose_ngram_drafts(const std::vector<TokenId>& prompt,
                                          const std::vector<TokenId>& output,
                                          const NgramConfig& config, int32_t max_tokens);

}  // namespace torchtpu::serve
