// LruMap: a map of at most `capacity` entries that drops its least recently used entry
// to make room for a new one. Bounds the process-wide executable caches, so no workload
// (a new program per shape, say) can grow them without limit.
// Thread safety: none; callers hold their own lock.
#pragma once

#include <cstddef>
#include <list>
#include <unordered_map>
#include <utility>

namespace torchtpu::base {

template <typename K, typename V>
class LruMap {
 public:
  explicit LruMap(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The entry for `key` (now the most recently used), or nullptr.
  V* find(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }

  // Inserts `value` under `key` unless the key is present; returns the entry kept and how
  // many entries were dropped to make room (0 or 1).
  std::pair<V*, size_t> insert(const K& key, V value) {
    if (V* present = find(key)) return {present, 0};
    size_t dropped = 0;
    while (index_.size() >= capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++dropped;
    }
    order_.emplace_front(key, std::move(value));
    index_.emplace(key, order_.begin());
    return {&order_.front().second, dropped};
  }

  // Drops least recently used entries until at most `n` are left; returns how many.
  size_t shrink_to(size_t n) {
    size_t dropped = 0;
    while (index_.size() > n) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++dropped;
    }
    return dropped;
  }

  size_t size() const { return index_.size(); }
  size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<K, V>;
  size_t capacity_;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<K, typename std::list<Entry>::iterator> index_;
};

}  // namespace torchtpu::base
