// Hidden states (SeqTokens::hidden, Session::step_hidden): the final norm's
// output for every token of an entry, bitwise the same whatever else is in
// the pass and however the prompt is chunked, with the other entries' logits
// unchanged; and pooling them into embeddings (runtime/pooling.h). Their
// agreement with llama.cpp is tests/server/embeddings_test.cpp's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/runtime/pooling.h"
#include "lumen/runtime/session.h"
#include "runtime_support.h"

namespace lumen::runtime {
namespace {

class HiddenStates : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = testing::qwen2_model(); }
  static void TearDownTestSuite() { model_.reset(); }

  static std::unique_ptr<Session> session(int n_seq) {
    SessionOptions o;
    o.n_threads = 2;
    o.n_batch = 128;
    o.n_ctx = 256;
    o.n_seq = n_seq;
    return std::make_unique<Session>(model_, testing::tiny_gguf(), o);
  }

  static std::vector<int32_t> tokens(int64_t count, uint32_t seed) {
    std::vector<int32_t> out;
    uint32_t x = seed * 2654435761u + 12345u;
    for (int64_t i = 0; i < count; ++i) {
      x = x * 1664525u + 1013904223u;
      out.push_back(static_cast<int32_t>((x >> 8) % 151643u));
    }
    return out;
  }

  static std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

  static std::shared_ptr<const CompiledModel> model_;
};
std::shared_ptr<const CompiledModel> HiddenStates::model_;

TEST_F(HiddenStates, AreBitwiseTheSameAloneAmongOthersAndInOtherChunks) {
  const std::vector<int32_t> prompt = tokens(40, 1), other = tokens(30, 2);
  auto alone = session(1);
  ASSERT_EQ(alone->n_embd(), 128);
  SeqTokens whole{0, prompt, false, true};
  alone->step(std::span<const SeqTokens>(&whole, 1));
  std::vector<std::vector<float>> expected;
  for (int64_t t = 0; t < static_cast<int64_t>(prompt.size()); ++t) expected.push_back(copy(alone->step_hidden(0, t)));
  EXPECT_THROW(alone->step_logits(0), std::out_of_range);  // no logits for a hidden entry: the head did not run

  // The other sequence's logits alone, to check they are untouched by the hidden entry.
  auto other_alone = session(1);
  const std::vector<float> other_logits = copy(other_alone->eval(std::span<const int32_t>(other).first(17)));

  // The prompt in chunks of 7 after another sequence's 17-token chunk.
  auto s = session(2);
  for (size_t at = 0; at < prompt.size(); at += 7) {
    const auto mine = std::span<const int32_t>(prompt).subspan(at, std::min<size_t>(7, prompt.size() - at));
    std::vector<SeqTokens> batch{{0, mine, false, true}};
    if (at == 0) batch.insert(batch.begin(), SeqTokens{1, std::span<const int32_t>(other).first(17)});
    s->step(batch);
    const size_t entry = batch.size() - 1;
    for (size_t t = 0; t < mine.size(); ++t)
      EXPECT_EQ(copy(s->step_hidden(entry, static_cast<int64_t>(t))), expected[at + t]) << "token " << at + t;
    if (at == 0) {
      EXPECT_EQ(copy(s->step_logits(0)), other_logits);
    }
    EXPECT_THROW(s->step_hidden(entry, static_cast<int64_t>(mine.size())), std::out_of_range);
  }
  EXPECT_EQ(s->position(0), static_cast<int64_t>(prompt.size()));
}

TEST_F(HiddenStates, AreRefusedWithAllLogitsAndNotKeptForOtherEntries) {
  auto s = session(2);
  const std::vector<int32_t> a = tokens(5, 3);
  EXPECT_THROW(s->step(std::vector<SeqTokens>{{0, a, true, true}}), EvalError);
  EXPECT_EQ(s->position(0), 0);
  s->step(std::vector<SeqTokens>{{0, a, false, false}, {1, a, false, true}});
  EXPECT_THROW(s->step_hidden(0, 0), std::out_of_range);
  EXPECT_EQ(s->step_hidden(1, 4).size(), 128u);
}

TEST(Pooling, MeanLastAndClsAreL2Normalized) {
  const std::vector<float> a = {3, 0, 4, 0}, b = {1, 2, 2, 0}, c = {0, 0, 0, 5};
  auto pooled = [&](Pooling p) {
    Pooler pooler(p, 4);
    for (const auto* row : {&a, &b, &c}) pooler.add(*row);
    EXPECT_EQ(pooler.rows(), 3);
    return pooler.result();
  };
  // mean (4/3, 2/3, 2, 5/3): norm sqrt(16+4+36+25)/3 = 3
  const std::vector<float> mean = pooled(Pooling::Mean);
  const std::vector<double> want = {4.0 / 9, 2.0 / 9, 6.0 / 9, 5.0 / 9};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(mean[i], want[i], 1e-7) << i;
  EXPECT_EQ(pooled(Pooling::Last), (std::vector<float>{0, 0, 0, 1}));
  EXPECT_EQ(pooled(Pooling::Cls), (std::vector<float>{0.6f, 0, 0.8f, 0}));
  Pooler zero(Pooling::Last, 2);
  zero.add(std::vector<float>{0, 0});
  EXPECT_EQ(zero.result(), (std::vector<float>{0, 0}));  // no division by zero
}

TEST(Pooling, NamesRoundTripTheGgufKeyUsesLlamaCppsNumberingAndTheFlagComesFirst) {
  for (std::string_view name : kPoolingNames) EXPECT_EQ(to_string(*parse_pooling(name)), name);
  EXPECT_FALSE(parse_pooling("none"));
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("lumen_pooling_" + std::to_string(getpid()) + ".gguf");
  auto pooling_of = [&](std::optional<uint32_t> type) {
    gguf::Writer w;
    w.set_string("general.architecture", "qwen2");
    if (type) w.set_u32("qwen2.pooling_type", *type);
    w.write(path.string());
    return gguf_pooling(gguf::File::open(path.string()));
  };
  EXPECT_EQ(pooling_of(std::nullopt), std::nullopt);
  EXPECT_EQ(pooling_of(0), std::nullopt);  // none
  EXPECT_EQ(pooling_of(1), Pooling::Mean);
  EXPECT_EQ(pooling_of(2), Pooling::Cls);
  EXPECT_EQ(pooling_of(3), Pooling::Last);
  EXPECT_EQ(pooling_of(4), std::nullopt);  // rank: a reranker's head, not an embedding
  gguf::Writer w;
  w.set_string("general.architecture", "qwen2");
  w.set_u32("qwen2.pooling_type", 2);
  w.write(path.string());
  const gguf::File with_key = gguf::File::open(path.string());
  EXPECT_EQ(choose_pooling(Pooling::Mean, with_key).pooling, Pooling::Mean);  // the flag first
  EXPECT_EQ(choose_pooling(std::nullopt, with_key).pooling, Pooling::Cls);    // then the file
  pooling_of(std::nullopt);
  EXPECT_EQ(choose_pooling(std::nullopt, gguf::File::open(path.string())).pooling, kDefaultPooling);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace lumen::runtime
