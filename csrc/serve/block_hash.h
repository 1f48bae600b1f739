// Block hashes: the identity of one full KV page ("block" in vLLM's and llm-d's words) by
// the tokens it holds and everything before them.
//
// hash(page i) = mix(FNV-1a(hash(page i-1) as 8 little-endian bytes, then the page's token
// ids as 4 little-endian bytes each)), with kRootBlockHash standing for the page before the
// first. Two pages get the same hash only when their whole prefixes are equal (up to 64-bit
// collisions), so a hash names a prefix, not a page of text. The engine publishes these
// hashes in its KV events and the router computes them over a request's prompt: both call
// this one function, so they agree by construction. Stable across processes and builds.
#pragma once

#include <cstdint>
#include <vector>

namespace torchtpu::serve {

using TokenId = int32_t;
using BlockHash = uint64_t;

// The parent of a sequence's first page.
inline constexpr BlockHash kRootBlockHash = 0x6b765f726f6f7421ull;

BlockHash block_hash(BlockHash parent, const TokenId* tokens, int32_t num_tokens);

// The hashes of the full pages of `tokens` (a trailing partial page has none), chained from
// kRootBlockHash. At most `max_blocks` when it is non-negative.
std::vector<BlockHash> block_hashes(const std::vector<TokenId>& tokens, int32_t page_size,
                                    int32_t max_blocks = -1);

}  // namespace torchtpu::serve
