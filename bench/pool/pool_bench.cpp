// Pool benchmark: the cost of one ThreadPool::parallel_for fork/join with as
// many trivial tasks as threads (the join's fixed cost), and the cost of
// claiming one task (a join of many trivial tasks, less the fixed cost, per
// task). Thread counts above this machine's cores are labelled
// oversubscribed: their figures include the scheduler's time slices.
// Rounds alternate the thread counts; each figure is given as the best round
// (the cost itself, on a shared machine) and the median one.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "lumen/runtime/thread_pool.h"

namespace {

using lumen::runtime::ThreadPool;
using Clock = std::chrono::steady_clock;

// One counter per thread, a cache line each, so tasks share nothing but the
// pool's own words.
struct alignas(64) Sink {
  int64_t value = 0;
};

// Seconds per parallel_for of n_tasks trivial tasks, over `joins` calls.
double seconds_per_join(ThreadPool& pool, std::vector<Sink>& sink, int64_t n_tasks, int joins) {
  const Clock::time_point start = Clock::now();
  for (int j = 0; j < joins; ++j)
    pool.parallel_for(n_tasks, [&](int64_t task, int thread) { sink[static_cast<size_t>(thread)].value += task; });
  return std::chrono::duration<double>(Clock::now() - start).count() / joins;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lumen-bench-pool: the runtime thread pool's fork/join and task-claiming costs"};
  std::vector<int> threads{1, 2, 4, 8, 16};
  int joins = 20000, rounds = 5;
  int64_t many = 4096;
  app.add_option("-t,--threads", threads, "thread counts (default 1 2 4 8 16)")->check(CLI::Range(1, 1024));
  app.add_option("-j,--joins", joins, "fork/joins timed per figure and round (default 20000)")->check(CLI::Range(1, 100000000));
  app.add_option("--tasks", many, "tasks of the join that times claiming (default 4096)")->check(CLI::Range(2, 1 << 20));
  app.add_option("-r,--rounds", rounds, "rounds over all thread counts (default 5)")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);

  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<std::unique_ptr<ThreadPool>> pools;
  std::vector<std::vector<Sink>> sinks;
  for (int t : threads) {
    pools.push_back(std::make_unique<ThreadPool>(t));
    sinks.emplace_back(static_cast<size_t>(t));
  }
  std::vector<std::vector<double>> join_s(threads.size()), task_s(threads.size());
  const int many_joins = std::max(1, static_cast<int>(static_cast<int64_t>(joins) * 8 / many));
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < threads.size(); ++i) {
      const double join = seconds_per_join(*pools[i], sinks[i], threads[i], joins);
      const double big = seconds_per_join(*pools[i], sinks[i], many, many_joins);
      join_s[i].push_back(join);
      task_s[i].push_back((big - join) / static_cast<double>(many - threads[i]));
    }

  fmt::print("{} logical CPUs, {} rounds; a fork/join of t trivial tasks at t threads; claiming: a join of {} tasks\n\n",
             cores, rounds, many);
  fmt::print("| threads | fork/join best (us) | median (us) | per claimed task best (ns) | median (ns) | |\n");
  fmt::print("| ---: | ---: | ---: | ---: | ---: | --- |\n");
  for (size_t i = 0; i < threads.size(); ++i) {
    const char* note = threads[i] == 1 ? "runs inline: no fork, no join"
                       : threads[i] > cores ? "oversubscribed"
                                           : "";
    fmt::print("| {} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {} |\n", threads[i], 1e6 * best(join_s[i]),
               1e6 * median(join_s[i]), 1e9 * best(task_s[i]), 1e9 * median(task_s[i]), note);
  }
  return 0;
}
