// KvEvent: one change to a replica's prefix cache, in the shape of vLLM's KV events
// (BlockStored, BlockRemoved, AllBlocksCleared), which llm-d's KV-cache indexer reads.
//
// The engine's radix cache records them as it adopts and evicts pages; the router's prefix
// index applies them. Hashes are block_hash.h's. Plain data, no behaviour.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "serve/block_hash.h"

namespace torchtpu::serve {

enum class KvEventKind { kBlockStored, kBlockRemoved, kAllBlocksCleared };

struct KvEvent {
  KvEventKind kind = KvEventKind::kAllBlocksCleared;
  // kBlockStored: the new pages in prefix order; kBlockRemoved: the pages dropped.
  std::vector<BlockHash> block_hashes;
  // kBlockStored: the page before block_hashes[0] (none when it is the sequence's first),
  // which an earlier event stored.
  std::optional<BlockHash> parent_block_hash;
  // kBlockStored: the tokens of those pages, block_size per hash.
  std::vector<TokenId> token_ids;
  int32_t block_size = 0;

  static KvEvent stored(std::vector<BlockHash> hashes, std::optional<BlockHash> parent,
                        std::vector<TokenId> tokens, int32_t block_size) {
    KvEvent e;
    e.kind = KvEventKind::kBlockStored;
    e.block_hashes = std::move(hashes);
    e.parent_block_hash = parent;
    e.token_ids = std::move(tokens);
    e.block_size = block_size;
    return e;
  }
  static KvEvent removed(std::vector<BlockHash> hashes) {
    KvEvent e;
    e.kind = KvEventKind::kBlockRemoved;
    e.block_hashes = std::move(hashes);
    return e;
  }
  static KvEvent cleared() { return KvEvent{}; }
};

const char* kv_event_kind_name(KvEventKind kind);  // "BlockStored", ... (vLLM's tags)

}  // namespace torchtpu::serve
