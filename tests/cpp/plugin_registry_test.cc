// The plugin registry: finding known plugins on a search path, the selection rule, and the
// facts the real XLA CPU plugin reports at load.
#include "runtime/plugin_registry.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_plugin.h"

namespace torchtpu {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "torchtpu-registry-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  // Creates the file `relative` (and its parent directories) with some bytes in it.
  void add_file(const std::string& relative) const {
    fs::path p = fs::path(path_) / relative;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << "not a real library";
  }

 private:
  std::string path_;
};

const runtime::KnownPlugin& known(const std::string& name) {
  const runtime::KnownPlugin* k = runtime::find_known_plugin(name);
  EXPECT_NE(k, nullptr) << name;
  return *k;
}

TEST(PluginRegistry, KnowsTheCpuBuildsAndTheAccelerators) {
  for (const char* name : {"xla-cpu-pjrt", "lammps-jax-pjrt-cpu", "jax-cuda12-pjrt",
                           "jax-cuda13-pjrt", "libtpu"}) {
    EXPECT_NE(runtime::find_known_plugin(name), nullptr) << name;
  }
  EXPECT_EQ(runtime::find_known_plugin("xla-cpu"), nullptr);
  // The defaults come first and are CPU plugins; accelerators are chosen only by name.
  bool seen_non_default = false;
  for (const runtime::KnownPlugin& k : runtime::known_plugins()) {
    if (k.is_default) {
      EXPECT_FALSE(seen_non_default) << k.name << " is a default listed after a non-default";
      EXPECT_EQ(k.platform, "cpu") << k.name;
    } else {
      seen_non_default = true;
    }
  }
  EXPECT_TRUE(runtime::known_plugins().front().is_default);
}

TEST(PluginRegistry, FindsInstalledPluginsFirstDirectoryWins) {
  TempDir a, b;
  a.add_file(known("lammps-jax-pjrt-cpu").relative_path);
  b.add_file(known("lammps-jax-pjrt-cpu").relative_path);
  b.add_file(known("jax-cuda12-pjrt").relative_path);
  // A directory where the library should be is not a plugin.
  fs::create_directories(fs::path(a.path()) / known("libtpu").relative_path);

  auto found = runtime::find_plugins({"", a.path(), b.path() + "/", "/nonexistent-dir"});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[0].known->name, "lammps-jax-pjrt-cpu");
  EXPECT_EQ(found[0].path, a.path() + "/" + known("lammps-jax-pjrt-cpu").relative_path);
  EXPECT_EQ(found[1].known->name, "jax-cuda12-pjrt");
  EXPECT_EQ(found[1].path, b.path() + "/" + known("jax-cuda12-pjrt").relative_path);
  EXPECT_TRUE(runtime::find_plugins({}).empty());
}

TEST(PluginRegistry, DefaultIsTheFirstInstalledDefaultCandidate) {
  TempDir dir;
  for (const runtime::KnownPlugin& k : runtime::known_plugins()) dir.add_file(k.relative_path);
  auto all = runtime::find_plugins({dir.path()});
  ASSERT_EQ(all.size(), runtime::known_plugins().size());
  auto choice = runtime::choose_plugin("", all);
  ASSERT_TRUE(choice.ok()) << choice.status().to_string();
  EXPECT_EQ(choice->name, runtime::known_plugins().front().name);
  EXPECT_EQ(choice->how, "default");

  // Without the first default, the next default candidate; never an accelerator.
  std::vector<runtime::FoundPlugin> rest(all.begin() + 1, all.end());
  choice = runtime::choose_plugin("", rest);
  ASSERT_TRUE(choice.ok());
  EXPECT_TRUE(runtime::find_known_plugin(choice->name)->is_default);
  EXPECT_EQ(runtime::find_known_plugin(choice->name)->platform, "cpu");
}

TEST(PluginRegistry, NoDefaultInstalledIsAnErrorThatSaysWhatToDo) {
  TempDir dir;
  dir.add_file(known("jax-cuda12-pjrt").relative_path);
  auto choice = runtime::choose_plugin("", runtime::find_plugins({dir.path()}));
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), base::StatusCode::kFailedPrecondition);
  const std::string& msg = choice.status().message();
  EXPECT_NE(msg.find("installed: jax-cuda12-pjrt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("TORCHTPU_PJRT_PLUGIN"), std::string::npos) << msg;
  EXPECT_NE(msg.find("scripts/setup.sh"), std::string::npos) << msg;
}

TEST(PluginRegistry, EnvironmentNamesAnInstalledPlugin) {
  TempDir dir;
  dir.add_file(known("xla-cpu-pjrt").relative_path);
  dir.add_file(known("jax-cuda13-pjrt").relative_path);
  auto found = runtime::find_plugins({dir.path()});
  auto choice = runtime::choose_plugin("jax-cuda13-pjrt", found);
  ASSERT_TRUE(choice.ok()) << choice.status().to_string();
  EXPECT_EQ(choice->name, "jax-cuda13-pjrt");
  EXPECT_EQ(choice->path, dir.path() + "/" + known("jax-cuda13-pjrt").relative_path);
  EXPECT_EQ(choice->how, "TORCHTPU_PJRT_PLUGIN=jax-cuda13-pjrt");

  auto missing = runtime::choose_plugin("libtpu", found);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("pip install libtpu"), std::string::npos)
      << missing.status().message();
  EXPECT_NE(missing.status().message().find("installed: xla-cpu-pjrt, jax-cuda13-pjrt"),
            std::string::npos)
      << missing.status().message();
}

TEST(PluginRegistry, EnvironmentPathIsUsedAsGiven) {
  TempDir dir;
  dir.add_file(known("lammps-jax-pjrt-cpu").relative_path);
  auto found = runtime::find_plugins({dir.path()});
  auto other = runtime::choose_plugin("/opt/my/plugin.so", found);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->name, "");
  EXPECT_EQ(other->path, "/opt/my/plugin.so");
  // The path of an installed known plugin keeps that plugin's name in reports.
  auto same = runtime::choose_plugin(found[0].path, found);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->name, "lammps-jax-pjrt-cpu");
  EXPECT_EQ(same->how, "TORCHTPU_PJRT_PLUGIN path");
}

// The installed plugin the tests run is found where pip put it, and reports what the
// version-dependent code reads: API version, StableHLO version, FFI.
TEST(PluginRegistry, RealPluginIsFoundAndReportsItsFacts) {
  std::string path = testing::test_plugin_path();
  ASSERT_FALSE(path.empty());
  bool matched = false;
  for (const runtime::KnownPlugin& k : runtime::known_plugins()) {
    std::string p(path);
    if (p.size() <= k.relative_path.size() ||
        p.compare(p.size() - k.relative_path.size(), std::string::npos, k.relative_path) != 0) {
      continue;
    }
    std::string site = p.substr(0, p.size() - k.relative_path.size());
    auto found = runtime::find_plugins({site});
    ASSERT_FALSE(found.empty());
    bool listed = false;
    for (const auto& f : found) listed |= (f.known == &k && f.path == p);
    EXPECT_TRUE(listed) << p;
    matched = true;
  }
  EXPECT_TRUE(matched) << path << " is not where any known plugin is installed";

  auto client = testing::test_client();
  const runtime::Plugin& plugin = client->plugin();
  EXPECT_EQ(plugin.api_major(), 0);
  EXPECT_TRUE(plugin.has_ffi_extension());
  EXPECT_NE(plugin.attributes().count("stablehlo_current_version"), 0u);
  EXPECT_NE(plugin.attributes().count("xla_version"), 0u);
  EXPECT_FALSE(client->platform_version().empty());
}

}  // namespace
}  // namespace torchtpu
