// Shared fixture: one CPU-plugin client per test binary (plugins load once per process).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/client.h"
#include "runtime/compile_cache.h"
#include "runtime/plugin_registry.h"

// A binary may ask for more devices (collectives_test: 4) by defining this.
#ifndef TORCHTPU_TEST_NUM_DEVICES
#define TORCHTPU_TEST_NUM_DEVICES 2
#endif

namespace torchtpu::testing {

// The plugin the tests run: the registry's choice among the plugins installed in
// TORCHTPU_TEST_SITE_PACKAGES (the build's Python environment, set by ctest), honouring
// TORCHTPU_PJRT_PLUGIN like the device does; TORCHTPU_TEST_PLUGIN (a path) overrides.
inline std::string test_plugin_path() {
  if (const char* path = std::getenv("TORCHTPU_TEST_PLUGIN")) return path;
  const char* site = std::getenv("TORCHTPU_TEST_SITE_PACKAGES");
  const char* env = std::getenv("TORCHTPU_PJRT_PLUGIN");
  auto choice = runtime::choose_plugin(env ? env : "",
                                       runtime::find_plugins({site ? site : ""}));
  EXPECT_TRUE(choice.ok()) << choice.status().to_string()
                           << " (TORCHTPU_TEST_SITE_PACKAGES: " << (site ? site : "unset") << ")";
  return choice.ok() ? choice->path : "";
}

inline std::shared_ptr<runtime::Client> test_client() {
  static std::shared_ptr<runtime::Client> client = [] {
    auto plugin = runtime::Plugin::load(test_plugin_path());
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
