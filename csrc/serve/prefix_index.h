// PrefixIndex: which replica holds which KV block, for the router's prefix-affinity score.
//
// Entries come from two sources, kept apart:
// - confirmed: the replica said so in its KV events (store / remove / clear). Exact as long
//   as its event stream is complete (kv_event_stream.h clears a replica whose stream is not).
// - routed: the router sent that replica a request whose prompt has these blocks, so it will
//   hold them soon (once its prefill runs) or holds them already. Each such entry expires
//   `routed_ttl_ms` after it was last routed, and each replica keeps at most
//   `routed_capacity_blocks` of them, least recently routed dropped first. With events on,
//   they bridge the time until the replica's own events arrive (a burst of requests sharing
//   a new system prompt goes to one replica, not to all); with events off they are all the
//   router knows (approximate mode: give the TTL and capacity the replica's own bounds).
// A block counts for a replica when either source holds it. Not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "serve/block_hash.h"

namespace torchtpu::serve {

using ReplicaId = int32_t;

struct PrefixIndexConfig {
  int64_t routed_ttl_ms = 30'000;
  int64_t routed_capacity_blocks = 1 << 20;  // per replica
};

class PrefixIndex {
 public:
  explicit PrefixIndex(PrefixIndexConfig config = {}) : config_(config) {}

  // Confirmed entries (KV events).
  void store(ReplicaId replica, const std::vector<BlockHash>& hashes);
  void remove(ReplicaId replica, const std::vector<BlockHash>& hashes);  // both sources
  // Forgets everything about `replica`, both sources (AllBlocksCleared, a replica that
  // failed or whose event stream broke).
  void clear(ReplicaId replica);

  // The bound on `replica`'s routed entries (default: the config's), e.g. its KV capacity
  // in blocks in approximate mode.
  void set_routed_capacity(ReplicaId replica, int64_t blocks) { capacity_[replica] = blocks; }

  // Routed entries: `replica` was sent a prompt with these leading blocks at `now_ms`.
  void record_routed(ReplicaId replica, const std::vector<BlockHash>& hashes, int64_t now_ms);

  // For each of `replicas`, how many leading blocks of `hashes` it holds without a gap
  // (the longest consecutive cached prefix), counting routed entries younger than the TTL.
  std::vector<int32_t> matched_blocks(const std::vector<BlockHash>& hashes,
                                      const std::vector<ReplicaId>& replicas,
                                      int64_t now_ms) const;

  int64_t num_confirmed_blocks(ReplicaId replica) const;
  int64_t num_routed_blocks(ReplicaId replica) const;
  const PrefixIndexConfig& config() const { return config_; }

 private:
  struct Routed {
    std::list<BlockHash> lru;  // most recently routed first
    std::unordered_map<BlockHash, std::pair<std::list<BlockHash>::iterator, int64_t>> when;
  };
  bool holds(ReplicaId replica, BlockHash hash, int64_t now_ms) const;
  void drop_routed(Routed& routed, BlockHash hash);

  PrefixIndexConfig config_;
  // hash -> replicas that confirmed it; per replica, what it confirmed (for clear()).
  std::unordered_map<BlockHash, std::vector<ReplicaId>> confirmed_;
  std::unordered_map<ReplicaId, std::unordered_set<BlockHash>> confirmed_by_replica_;
  std::unordered_map<ReplicaId, Routed> routed_;
  std::unordered_map<ReplicaId, int64_t> capacity_;
};

}  // namespace torchtpu::serve
