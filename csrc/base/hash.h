// Stable 64-bit hashing (FNV-1a) for cache keys. Stable across processes and builds, so
// it can key the on-disk compile cache.
#pragma once

#include <cstdint>
#include <string_view>

namespace torchtpu::base {

inline constexpr uint64_t kFnvOffset = 1469598103934665603ull;
inline constexpr uint64_t kFnvPrime = 1099511628211ull;

inline uint64_t fnv1a(std::string_view bytes, uint64_t seed = kFnvOffset) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= kFnvPrime;
  }
  return h;
}

inline uint64_t hash_combine(uint64_t a, uint64_t b) {
  return a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
}

}  // namespace torchtpu::base
