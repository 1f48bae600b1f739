#include "aten/deferred_checks.h"

#include <c10/util/Exception.h>

#include <deque>
#include <mutex>

#include "aten/program_executor.h"
#include "base/metrics.h"

namespace torchtpu::aten {
namespace {

// The check vector of one program run, and what each of its flags stands for.
struct PendingRun {
  runtime::BufferPtr flags;  // i1[messages.size()]: true where the check held
  std::vector<lowering::CheckKind> kinds;
  std::vector<std::string> messages;
  std::string origin;
};

// Past this many queued runs the older half is read at the next defer: by then those
// programs have long finished, so the read rarely waits, and memory stays bounded in a
// loop that never reads the host (a run's checks are bounded by its program).
constexpr size_t kMaxPendingRuns = 64;

std::mutex g_mu;
std::deque<PendingRun>& pending() {
  static auto* q = new std::deque<PendingRun>();
  return *q;
}

// Reads the runs' check vectors in order (one transfer each) and raises for the first
// failure.
void read_checks(std::deque<PendingRun>& runs) {
  for (const PendingRun& r : runs) {
    int k = first_failed_check({r.flags}, 0, r.messages.size());
    if (k < 0) continue;
    std::string message = r.origin + " failed a data check: " + r.messages[k];
    lowering::CheckKind kind = r.kinds[k];
    runs.clear();
    raise_check_failure(kind, message);
  }
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
  std::deque<PendingRun> older;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto& q = pending();
    q.push_back(PendingRun{outputs.at(first), kinds, messages, origin});
    base::counter_add("num_data_checks_deferred", static_cast<int64_t>(messages.size()));
    if (q.size() > kMaxPendingRuns) {
      size_t n = q.size() / 2;
      for (size_t k = 0; k < n; ++k) {
        older.push_back(std::move(q.front()));
        q.pop_front();
      }
    }
  }
  read_checks(older);
}

void flush_data_checks() {
  std::deque<PendingRun> all;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (pending().empty()) return;
    all.swap(pending());
  }
  read_checks(all);
}

size_t num_pending_data_checks() {
  std::lock_guard<std::mutex> lock(g_mu);
  size_t n = 0;  // the queue holds at most kMaxPendingRuns + 1 runs
  for (const PendingRun& r : pending()) n += r.messages.size();
  return n;
}

}  // namespace torchtpu::aten
