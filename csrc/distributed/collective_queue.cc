#include "distributed/collective_queue.h"

#include <pthread.h>

#include <atomic>
#include <utility>

namespace torchtpu::distributed {
namespace {

std::atomic<int> detached_live{0};

}  // namespace

int CollectiveQueue::detached_threads() { return detached_live.load(); }

CollectiveQueue::CollectiveQueue(const std::string& thread_name)
    : state_(std::make_shared<State>()) {
  thread_ = std::thread([state = state_, name = thread_name.substr(0, 15)] {
    // Uncounts a detached thread when it ends, also by a forced unwind.
    struct Uncount {
      State& s;
      ~Uncount() {
        std::lock_guard<std::mutex> lock(s.mu);
        if (s.detached) detached_live.fetch_sub(1);
        s.detached = false;
      }
    } uncount{*state};
    pthread_setname_np(pthread_self(), name.c_str());
    loop(state);
  });
}

CollectiveQueue::~CollectiveQueue() {
  bool busy;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->stopping = true;
    busy = state_->running || !state_->tasks.empty() ||
           std::this_thread::get_id() == thread_.get_id();
    if (busy) {
      state_->detached = true;
      detached_live.fetch_add(1);
    }
  }
  state_->cv.notify_all();
  if (busy) {
    // The thread holds its own reference to the state: it finishes the running task, runs
    // what is left (cancelled) and ends on its own.
    thread_.detach();
  } else {
    thread_.join();
  }
}

bool CollectiveQueue::idle() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return !state_->running && state_->tasks.empty();
}

void CollectiveQueue::enqueue(Task task) {
  bool cancelled;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (std::this_thread::get_id() != state_->worker) {
      state_->tasks.push_back(std::move(task));
      cancelled = false;
      task = nullptr;
    } else {
      cancelled = state_->stopping;
    }
  }
  if (task) {
    task(cancelled);  // from a task: the queue's thread is this one
    return;
  }
  state_->cv.notify_one();
}

void CollectiveQueue::loop(const std::shared_ptr<State>& state) {
  std::unique_lock<std::mutex> lock(state->mu);
  state->worker = std::this_thread::get_id();
  for (;;) {
    state->cv.wait(lock, [&] { return state->stopping || !state->tasks.empty(); });
    if (state->tasks.empty()) return;  // stopping, nothing left
    Task task = std::move(state->tasks.front());
    state->tasks.pop_front();
    bool cancelled = state->stopping;
    state->running = true;
    lock.unlock();
    task(cancelled);
    task = nullptr;  // what the task held goes before the next wait
    lock.lock();
    state->running = false;
  }
}

}  // namespace torchtpu::distributed
