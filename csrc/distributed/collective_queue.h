// CollectiveQueue: the thread that runs a host-staged group's collectives.
//
// A host-staged collective waits for its tpu data, copies it to the host, runs Gloo and
// copies the result back: work the issuing thread (DDP's backward, FSDP2's prefetch) need
// not wait for. The backend enqueues each collective here and returns a pending Work; the
// queue runs them one at a time in the order they were issued (the order every rank
// issues them, which Gloo's matching relies on), on its own thread.
//
// Lifetime: after the destructor, the running task finishes and every task still queued
// runs with `cancelled` true (each then completes its Work with an error instead of moving
// data). The destructor joins the thread when it is idle; while a task runs, or from the
// queue's own thread, it detaches it instead, which then ends by itself: the task may need
// a lock its owner's destroyer holds (Python's, which Gloo's flight recorder takes), so
// tasks must hold what they use (shared ownership), never their queue's owner. A detached
// thread is counted in detached_threads() until it ends.
// Thread safety: enqueue() may be called from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace torchtpu::distributed {

class CollectiveQueue {
 public:
  // A task runs once; `cancelled` is true when the queue is being destroyed before the
  // task started.
  using Task = std::function<void(bool cancelled)>;

  // `thread_name`: at most 15 characters (shown by debuggers and `top -H`).
  explicit CollectiveQueue(const std::string& thread_name);
  ~CollectiveQueue();
  CollectiveQueue(const CollectiveQueue&) = delete;
  CollectiveQueue& operator=(const CollectiveQueue&) = delete;

  // Runs `task` on the queue's thread after every task enqueued before it. A task
  // enqueued from the queue's own thread (a work's future callback that issues another
  // collective and waits for it, as DDP's PowerSGD hook does) runs at once, inline:
  // queued, it would wait for the task that waits for it.
  void enqueue(Task task);

  // Whether no task is queued or running (a caller that also serializes enqueue() may
  // then destroy the queue without waiting).
  bool idle() const;

  // Detached queue threads (of destroyed queues) that have not ended: Python waits for
  // them at exit, before its finalization cancels threads that take its lock.
  static int detached_threads();

 private:
  // Shared with the thread, which may outlive the queue when it detaches.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Task> tasks;
    bool running = false;  // a task is running
    bool stopping = false;
    bool detached = false;  // counted in detached_threads() until the thread ends
    std::thread::id worker;  // the queue's thread
  };
  static void loop(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_;
  std::thread thread_;
};

}  // namespace torchtpu::distributed
