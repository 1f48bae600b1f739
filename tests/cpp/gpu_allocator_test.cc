// The GPU allocator's create options (runtime/gpu_allocator.h): what the environment may
// say. That they reach PJRT_Client_Create only for a GPU platform: kv_store_test.cc, beside
// the other create options.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/gpu_allocator.h"

namespace torchtpu {
namespace {

// Sets (or, for nullptr, unsets) the two variables for one test; unsets both after it.
class GpuAllocatorEnv : public ::testing::Test {
 protected:
  void TearDown() override {
    ::unsetenv("TORCHTPU_GPU_PREALLOCATE");
    ::unsetenv("TORCHTPU_GPU_MEMORY_FRACTION");
  }
  static void set(const char* preallocate, const char* fraction) {
    if (preallocate) ::setenv("TORCHTPU_GPU_PREALLOCATE", preallocate, 1);
    else ::unsetenv("TORCHTPU_GPU_PREALLOCATE");
    if (fraction) ::setenv("TORCHTPU_GPU_MEMORY_FRACTION", fraction, 1);
    else ::unsetenv("TORCHTPU_GPU_MEMORY_FRACTION");
  }
};

TEST_F(GpuAllocatorEnv, UnsetLeavesThePluginDefaults) {
  set(nullptr, nullptr);
  auto o = runtime::gpu_allocator_options_from_env();
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_FALSE(o->preallocate.has_value());
  EXPECT_FALSE(o->memory_fraction.has_value());
  set("", "");
  o = runtime::gpu_allocator_options_from_env();
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->preallocate.has_value());
  EXPECT_FALSE(o->memory_fraction.has_value());
}

TEST_F(GpuAllocatorEnv, ReadsSwitchAndFraction) {
  for (const char* on : {"1", "true"}) {
    set(on, "0.5");
    auto o = runtime::gpu_allocator_options_from_env();
    ASSERT_TRUE(o.ok()) << on;
    EXPECT_EQ(o->preallocate, std::optional<bool>(true)) << on;
    EXPECT_DOUBLE_EQ(o->memory_fraction.value_or(-1), 0.5);
  }
  for (const char* off : {"0", "false"}) {
    set(off, "1");
    auto o = runtime::gpu_allocator_options_from_env();
    ASSERT_TRUE(o.ok()) << off;
    EXPECT_EQ(o->preallocate, std::optional<bool>(false)) << off;
    EXPECT_DOUBLE_EQ(o->memory_fraction.value_or(-1), 1.0);
  }
}

TEST_F(GpuAllocatorEnv, RefusesWhatIsNotASwitchOrAShare) {
  for (const char* bad : {"yes", "2", "on ", "-1"}) {
    set(bad, nullptr);
    auto o = runtime::gpu_allocator_options_from_env();
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_EQ(o.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find("TORCHTPU_GPU_PREALLOCATE='" + std::string(bad) + "'"),
              std::string::npos)
        << o.status().message();
  }
  for (const char* bad : {"0", "-0.5", "1.5", "nan", "inf", "half", "0.5x", "1e400"}) {
    set(nullptr, bad);
    auto o = runtime::gpu_allocator_options_from_env();
    ASSERT_FALSE(o.ok()) << bad;
    EXPECT_EQ(o.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find("TORCHTPU_GPU_MEMORY_FRACTION"), std::string::npos);
    EXPECT_NE(o.status().message().find("0 < f <= 1"), std::string::npos);
  }
}

}  // namespace
}  // namespace torchtpu
