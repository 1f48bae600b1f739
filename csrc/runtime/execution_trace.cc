#include "runtime/execution_trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/event.h"

namespace torchtpu::runtime::trace {

namespace {

struct Pending {
  Record record;
  std::shared_ptr<std::atomic<int64_t>> end_ns;  // -1 until the ready callback runs
  std::unique_ptr<Event> ready;
};

std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::vector<Pending>& records() {
  static auto* r = new std::vector<Pending>();
  return *r;
}

thread_local const char* t_label = nullptr;
thread_local std::vector<uint64_t> t_correlation;

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void set_enabled(bool on) {
  std::vector<Pending> dropped;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (on) dropped.swap(records());
    g_enabled.store(on, std::memory_order_relaxed);
  }
}

Label::Label(const char* name) : previous_(t_label) { t_label = name; }
Label::~Label() { t_label = previous_; }

const char* current_label() { return t_label; }

void push_correlation(uint64_t id) { t_correlation.push_back(id); }
void pop_correlation() {
  if (!t_correlation.empty()) t_correlation.pop_back();
}

namespace {

Pending make_pending(Kind kind, int device, int64_t bytes, int64_t enqueue_ns) {
  Pending p;
  p.record.kind = kind;
  if (t_label != nullptr) p.record.name = t_label;
  p.record.device = device;
  p.record.enqueue_ns = enqueue_ns;
  p.record.bytes = bytes;
  p.record.correlation_id = t_correlation.empty() ? 0 : t_correlation.back();
  p.end_ns = std::make_shared<std::atomic<int64_t>>(-1);
  return p;
}

void add(Pending p) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_enabled.load(std::memory_order_relaxed)) records().push_back(std::move(p));
}

}  // namespace

void record(Kind kind, int device, int64_t bytes, const Buffer& ready_on, int64_t enqueue_ns) {
  if (!enabled()) return;
  // 0: the trace started after the caller's enabled() check, during the call.
  Pending p = make_pending(kind, device, bytes, enqueue_ns != 0 ? enqueue_ns : now_ns());
  auto ready = ready_on.ready_event();
  if (!ready.ok()) return;  // the buffer failed; its error reaches whoever reads it
  std::shared_ptr<std::atomic<int64_t>> end = p.end_ns;
  if (!(*ready)->on_ready([end](const base::Status&) { end->store(now_ns()); }).ok()) return;
  p.ready = std::move(ready).value();
  add(std::move(p));
}

void record_completed(Kind kind, int device, int64_t bytes, int64_t enqueue_ns) {
  if (!enabled()) return;
  Pending p = make_pending(kind, device, bytes, enqueue_ns);
  p.end_ns->store(now_ns());
  add(std::move(p));
}

std::vector<Record> take() {
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    pending.swap(records());
  }
  std::vector<Record> out;
  out.reserve(pending.size());
  for (Pending& p : pending) {
    if (p.ready != nullptr) (void)p.ready->await();
    // The ready callback may run just after await() returns.
    for (int spins = 0; p.end_ns->load() < 0 && spins < 100000; ++spins) {
      std::this_thread::yield();
    }
    p.record.end_ns = std::max(p.end_ns->load(), p.record.enqueue_ns);
    out.push_back(std::move(p.record));
  }
  std::stable_sort(out.begin(), out.end(), [](const Record& a, const Record& b) {
    return a.enqueue_ns < b.enqueue_ns;
  });
  std::map<int, int64_t> device_free_ns;  // when each device finished its previous record
  for (Record& r : out) {
    int64_t& free_ns = device_free_ns[r.device];
    r.start_ns = std::min(std::max(r.enqueue_ns, free_ns), r.end_ns);
    free_ns = std::max(free_ns, r.end_ns);
  }
  return out;
}

}  // namespace torchtpu::runtime::trace
