#include "serve/radix_cache.h"

#include <algorithm>
#include <queue>
#include <string_view>

#include "base/check.h"
#include "base/hash.h"

namespace torchtpu::serve {

namespace {

uint64_t fnv_page_hash(const TokenId* tokens, int32_t num_tokens) {
  return base::fnv1a(std::string_view(reinterpret_cast<const char*>(tokens),
                                      sizeof(TokenId) * static_cast<size_t>(num_tokens)));
}

}  // namespace

RadixCache::RadixCache(int32_t page_size, PageAllocator* allocator, PageHasher hasher)
    : page_size_(page_size),
      allocator_(allocator),
      hasher_(hasher ? std::move(hasher) : PageHasher(fnv_page_hash)),
      root_(std::make_unique<Node>()) {
  TORCHTPU_CHECK(page_size_ > 0, "radix cache needs a positive page size");
  TORCHTPU_CHECK(allocator_ != nullptr, "radix cache needs an allocator");
}

// Iterative throughout (here and in the walks below): a long multi-turn conversation makes a
// deep chain of nodes, and recursion (including the nodes' own destructors) could overflow.
RadixCache::~RadixCache() {
  std::vector<std::unique_ptr<Node>> nodes;
  nodes.push_back(std::move(root_));
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node* node = nodes[i].get();
    for (PageId p : node->pages) TORCHTPU_CHECK(allocator_->decref(p).ok(), "tree page was free");
    for (auto& [hash, bucket] : node->children) {
      for (auto& child : bucket) nodes.push_back(std::move(child));
    }
    node->children.clear();  // so destroying `nodes` never recurses
  }
}

uint64_t RadixCache::hash_page(const TokenId* page) const { return hasher_(page, page_size_); }

RadixCache::Node* RadixCache::find_child(Node* node, const TokenId* page) const {
  auto it = node->children.find(hash_page(page));
  if (it == node->children.end()) return nullptr;
  for (const auto& child : it->second) {
    if (std::equal(page, page + page_size_, child->tokens.begin())) return child.get();
  }
  return nullptr;
}

int32_t RadixCache::common_pages(const Node* node, const TokenId* tokens,
                                 int32_t max_pages) const {
  int32_t n = std::min(node->num_pages(), max_pages);
  for (int32_t i = 0; i < n; ++i) {
    const TokenId* mine = node->tokens.data() + static_cast<size_t>(i) * page_size_;
    if (!std::equal(mine, mine + page_size_, tokens + static_cast<size_t>(i) * page_size_)) {
      return i;
    }
  }
  return n;
}

void RadixCache::add_child(Node* parent, std::unique_ptr<Node> child) {
  child->parent = parent;
  child->bucket_key = hash_page(child->tokens.data());
  parent->children[child->bucket_key].push_back(std::move(child));
}

std::unique_ptr<RadixCache::Node> RadixCache::detach(Node* child) {
  // By key, not by tokens: an evicted leaf is detached after its last page is trimmed.
  Node* parent = child->parent;
  auto it = parent->children.find(child->bucket_key);
  TORCHTPU_CHECK(it != parent->children.end(), "radix child missing from its bucket");
  auto& bucket = it->second;
  auto slot = std::find_if(bucket.begin(), bucket.end(),
                           [child](const std::unique_ptr<Node>& c) { return c.get() == child; });
  TORCHTPU_CHECK(slot != bucket.end(), "radix child missing from its bucket");
  std::unique_ptr<Node> owned = std::move(*slot);
  bucket.erase(slot);
  if (bucket.empty()) parent->children.erase(it);
  owned->parent = nullptr;
  return owned;
}

RadixCache::Node* RadixCache::split(Node* node, int32_t num_pages) {
  TORCHTPU_CHECK(num_pages > 0 && num_pages < node->num_pages(), "split inside the node");
  Node* parent = node->parent;
  std::unique_ptr<Node> lower = detach(node);
  auto upper = std::make_unique<Node>();
  size_t cut = static_cast<size_t>(num_pages) * page_size_;
  upper->tokens.assign(lower->tokens.begin(), lower->tokens.begin() + cut);
  upper->pages.assign(lower->pages.begin(), lower->pages.begin() + num_pages);
  upper->hashes.assign(lower->hashes.begin(), lower->hashes.begin() + num_pages);
  upper->last_access = lower->last_access;
  lower->tokens.erase(lower->tokens.begin(), lower->tokens.begin() + cut);
  lower->pages.erase(lower->pages.begin(), lower->pages.begin() + num_pages);
  lower->hashes.erase(lower->hashes.begin(), lower->hashes.begin() + num_pages);
  Node* upper_raw = upper.get();
  add_child(upper_raw, std::move(lower));
  add_child(parent, std::move(upper));
  return upper_raw;
}

PrefixMatch RadixCache::match(const std::vector<TokenId>& tokens, int32_t max_tokens) {
  int32_t limit = static_cast<int32_t>(tokens.size());
  if (max_tokens >= 0) limit = std::min(limit, max_tokens);
  const int32_t total_pages = limit / page_size_;
  const uint64_t now = ++clock_;
  PrefixMatch result;
  Node* node = root_.get();
  int32_t page = 0;
  while (page < total_pages) {
    const TokenId* at = tokens.data() + static_cast<size_t>(page) * page_size_;
    Node* child = find_child(node, at);
    if (child == nullptr) break;
    int32_t k = common_pages(child, at, total_pages - page);
    child->last_access = now;
    result.pages.insert(result.pages.end(), child->pages.begin(), child->pages.begin() + k);
    page += k;
    if (k < child->num_pages()) break;
    node = child;
  }
  result.num_tokens = page * page_size_;
  return result;
}

int32_t RadixCache::insert(const std::vector<TokenId>& tokens, int32_t num_tokens,
                           const std::vector<PageId>& pages) {
  num_tokens = std::min(num_tokens, static_cast<int32_t>(tokens.size()));
  const int32_t total_pages = std::min(num_tokens / page_size_, static_cast<int32_t>(pages.size()));
  const uint64_t now = ++clock_;
  Node* node = root_.get();
  int32_t page = 0;
  while (page < total_pages) {
    const TokenId* at = tokens.data() + static_cast<size_t>(page) * page_size_;
    Node* child = find_child(node, at);
    if (child == nullptr) {
      auto fresh = std::make_unique<Node>();
      fresh->tokens.assign(at, tokens.data() + static_cast<size_t>(total_pages) * page_size_);
      fresh->pages.assign(pages.begin() + page, pages.begin() + total_pages);
      const std::optional<BlockHash> parent =
          node == root_.get() ? std::nullopt : std::optional<BlockHash>(node->hashes.back());
      BlockHash h = parent.value_or(kRootBlockHash);
      for (int32_t i = 0; i < fresh->num_pages(); ++i) {
        h = block_hash(h, fresh->tokens.data() + static_cast<size_t>(i) * page_size_, page_size_);
        fresh->hashes.push_back(h);
      }
      fresh->last_access = now;
      for (PageId p : fresh->pages) {
        TORCHTPU_CHECK(allocator_->incref(p).ok(), "inserted page must be allocated");
      }
      const int32_t adopted = fresh->num_pages();
      num_cached_pages_ += adopted;
      if (events_ != nullptr) {
        events_->push_back(KvEvent::stored(fresh->hashes, parent, fresh->tokens, page_size_));
      }
      add_child(node, std::move(fresh));
      return adopted;
    }
    int32_t k = common_pages(child, at, total_pages - page);
    if (k < child->num_pages()) child = split(child, k);
    child->last_access = now;
    node = child;
    page += k;
  }
  return 0;
}

int32_t RadixCache::evict(int32_t num_pages) {
  if (num_pages <= 0) return 0;
  auto older = [](const Node* a, const Node* b) { return a->last_access > b->last_access; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(older)> leaves(older);
  // Collect every leaf (iteratively: a long chat can make a deep tree).
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n != root_.get() && n->children.empty()) leaves.push(n);
    for (auto& [hash, bucket] : n->children) {
      for (auto& child : bucket) stack.push_back(child.get());
    }
  }
  int32_t freed = 0;
  std::vector<BlockHash> removed;
  while (freed < num_pages && !leaves.empty()) {
    Node* leaf = leaves.top();
    leaves.pop();
    // Trim from the tail while the tree holds the only reference.
    while (freed < num_pages && !leaf->pages.empty() &&
           allocator_->ref_count(leaf->pages.back()) == 1) {
      TORCHTPU_CHECK(allocator_->decref(leaf->pages.back()).ok(), "tree page was free");
      leaf->pages.pop_back();
      removed.push_back(leaf->hashes.back());
      leaf->hashes.pop_back();
      leaf->tokens.resize(leaf->tokens.size() - page_size_);
      --num_cached_pages_;
      ++freed;
    }
    if (leaf->pages.empty()) {
      Node* parent = leaf->parent;
      detach(leaf);  // destroys it
      if (parent != root_.get() && parent->children.empty()) leaves.push(parent);
    }
  }
  if (events_ != nullptr && !removed.empty()) {
    events_->push_back(KvEvent::removed(std::move(removed)));
  }
  return freed;
}

int32_t RadixCache::num_evictable_pages() const {
  // Children before parents: a node's pages are evictable only from its tail, and only once
  // everything below it is.
  std::vector<const Node*> order{root_.get()};
  for (size_t i = 0; i < order.size(); ++i) {
    for (const auto& [hash, bucket] : order[i]->children) {
      for (const auto& child : bucket) order.push_back(child.get());
    }
  }
  std::unordered_map<const Node*, bool> whole;  // every page under the node is evictable
  int32_t count = 0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node* node = *it;
    bool children_whole = true;
    for (const auto& [hash, bucket] : node->children) {
      for (const auto& child : bucket) children_whole = children_whole && whole[child.get()];
    }
    int32_t own = 0;
    if (children_whole) {
      for (int32_t i = node->num_pages() - 1; i >= 0; --i) {
        if (allocator_->ref_count(node->pages[i]) != 1) break;
        ++own;
      }
    }
    whole[node] = children_whole && own == node->num_pages();
    count += own;
  }
  return count;
}

int32_t RadixCache::num_nodes() const {
  int32_t n = 0;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const auto& [hash, bucket] : node->children) {
      for (const auto& child : bucket) {
        ++n;
        stack.push_back(child.get());
      }
    }
  }
  return n;
}

}  // namespace torchtpu::serve
