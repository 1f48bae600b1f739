#include "serve/routing_policy.h"

#include <algorithm>

namespace torchtpu::serve {

std::vector<RankedReplica> RoutingPolicy::rank(const std::vector<ReplicaLoad>& candidates,
                                               const std::vector<int32_t>& matched_blocks,
                                               int32_t num_blocks) {
  const size_t n = candidates.size();
  std::vector<RankedReplica> out(n);
  if (n == 0) return out;
  const uint64_t turn = rotation_++;
  // Position in this request's rotation: the tie-breaker (and all of round-robin).
  auto rotated = [&](size_t i) { return (i + n - turn % n) % n; };
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  if (mode_ == RoutingMode::kRoundRobin) {
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return rotated(a) < rotated(b); });
    for (size_t k = 0; k < n; ++k) {
      out[k] = {candidates[order[k]].replica, matched_blocks[order[k]], 0.0};
    }
    return out;
  }
  std::vector<double> queue(n);
  for (size_t i = 0; i < n; ++i) {
    const ReplicaLoad& r = candidates[i];
    queue[i] = std::max<double>(r.num_in_flight, r.num_waiting + r.num_running);
  }
  const auto [lo, hi] = std::minmax_element(queue.begin(), queue.end());
  std::vector<double> score(n);
  for (size_t i = 0; i < n; ++i) {
    const double prefix = num_blocks > 0 ? static_cast<double>(matched_blocks[i]) / num_blocks : 0;
    const double q = *hi > *lo ? (*hi - queue[i]) / (*hi - *lo) : 1.0;
    const double kv = 1.0 - std::clamp(candidates[i].kv_cache_usage, 0.0, 1.0);
    score[i] = weights_.prefix * prefix + weights_.queue * q + weights_.kv_usage * kv;
  }
  std::vector<bool> over(n, false);
  const size_t best = std::max_element(score.begin(), score.end()) - score.begin();
  if (filter_.spill_threshold >= 0) {
    for (size_t i = 0; i < n; ++i) over[i] = queue[i] - *lo > filter_.spill_threshold;
  }
  if (over[best]) {
    // KV room: a spill computes the prompt's uncached blocks on its new replica, which
    // without that many free blocks evicts cached prefixes (other groups'), whose requests
    // then miss and queue in turn. So the best-scored replica is passed over only for one
    // within the bound that has room, and those without room rank behind it.
    std::vector<bool> room(n);
    bool any_room = false;
    for (size_t i = 0; i < n; ++i) {
      const int64_t free = candidates[i].free_blocks;
      room[i] = !over[i] && (free < 0 || free >= num_blocks - matched_blocks[i]);
      any_room = any_room || room[i];
    }
    if (any_room) {
      for (size_t i = 0; i < n; ++i) over[i] = !room[i];
    } else {
      over.assign(n, false);
      ++num_spills_withheld_;
    }
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (over[a] != over[b]) return !over[a];
    if (score[a] != score[b]) return score[a] > score[b];
    if (candidates[a].num_in_flight != candidates[b].num_in_flight) {
      return candidates[a].num_in_flight < candidates[b].num_in_flight;
    }
    return rotated(a) < rotated(b);
  });
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    out[k] = {candidates[i].replica, matched_blocks[i], score[i], over[i]};
  }
  if (over[best] && score[best] > score[order[0]]) ++num_spills_;
  return out;
}

bool parse_routing_mode(const std::string& name, RoutingMode* mode) {
  if (name == "cache-aware") {
    *mode = RoutingMode::kCacheAware;
  } else if (name == "round-robin") {
    *mode = RoutingMode::kRoundRobin;
  } else {
    return false;
  }
  return true;
}

}  // namespace torchtpu::serve
