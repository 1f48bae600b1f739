// Shared fixture: one CPU-plugin client per test binary (plugins load once per process).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "runtime/client.h"
#include "runtime/compile_cache.h"

// A binary may ask for more devices (collectives_test: 4) by defining this.
#ifndef TORCHTPU_TEST_NUM_DEVICES
#define TORCHTPU_TEST_NUM_DEVICES 2
#endif

namespace torchtpu::testing {

inline std::shared_ptr<runtime::Client> test_client() {
  static std::shared_ptr<runtime::Client> client = [] {
    const char* path = std::getenv("TORCHTPU_TEST_PLUGIN");
    EXPECT_NE(path, nullptr) << "TORCHTPU_TEST_PLUGIN must name the XLA CPU plugin";
    auto plugin = runtime::Plugin::load(path ? path : "");
    EXPECT_TRUE(plugin.ok()) << plugin.status().to_string();
    runtime::ClientOptions options;
    options.cpu_device_count = TORCHTPU_TEST_NUM_DEVICES;
    auto c = runtime::Client::create(*plugin, options);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return *c;
  }();
  return client;
}

}  // namespace torchtpu::testing
