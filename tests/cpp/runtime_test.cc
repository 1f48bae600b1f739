// The runtime on the real XLA CPU plugin: load, transfer, compile, execute, errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/metrics.h"
#include "lowering/hlo_builder.h"
#include "runtime/memory_stats.h"
#include "test_plugin.h"

namespace torchtpu {
namespace {

using lowering::Builder;
using lowering::TensorType;
using base::DType;

std::string add_module() {
  Builder b;
  auto x = b.param(TensorType{DType::kF32, {2, 3}});
  auto y = b.param(TensorType{DType::kF32, {2, 3}});
  return b.finish({b.add(x, y)});
}

TEST(Runtime, PluginReportsVersionAndDevices) {
  auto client = testing::test_client();
  EXPECT_EQ(client->plugin().api_major(), 0);
  EXPECT_GE(client->plugin().api_minor(), 40);
  EXPECT_EQ(client->num_devices(), 2);
  EXPECT_EQ(client->platform_name(), "cpu");
  EXPECT_NE(client->plugin().identity().find("api=0."), std::string::npos);
}

TEST(Runtime, CompilesAndRunsAdd) {
  auto client = testing::test_client();
  auto exe = client->compile(add_module(), 0);
  ASSERT_TRUE(exe.ok()) << exe.status().to_string();
  std::vector<float> a{1, 2, 3, 4, 5, 6}, c{10, 20, 30, 40, 50, 60};
  auto ba = client->buffer_from_host(a.data(), DType::kF32, {2, 3}, 0);
  auto bc = client->buffer_from_host(c.data(), DType::kF32, {2, 3}, 0);
  ASSERT_TRUE(ba.ok() && bc.ok());
  auto out = (*exe)->execute({ba->get(), bc->get()});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ((*out)[0]->dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*out)[0]->dtype(), DType::kF32);
  std::vector<float> result(6);
  ASSERT_TRUE((*out)[0]->to_host(result.data(), 24).ok());
  EXPECT_EQ(result, (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST(Runtime, BufferMemoryIsCountedPerDevice) {
  auto client = testing::test_client();
  runtime::BufferMemoryStats before = runtime::buffer_memory_stats(1);
  std::vector<float> a(256, 1.0f);
  {
    auto b = client->buffer_from_host(a.data(), DType::kF32, {16, 16}, 1);
    ASSERT_TRUE(b.ok());
    runtime::BufferMemoryStats live = runtime::buffer_memory_stats(1);
    EXPECT_EQ(live.current_bytes - before.current_bytes, 1024);
    EXPECT_EQ(live.num_buffers - before.num_buffers, 1);
    EXPECT_GE(live.peak_bytes, before.current_bytes + 1024);
  }
  runtime::BufferMemoryStats after = runtime::buffer_memory_stats(1);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.freed_bytes - before.freed_bytes, 1024);
  runtime::reset_peak_buffer_memory(1);
  EXPECT_EQ(runtime::buffer_memory_stats(1).peak_bytes, after.current_bytes);
}

TEST(Runtime, DeviceMemoryStatsAreAStatus) {
  auto client = testing::test_client();
  // The CPU plugin may or may not implement PJRT_Device_MemoryStats; either way it is a
  // Status, and a bad index is an error, never a crash.
  auto info = client->device_memory(0);
  if (info.ok()) EXPECT_GE(info->bytes_in_use, 0);
  EXPECT_FALSE(client->device_memory(5).ok());
  auto host = runtime::host_memory_info();
  ASSERT_TRUE(host.has_value());
  EXPECT_GT(host->total_bytes, 0);
  EXPECT_LE(host->available_bytes, host->total_bytes);
}

namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

}  // namespace

// A container's memory limit caps the host's figures: cgroup v2 (the smallest limit over
// the group and its ancestors, inactive file cache counted free) and v1 (the hierarchical
// limit, also when the group's path names the host's hierarchy).
TEST(Runtime, CgroupMemoryLimitIsRead) {
  auto root = std::filesystem::temp_directory_path() /
              ("torchtpu_cgroup_" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  EXPECT_FALSE(runtime::cgroup_memory("0::/\n", root.string()).has_value());

  write_file(root / "v2/memory.max", "max\n");  // the container's own group: no limit
  write_file(root / "v2/job/memory.max", "8000\n");
  write_file(root / "v2/job/memory.current", "7000\n");
  write_file(root / "v2/job/memory.stat", "anon 5000\ninactive_file 500\n");
  write_file(root / "v2/job/memory.swap.max", "max\n");
  write_file(root / "v2/job/task/memory.max", "max\n");
  write_file(root / "v2/job/task/memory.current", "6000\n");
  auto v2 = runtime::cgroup_memory("0::/job/task\n", (root / "v2").string());
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->limit_bytes, 8000);
  EXPECT_EQ(v2->available_bytes, 1500);
  EXPECT_FALSE(v2->swap_bytes.has_value());
  write_file(root / "v2/job/task/memory.max", "4000\n");
  write_file(root / "v2/job/task/memory.swap.max", "0\n");
  v2 = runtime::cgroup_memory("0::/job/task\n", (root / "v2").string());
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->limit_bytes, 4000);
  EXPECT_EQ(v2->available_bytes, 0);  // 4000 - 6000 used: nothing, never negative
  EXPECT_EQ(v2->swap_bytes, 0);

  write_file(root / "v1/memory/memory.usage_in_bytes", "3000\n");
  write_file(root / "v1/memory/memory.stat",
             "cache 10\nhierarchical_memory_limit 10000\nhierarchical_memsw_limit "
             "9223372036854771712\ntotal_inactive_file 200\n");
  // The host's path of the group does not exist inside the container: its mount is read.
  auto v1 = runtime::cgroup_memory("12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n",
                                   (root / "v1").string());
  ASSERT_TRUE(v1.has_value());
  EXPECT_EQ(v1->limit_bytes, 10000);
  EXPECT_EQ(v1->available_bytes, 7200);
  EXPECT_FALSE(v1->swap_bytes.has_value());
  write_file(root / "v1/memory/memory.stat", "hierarchical_memory_limit 9223372036854771712\n");
  EXPECT_FALSE(runtime::cgroup_memory("4:memory:/\n", (root / "v1").string()).has_value());
  // A parent's limit counts its other children's usage: the parent has 1000 left.
  write_file(root / "v1/memory/memory.limit_in_bytes", "20000\n");
  write_file(root / "v1/memory/memory.usage_in_bytes", "19000\n");
  write_file(root / "v1/memory/job/memory.limit_in_bytes", "9223372036854771712\n");
  write_file(root / "v1/memory/job/memory.usage_in_bytes", "500\n");
  write_file(root / "v1/memory/job/memory.stat", "hierarchical_memory_limit 20000\n");
  auto nested = runtime::cgroup_memory("4:memory:/job\n", (root / "v1").string());
  ASSERT_TRUE(nested.has_value());
  EXPECT_EQ(nested->limit_bytes, 20000);
  EXPECT_EQ(nested->available_bytes, 1000);
  EXPECT_FALSE(runtime::cgroup_memory("garbage\n\n::\n", root.string()).has_value());
  std::filesystem::remove_all(root);
}

// A zero-copy buffer over host memory: the CPU plugin aliases it (nothing is released
// while the buffer lives), a program reads it, and it is released once, after the buffer
// and the program's read are gone.
TEST(Runtime, ZeroCopyBufferReleasesItsHostMemoryOnce) {
  auto client = testing::test_client();
  alignas(64) static float data[6] = {1, 2, 3, 4, 5, 6};
  std::atomic<int> released{0};
  {
    auto x = client->buffer_from_host_zero_copy(data, DType::kF32, {2, 3}, 0,
                                                [&released] { released++; });
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    auto exe = client->compile(add_module(), 0);
    ASSERT_TRUE(exe.ok()) << exe.status().to_string();
    auto out = (*exe)->execute({x->get(), x->get()});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    std::vector<float> sum(6);
    ASSERT_TRUE((*out)[0]->to_host(sum.data(), 24).ok());
    EXPECT_EQ(sum, (std::vector<float>{2, 4, 6, 8, 10, 12}));
    EXPECT_EQ(released.load(), 0) << "the plugin copied the host data instead of aliasing it";
  }
  for (int i = 0; i < 500 && released.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(released.load(), 1);
  auto bad = client->buffer_from_host_zero_copy(data, DType::kF32, {2, 3}, 9,
                                                [&released] { released++; });
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(released.load(), 2) << "released once also when it fails";
}

TEST(Runtime, RunsOnSecondDevice) {
  auto client = testing::test_client();
  auto exe = client->compile(add_module(), 1);
  ASSERT_TRUE(exe.ok());
  std::vector<float> a(6, 1.5f);
  auto ba = client->buffer_from_host(a.data(), DType::kF32, {2, 3}, 1);
  ASSERT_TRUE(ba.ok());
  auto out = (*exe)->execute({ba->get(), ba->get()});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0]->device_index(), 1);
  std::vector<float> result(6);
  ASSERT_TRUE((*out)[0]->to_host(result.data(), 24).ok());
  EXPECT_EQ(result[5], 3.0f);
}

TEST(Runtime, MalformedProgramIsAnErrorWithPluginMessage) {
  auto client = testing::test_client();
  auto exe = client->compile("module { this is not mlir }", 0);
  ASSERT_FALSE(exe.ok());
  EXPECT_NE(exe.status().message().find("PJRT_Client_Compile failed"), std::string::npos);
  EXPECT_GT(exe.status().message().size(), std::string("runtime: PJRT_Client_Compile failed: ").size());
}

TEST(Runtime, WrongArgumentCountIsAnError) {
  auto client = testing::test_client();
  auto exe = client->compile(add_module(), 0);
  ASSERT_TRUE(exe.ok());
  std::vector<float> a(6, 1.0f);
  auto ba = client->buffer_from_host(a.data(), DType::kF32, {2, 3}, 0);
  ASSERT_TRUE(ba.ok());
  auto out = (*exe)->execute({ba->get()});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("PJRT_LoadedExecutable_Execute failed"), std::string::npos)
      << out.status().message();
}

TEST(Runtime, BadDeviceIndexIsAnError) {
  auto client = testing::test_client();
  float x = 1;
  auto b = client->buffer_from_host(&x, DType::kF32, {}, 7);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), base::StatusCode::kOutOfRange);
}

TEST(Runtime, MissingPluginIsAnError) {
  auto p = runtime::Plugin::load("/nonexistent/plugin.so");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("TORCHTPU_PJRT_PLUGIN"), std::string::npos);
}

TEST(Runtime, CompileCacheHitsInMemoryAndSerializes) {
  auto client = testing::test_client();
  runtime::CompileCache cache(client);
  int64_t compiles = base::counter_value("num_compiles");
  auto e1 = cache.get_or_compile(add_module(), 0);
  auto e2 = cache.get_or_compile(add_module(), 0);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(e1->get(), e2->get());
  EXPECT_EQ(base::counter_value("num_compiles"), compiles + 1);
  auto bytes = (*e1)->serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto loaded = client->deserialize(*bytes, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ((*loaded)->num_outputs(), 1u);
}

}  // namespace
}  // namespace torchtpu
