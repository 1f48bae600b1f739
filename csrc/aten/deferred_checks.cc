#include "aten/deferred_checks.h"

#include <c10/util/Exception.h>

#include <deque>
#include <mutex>

#include "base/metrics.h"

namespace torchtpu::aten {
namespace {

struct PendingCheck {
  runtime::BufferPtr ok;  // i1 scalar: true when the check passed
  lowering::CheckKind kind;
  std::string message;
  std::string origin;
};

// Past this many queued checks the older half is read at the next defer: by then those
// programs have long finished, so the read rarely waits, and memory stays bounded in a
// loop that never reads the host.
constexpr size_t kMaxPending = 64;

std::mutex g_mu;
std::deque<PendingCheck>& pending() {
  static auto* q = new std::deque<PendingCheck>();
  return *q;
}

// Reads `checks` in order and raises for the first failure.
void read_checks(std::deque<PendingCheck>& checks) {
  const PendingCheck* failed = nullptr;
  for (const PendingCheck& c : checks) {
    bool ok = false;
    auto status = c.ok->to_host(&ok, 1);
    TORCH_CHECK(status.ok(), status.message());
    base::counter_add("num_data_checks");
    if (!ok && failed == nullptr) failed = &c;
  }
  if (failed == nullptr) return;
  std::string message = failed->origin + " failed a data check: " + failed->message;
  lowering::CheckKind kind = failed->kind;
  checks.clear();
  raise_check_failure(kind, message);
}

}  // namespace

void raise_check_failure(lowering::CheckKind kind, const std::string& message) {
  if (kind == lowering::CheckKind::kIndexError) C10_THROW_ERROR(IndexError, message);
  if (kind == lowering::CheckKind::kLinalgError) C10_THROW_ERROR(LinAlgError, message);
  C10_THROW_ERROR(Error, message);
}

void defer_data_checks(const std::vector<runtime::BufferPtr>& outputs, size_t first,
                       const std::vector<lowering::CheckKind>& kinds,
                       const std::vector<std::string>& messages, const std::string& origin) {
  if (messages.empty()) return;
  std::deque<PendingCheck> older;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& q = pending();
    for (size_t k = 0; k < messages.size(); ++k) {
      q.push_back(PendingCheck{outputs.at(first + k), kinds.at(k), messages[k], origin});
      base::counter_add("num_data_checks_deferred");
    }
    if (q.size() > kMaxPending) {
      size_t n = q.size() / 2;
      older.insert(older.end(), std::make_move_iterator(q.begin()),
                   std::make_move_iterator(q.begin() + static_cast<std::ptrdiff_t>(n)));
      q.erase(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n));
    }
  }
  read_checks(older);
}

void flush_data_checks() {
  std::deque<PendingCheck> all;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (pending().empty()) return;
    all.swap(pending());
  }
  read_checks(all);
}

size_t num_pending_data_checks() {
  std::lock_guard<std::mutex> lock(g_mu);
  return pending().size();
}

}  // namespace torchtpu::aten
