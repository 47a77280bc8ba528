// ThreadPool: every task runs exactly once on a valid thread, whatever the
// thread and task counts (fewer tasks than threads, jobs split past the
// per-job limit, many joins in a row); a profiling pool counts its calls,
// joins and waits, and a plain one counts nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "lumen/runtime/thread_pool.h"

namespace lumen::runtime {
namespace {

// Runs `joins` parallel_fors of n_tasks and expects each task once per join.
void expect_each_task_once(ThreadPool& pool, int64_t n_tasks, int joins) {
  std::vector<std::atomic<int>> runs(static_cast<size_t>(n_tasks));
  std::atomic<bool> bad_thread{false};
  for (int j = 0; j < joins; ++j)
    pool.parallel_for(n_tasks, [&](int64_t task, int thread) {
      if (thread < 0 || thread >= pool.size()) bad_thread = true;
      runs[static_cast<size_t>(task)].fetch_add(1, std::memory_order_relaxed);
    });
  EXPECT_FALSE(bad_thread);
  for (int64_t t = 0; t < n_tasks; ++t) ASSERT_EQ(runs[static_cast<size_t>(t)].load(), joins) << "task " << t;
}

TEST(ThreadPool, EveryTaskRunsOnceAt1To16ThreadsAndAnyTaskCount) {
  for (int threads : {1, 2, 3, 7, 16}) {
    ThreadPool pool(threads);
    for (int64_t n_tasks : {1, 2, 5, 16, 17, 1000}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, " + std::to_string(n_tasks) + " tasks");
      expect_each_task_once(pool, n_tasks, 40);
    }
  }
}

TEST(ThreadPool, AJobPastThePerJobTaskLimitRunsEveryTaskOnce) {
  ThreadPool pool(3);
  expect_each_task_once(pool, (int64_t{1} << 20) + 5, 1);
}

TEST(ThreadPool, AProfilingPoolCountsCallsJoinsAndWaits) {
  ThreadPool pool(3, /*profile=*/true);
  std::atomic<int64_t> sum{0};
  for (int j = 0; j < 10; ++j) pool.parallel_for(12, [&](int64_t task, int) { sum += task; });
  pool.parallel_for(1, [&](int64_t task, int) { sum += task; });  // inline: a call, no join
  const ThreadPool::Stats& s = pool.stats();
  EXPECT_EQ(s.calls, 11);
  EXPECT_EQ(s.joins, 10);
  EXPECT_EQ(s.joined_tasks, 120);
  EXPECT_GT(s.join_seconds, 0);
  EXPECT_GE(s.caller_wait_seconds, 0);
  EXPECT_GE(s.wait_seconds, s.caller_wait_seconds);
  // No thread waits longer than the joins lasted.
  EXPECT_LE(s.wait_seconds, 3 * s.join_seconds);
  EXPECT_EQ(sum, 10 * 66);

  ThreadPool one(1, /*profile=*/true);
  one.parallel_for(4, [&](int64_t, int) {});
  EXPECT_EQ(one.stats().calls, 1);
  EXPECT_EQ(one.stats().joins, 0);
}

TEST(ThreadPool, APlainPoolCountsNothing) {
  ThreadPool pool(2);
  pool.parallel_for(8, [](int64_t, int) {});
  EXPECT_EQ(pool.stats().calls, 0);
  EXPECT_EQ(pool.stats().joins, 0);
}

}  // namespace
}  // namespace lumen::runtime
