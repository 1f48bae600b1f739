#include "runtime/host_malloc.h"

#include <malloc.h>

#include <cstdlib>
#include <mutex>
#include <optional>

namespace torchtpu::runtime {
namespace {

constexpr char kEnv[] = "TORCHTPU_HOST_MALLOC";
constexpr int kTopPadBytes = 256 << 20;

struct Applied {
  std::mutex mu;
  std::optional<HostMallocPolicy> policy;  // set by the first apply_host_malloc_policy
};

Applied& applied() {
  static auto* a = new Applied();
  return *a;
}

const char* name_of(HostMallocPolicy p) {
  return p == HostMallocPolicy::kRetain ? "retain" : "system";
}

base::Status set(int param, const char* param_name, int value) {
  // mallopt returns 1 on success, 0 for a parameter or value glibc does not take.
  if (mallopt(param, value) == 1) return base::Status::ok_status();
  return base::internal_error(std::string("runtime: mallopt(") + param_name + ", " +
                              std::to_string(value) + ") was rejected; start with " + kEnv +
                              "=system to keep glibc's defaults");
}

}  // namespace

base::StatusOr<HostMallocPolicy> host_malloc_policy_from_env() {
  const char* v = std::getenv(kEnv);
  if (v == nullptr || *v == '\0' || std::string(v) == "retain") return HostMallocPolicy::kRetain;
  if (std::string(v) == "system") return HostMallocPolicy::kSystem;
  return base::invalid_argument(
      std::string("tpu: ") + kEnv + "='" + v + "' is not a host allocator policy (expected " +
      "'retain', the default on CPU plugins: freed host memory is kept for reuse, or " +
      "'system': glibc's own malloc settings)");
}

base::StatusOr<HostMallocPolicy> apply_host_malloc_policy(HostMallocPolicy policy) {
  Applied& a = applied();
  std::lock_guard<std::mutex> lock(a.mu);
  if (a.policy) return *a.policy;
  a.policy = HostMallocPolicy::kSystem;
  if (policy == HostMallocPolicy::kSystem) return *a.policy;
  TORCHTPU_RETURN_IF_ERROR(set(M_MMAP_MAX, "M_MMAP_MAX", 0));
  TORCHTPU_RETURN_IF_ERROR(set(M_TRIM_THRESHOLD, "M_TRIM_THRESHOLD", -1));
  TORCHTPU_RETURN_IF_ERROR(set(M_TOP_PAD, "M_TOP_PAD", kTopPadBytes));
  TORCHTPU_RETURN_IF_ERROR(set(M_ARENA_MAX, "M_ARENA_MAX", 1));
  a.policy = HostMallocPolicy::kRetain;
  return *a.policy;
}

std::string host_malloc_policy_name() {
  Applied& a = applied();
  std::lock_guard<std::mutex> lock(a.mu);
  return name_of(a.policy.value_or(HostMallocPolicy::kSystem));
}

}  // namespace torchtpu::runtime
