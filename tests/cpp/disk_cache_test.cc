// The on-disk tier of CompileCache on the real XLA CPU plugin: hits across cache
// instances and processes, damaged entries, disabled and unwritable cache directories.
//
// A "second process" is simulated by a second CompileCache over the same client (an empty
// memory tier), and once for real: the binary re-executes itself with --disk-cache-child.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/metrics.h"
#include "lowering/hlo_builder.h"
#include "runtime/disk_cache.h"
#include "test_plugin.h"

extern char** environ;

namespace torchtpu {
namespace {

namespace fs = std::filesystem;
using base::counter_value;
using base::DType;
using lowering::Builder;
using lowering::TensorType;
using runtime::CompileCache;
using runtime::DiskCache;

constexpr char kChildFlag[] = "--disk-cache-child";

std::string add_module() {
  Builder b;
  auto x = b.param(TensorType{DType::kF32, {2, 3}});
  auto y = b.param(TensorType{DType::kF32, {2, 3}});
  return b.finish({b.add(x, y)});
}

std::string mul_module() {
  Builder b;
  auto x = b.param(TensorType{DType::kF32, {2, 3}});
  auto y = b.param(TensorType{DType::kF32, {2, 3}});
  return b.finish({b.mul(x, y)});
}

// Runs an add_module() executable; returns "" on success or what went wrong.
std::string check_add_runs(const runtime::ExecutablePtr& exe, int device) {
  auto client = testing::test_client();
  std::vector<float> a{1, 2, 3, 4, 5, 6}, c{10, 20, 30, 40, 50, 60};
  auto ba = client->buffer_from_host(a.data(), DType::kF32, {2, 3}, device);
  auto bc = client->buffer_from_host(c.data(), DType::kF32, {2, 3}, device);
  if (!ba.ok() || !bc.ok()) return "transfer failed";
  auto out = exe->execute({ba->get(), bc->get()});
  if (!out.ok()) return out.status().to_string();
  if (out->size() != 1 || (*out)[0]->device_index() != device) return "wrong outputs";
  std::vector<float> result(6);
  if (!(*out)[0]->to_host(result.data(), 24).ok()) return "to_host failed";
  if (result != std::vector<float>{11, 22, 33, 44, 55, 66}) return "wrong values";
  return "";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Files under `dir` but the trims' marker (.last_trim, see disk_cache.h).
size_t count_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return 0;
  size_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    n += e.is_regular_file() && e.path().filename() != ".last_trim";
  }
  return n;
}

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "torchtpu_disk_cache_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  // Compiles add_module() into a fresh cache, damages its entry with `damage`, and checks
  // that a second cache recompiles, logs `reason`, and leaves a valid entry behind.
  void expect_recompile_after(const std::function<void(const std::string& path)>& damage,
                              const std::string& reason) {
    auto client = testing::test_client();
    CompileCache first(client, root_);
    ASSERT_TRUE(first.get_or_compile(add_module(), 0).ok());
    std::string path = first.disk_cache().path_of(first.key_of(add_module(), 0));
    std::string valid = read_bytes(path);
    ASSERT_GT(valid.size(), runtime::kDiskCacheHeaderBytes);
    damage(path);
    ASSERT_NE(read_bytes(path), valid);

    int64_t compiles = counter_value("num_compiles");
    int64_t corrupt = counter_value("num_disk_cache_corrupt");
    int64_t writes = counter_value("num_disk_cache_writes");
    CompileCache second(client, root_);
    ::testing::internal::CaptureStderr();
    auto exe = second.get_or_compile(add_module(), 0);
    std::string log = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    EXPECT_EQ(check_add_runs(*exe, 0), "");
    EXPECT_EQ(counter_value("num_compiles"), compiles + 1);
    EXPECT_EQ(counter_value("num_disk_cache_corrupt"), corrupt + 1);
    EXPECT_EQ(counter_value("num_disk_cache_writes"), writes + 1);
    EXPECT_NE(log.find("torchtpu: disk cache entry " + path + " is corrupt ("), std::string::npos)
        << log;
    EXPECT_NE(log.find(reason), std::string::npos) << log;
    EXPECT_NE(log.find("); recompiling"), std::string::npos) << log;

    // The replacement is whole: a third cache loads it without compiling.
    EXPECT_EQ(read_bytes(path).substr(0, 24), valid.substr(0, 24));
    int64_t disk_hits = counter_value("num_compile_cache_hits_disk");
    compiles = counter_value("num_compiles");
    CompileCache third(client, root_);
    auto again = third.get_or_compile(add_module(), 0);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(counter_value("num_compiles"), compiles);
    EXPECT_EQ(counter_value("num_compile_cache_hits_disk"), disk_hits + 1);
  }

  std::string root_;
};

TEST_F(DiskCacheTest, SecondCacheHitsDiskAndRuns) {
  auto client = testing::test_client();
  int64_t compiles = counter_value("num_compiles");
  int64_t writes = counter_value("num_disk_cache_writes");
  CompileCache first(client, root_);
  auto e1 = first.get_or_compile(add_module(), 0);
  ASSERT_TRUE(e1.ok()) << e1.status().to_string();
  EXPECT_EQ(counter_value("num_compiles"), compiles + 1);
  EXPECT_EQ(counter_value("num_disk_cache_writes"), writes + 1);
  std::string path = first.disk_cache().path_of(first.key_of(add_module(), 0));
  EXPECT_TRUE(fs::exists(path)) << path;
  EXPECT_EQ(fs::path(path).filename().string().size(), 16u + std::string(".pjrtexe").size());
  EXPECT_EQ(fs::path(path).parent_path().parent_path(), fs::path(root_));
  EXPECT_EQ(count_files(root_), 1u);  // no temp files left behind

  int64_t disk_hits = counter_value("num_compile_cache_hits_disk");
  int64_t memory_hits = counter_value("num_compile_cache_hits_memory");
  CompileCache second(client, root_);
  auto e2 = second.get_or_compile(add_module(), 0);
  ASSERT_TRUE(e2.ok()) << e2.status().to_string();
  EXPECT_EQ(counter_value("num_compiles"), compiles + 1);
  EXPECT_EQ(counter_value("num_compile_cache_hits_disk"), disk_hits + 1);
  EXPECT_EQ(counter_value("num_disk_cache_writes"), writes + 1);
  EXPECT_EQ((*e2)->num_outputs(), 1u);
  EXPECT_EQ(check_add_runs(*e2, 0), "");

  // The disk hit joined the memory tier.
  auto e3 = second.get_or_compile(add_module(), 0);
  ASSERT_TRUE(e3.ok());
  EXPECT_EQ(e3->get(), e2->get());
  EXPECT_EQ(counter_value("num_compile_cache_hits_memory"), memory_hits + 1);
  EXPECT_EQ(counter_value("num_compile_cache_hits_disk"), disk_hits + 1);
}

TEST_F(DiskCacheTest, EntriesAreKeyedByDevice) {
  auto client = testing::test_client();
  CompileCache first(client, root_);
  ASSERT_TRUE(first.get_or_compile(add_module(), 0).ok());
  ASSERT_TRUE(first.get_or_compile(add_module(), 1).ok());
  EXPECT_NE(first.key_of(add_module(), 0), first.key_of(add_module(), 1));
  EXPECT_EQ(count_files(root_), 2u);

  int64_t compiles = counter_value("num_compiles");
  CompileCache second(client, root_);
  auto exe = second.get_or_compile(add_module(), 1);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  EXPECT_EQ(counter_value("num_compiles"), compiles);
  EXPECT_EQ((*exe)->device_index(), 1);
  EXPECT_EQ(check_add_runs(*exe, 1), "");
}

TEST_F(DiskCacheTest, FlippedPayloadBytesRecompile) {
  expect_recompile_after(
      [](const std::string& path) {
        std::string bytes = read_bytes(path);
        size_t mid = runtime::kDiskCacheHeaderBytes + (bytes.size() - 40) / 2;
        for (size_t i = mid; i < mid + 8; ++i) bytes[i] = static_cast<char>(~bytes[i]);
        write_bytes(path, bytes);
      },
      "payload checksum mismatch");
}

TEST_F(DiskCacheTest, TruncatedPayloadRecompiles) {
  expect_recompile_after(
      [](const std::string& path) { fs::resize_file(path, fs::file_size(path) / 2); },
      "truncated payload");
}

TEST_F(DiskCacheTest, TruncatedHeaderRecompiles) {
  expect_recompile_after([](const std::string& path) { fs::resize_file(path, 10); },
                         "truncated header: 10 bytes");
}

TEST_F(DiskCacheTest, EmptyFileRecompiles) {
  expect_recompile_after([](const std::string& path) { fs::resize_file(path, 0); },
                         "truncated header: 0 bytes");
}

TEST_F(DiskCacheTest, GarbageRecompiles) {
  expect_recompile_after(
      [](const std::string& path) {
        std::string garbage(4096, '\0');
        for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>(i * 131 + 7);
        write_bytes(path, garbage);
      },
      "bad magic");
}

TEST_F(DiskCacheTest, OtherFormatVersionRecompiles) {
  expect_recompile_after(
      [](const std::string& path) {
        std::string bytes = read_bytes(path);
        bytes[8] = 99;
        write_bytes(path, bytes);
      },
      "format version 99 (expected 1)");
}

TEST_F(DiskCacheTest, EntryOfAnotherKeyRecompiles) {
  // A valid entry under the wrong name: the mul program's file copied over the add's.
  std::string root = root_;
  expect_recompile_after(
      [root](const std::string& path) {
        CompileCache other(testing::test_client(), root);
        ASSERT_TRUE(other.get_or_compile(mul_module(), 0).ok());
        std::string mul_path = other.disk_cache().path_of(other.key_of(mul_module(), 0));
        fs::copy_file(mul_path, path, fs::copy_options::overwrite_existing);
      },
      "key ");
}

TEST_F(DiskCacheTest, UndeserializablePayloadRecompiles) {
  // Header and checksum intact, but the plugin refuses the bytes.
  expect_recompile_after(
      [](const std::string& path) {
        std::string bytes = read_bytes(path);
        uint64_t key = 0;
        for (int i = 0; i < 8; ++i) {
          key |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[16 + i])) << (8 * i);
        }
        write_bytes(path, DiskCache::encode(key, "not a serialized executable"));
      },
      "plugin cannot load it");
}

TEST_F(DiskCacheTest, DisabledCacheWritesNothing) {
  auto client = testing::test_client();
  int64_t writes = counter_value("num_disk_cache_writes");
  int64_t compiles = counter_value("num_compiles");
  CompileCache cache(client, "");
  EXPECT_FALSE(cache.disk_cache().enabled());
  EXPECT_EQ(cache.disk_cache().path_of(1), "");
  auto exe = cache.get_or_compile(add_module(), 0);
  ASSERT_TRUE(exe.ok());
  EXPECT_EQ(check_add_runs(*exe, 0), "");
  EXPECT_EQ(counter_value("num_disk_cache_writes"), writes);
  EXPECT_EQ(counter_value("num_compiles"), compiles + 1);
  EXPECT_EQ(count_files(root_), 0u);

  // And a second disabled cache compiles again: nothing was kept anywhere.
  CompileCache again(client, "");
  ASSERT_TRUE(again.get_or_compile(add_module(), 0).ok());
  EXPECT_EQ(counter_value("num_compiles"), compiles + 2);
}

// Sets an environment variable for one scope (nullptr unsets), restoring it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  bool had_;
  std::string old_;
};

TEST(DiskCacheLocation, FollowsEnvironment) {
  {
    ScopedEnv dir("TORCHTPU_CACHE_DIR", "/some/dir");
    EXPECT_EQ(runtime::default_disk_cache_dir(), "/some/dir");
  }
  {
    ScopedEnv dir("TORCHTPU_CACHE_DIR", "");
    EXPECT_EQ(runtime::default_disk_cache_dir(), "");
  }
  {
    ScopedEnv dir("TORCHTPU_CACHE_DIR", "off");
    EXPECT_EQ(runtime::default_disk_cache_dir(), "");
  }
  ScopedEnv dir("TORCHTPU_CACHE_DIR", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(runtime::default_disk_cache_dir(), "/xdg/torchtpu");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  {
    ScopedEnv home("HOME", "/home/u");
    EXPECT_EQ(runtime::default_disk_cache_dir(), "/home/u/.cache/torchtpu");
  }
  ScopedEnv home("HOME", nullptr);
  EXPECT_EQ(runtime::default_disk_cache_dir(), "");
  EXPECT_FALSE(DiskCache(runtime::default_disk_cache_dir(), 7).enabled());
}

TEST_F(DiskCacheTest, UnwritableDirectoryDoesNotFailCompile) {
  // A regular file where a directory must go: creating it fails even for root, which
  // permission bits would not stop.
  std::string blocker = root_ + "/not_a_dir";
  write_bytes(blocker, "x");
  auto client = testing::test_client();
  int64_t failures = counter_value("num_disk_cache_write_failures");
  int64_t writes = counter_value("num_disk_cache_writes");
  CompileCache cache(client, blocker + "/cache");
  ::testing::internal::CaptureStderr();
  auto add = cache.get_or_compile(add_module(), 0);
  auto mul = cache.get_or_compile(mul_module(), 0);
  std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(add.ok()) << add.status().to_string();
  ASSERT_TRUE(mul.ok()) << mul.status().to_string();
  EXPECT_EQ(check_add_runs(*add, 0), "");
  EXPECT_EQ(counter_value("num_disk_cache_write_failures"), failures + 2);
  EXPECT_EQ(counter_value("num_disk_cache_writes"), writes);
  // Logged once, not once per program.
  size_t first = log.find("torchtpu: cannot write disk cache entry");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("torchtpu: cannot write disk cache entry", first + 1), std::string::npos)
      << log;
  EXPECT_EQ(count_files(root_), 1u);  // just the blocker
}

TEST_F(DiskCacheTest, ConcurrentWritersLeaveOneWholeEntry) {
  DiskCache disk(root_, 42);
  std::string payload(100000, 'p');
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) EXPECT_TRUE(disk.store(5, payload));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(count_files(root_), 1u);
  auto loaded = disk.load(5);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(*loaded, payload);
  EXPECT_FALSE(disk.load(6).has_value());
}

TEST(DiskCacheSize, FollowsEnvironment) {
  {
    ScopedEnv size("TORCHTPU_CACHE_MAX_SIZE", nullptr);
    auto parsed = runtime::disk_cache_max_bytes_from_env();
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, runtime::kDefaultDiskCacheMaxBytes);
  }
  const std::vector<std::pair<const char*, uint64_t>> valid = {
      {"0", 0},
      {"1000", 1000},
      {"512M", uint64_t{512} << 20},
      {"20g", uint64_t{20} << 30},
      {"3K", 3072},
      {"2T", uint64_t{2} << 40},
      {"9999999999999999999", 9999999999999999999ull}};
  for (const auto& [text, bytes] : valid) {
    ScopedEnv size("TORCHTPU_CACHE_MAX_SIZE", text);
    auto parsed = runtime::disk_cache_max_bytes_from_env();
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status().to_string();
    EXPECT_EQ(*parsed, bytes) << text;
  }
  for (const char* text : {"-1", "1.5G", "10GB", "G", "abc", " 1", "1 ", "0x10",
                           "99999999999999999999", "16777216T", "nan", "inf"}) {
    ScopedEnv size("TORCHTPU_CACHE_MAX_SIZE", text);
    auto parsed = runtime::disk_cache_max_bytes_from_env();
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find("TORCHTPU_CACHE_MAX_SIZE='" + std::string(text)),
              std::string::npos)
        << parsed.status().to_string();
  }
}

// Sets `path`'s modification time (the trim's "last used") to `age` before now.
void set_age(const std::string& path, std::chrono::seconds age) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - age);
}

TEST_F(DiskCacheTest, TrimDeletesLeastRecentlyUsedEntriesOfEveryBuild) {
  // Ten 1000-byte entries over two plugin builds, the i-th used i hours ago; beside them
  // what the root holds that is not an entry (converted models, measured peaks) and two
  // temp files, one of a store in flight, one a dead writer left.
  std::vector<std::string> entries;
  for (int i = 0; i < 10; ++i) {
    std::string dir = root_ + (i % 2 ? "/00000000000000aa" : "/00000000000000bb");
    fs::create_directories(dir);
    entries.push_back(dir + "/" + std::string(15, '0') + std::to_string(i) + ".pjrtexe");
    write_bytes(entries.back(), std::string(1000, 'e'));
    set_age(entries.back(), std::chrono::hours(i));
  }
  fs::create_directories(root_ + "/models");
  write_bytes(root_ + "/models/weights.safetensors", std::string(100000, 'm'));
  set_age(root_ + "/models/weights.safetensors", std::chrono::hours(100));
  std::string fresh_temp = root_ + "/00000000000000aa/.0000000000000001.tmp.1.0";
  std::string stale_temp = root_ + "/00000000000000aa/.0000000000000002.tmp.1.1";
  write_bytes(fresh_temp, std::string(1000, 't'));
  write_bytes(stale_temp, std::string(1000, 't'));
  set_age(stale_temp, std::chrono::hours(2));

  int64_t evictions = counter_value("num_disk_cache_evictions");
  runtime::DiskCacheTrim trim = DiskCache(root_, 0xaa, 4000).trim();
  EXPECT_EQ(trim.bytes_before, 10000u);
  EXPECT_EQ(trim.bytes_after, 3000u);  // down to three quarters of the bound
  EXPECT_EQ(trim.files_deleted, 7);
  EXPECT_EQ(counter_value("num_disk_cache_evictions"), evictions + 7);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(fs::exists(entries[i]), i < 3) << entries[i];
  EXPECT_TRUE(fs::exists(root_ + "/models/weights.safetensors"));
  EXPECT_TRUE(fs::exists(fresh_temp));
  EXPECT_FALSE(fs::exists(stale_temp));

  // Within the bound, or unbounded, a trim deletes nothing.
  EXPECT_EQ(DiskCache(root_, 0xaa, 3000).trim().files_deleted, 0);
  EXPECT_EQ(DiskCache(root_, 0xaa, 0).trim().files_deleted, 0);
  EXPECT_EQ(count_files(root_), 5u);
}

TEST_F(DiskCacheTest, StoreKeepsTheRecentlyUsedEntriesWithinTheBound) {
  auto client = testing::test_client();
  std::string add_path, mul_path;
  uint64_t entry_bytes = 0;
  {
    CompileCache unbounded(client, root_, CompileCache::kDefaultMemoryCapacity, 0);
    ASSERT_TRUE(unbounded.get_or_compile(add_module(), 0).ok());
    add_path = unbounded.disk_cache().path_of(unbounded.key_of(add_module(), 0));
    mul_path = unbounded.disk_cache().path_of(unbounded.key_of(mul_module(), 0));
    entry_bytes = fs::file_size(add_path);
  }
  // Room for one entry and a half: storing the second trims down to one.
  const uint64_t bound = entry_bytes * 3 / 2;
  set_age(add_path, std::chrono::hours(1));
  {
    CompileCache bounded(client, root_, CompileCache::kDefaultMemoryCapacity, bound);
    // A disk hit marks its entry as used now.
    int64_t hits = counter_value("num_compile_cache_hits_disk");
    ASSERT_TRUE(bounded.get_or_compile(add_module(), 0).ok());
    EXPECT_EQ(counter_value("num_compile_cache_hits_disk"), hits + 1);
    EXPECT_LT(fs::file_time_type::clock::now() - fs::last_write_time(add_path),
              std::chrono::minutes(1));
    // Storing mul trims: two entries exceed the bound, and the one used less recently goes
    // (file times can tie within a few milliseconds, so add's is set back).
    set_age(add_path, std::chrono::seconds(10));
    int64_t evictions = counter_value("num_disk_cache_evictions");
    ASSERT_TRUE(bounded.get_or_compile(mul_module(), 0).ok());
    EXPECT_EQ(counter_value("num_disk_cache_evictions"), evictions + 1);
  }
  EXPECT_FALSE(fs::exists(add_path));
  EXPECT_TRUE(fs::exists(mul_path));
  EXPECT_LE(fs::file_size(mul_path), bound);
}

TEST_F(DiskCacheTest, StoreNeverTrimsTheEntryItWrote) {
  // A bound smaller than one program: each store keeps its own entry (the one before goes).
  auto client = testing::test_client();
  CompileCache tiny(client, root_, CompileCache::kDefaultMemoryCapacity, 1);
  ASSERT_TRUE(tiny.get_or_compile(add_module(), 0).ok());
  std::string add_path = tiny.disk_cache().path_of(tiny.key_of(add_module(), 0));
  EXPECT_TRUE(fs::exists(add_path));
  ASSERT_TRUE(tiny.get_or_compile(mul_module(), 0).ok());
  EXPECT_TRUE(fs::exists(tiny.disk_cache().path_of(tiny.key_of(mul_module(), 0))));
  EXPECT_FALSE(fs::exists(add_path));
  EXPECT_EQ(count_files(root_), 1u);
}

TEST_F(DiskCacheTest, SecondProcessCompilesNothing) {
  auto client = testing::test_client();
  CompileCache first(client, root_);
  ASSERT_TRUE(first.get_or_compile(add_module(), 0).ok());

  // The child finds the cache through TORCHTPU_CACHE_DIR, as a user's process would.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("TORCHTPU_CACHE_DIR=", 0) != 0) env_strings.push_back(*e);
  }
  env_strings.push_back("TORCHTPU_CACHE_DIR=" + root_);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string flag = kChildFlag;
  char* argv[] = {self.data(), flag.data(), nullptr};
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child compiled, missed the disk or ran wrongly";
}

// The second process of SecondProcessCompilesNothing: the same program must come from
// disk (zero compiles, one disk hit) and run correctly.
int run_child() {
  CompileCache cache(testing::test_client());
  auto exe = cache.get_or_compile(add_module(), 0);
  if (!exe.ok()) {
    std::fprintf(stderr, "child: %s\n", exe.status().to_string().c_str());
    return 2;
  }
  if (counter_value("num_compiles") != 0 || counter_value("num_compile_cache_hits_disk") != 1) {
    std::fprintf(stderr, "child: %lld compiles, %lld disk hits (expected 0 and 1)\n",
                 static_cast<long long>(counter_value("num_compiles")),
                 static_cast<long long>(counter_value("num_compile_cache_hits_disk")));
    return 3;
  }
  std::string why = check_add_runs(*exe, 0);
  if (!why.empty()) {
    std::fprintf(stderr, "child: %s\n", why.c_str());
    return 4;
  }
  return 0;
}

}  // namespace
}  // namespace torchtpu

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == torchtpu::kChildFlag) return torchtpu::run_child();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
