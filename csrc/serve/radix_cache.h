// RadixCache: a token-level radix tree of KV pages shared between requests (the idea of
// SGLang's RadixAttention, at page granularity).
//
// Contract:
// - Only FULL pages are cached: every node holds a page-aligned run of token ids and the
//   pages that hold their KV, so match lengths are multiples of `page_size`.
// - A hit is decided by comparing token ids. Children are bucketed by a hash of their first
//   page, but a bucket is only a shortlist: two different token sequences never share a
//   page, even when their hashes collide.
// - References: the tree owns one reference on every page it holds (taken by insert,
//   returned by eviction or destruction). match() takes none: a caller that keeps matched
//   pages increfs them itself, which is also what locks them against eviction.
// - Eviction frees only pages whose reference is the tree's alone, least recently used leaf
//   first, trimming a leaf from its tail (a node's pages are a prefix of its children's
//   context, so the tail is always the part no one else depends on).
// - Not thread-safe (owned by the single-threaded scheduler). The allocator must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "serve/block_hash.h"
#include "serve/kv_event.h"
#include "serve/page_allocator.h"

namespace torchtpu::serve {

struct PrefixMatch {
  int32_t num_tokens = 0;     // a multiple of page_size
  std::vector<PageId> pages;  // num_tokens / page_size pages, in order
};

class RadixCache {
 public:
  // Hashes one page of token ids (the bucket key for a child). Tests pass a colliding one.
  using PageHasher = std::function<uint64_t(const TokenId* tokens, int32_t num_tokens)>;

  RadixCache(int32_t page_size, PageAllocator* allocator, PageHasher hasher = nullptr);
  ~RadixCache();
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  // The longest cached prefix of tokens[0, max_tokens) (all of `tokens` when max_tokens < 0),
  // rounded down to full pages. Marks the matched nodes as most recently used.
  PrefixMatch match(const std::vector<TokenId>& tokens, int32_t max_tokens = -1);

  // Caches the full pages of tokens[0, num_tokens): pages[i] holds the KV of page i. Pages
  // whose tokens are already in the tree are left to the caller (the tree keeps its own
  // copy); the rest are adopted with one new reference each. Nodes split at the first page
  // that differs. Returns the number of pages adopted.
  int32_t insert(const std::vector<TokenId>& tokens, int32_t num_tokens,
                 const std::vector<PageId>& pages);

  // Frees up to `num_pages` pages held by the tree alone, LRU leaves first. Returns how many.
  int32_t evict(int32_t num_pages);
  // Frees every page held by the tree alone; pages that requests still use stay cached.
  int32_t reset() { return evict(num_cached_pages()); }

  // Appends the cache's KvEvents to `sink` from now on (nullptr: stop). The sink must
  // outlive the cache or be reset first.
  void set_event_sink(std::vector<KvEvent>* sink) { events_ = sink; }

  int32_t page_size() const { return page_size_; }
  int32_t num_cached_pages() const { return num_cached_pages_; }
  // Exactly the number of pages evict() could free now.
  int32_t num_evictable_pages() const;
  int32_t num_nodes() const;  // excluding the root; for tests and debugging

 private:
  struct Node {
    std::vector<TokenId> tokens;  // page-aligned run
    std::vector<PageId> pages;    // tokens.size() / page_size
    std::vector<BlockHash> hashes;  // block_hash of each page (its whole prefix)
    Node* parent = nullptr;
    // Bucketed by the hash of the child's first page; ties are resolved by comparing tokens.
    std::unordered_map<uint64_t, std::vector<std::unique_ptr<Node>>> children;
    uint64_t last_access = 0;
    uint64_t bucket_key = 0;  // hash of the first page, fixed while the node is linked
    int32_t num_pages() const { return static_cast<int32_t>(pages.size()); }
  };

  uint64_t hash_page(const TokenId* page) const;
  Node* find_child(Node* node, const TokenId* page) const;
  // How many leading pages of `node` equal the pages starting at `tokens` (at most
  // `max_pages`), compared token by token.
  int32_t common_pages(const Node* node, const TokenId* tokens, int32_t max_pages) const;
  // Splits `node` after its first `num_pages` pages; returns the new upper node.
  Node* split(Node* node, int32_t num_pages);
  void add_child(Node* parent, std::unique_ptr<Node> child);
  std::unique_ptr<Node> detach(Node* child);

  int32_t page_size_;
  PageAllocator* allocator_;
  PageHasher hasher_;
  std::unique_ptr<Node> root_;
  int32_t num_cached_pages_ = 0;
  uint64_t clock_ = 0;  // logical time for LRU order
  std::vector<KvEvent>* events_ = nullptr;
};

}  // namespace torchtpu::serve
