#include "serve/block_hash.h"

#include "base/hash.h"

namespace torchtpu::serve {

namespace {

inline uint64_t fnv_byte(uint64_t h, uint8_t byte) {
  return (h ^ byte) * base::kFnvPrime;
}

// splitmix64's finalizer: FNV-1a's low bits mix poorly, and index buckets use them.
inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BlockHash block_hash(BlockHash parent, const TokenId* tokens, int32_t num_tokens) {
  uint64_t h = base::kFnvOffset;
  for (int shift = 0; shift < 64; shift += 8) {
    h = fnv_byte(h, static_cast<uint8_t>(parent >> shift));
  }
  for (int32_t i = 0; i < num_tokens; ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int shift = 0; shift < 32; shift += 8) h = fnv_byte(h, static_cast<uint8_t>(t >> shift));
  }
  return mix(h);
}

std::vector<BlockHash> block_hashes(const std::vector<TokenId>& tokens, int32_t page_size,
                                    int32_t max_blocks) {
  std::vector<BlockHash> out;
  if (page_size <= 0) return out;
  size_t n = tokens.size() / static_cast<size_t>(page_size);
  if (max_blocks >= 0 && static_cast<size_t>(max_blocks) < n) n = static_cast<size_t>(max_blocks);
  out.reserve(n);
  BlockHash parent = kRootBlockHash;
  for (size_t i = 0; i < n; ++i) {
    parent = block_hash(parent, tokens.data() + i * page_size, page_size);
    out.push_back(parent);
  }
  return out;
}

}  // namespace torchtpu::serve
