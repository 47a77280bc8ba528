// The executor's persistent thread pool: one fork/join per parallel op, each
// thread claiming from its own range of tasks then from the others' (a
// compare-exchange per task on the range's own cache line), spin-then-sleep
// waiting.
#include "lumen/runtime/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace lumen::runtime {
namespace {

// Spinning catches the next op of a forward pass without a futex round trip;
// the bound keeps idle pools from burning a core between calls.
constexpr int kSpinIterations = 1 << 14;

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

template <typename T>
void spin_then_wait(const std::atomic<T>& value, T old) {
  for (int i = 0; i < kSpinIterations; ++i) {
    if (value.load(std::memory_order_acquire) != old) return;
    cpu_relax();
  }
  while (value.load(std::memory_order_acquire) == old) value.wait(old, std::memory_order_acquire);
}

}  // namespace

// job_ layout: generation in the top 24 bits, then the task count and 20 bits
// left at 0; a cursor's: the same generation, the end and the next task of its
// range (20 bits each).
constexpr int kTaskBits = 20;
constexpr uint64_t kTaskMask = (uint64_t{1} << kTaskBits) - 1;
constexpr int64_t kMaxTasksPerJob = static_cast<int64_t>(kTaskMask);
constexpr uint64_t kGenerationMask = (uint64_t{1} << (64 - 2 * kTaskBits)) - 1;

uint64_t job_generation(uint64_t job) { return job >> (2 * kTaskBits); }
int64_t job_tasks(uint64_t job) { return static_cast<int64_t>((job >> kTaskBits) & kTaskMask); }
int64_t job_next(uint64_t job) { return static_cast<int64_t>(job & kTaskMask); }
uint64_t job_word(uint64_t generation, int64_t tasks, int64_t next) {
  return (generation << (2 * kTaskBits)) | (static_cast<uint64_t>(tasks) << kTaskBits) | static_cast<uint64_t>(next);
}

ThreadPool::ThreadPool(int n_threads, bool profile)
    : n_threads_(n_threads < 1 ? 1 : n_threads), profile_(profile), cursors_(static_cast<size_t>(n_threads_)) {
  if (profile_) last_task_.resize(static_cast<size_t>(n_threads_));
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  // A new generation with no tasks wakes every worker, which then sees stop_.
  const uint64_t job = job_.load(std::memory_order_relaxed);
  job_.store(job_word((job_generation(job) + 1) & kGenerationMask, 0, 0), std::memory_order_release);
  job_.notify_all();
  for (std::thread& w : workers_) w.join();
}

bool ThreadPool::claim(Cursor& cursor, uint64_t generation, int64_t& task) {
  uint64_t word = cursor.word.load(std::memory_order_acquire);
  while (job_generation(word) == generation && job_next(word) < job_tasks(word)) {
    if (cursor.word.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
      task = job_next(word);
      return true;
    }
  }
  return false;
}

void ThreadPool::work(int thread, uint64_t job) {
  const uint64_t generation = job_generation(job);
  const int64_t n_tasks = job_tasks(job);
  // Read the job's function before claiming: a successful claim proves the
  // job was still open, so these are its values (see thread_pool.h).
  TaskFn fn = fn_.load(std::memory_order_relaxed);
  void* ctx = ctx_.load(std::memory_order_relaxed);
  auto run_task = [&](int64_t task) {
    fn(ctx, task, thread);
    if (profile_) last_task_[static_cast<size_t>(thread)] = {generation, Clock::now()};
  };
  auto count_done = [&](int64_t n) {
    if (n > 0 && done_.fetch_add(n, std::memory_order_acq_rel) + n == n_tasks) done_.notify_one();
  };
  // The own range's tasks are counted done together, the others' one by one
  // (so a thread preempted while helping holds back at most one task's count).
  int64_t task = 0, ran = 0;
  while (claim(cursors_[static_cast<size_t>(thread)], generation, task)) {
    run_task(task);
    ++ran;
  }
  count_done(ran);
  for (int i = 1; i < n_threads_; ++i) {
    Cursor& other = cursors_[static_cast<size_t>((thread + i) % n_threads_)];
    while (claim(other, generation, task)) {
      run_task(task);
      count_done(1);
    }
  }
}

void ThreadPool::run(int64_t n_tasks, void* ctx, TaskFn fn) {
  if (n_tasks <= 0) return;
  if (profile_) ++stats_.calls;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  // Jobs hold at most kMaxTasksPerJob tasks: split larger loops.
  for (int64_t first = 0; first < n_tasks; first += kMaxTasksPerJob) {
    const int64_t count = std::min(kMaxTasksPerJob, n_tasks - first);
    struct Offset {
      void* ctx;
      TaskFn fn;
      int64_t first;
    } offset{ctx, fn, first};
    TaskFn shifted = [](void* c, int64_t task, int thread) {
      auto* o = static_cast<Offset*>(c);
      o->fn(o->ctx, o->first + task, thread);
    };
    const Clock::time_point fork = profile_ ? Clock::now() : Clock::time_point{};
    ctx_.store(&offset, std::memory_order_relaxed);
    fn_.store(shifted, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (job_generation(job_.load(std::memory_order_relaxed)) + 1) & kGenerationMask;
    for (int t = 0; t < n_threads_; ++t)
      cursors_[static_cast<size_t>(t)].word.store(
          job_word(generation, count * (t + 1) / n_threads_, count * t / n_threads_), std::memory_order_relaxed);
    const uint64_t job = job_word(generation, count, 0);
    job_.store(job, std::memory_order_release);
    job_.notify_all();
    work(0, job);
    int64_t done = done_.load(std::memory_order_acquire);
    while (done != count) {
      spin_then_wait(done_, done);
      done = done_.load(std::memory_order_acquire);
    }
    if (profile_) account_join(generation, count, fork);
  }
}

void ThreadPool::account_join(uint64_t generation, int64_t n_tasks, Clock::time_point fork) {
  const Clock::time_point release = Clock::now();
  ++stats_.joins;
  stats_.joined_tasks += n_tasks;
  stats_.join_seconds += std::chrono::duration<double>(release - fork).count();
  for (size_t t = 0; t < last_task_.size(); ++t) {
    // A thread that ran no task of this job waited from the fork.
    const Clock::time_point from = last_task_[t].generation == generation ? last_task_[t].at : fork;
    const double wait = std::chrono::duration<double>(release - from).count();
    stats_.wait_seconds += wait;
    if (t == 0) stats_.caller_wait_seconds += wait;
  }
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;  // the generation of the last job this thread worked on
  while (true) {
    const uint64_t job = job_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    if (job_generation(job) != seen) {
      seen = job_generation(job);
      work(thread, job);
      continue;
    }
    // Worked on already: sleep until the job word changes (a new job, or stop).
    spin_then_wait(job_, job);
  }
}

int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int logical = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof set, &set) == 0) logical = CPU_COUNT(&set);
  std::set<std::pair<std::string, std::string>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core(dir + "core_id"), package(dir + "physical_package_id");
    std::string core_id, package_id;
    if (!(core >> core_id) || !(package >> package_id)) return logical > 0 ? logical : 1;
    cores.emplace(package_id, core_id);
  }
  if (cores.empty()) return logical > 0 ? logical : 1;
  return static_cast<int>(cores.size());
}

}  // namespace lumen::runtime
