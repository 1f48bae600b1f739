// DiskCache: serialized executables on disk, so a later process skips compiling.
//
// Layout: <root>/<identity hash, 16 hex>/<key, 16 hex>.pjrtexe, one file per executable.
// The root comes from default_disk_cache_dir(); an empty root disables the cache (every
// load misses, every store is a no-op).
//
// File format (all integers little-endian):
//   offset  0  magic "TTPUEXE\0"          (8 bytes)
//   offset  8  format version (kDiskCacheFormatVersion, u32), reserved (u32, zero)
//   offset 16  key (u64): the file's own cache key, so a misnamed file is caught
//   offset 24  payload length in bytes (u64)
//   offset 32  FNV-1a 64 of the payload (u64)
//   offset 40  payload: the bytes of Executable::serialize()
//
// Failure contract: nothing here is fatal. A corrupt entry (bad magic, version, key,
// length or checksum; or a payload the plugin refuses, reported through discard()) is
// logged to stderr as "torchtpu: disk cache entry <path> is corrupt (<reason>);
// recompiling", counted in `num_disk_cache_corrupt` and deleted. A failed store is
// counted in `num_disk_cache_write_failures` and logged on the first failure only (a
// read-only or full disk would otherwise log once per op).
//
// Size bound: the entries under the root (every plugin build's) take at most `max_bytes`
// (TORCHTPU_CACHE_MAX_SIZE, default 10 GiB; 0: no bound). A load that hits marks its entry
// as used now (its modification time). A store trims the root once the bytes this
// process stored since its last trim reach a sixteenth of the bound, and at its first
// store when no trim ran for an hour (`<root>/.last_trim`'s time; listing tens of thousands
// of entries takes ~0.1 s): the entries are summed, and while they exceed the bound the
// least recently used are deleted until they take at most three quarters of it (counted in
// `num_disk_cache_evictions`), never the entry the store just wrote nor one used since
// the listing; temp files a crashed writer left over an hour ago go too. The bound is thus
// soft: many short processes that each store less than a sixteenth of it may pass it for
// up to an hour; processes trimming at once may delete a little more than needed; a
// reader keeps a file it has opened. CompileCache marks an entry its memory tier keeps
// using as used too (touch()), at most every few minutes.
//
// Concurrency: a store writes a uniquely named temp file in the entry's directory and
// rename()s it over the entry, so readers in any process see either no file or a whole
// one, and concurrent writers of the same key simply replace each other's equal bytes.
// All methods may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace torchtpu::runtime {

inline constexpr uint32_t kDiskCacheFormatVersion = 1;
inline constexpr size_t kDiskCacheHeaderBytes = 40;

// TORCHTPU_CACHE_DIR if set ("" or "off" disables: returns ""), else
// $XDG_CACHE_HOME/torchtpu, else $HOME/.cache/torchtpu, else "" (no home: disabled).
std::string default_disk_cache_dir();

inline constexpr uint64_t kDefaultDiskCacheMaxBytes = uint64_t{10} << 30;
// TORCHTPU_CACHE_MAX_SIZE: bytes ("1000000"), or with a binary suffix K, M, G or T
// ("512M", "20G"); 0 for no bound; unset: kDefaultDiskCacheMaxBytes. kInvalidArgument
// for anything else.
base::StatusOr<uint64_t> disk_cache_max_bytes_from_env();

struct DiskCacheTrim {
  uint64_t bytes_before = 0;  // the entries' bytes when the trim began
  uint64_t bytes_after = 0;
  int64_t files_deleted = 0;
};

class DiskCache {
 public:
  // `root` "" disables the cache. `identity_hash` names the plugin build (and platform):
  // entries of different plugin builds live in different subdirectories.
  // `max_bytes` bounds the entries under `root` (0: no bound).
  DiskCache(std::string root, uint64_t identity_hash,
            uint64_t max_bytes = kDefaultDiskCacheMaxBytes);

  bool enabled() const { return !dir_.empty(); }
  // Directory holding this plugin's entries ("" when disabled).
  const std::string& dir() const { return dir_; }
  // Path of the entry for `key` ("" when disabled).
  std::string path_of(uint64_t key) const;

  // The payload stored for `key`, or nullopt on a miss. A corrupt entry is reported,
  // deleted and reported as a miss.
  std::optional<std::string> load(uint64_t key) const;
  // Writes `payload` as the entry for `key`. Returns false (after counting and maybe
  // logging) when the entry could not be written.
  bool store(uint64_t key, const std::string& payload) const;
  // Reports the entry for `key` as corrupt for `reason` (e.g. the plugin could not
  // deserialize it) and deletes it.
  void discard(uint64_t key, const std::string& reason) const;
  // Counts (and on the first failure logs) that the entry for `key` could not be written
  // for `reason`; store() reports its own failures through this.
  void report_write_failure(uint64_t key, const std::string& reason) const;

  // Marks the entry for `key` as used now (its modification time), if it exists.
  void touch(uint64_t key) const;
  // Deletes the least recently used entries under the root while they exceed the bound
  // (see above); store() calls it as it goes. Nothing when disabled or unbounded.
  DiskCacheTrim trim() const;

  uint64_t max_bytes() const { return max_bytes_; }

  // The file bytes store() writes; exposed for tests that build damaged entries.
  static std::string encode(uint64_t key, const std::string& payload);

 private:
  std::string root_;
  std::string dir_;
  uint64_t max_bytes_;
  mutable std::atomic<bool> write_failure_logged_{false};
  // Whether no process trimmed the root for an hour.
  bool last_trim_is_stale() const;
  // trim(), never deleting the file at `keep`.
  DiskCacheTrim trim_keeping(const std::string& keep) const;

  // Bytes this process stored since its last trim.
  mutable std::atomic<uint64_t> stored_since_trim_{0};
  mutable std::atomic<bool> first_store_seen_{false};
  mutable std::atomic<bool> trimming_{false};
};

}  // namespace torchtpu::runtime
