#include "serve/prefix_index.h"

#include <algorithm>

namespace torchtpu::serve {

void PrefixIndex::store(ReplicaId replica, const std::vector<BlockHash>& hashes) {
  auto& mine = confirmed_by_replica_[replica];
  for (BlockHash h : hashes) {
    if (!mine.insert(h).second) continue;
    confirmed_[h].push_back(replica);
  }
}

void PrefixIndex::drop_routed(Routed& routed, BlockHash hash) {
  auto it = routed.when.find(hash);
  if (it == routed.when.end()) return;
  routed.lru.erase(it->second.first);
  routed.when.erase(it);
}

void PrefixIndex::remove(ReplicaId replica, const std::vector<BlockHash>& hashes) {
  auto mine = confirmed_by_replica_.find(replica);
  auto routed = routed_.find(replica);
  for (BlockHash h : hashes) {
    if (routed != routed_.end()) drop_routed(routed->second, h);
    if (mine == confirmed_by_replica_.end() || mine->second.erase(h) == 0) continue;
    auto holders = confirmed_.find(h);
    if (holders == confirmed_.end()) continue;
    auto& v = holders->second;
    v.erase(std::remove(v.begin(), v.end(), replica), v.end());
    if (v.empty()) confirmed_.erase(holders);
  }
}

void PrefixIndex::clear(ReplicaId replica) {
  auto mine = confirmed_by_replica_.find(replica);
  if (mine != confirmed_by_replica_.end()) {
    for (BlockHash h : mine->second) {
      auto holders = confirmed_.find(h);
      if (holders == confirmed_.end()) continue;
      auto& v = holders->second;
      v.erase(std::remove(v.begin(), v.end(), replica), v.end());
      if (v.empty()) confirmed_.erase(holders);
    }
    confirmed_by_replica_.erase(mine);
  }
  routed_.erase(replica);
}

void PrefixIndex::record_routed(ReplicaId replica, const std::vector<BlockHash>& hashes,
                                int64_t now_ms) {
  auto cap = capacity_.find(replica);
  const int64_t capacity = cap == capacity_.end() ? config_.routed_capacity_blocks : cap->second;
  if (capacity <= 0) return;
  Routed& routed = routed_[replica];
  // Last block first, so the prompt's first block ends up most recent: a replica keeps a
  // prefix longest, and capacity trims prompts from their tails.
  for (auto h = hashes.rbegin(); h != hashes.rend(); ++h) {
    drop_routed(routed, *h);
    routed.lru.push_front(*h);
    routed.when[*h] = {routed.lru.begin(), now_ms};
  }
  while (static_cast<int64_t>(routed.lru.size()) > capacity) {
    routed.when.erase(routed.lru.back());
    routed.lru.pop_back();
  }
}

bool PrefixIndex::holds(ReplicaId replica, BlockHash hash, int64_t now_ms) const {
  auto holders = confirmed_.find(hash);
  if (holders != confirmed_.end() &&
      std::find(holders->second.begin(), holders->second.end(), replica) !=
          holders->second.end()) {
    return true;
  }
  auto routed = routed_.find(replica);
  if (routed == routed_.end()) return false;
  auto it = routed->second.when.find(hash);
  return it != routed->second.when.end() && now_ms - it->second.second < config_.routed_ttl_ms;
}

std::vector<int32_t> PrefixIndex::matched_blocks(const std::vector<BlockHash>& hashes,
                                                 const std::vector<ReplicaId>& replicas,
                                                 int64_t now_ms) const {
  std::vector<int32_t> matched(replicas.size(), 0);
  std::vector<size_t> live(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) live[i] = i;
  for (size_t b = 0; b < hashes.size() && !live.empty(); ++b) {
    size_t kept = 0;
    for (size_t i : live) {
      if (!holds(replicas[i], hashes[b], now_ms)) continue;
      ++matched[i];
      live[kept++] = i;
    }
    live.resize(kept);
  }
  return matched;
}

int64_t PrefixIndex::num_confirmed_blocks(ReplicaId replica) const {
  auto it = confirmed_by_replica_.find(replica);
  return it == confirmed_by_replica_.end() ? 0 : static_cast<int64_t>(it->second.size());
}

int64_t PrefixIndex::num_routed_blocks(ReplicaId replica) const {
  auto it = routed_.find(replica);
  return it == routed_.end() ? 0 : static_cast<int64_t>(it->second.lru.size());
}

}  // namespace torchtpu::serve
