// /v1/embeddings: Lumen's pooled hidden states against llama-server
// --embeddings on the reference model (tests/data/embeddings/README.md), for
// each pooling; embeddings that batch with generation and keep batch
// invariance; the request's checks (each a 400 naming the field); the
// response's float and base64 encodings; and the route over HTTP.
#include <gtest/gtest.h>
#include <httplib.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../runtime/runtime_support.h"
#include "lumen/runtime/pooling.h"
#include "lumen/runtime/session.h"
#include "lumen/server/api_embeddings.h"
#include "lumen/server/http_server.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"
#include "support/test_files.h"
#include "support/tolerances.h"

namespace lumen::server {
namespace {

using nlohmann::json;
using runtime::Pooling;

json oracle() {
  static const json j =
      json::parse(test_support::read_existing_file(LUMEN_SOURCE_DIR "/tests/data/embeddings/tiny-qwen2-a.llama-server.json"));
  return j;
}

class Embeddings : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = runtime::testing::qwen2_model(); }
  static void TearDownTestSuite() { model_.reset(); }

  void make(int parallel, int64_t chunk = 64) {
    scheduler_.reset();
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 256;
    so.n_batch = 128;
    so.n_seq = parallel;
    session_ = std::make_unique<runtime::Session>(model_, runtime::testing::tiny_gguf(), so);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(session_->gguf()));
    SchedulerOptions options;
    options.prompt_chunk = chunk;
    scheduler_ = std::make_unique<Scheduler>(*session_, *tokenizer_, options);
  }

  static GenerationParams embedding(std::vector<int32_t> ids, Pooling pooling) {
    GenerationParams g;
    g.prompt = std::move(ids);
    g.max_tokens = 0;
    g.pooling = pooling;
    return g;
  }

  // Steps until every request is done; each one's Done event.
  std::vector<Event> finish(const std::vector<std::shared_ptr<Request>>& requests,
                            std::vector<std::vector<int32_t>>* tokens = nullptr) {
    std::vector<Event> out(requests.size());
    std::vector<bool> done(requests.size(), false);
    if (tokens) tokens->assign(requests.size(), {});
    for (int guard = 0; guard < 10000; ++guard) {
      bool all = true;
      for (size_t i = 0; i < requests.size(); ++i) {
        std::vector<Event> events;
        requests[i]->next(events, std::chrono::milliseconds(0));
        for (Event& e : events) {
          if (e.kind == Event::Kind::Token && tokens) (*tokens)[i].push_back(e.token.id);
          if (e.kind == Event::Kind::Done) {
            done[i] = true;
            out[i] = std::move(e);
          }
        }
        all = all && done[i];
      }
      if (all) return out;
      scheduler_->step();
    }
    ADD_FAILURE() << "requests never finished";
    return out;
  }

  static std::shared_ptr<const runtime::CompiledModel> model_;
  std::unique_ptr<runtime::Session> session_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;
};
std::shared_ptr<const runtime::CompiledModel> Embeddings::model_;

TEST_F(Embeddings, AgreeWithLlamaServerForEveryPooling) {
  const json o = oracle();
  make(/*parallel=*/4, /*chunk=*/16);  // the 73-token input spans 5 steps
  for (size_t i = 0; i < o["inputs"].size(); ++i)
    EXPECT_EQ(embedding_tokens(*tokenizer_, o["inputs"][i].get<std::string>()), o["tokens"][i].get<std::vector<int32_t>>())
        << "input " << i;
  for (std::string_view name : runtime::kPoolingNames) {
    const Pooling pooling = *runtime::parse_pooling(name);
    std::vector<std::shared_ptr<Request>> requests;
    for (const json& text : o["inputs"])
      requests.push_back(scheduler_->submit(embedding(embedding_tokens(*tokenizer_, text.get<std::string>()), pooling)));
    const std::vector<Event> got = finish(requests);
    const json& want = o["embeddings"][std::string(name)];
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(std::string(name) + " pooling, input " + std::to_string(i));
      const std::vector<float> theirs = want[i].get<std::vector<float>>();
      ASSERT_EQ(got[i].finish_reason, "stop");
      ASSERT_EQ(got[i].embedding.size(), theirs.size());
      double dot = 0, ours_sq = 0, theirs_sq = 0, max_diff = 0;
      for (size_t k = 0; k < theirs.size(); ++k) {
        dot += static_cast<double>(got[i].embedding[k]) * theirs[k];
        ours_sq += static_cast<double>(got[i].embedding[k]) * got[i].embedding[k];
        theirs_sq += static_cast<double>(theirs[k]) * theirs[k];
        max_diff = std::max(max_diff, std::abs(static_cast<double>(got[i].embedding[k]) - theirs[k]));
      }
      EXPECT_NEAR(ours_sq, 1.0, 1e-5);  // L2-normalized
      const double cosine = dot / std::sqrt(ours_sq * theirs_sq);
      EXPECT_GE(cosine, tolerance::kEmbeddingMinCosine);
      EXPECT_LE(max_diff, tolerance::kEmbeddingMaxAbsDiff);
      std::printf("%s input %zu: cosine %.7f, max|d| %.2e\n", std::string(name).c_str(), i, cosine, max_diff);
    }
  }
}

// An embedding's vector is bitwise the same alone (chunks of 64) and among
// generating requests and other embeddings (chunks of 5); the generated
// tokens are the same with and without embeddings beside them.
TEST_F(Embeddings, BatchWithGenerationAndKeepBatchInvariance) {
  auto greedy = [&](const std::string& text) {
    GenerationParams g;
    g.prompt = tokenizer_->encode(text);
    g.sampling.temp = 0;
    g.max_tokens = 8;
    g.ignore_eos = true;
    return g;
  };
  for (Pooling pooling : {Pooling::Mean, Pooling::Last, Pooling::Cls}) {
    SCOPED_TRACE(std::string(to_string(pooling)));
    make(1);
    const std::vector<int32_t> ids = embedding_tokens(*tokenizer_, oracle()["inputs"][5].get<std::string>());
    const std::vector<float> alone = finish({scheduler_->submit(embedding(ids, pooling))})[0].embedding;
    std::vector<std::vector<int32_t>> tokens_alone;
    finish({scheduler_->submit(greedy("Once upon a time")), scheduler_->submit(greedy("The capital of"))}, &tokens_alone);

    make(4, /*chunk=*/5);
    std::vector<std::shared_ptr<Request>> mixed;
    mixed.push_back(scheduler_->submit(greedy("Once upon a time")));
    mixed.push_back(scheduler_->submit(greedy("The capital of")));
    scheduler_->step();  // the generating requests are ahead of the embeddings
    mixed.push_back(scheduler_->submit(embedding(ids, pooling)));
    mixed.push_back(scheduler_->submit(embedding(std::vector<int32_t>(ids.rbegin(), ids.rend()), pooling)));
    std::vector<std::vector<int32_t>> tokens_mixed;
    const std::vector<Event> got = finish(mixed, &tokens_mixed);
    EXPECT_EQ(got[2].embedding, alone);
    EXPECT_NE(got[3].embedding, alone);
    EXPECT_EQ(tokens_mixed[0], tokens_alone[0]);
    EXPECT_EQ(tokens_mixed[1], tokens_alone[1]);
    EXPECT_EQ(got[2].finish_reason, "stop");
  }
}

// The job keeps at most parallel() items queued or running, and gives each
// item's vector at its index.
TEST_F(Embeddings, AJobOfManyItemsRunsParallelAtATime) {
  make(2);
  EmbeddingRequest request;
  for (int i = 0; i < 7; ++i) request.inputs.push_back(tokenizer_->encode("item number " + std::to_string(i)));
  EmbeddingJob job(*scheduler_, request, Pooling::Mean);
  ASSERT_TRUE(job.start());
  for (int guard = 0; guard < 1000 && !job.done(); ++guard) {
    const SchedulerStats st = scheduler_->stats();
    EXPECT_LE(st.queued + st.active, 2);
    scheduler_->step();
    job.pump(std::chrono::milliseconds(0));
  }
  ASSERT_TRUE(job.done());
  EXPECT_FALSE(job.error());
  make(1);
  for (size_t i = 0; i < request.inputs.size(); ++i)
    EXPECT_EQ(finish({scheduler_->submit(embedding(request.inputs[i], Pooling::Mean))})[0].embedding, job.vectors()[i])
        << i;
}

class EmbeddingRequests : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tokenizer_ = new Tokenizer(Tokenizer::from_gguf(gguf::File::open(runtime::testing::tiny_gguf()))); }
  static void TearDownTestSuite() { delete tokenizer_; }
  static EmbeddingRequest parse(const json& body) { return parse_embedding_request(body.dump(), *tokenizer_, 16, 128); }
  // The 400 a body gets, and its message must name `field`.
  static void expect_refused(const json& body, const std::string& field) {
    try {
      parse(body);
      ADD_FAILURE() << "accepted: " << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body.dump();
      EXPECT_NE(std::string(e.what()).find("'" + field + "'"), std::string::npos) << e.what();
    }
  }
  static Tokenizer* tokenizer_;
};
Tokenizer* EmbeddingRequests::tokenizer_ = nullptr;

TEST_F(EmbeddingRequests, TakeAStringStringsTokenIdsOrListsOfTokenIds) {
  EXPECT_EQ(parse({{"input", "Hello world"}}).inputs, (std::vector<std::vector<int32_t>>{{9707, 1879}}));
  EXPECT_EQ(parse({{"input", {"Hello world", "Hello"}}}).inputs.size(), 2u);
  EXPECT_EQ(parse({{"input", {1, 2, 3}}}).inputs, (std::vector<std::vector<int32_t>>{{1, 2, 3}}));
  EXPECT_EQ(parse({{"input", {{1, 2}, {3}}}}).inputs, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  const EmbeddingRequest r = parse({{"input", "x"}, {"model", "any"}, {"user", "u"}, {"dimensions", 128},
                                    {"encoding_format", "base64"}});
  EXPECT_TRUE(r.base64);
  EXPECT_FALSE(parse({{"input", "x"}, {"encoding_format", "float"}}).base64);
}

TEST_F(EmbeddingRequests, RefuseWhatTheyCannotHonourNamingTheField) {
  expect_refused(json::object(), "input");
  expect_refused({{"input", ""}}, "input");
  expect_refused({{"input", json::array()}}, "input");
  expect_refused({{"input", {"a", ""}}}, "input");
  expect_refused({{"input", {json::array()}}}, "input");
  expect_refused({{"input", {"a", 1}}}, "input");           // mixed
  expect_refused({{"input", {1.5}}}, "input");              // not an id
  expect_refused({{"input", {-1}}}, "input");
  expect_refused({{"input", {151936}}}, "input");           // beyond the vocabulary
  expect_refused({{"input", 7}}, "input");
  expect_refused({{"input", json::object()}}, "input");
  expect_refused({{"input", std::vector<int32_t>(17, 1)}}, "input");  // longer than the context of 16
  expect_refused({{"input", std::vector<std::string>(kMaxEmbeddingInputs + 1, "a")}}, "input");
  expect_refused({{"input", "x"}, {"dimensions", 64}}, "dimensions");
  expect_refused({{"input", "x"}, {"dimensions", "128"}}, "dimensions");
  expect_refused({{"input", "x"}, {"encoding_format", "int8"}}, "encoding_format");
  expect_refused({{"input", "x"}, {"model", 3}}, "model");
  expect_refused({{"input", "x"}, {"user", false}}, "user");
  expect_refused({{"input", "x"}, {"pooling", "mean"}}, "pooling");  // not a field of the API: refused, not ignored
  try {
    parse_embedding_request("{\"input\": ", *tokenizer_, 16, 128);
    ADD_FAILURE() << "accepted broken JSON";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
  }
}

TEST(EmbeddingResponse, FloatsReadBackExactlyAndBase64IsLittleEndianFloat32) {
  const std::vector<std::vector<float>> vectors = {{0.1f, -1.5e-8f, 3.4028235e38f, 0.0f}, {1.0f / 3}};
  const json plain = json::parse(embedding_response(vectors, false, "m", 7));
  EXPECT_EQ(plain["object"], "list");
  EXPECT_EQ(plain["model"], "m");
  EXPECT_EQ(plain["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(plain["usage"]["total_tokens"], 7);
  ASSERT_EQ(plain["data"].size(), 2u);
  const json encoded = json::parse(embedding_response(vectors, true, "m", 7));
  static const std::string kDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < vectors.size(); ++i) {
    EXPECT_EQ(plain["data"][i]["object"], "embedding");
    EXPECT_EQ(plain["data"][i]["index"], i);
    EXPECT_EQ(plain["data"][i]["embedding"].get<std::vector<float>>(), vectors[i]);
    const std::string b64 = encoded["data"][i]["embedding"].get<std::string>();
    ASSERT_EQ(b64.size() % 4, 0u);
    std::vector<uint8_t> bytes;
    uint32_t acc = 0;
    int bits = 0;
    for (char c : b64) {
      if (c == '=') break;
      acc = (acc << 6) | static_cast<uint32_t>(kDigits.find(c));
      bits += 6;
      if (bits >= 8) {
        bits -= 8;
        bytes.push_back(static_cast<uint8_t>(acc >> bits));
      }
    }
    ASSERT_EQ(bytes.size(), vectors[i].size() * 4);
    for (size_t k = 0; k < vectors[i].size(); ++k) {
      const uint32_t u = uint32_t{bytes[4 * k]} | uint32_t{bytes[4 * k + 1]} << 8 | uint32_t{bytes[4 * k + 2]} << 16 |
                         uint32_t{bytes[4 * k + 3]} << 24;
      EXPECT_EQ(std::bit_cast<float>(u), vectors[i][k]);
    }
  }
}

// The route over HTTP, on a server in this process whose scheduler runs.
TEST_F(Embeddings, AreServedAtBothRoutesAsFloatsOrBase64) {
  make(2);
  bool used_chatml = false;
  const chat::ChatTemplate tmpl =
      chat::load_chat_template(session_->gguf(), runtime::testing::tiny_gguf(), std::nullopt, &used_chatml);
  HttpOptions options;
  options.port = 0;
  HttpServer http(options);
  http.bind();
  http.set_embeddings(Pooling::Mean, session_->n_embd());
  http.attach(*scheduler_, *tokenizer_, tmpl, "tiny", session_->n_ctx());
  std::thread serving([&] { http.serve(); });
  std::thread running([&] { scheduler_->run(); });
  httplib::Client client("127.0.0.1", http.port());
  const json body = {{"input", {"Hello world", "The capital of France is Paris."}}, {"model", "whatever"}};
  auto r = client.Post("/v1/embeddings", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json plain = json::parse(r->body);
  EXPECT_EQ(plain["model"], "tiny");
  EXPECT_EQ(plain["usage"]["prompt_tokens"], 2 + 7);
  ASSERT_EQ(plain["data"].size(), 2u);
  EXPECT_EQ(plain["data"][1]["embedding"].size(), 128u);
  json b64_body = body;
  b64_body["encoding_format"] = "base64";
  r = client.Post("/embeddings", b64_body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(json::parse(r->body)["data"][0]["embedding"].is_string());
  r = client.Post("/v1/embeddings", json{{"input", "x"}, {"dimensions", 3}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("'dimensions'"), std::string::npos);
  scheduler_->stop(std::chrono::milliseconds(0));
  running.join();
  http.stop();
  serving.join();
}

}  // namespace
}  // namespace lumen::server
