// A persistent pool of worker threads for the executor. Each parallel_for is
// one fork/join: the caller thread works too, workers spin briefly for the
// next job and then sleep, and nothing is created per op.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace lumen::runtime {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1, counting the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls body(task, thread) for every task in [0, n_tasks), spread over the
  // threads, and returns when all are done. `thread` is in [0, size()) and
  // identifies per-thread scratch; which thread runs a task must not matter.
  template <typename Body>
  void parallel_for(int64_t n_tasks, Body&& body) {
    run(n_tasks, &body, [](void* ctx, int64_t task, int thread) { (*static_cast<Body*>(ctx))(task, thread); });
  }

 private:
  using TaskFn = void (*)(void*, int64_t, int);
  void run(int64_t n_tasks, void* ctx, TaskFn fn);
  void worker_loop(int thread);
  // Claims and runs tasks of the current job until none is left.
  void work(int thread);

  int n_threads_;
  std::vector<std::thread> workers_;
  // The current job. A claim is a compare-exchange on job_ = generation |
  // task count | next task, so a worker can never run a task of a job other
  // than the one whose function it read, and a job is complete when its tasks
  // are done: the caller never waits for a worker that is not scheduled.
  std::atomic<void*> ctx_{nullptr};
  std::atomic<TaskFn> fn_{nullptr};
  alignas(64) std::atomic<uint64_t> job_{0};
  alignas(64) std::atomic<int64_t> done_{0};
  std::atomic<bool> stop_{false};
};

// Physical cores of this machine (hyperthread siblings counted once), >= 1.
int physical_cores();

}  // namespace lumen::runtime
