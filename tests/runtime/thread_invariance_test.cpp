// Thread-count invariance (docs/runtime.md): the logits of every position are
// bitwise the same at 1, 2, 3, 7 and 16 threads, on every ISA tier this CPU
// runs, through a prefill GEMM pass (20 tokens), a batch-kernel pass (3
// tokens) and GEMV decode steps. The tiny model's small matmuls are one to a
// few tasks, but the output head is 151936 rows = 2374 tasks of 64 rows and
// the row-wise ops have one task per token, so at every thread count those
// ops are split over all threads and each thread computes different rows
// (oversubscribed on a small machine, which changes the interleaving only).
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "lumen/runtime/session.h"
#include "runtime_support.h"

namespace lumen::runtime {
namespace {

constexpr int kThreadCounts[] = {1, 2, 3, 7, 16};


// Every position's logits of: a 20-token prefill, a 3-token pass, then 3
// greedy decode steps (each step feeds back the argmax of the last logits).
std::vector<std::vector<float>> run(const std::shared_ptr<const CompiledModel>& model, int n_threads,
                                    bool fuse_ops = true, std::string* profile = nullptr) {
  SessionOptions o;
  o.n_threads = n_threads;
  o.fuse_ops = fuse_ops;
  o.profile = profile != nullptr;
  o.n_batch = 32;
  o.n_ctx = 64;
  o.all_logits = true;
  Session s(model, testing::tiny_gguf(), o);
  std::vector<std::vector<float>> out;
  auto pass = [&](const std::vector<int32_t>& t) {
    s.eval(t);
    for (int64_t i = 0; i < static_cast<int64_t>(t.size()); ++i) {
      std::span<const float> l = s.logits_at(i);
      out.emplace_back(l.begin(), l.end());
    }
  };
  pass(testing::tokens(20, 1, s.n_vocab()));
  pass(testing::tokens(3, 2, s.n_vocab()));
  for (int step = 0; step < 3; ++step) {
    const std::vector<float>& last = out.back();
    int32_t next = 0;
    for (size_t v = 1; v < last.size(); ++v)
      if (last[v] > last[static_cast<size_t>(next)]) next = static_cast<int32_t>(v);
    pass({next});
  }
  if (profile != nullptr) *profile = s.profile_report();
  return out;
}

// The figure of `column` (0: passes, ..., 3: joins/tok) on the pool table's
// row that starts with `pass` in a profile report.
double pool_figure(const std::string& report, const std::string& pass, int column) {
  const size_t at = report.find(pass);
  if (at == std::string::npos) return -1;
  std::istringstream row(report.substr(at + pass.size()));
  double v = -1;
  for (int c = 0; c <= column; ++c) row >> v;
  return v;
}

TEST(ThreadInvariance, LogitsAreBitwiseTheSameAt1And2And3And7And16ThreadsOnEveryIsaTier) {
  int tiers = 0;
  for (Isa isa : kAllIsas) {
    if ((cpu_features() & required_features(isa)) != required_features(isa)) continue;
    ++tiers;
    SCOPED_TRACE(to_string(isa));
    auto model = testing::in_process_model(testing::qwen2_program(isa), isa);
    const std::vector<std::vector<float>> expected = run(model, 1);
    ASSERT_EQ(expected.size(), 26u);
    for (int n_threads : kThreadCounts) {
      if (n_threads == 1) continue;
      SCOPED_TRACE(std::to_string(n_threads) + " threads");
      const std::vector<std::vector<float>> got = run(model, n_threads);
      ASSERT_EQ(got.size(), expected.size());
      for (size_t p = 0; p < got.size(); ++p)
        EXPECT_EQ(std::memcmp(got[p].data(), expected[p].data(), expected[p].size() * sizeof(float)), 0)
            << "position " << p;
    }
  }
  EXPECT_GE(tiers, 1);  // AVX2 is the least this runtime runs on
}


// Row runs and folded quantizes (docs/runtime.md) change how the ops are
// split into parallel_fors, not what any row computes: every position's
// logits are bitwise those of every op run alone, at 1 and 3 threads, and a
// prefill pass forks fewer times (the tiny qwen2 program: 8 joins per layer
// instead of 12).
TEST(ThreadInvariance, FusedOpsGiveTheLogitsOfEveryOpRunAloneWithFewerJoins) {
  const std::shared_ptr<const CompiledModel> model = testing::qwen2_model();
  for (int threads : {1, 3}) {
    std::string fused_report, alone_report;
    const auto fused = run(model, threads, true, &fused_report);
    const auto alone = run(model, threads, false, &alone_report);
    ASSERT_EQ(fused.size(), alone.size());
    for (size_t i = 0; i < fused.size(); ++i)
      ASSERT_EQ(std::memcmp(fused[i].data(), alone[i].data(), fused[i].size() * sizeof(float)), 0)
          << "position " << i << " at " << threads << " threads";
    if (threads == 1) continue;  // one thread runs every op inline: no joins either way
    const double fused_joins = pool_figure(fused_report, "prefill (longer passes)", 3);
    const double alone_joins = pool_figure(alone_report, "prefill (longer passes)", 3);
    EXPECT_GT(fused_joins, 0);
    EXPECT_LT(fused_joins, alone_joins * 0.75) << fused_report << alone_report;
  }
}

}  // namespace
}  // namespace lumen::runtime
