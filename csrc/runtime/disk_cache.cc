#include "runtime/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/hash.h"
#include "base/metrics.h"

namespace torchtpu::runtime {

namespace {

constexpr char kMagic[8] = {'T', 'T', 'P', 'U', 'E', 'X', 'E', '\0'};

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_u(const std::string& in, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  }
  return v;
}

// Reads the whole file. nullopt when it cannot be opened (a miss, not corruption: the
// common case is that it does not exist).
std::optional<std::string> read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return std::nullopt;
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return std::nullopt;
  return bytes;
}

// Why `bytes` is not a valid entry for `key`, or "" when it is.
std::string check_entry(const std::string& bytes, uint64_t key) {
  if (bytes.size() < kDiskCacheHeaderBytes) {
    return "truncated header: " + std::to_string(bytes.size()) + " bytes (expected at least " +
           std::to_string(kDiskCacheHeaderBytes) + ")";
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return "bad magic";
  uint64_t version = get_u(bytes, 8, 4);
  if (version != kDiskCacheFormatVersion) {
    return "format version " + std::to_string(version) + " (expected " +
           std::to_string(kDiskCacheFormatVersion) + ")";
  }
  uint64_t stored_key = get_u(bytes, 16, 8);
  if (stored_key != key) return "key " + hex16(stored_key) + " (expected " + hex16(key) + ")";
  uint64_t length = get_u(bytes, 24, 8);
  uint64_t actual = bytes.size() - kDiskCacheHeaderBytes;
  if (length != actual) {
    return std::string(actual < length ? "truncated payload" : "trailing bytes") + ": " +
           std::to_string(actual) + " bytes (expected " + std::to_string(length) + ")";
  }
  uint64_t checksum = get_u(bytes, 32, 8);
  std::string_view payload(bytes.data() + kDiskCacheHeaderBytes, actual);
  if (base::fnv1a(payload) != checksum) return "payload checksum mismatch";
  return "";
}

// A plugin build's directory under the root: its identity hash, 16 lowercase hex digits
// (the root also holds other things: converted models, measured peaks).
bool is_identity_dir(const std::string& name) {
  return name.size() == 16 && std::all_of(name.begin(), name.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

bool is_entry(const std::string& name) {
  constexpr std::string_view kSuffix = ".pjrtexe";
  return name.size() > kSuffix.size() &&
         name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

bool is_temp(const std::string& name) {
  return !name.empty() && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

// A temp file this old was left by a writer that died before its rename.
constexpr auto kStaleTemp = std::chrono::hours(1);
// Under the root: touched by every trim.
constexpr char kLastTrimFile[] = ".last_trim";
constexpr auto kTrimInterval = std::chrono::hours(1);

}  // namespace

base::StatusOr<uint64_t> disk_cache_max_bytes_from_env() {
  const char* v = std::getenv("TORCHTPU_CACHE_MAX_SIZE");
  if (v == nullptr || *v == '\0') return kDefaultDiskCacheMaxBytes;
  std::string text(v);
  auto invalid = [&] {
    return base::invalid_argument(
        "tpu: TORCHTPU_CACHE_MAX_SIZE='" + text +
        "' is not a size for the compile cache on disk (expected bytes, or a whole number "
        "with K, M, G or T: \"512M\", \"20G\"; 0 for no bound; default 10G)");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  // 19 digits always fit in 64 bits.
  if (digits == 0 || digits > 19) return invalid();
  uint64_t n = std::stoull(text.substr(0, digits));
  int shift = 0;
  if (text.size() == digits + 1) {
    switch (std::toupper(static_cast<unsigned char>(text[digits]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: return invalid();
    }
  } else if (text.size() != digits) {
    return invalid();
  }
  if (n > (UINT64_MAX >> shift)) return invalid();
  return n << shift;
}

std::string default_disk_cache_dir() {
  if (const char* dir = std::getenv("TORCHTPU_CACHE_DIR")) {
    std::string d(dir);
    if (d.empty() || d == "off") return "";
    return d;
  }
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/torchtpu";
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return std::string(home) + "/.cache/torchtpu";
  return "";
}

DiskCache::DiskCache(std::string root, uint64_t identity_hash, uint64_t max_bytes)
    : root_(std::move(root)), max_bytes_(max_bytes) {
  if (!root_.empty()) dir_ = root_ + "/" + hex16(identity_hash);
}

std::string DiskCache::path_of(uint64_t key) const {
  if (!enabled()) return "";
  return dir_ + "/" + hex16(key) + ".pjrtexe";
}

std::string DiskCache::encode(uint64_t key, const std::string& payload) {
  std::string out(kMagic, sizeof(kMagic));
  put_u32(out, kDiskCacheFormatVersion);
  put_u32(out, 0);
  put_u64(out, key);
  put_u64(out, payload.size());
  put_u64(out, base::fnv1a(payload));
  out += payload;
  return out;
}

std::optional<std::string> DiskCache::load(uint64_t key) const {
  if (!enabled()) return std::nullopt;
  std::optional<std::string> bytes = read_file(path_of(key));
  if (!bytes) return std::nullopt;
  std::string why = check_entry(*bytes, key);
  if (!why.empty()) {
    discard(key, why);
    return std::nullopt;
  }
  touch(key);
  return bytes->substr(kDiskCacheHeaderBytes);
}

void DiskCache::touch(uint64_t key) const {
  // A read-only cache directory keeps the old time.
  if (enabled()) ::utimensat(AT_FDCWD, path_of(key).c_str(), nullptr, 0);
}

void DiskCache::discard(uint64_t key, const std::string& reason) const {
  std::string path = path_of(key);
  std::fprintf(stderr, "torchtpu: disk cache entry %s is corrupt (%s); recompiling\n",
               path.c_str(), reason.c_str());
  base::counter_add("num_disk_cache_corrupt");
  std::error_code ec;
  std::filesystem::remove(path, ec);
}

void DiskCache::report_write_failure(uint64_t key, const std::string& reason) const {
  base::counter_add("num_disk_cache_write_failures");
  if (!write_failure_logged_.exchange(true)) {
    std::fprintf(stderr,
                 "torchtpu: cannot write disk cache entry %s (%s); compiled programs will "
                 "not be cached on disk\n",
                 path_of(key).c_str(), reason.c_str());
  }
}

bool DiskCache::store(uint64_t key, const std::string& payload) const {
  if (!enabled()) return true;
  std::string path = path_of(key);
  auto fail = [&](const std::string& why) {
    report_write_failure(key, why);
    return false;
  };
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return fail("cannot create " + dir_ + ": " + ec.message());

  // Unique per process and per call, so concurrent writers never share a temp file.
  static std::atomic<uint64_t> next_temp{0};
  std::string temp = dir_ + "/." + hex16(key) + ".tmp." + std::to_string(::getpid()) + "." +
                     std::to_string(next_temp.fetch_add(1));
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (f == nullptr) return fail(std::strerror(errno));
  std::string bytes = encode(key, payload);
  bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  int write_errno = errno;
  if (std::fclose(f) != 0 && written) {
    written = false;
    write_errno = errno;
  }
  if (!written) {
    std::filesystem::remove(temp, ec);
    return fail(std::strerror(write_errno));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    int rename_errno = errno;
    std::filesystem::remove(temp, ec);
    return fail(std::string("rename: ") + std::strerror(rename_errno));
  }
  base::counter_add("num_disk_cache_writes");
  if (max_bytes_ > 0) {
    bool due = stored_since_trim_.fetch_add(bytes.size()) + bytes.size() >= max_bytes_ / 16;
    // A process's first store trims when no process did for an hour: a run of short
    // processes, each storing a little, still trims, and a long-lived cache of tens of
    // thousands of entries is not listed by every process that compiles once.
    if (!due && !first_store_seen_.exchange(true)) due = last_trim_is_stale();
    if (due && !trimming_.exchange(true)) {
      stored_since_trim_.store(0);
      try {
        trim_keeping(path);
      } catch (const std::exception&) {
        // Out of memory listing the directory: the entry is stored; the next trim retries.
      }
      trimming_.store(false);
    }
  }
  return true;
}

bool DiskCache::last_trim_is_stale() const {
  std::error_code ec;
  auto last = std::filesystem::last_write_time(root_ + "/" + kLastTrimFile, ec);
  return ec || std::filesystem::file_time_type::clock::now() - last > kTrimInterval;
}

DiskCacheTrim DiskCache::trim() const { return trim_keeping(""); }

DiskCacheTrim DiskCache::trim_keeping(const std::string& keep) const {
  namespace fs = std::filesystem;
  DiskCacheTrim result;
  if (!enabled() || max_bytes_ == 0) return result;
  struct Entry {
    fs::file_time_type used;
    uint64_t bytes;
    fs::path path;
  };
  std::vector<Entry> entries;
  const auto now = fs::file_time_type::clock::now();
  std::error_code ec;
  for (fs::directory_iterator dir(root_, ec), end; !ec && dir != end; dir.increment(ec)) {
    std::error_code e;
    if (!is_identity_dir(dir->path().filename().string()) || !dir->is_directory(e)) continue;
    for (fs::directory_iterator f(dir->path(), e); !e && f != end; f.increment(e)) {
      std::error_code fe;
      std::string name = f->path().filename().string();
      if (!(is_entry(name) || is_temp(name)) || !f->is_regular_file(fe)) continue;
      uint64_t bytes = f->file_size(fe);
      if (fe) continue;
      fs::file_time_type used = f->last_write_time(fe);
      if (fe) continue;
      if (is_temp(name)) {  // a store in flight, or a dead writer's
        if (now - used > kStaleTemp) fs::remove(f->path(), fe);
        continue;
      }
      result.bytes_before += bytes;
      if (f->path() != keep) entries.push_back({used, bytes, f->path()});
    }
  }
  result.bytes_after = result.bytes_before;
  // When this trim ran, for the next processes' first stores (last_trim_is_stale).
  std::string marker = root_ + "/" + kLastTrimFile;
  if (std::FILE* f = std::fopen(marker.c_str(), "ab")) std::fclose(f);
  ::utimensat(AT_FDCWD, marker.c_str(), nullptr, 0);
  if (result.bytes_before <= max_bytes_) return result;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  const uint64_t target = max_bytes_ / 4 * 3;
  for (const Entry& entry : entries) {
    if (result.bytes_after <= target) break;
    std::error_code e;
    // Used since it was listed (a load in another process): kept.
    if (fs::last_write_time(entry.path, e) > entry.used && !e) continue;
    bool removed = fs::remove(entry.path, e);
    if (e) continue;  // still there (a permission): it keeps its bytes
    result.bytes_after -= entry.bytes;  // removed here, or by another process's trim
    result.files_deleted += removed;
  }
  base::counter_add("num_disk_cache_evictions", result.files_deleted);
  return result;
}

}  // namespace torchtpu::runtime
