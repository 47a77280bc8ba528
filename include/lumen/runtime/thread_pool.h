// A persistent pool of worker threads for the executor. Each parallel_for is
// one fork/join: the caller thread works too, workers spin briefly for the
// next job and then sleep, and nothing is created per op. Each thread starts
// on its own contiguous range of the tasks, then takes the others' leftovers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace lumen::runtime {

class ThreadPool {
 public:
  // What a profiling pool measured (Session's --profile). A join is one
  // fork/join of the workers; parallel_for calls that run inline (one thread,
  // or one task) are counted as calls only.
  struct Stats {
    int64_t calls = 0;         // parallel_for calls with tasks
    int64_t joins = 0;         // fork/joins (calls that woke the workers)
    int64_t joined_tasks = 0;  // tasks of those joins
    double join_seconds = 0;   // wall time from each fork to its join's release
    // Summed over the threads: from a thread's last task of a join (or the
    // fork, if it ran none) to the release; the caller's part separately.
    double wait_seconds = 0;
    double caller_wait_seconds = 0;
  };

  // n_threads >= 1, counting the caller. With profile, every join is timed
  // (stats()); without, the hot path has no clock reads and no extra atomics.
  explicit ThreadPool(int n_threads, bool profile = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  const Stats& stats() const { return stats_; }

  // Calls body(task, thread) for every task in [0, n_tasks), spread over the
  // threads, and returns when all are done. `thread` is in [0, size()) and
  // identifies per-thread scratch; which thread runs a task must not matter.
  template <typename Body>
  void parallel_for(int64_t n_tasks, Body&& body) {
    run(n_tasks, &body, [](void* ctx, int64_t task, int thread) { (*static_cast<Body*>(ctx))(task, thread); });
  }

 private:
  using Clock = std::chrono::steady_clock;
  using TaskFn = void (*)(void*, int64_t, int);
  void run(int64_t n_tasks, void* ctx, TaskFn fn);
  void worker_loop(int thread);
  // Runs tasks of `job` (a job_ value): its own range, then the others'.
  void work(int thread, uint64_t job);
  struct alignas(64) Cursor {
    std::atomic<uint64_t> word{0};
  };
  // Claims the next task of `cursor` if it still holds job `generation`'s range.
  static bool claim(Cursor& cursor, uint64_t generation, int64_t& task);
  // Adds the join of job `generation` (just released) to stats_.
  void account_join(uint64_t generation, int64_t n_tasks, Clock::time_point fork);

  // When a thread last finished a task, and of which job: written by that
  // thread before its task's done_ increment, read by the caller after the
  // join (so ordered by done_), one cache line each.
  struct alignas(64) LastTask {
    uint64_t generation = 0;
    Clock::time_point at;
  };

  int n_threads_;
  bool profile_;
  Stats stats_;
  std::vector<LastTask> last_task_;  // per thread, when profiling
  std::vector<std::thread> workers_;
  // The current job: job_ = generation | task count, and per thread a
  // cursor = generation | end | next over its contiguous range, one cache
  // line each. A claim is a compare-exchange on a cursor, its owner's or
  // (once that is empty) another's, so a worker can never run a task of a job
  // other than the one whose function it read, threads do not contend on one
  // line while they have their own tasks, and a job is complete when its
  // tasks are done: the caller never waits for a worker that is not
  // scheduled, whose range the others take.
  std::atomic<void*> ctx_{nullptr};
  std::atomic<TaskFn> fn_{nullptr};
  std::vector<Cursor> cursors_;
  alignas(64) std::atomic<uint64_t> job_{0};
  alignas(64) std::atomic<int64_t> done_{0};
  std::atomic<bool> stop_{false};
};

// Physical cores of this machine (hyperthread siblings counted once), >= 1.
int physical_cores();

}  // namespace lumen::runtime
