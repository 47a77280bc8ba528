// lumen-server end to end: the real binary on a free port with the reference
// model, driven over HTTP: completions, chat, streaming, logprobs, errors, a
// flood of requests, the API key and SIGTERM. Greedy results must equal
// lumen-run's and be the same alone and among concurrent requests. Then the
// HTTP layer in this process over a scheduler the test steps itself: a
// vanishing client and a full queue, whose outcomes would otherwise race with
// generation.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "../runtime/runtime_support.h"
#include "server_process.h"
#include "lumen/codegen/codegen.h"
#include "lumen/runtime/sampler.h"
#include "synth/gguf_synth.h"
#include "lumen/runtime/session.h"
#include "lumen/server/http_server.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Http : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(LUMEN_BINARY_DIR) / "tests" / "server" / "http_test_files" / std::to_string(getpid());
    fs::create_directories(dir_);
    // The servers' packed-weight cache goes here, not into the user's cache.
    setenv("LUMEN_CACHE_DIR", (dir_ / "pack_cache").c_str(), 1);
    model_so_ = (dir_ / "qwen2.so").string();
    codegen::emit_model_so(runtime::testing::qwen2_program(best_isa(cpu_features())), best_isa(cpu_features()),
                           host_cpu_tune(), model_so_);
    server_ = new ServerProcess;
    server_->start(model_so_, tiny_args({"--parallel", "8", "--max-body", "65536", "--chunk", "16"}));
  }

  // The reference model with 256 positions per sequence on 2 threads (in
  // llama.cpp's spellings), then `extra`.
  static std::vector<std::string> tiny_args(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"-m", runtime::testing::tiny_gguf(), "-c", "256", "-t", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  static void TearDownTestSuite() {
    if (server_) server_->terminate();
    delete server_;
    server_ = nullptr;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  static httplib::Result post(const std::string& path, const std::string& body, int port = 0,
                              const httplib::Headers& headers = {}) {
    httplib::Client c("127.0.0.1", port ? port : server_->port);
    c.set_read_timeout(120, 0);
    return c.Post(path.c_str(), headers, body, "application/json");
  }

  static json post_json(const std::string& path, const json& body) {
    auto r = post(path, body.dump());
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }

  static void expect_error(const std::string& path, const std::string& body, int status, const std::string& what = "") {
    auto r = post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << body.substr(0, 100) << " -> " << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("code"));
    if (!what.empty()) {
      EXPECT_NE(j["error"]["message"].get<std::string>().find(what), std::string::npos) << r->body;
    }
  }

  static std::string lumen_run(const std::string& prompt, int n) {
    const std::string out = (dir_ / "run.txt").string();
    std::string cmd = std::string(LUMEN_BINARY_DIR "/tools/lumen-run ") + model_so_ + " --gguf " +
                      runtime::testing::tiny_gguf() + " --temp 0 -t 2 -n " + std::to_string(n) + " --prompt '" +
                      prompt + "' >" + out + " 2>/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    return runtime::testing::read_file(out);
  }

  static fs::path dir_;
  static std::string model_so_;
  static ServerProcess* server_;
};
fs::path Http::dir_;
std::string Http::model_so_;
ServerProcess* Http::server_ = nullptr;

const std::vector<std::string> kPrompts = {"The quick brown fox", "Once upon a time", "1 2 3 4 5", "Hello there",
                                           "A compiler turns", "In the beginning", "def main", "Lorem ipsum dolor"};

TEST_F(Http, GreedyCompletionEqualsLumenRun) {
  json r = post_json("/v1/completions", {{"prompt", kPrompts[0]}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_TRUE(r["id"].is_string() && r["created"].is_number() && r["model"].is_string());
  EXPECT_EQ(r["choices"][0]["text"].get<std::string>(), lumen_run(kPrompts[0], 12));
  EXPECT_EQ(r["usage"]["completion_tokens"].get<int>() + r["usage"]["prompt_tokens"].get<int>(),
            r["usage"]["total_tokens"].get<int>());
}

TEST_F(Http, ChatCompletionHasTheOpenAiShape) {
  json r = post_json("/v1/chat/completions",
                     {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string());
  const std::string reason = r["choices"][0]["finish_reason"];
  EXPECT_TRUE(reason == "stop" || reason == "length") << reason;
  EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), 5);
  auto models = httplib::Client("127.0.0.1", server_->port).Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], r["model"]);
}

// GET / is the chat page, byte for byte the source file built into the binary,
// under a policy that lets it reach nothing but this server.
TEST_F(Http, RootServesTheChatPageBuiltIntoTheBinary) {
  auto page = httplib::Client("127.0.0.1", server_->port).Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(page->get_header_value("Content-Security-Policy").rfind("default-src 'self';", 0), 0u);
  EXPECT_EQ(page->body, test_support::read_existing_file(LUMEN_SOURCE_DIR "/src/server/chat_page.html"));
}

TEST_F(Http, StreamSendsTheSameTextAsChunksEndingWithDone) {
  json body = {{"prompt", kPrompts[1]}, {"max_tokens", 10}, {"temperature", 0}};
  const std::string whole = post_json("/v1/completions", body)["choices"][0]["text"];
  body["stream"] = true;
  auto r = post("/v1/completions", body.dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::string text, last;
  size_t at = 0;
  int records = 0;
  while ((at = r->body.find("data: ", at)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    last = r->body.substr(at + 6, end - at - 6);
    at = end;
    ++records;
    if (last == "[DONE]") break;
    json chunk = json::parse(last);
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(last, "[DONE]");
  EXPECT_GE(records, 3);
  EXPECT_EQ(text, whole);
}

TEST_F(Http, EchoLogprobsScoreThePrompt) {
  json r = post_json("/v1/completions", {{"prompt", kPrompts[7]}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 3}});
  const json& lp = r["choices"][0]["logprobs"];
  const size_t n = lp["tokens"].size();
  ASSERT_GT(n, 2u);
  EXPECT_EQ(r["choices"][0]["text"], kPrompts[7]);
  EXPECT_EQ(lp["token_logprobs"].size(), n);
  EXPECT_EQ(lp["top_logprobs"].size(), n);
  EXPECT_EQ(lp["text_offset"].size(), n);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  for (size_t i = 1; i < n; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 3u);
    EXPECT_GE(lp["text_offset"][i].get<int>(), lp["text_offset"][i - 1].get<int>());
  }
  // Chat log-probabilities.
  json c = post_json("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                              {"max_tokens", 3}, {"logprobs", true}, {"top_logprobs", 2}, {"temperature", 0}});
  const json& content = c["choices"][0]["logprobs"]["content"];
  ASSERT_GE(content.size(), 1u);
  EXPECT_TRUE(content[0]["logprob"].is_number());
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
}

TEST_F(Http, ConcurrentGreedyCompletionsEqualTheSameRequestsAlone) {
  auto body = [](const std::string& p) {
    return json{{"prompt", p}, {"max_tokens", 10}, {"temperature", 0}, {"logprobs", 1}}.dump();
  };
  std::vector<std::string> alone;
  for (const std::string& p : kPrompts) {
    auto r = post("/v1/completions", body(p));
    ASSERT_TRUE(r);
    alone.push_back(json::parse(r->body)["choices"][0].dump());  // text and logprobs, printed exactly
  }
  std::vector<std::string> together(kPrompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < kPrompts.size(); ++i)
    threads.emplace_back([&, i] {
      auto r = post("/v1/completions", body(kPrompts[i]));
      if (r) together[i] = json::parse(r->body)["choices"][0].dump();
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < kPrompts.size(); ++i) EXPECT_EQ(together[i], alone[i]) << kPrompts[i];
}

// The SSE records of a streamed response, [DONE] last.
std::vector<std::string> records(const std::string& body) {
  std::vector<std::string> out;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos;) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

double metric_value(int port, const std::string& name) {
  auto m = httplib::Client("127.0.0.1", port).Get("/metrics");
  if (!m) return -1;
  const size_t at = m->body.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stod(m->body.substr(at + name.size() + 2));
}

// n choices, whole and streamed, completions and chat: choice 0 is the n = 1
// answer, choice i the answer seeded seed + i, usage counts the prompt once.
TEST_F(Http, NChoicesAreTheAnswersSeededSeedPlusI) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    SCOPED_TRACE(path);
    const bool chat = std::string(path).find("chat") != std::string::npos;
    json body = {{"max_tokens", 6}, {"temperature", 1.0}, {"seed", 5}, {"logprobs", chat ? json(true) : json(1)}};
    if (chat)
      body["messages"] = {{{"role", "user"}, {"content", kPrompts[4]}}};
    else
      body["prompt"] = kPrompts[4];
    std::vector<json> single;
    for (int i = 0; i < 3; ++i) {
      json one = body;
      one["seed"] = 5 + i;
      single.push_back(post_json(path, one));
    }
    body["n"] = 3;
    json r = post_json(path, body);
    ASSERT_EQ(r["choices"].size(), 3u) << r.dump();
    int64_t completion = 0;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(r["choices"][i]["index"], i);
      json want = single[i]["choices"][0];
      want["index"] = i;
      EXPECT_EQ(r["choices"][i].dump(), want.dump());
      completion += single[i]["usage"]["completion_tokens"].get<int64_t>();
    }
    EXPECT_EQ(r["usage"]["prompt_tokens"], single[0]["usage"]["prompt_tokens"]);
    EXPECT_EQ(r["usage"]["completion_tokens"].get<int64_t>(), completion);

    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto streamed = post(path, body.dump());
    ASSERT_TRUE(streamed);
    const std::vector<std::string> recs = records(streamed->body);
    ASSERT_FALSE(recs.empty());
    EXPECT_EQ(recs.back(), "[DONE]");
    std::vector<std::string> text(3);
    int finished = 0;
    for (size_t k = 0; k + 1 < recs.size(); ++k) {
      json c = json::parse(recs[k]);
      ASSERT_EQ(c["choices"].size(), 1u);
      const size_t i = c["choices"][0]["index"].get<size_t>();
      ASSERT_LT(i, 3u);
      const json& piece = chat ? c["choices"][0]["delta"]["content"] : c["choices"][0]["text"];
      if (piece.is_string()) text[i] += piece.get<std::string>();
      if (!c["choices"][0]["finish_reason"].is_null()) ++finished;
      EXPECT_EQ(c.contains("usage"), k + 2 == recs.size());  // usage once, on the last chunk
    }
    EXPECT_EQ(finished, 3);
    for (size_t i = 0; i < 3; ++i) {
      const json& m = r["choices"][i];
      EXPECT_EQ(text[i], chat ? m["message"]["content"].get<std::string>() : m["text"].get<std::string>()) << i;
    }
  }
}

// A chat's second request takes its prefix from the cache (a hit in /metrics)
// and answers the same bytes as the first.
TEST_F(Http, RepeatedChatHitsThePrefixCacheAndAnswersTheSameBytes) {
  const json body = {{"messages", {{{"role", "system"}, {"content", "You are a terse assistant. " + kPrompts[5]}},
                                   {{"role", "user"}, {"content", kPrompts[2]}}}},
                     {"max_tokens", 8}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}};
  const double hits = metric_value(server_->port, "lumen_prefix_cache_hits_total");
  const double reused = metric_value(server_->port, "lumen_prefix_cache_reused_tokens_total");
  json first = post_json("/v1/chat/completions", body);
  json second = post_json("/v1/chat/completions", body);
  EXPECT_EQ(second["choices"].dump(), first["choices"].dump());
  EXPECT_EQ(second["usage"].dump(), first["usage"].dump());
  EXPECT_GE(metric_value(server_->port, "lumen_prefix_cache_hits_total"), hits + 1);
  EXPECT_GE(metric_value(server_->port, "lumen_prefix_cache_reused_tokens_total"),
            reused + first["usage"]["prompt_tokens"].get<double>() - 1);
  EXPECT_GE(metric_value(server_->port, "lumen_prefix_cache_bytes"), 0);
}

TEST_F(Http, BadRequestsGetOpenAiErrorsAndChangeNothing) {
  expect_error("/v1/completions", "{\"prompt\": ", 400, "not valid JSON");
  expect_error("/v1/completions", "[1, 2]", 400, "JSON object");
  expect_error("/v1/completions", R"({"prompt": 42})", 400, "prompt");
  expect_error("/v1/completions", R"({"prompt": "x", "max_tokens": "ten"})", 400, "max_tokens");
  expect_error("/v1/completions", R"({"prompt": "x", "max_tokens": -1})", 400, "max_tokens");
  expect_error("/v1/completions", R"({"prompt": "x", "max_tokens": 1e30})", 400, "max_tokens");
  expect_error("/v1/completions", R"({"prompt": "x", "n": 1000})", 400, "'n' must be in [1, 8]");
  expect_error("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "n": 0})", 400, "'n'");
  expect_error("/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature");
  expect_error("/v1/completions", R"({"prompt": "x", "stop": [1]})", 400, "stop");
  expect_error("/v1/chat/completions", R"({"model": "m"})", 400, "messages");
  expect_error("/v1/chat/completions", R"({"messages": [{"content": "hi"}]})", 400, "role");
  expect_error("/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, "UTF-8");
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += " word";
  expect_error("/v1/completions", json{{"prompt", long_prompt}}.dump(), 400, "context");
  expect_error("/v1/completions", json{{"prompt", std::string(70000, 'a')}}.dump(), 413);
  expect_error("/v1/nothing", "{}", 404);
  auto health = httplib::Client("127.0.0.1", server_->port).Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// The sampler fields are checked by the runtime's sampler table (the one
// lumen-run's flags come from): a wrong type and a value above the range are
// 400s naming the field.
TEST_F(Http, SamplerFieldsAreCheckedByTheSamplerTable) {
  for (const SamplerParam& p : kSamplerParams) {
    const std::string field(p.json_field);
    SCOPED_TRACE(field);
    expect_error("/v1/completions", json{{"prompt", "x"}, {field, "high"}}.dump(), 400, field);
    json above = {{"prompt", "x"}};
    if (const auto* real = std::get_if<RealSamplerParam>(&p.value))
      above[field] = real->hi + 1;
    else
      above[field] = static_cast<uint64_t>(std::get<IntegerSamplerParam>(p.value).hi) + 1;
    expect_error("/v1/completions", above.dump(), 400, field);
  }
}

// Waits for a condition the server exposes; never arriving (a minute) is a
// failure. The poll interval decides no outcome, only how soon it is seen.
void wait_until(const std::function<bool()>& condition, const std::string& what) {
  for (int i = 0; i < 60000; ++i) {
    if (condition()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ADD_FAILURE() << what;
}

// Constrained streams for the flood and the vanishing client: a JSON Schema,
// and a forced tool call. Both need far more than the tokens those tests let
// run (a string of at least 200 characters).
const json kLongTextSchema = {{"type", "object"},
                              {"properties", {{"text", {{"type", "string"}, {"minLength", 200}}}}},
                              {"required", {"text"}}};

json chat_body(const std::string& content) { return {{"messages", {{{"role", "user"}, {"content", content}}}}}; }

json schema_chat() {
  json body = chat_body("Write a long text.");
  body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "long"}, {"schema", kLongTextSchema}}}};
  return body;
}

json tool_chat() {
  json body = chat_body("Note this down.");
  body["tools"] = {{{"type", "function"}, {"function", {{"name", "note"}, {"parameters", kLongTextSchema}}}}};
  body["tool_choice"] = "required";
  return body;
}

// Constrained output (docs/server.md, "Constrained output"): llama-server's
// `grammar` and response_format json_object, whole and streamed (the same
// text), a complete match whenever finish is "stop"; bad constraints are 400s
// naming the field.
TEST_F(Http, GrammarAndJsonObjectConstrainTheOutput) {
  const std::string gbnf = "root ::= (\"yes\" | \"no\") \", because \" [a-z ]{1,12} \".\"";
  json body = {{"prompt", kPrompts[2]}, {"max_tokens", 30}, {"temperature", 0}, {"grammar", gbnf}};
  json whole = post_json("/v1/completions", body);
  const std::string text = whole["choices"][0]["text"];
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop") << text;
  EXPECT_TRUE(text.starts_with("yes, because ") || text.starts_with("no, because ")) << text;
  EXPECT_TRUE(text.ends_with(".")) << text;
  body["stream"] = true;
  auto r = post("/v1/completions", body.dump());
  ASSERT_TRUE(r);
  std::string streamed;
  for (size_t at = 0; (at = r->body.find("data: {", at)) != std::string::npos; ++at)
    streamed += json::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6))["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text);

  for (bool stream : {false, true})
    for (uint64_t seed : {1, 2, 3}) {
      json chat = {{"messages", {{{"role", "user"}, {"content", "Answer in JSON."}}}},
                   {"max_tokens", 48}, {"seed", seed}, {"temperature", 1.0}, {"stream", stream},
                   {"response_format", {{"type", "json_object"}}}};
      auto c = post("/v1/chat/completions", chat.dump());
      ASSERT_TRUE(c);
      ASSERT_EQ(c->status, 200) << c->body;
      std::string content, finish;
      if (!stream) {
        const json j = json::parse(c->body);
        content = j["choices"][0]["message"]["content"];
        finish = j["choices"][0]["finish_reason"];
      } else {
        for (size_t at = 0; (at = c->body.find("data: {", at)) != std::string::npos; ++at) {
          const json chunk = json::parse(c->body.substr(at + 6, c->body.find("\n\n", at) - at - 6));
          const json& choice = chunk["choices"][0];
          if (choice["delta"].contains("content")) content += choice["delta"]["content"].get<std::string>();
          if (choice["finish_reason"].is_string()) finish = choice["finish_reason"];
        }
      }
      EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
      EXPECT_TRUE(content.starts_with("{")) << content;
      if (finish == "stop") {
        EXPECT_TRUE(json::parse(content, nullptr, false).is_object()) << content;
      }
    }
  json text_format = {{"prompt", "x"}, {"max_tokens", 2}, {"response_format", {{"type", "text"}}}};
  EXPECT_EQ(post("/v1/completions", text_format.dump())->status, 200);

  expect_error("/v1/completions", json{{"prompt", "x"}, {"grammar", 5}}.dump(), 400, "'grammar'");
  expect_error("/v1/completions", json{{"prompt", "x"}, {"grammar", "root ::= \"a\" |\n  ( \"b\""}}.dump(), 400,
               "'grammar' is not a valid grammar: 2:8: expected ')'");
  expect_error("/v1/completions", json{{"prompt", "x"}, {"grammar", "root ::= \"a\" root"}}.dump(), 400, "matches nothing");
  const std::string deep = "root ::= " + std::string(10000, '(') + "\"a\"" + std::string(10000, ')');
  expect_error("/v1/completions", json{{"prompt", "x"}, {"grammar", deep}}.dump(), 400, "nested deeper");
  expect_error("/v1/completions", json{{"prompt", "x"}, {"response_format", "json"}}.dump(), 400, "'response_format'");
  expect_error("/v1/completions", json{{"prompt", "x"}, {"response_format", {{"type", "yaml"}}}}.dump(), 400,
               "'response_format.type'");
  expect_error("/v1/completions",
               json{{"prompt", "x"}, {"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}.dump(),
               400, "cannot both");
  EXPECT_GE(metric_value(server_->port, "lumen_requests_constrained_total"), 8);
}

// A third of the flood streams a chat constrained by a JSON Schema and a
// third a forced tool call, cut short by max_tokens: every stream ends with
// [DONE] and the server serves the next request.
TEST_F(Http, FloodOf48SimultaneousRequestsIsServed) {
  std::vector<int> status(48, 0);
  std::vector<std::string> bodies(status.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < status.size(); ++i)
    threads.emplace_back([&, i] {
      json body = i % 3 == 1 ? schema_chat() : tool_chat();
      body["max_tokens"] = 6;
      body["stream"] = true;
      auto r = i % 3 == 0  // no retry: the server listens with a deep backlog
                   ? post("/v1/completions", json{{"prompt", kPrompts[i % kPrompts.size()]}, {"max_tokens", 3}}.dump())
                   : post("/v1/chat/completions", body.dump());
      status[i] = r ? r->status : -1;
      if (r) bodies[i] = r->body;
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < status.size(); ++i) {
    EXPECT_EQ(status[i], 200) << i << ": " << bodies[i];
    if (i % 3 != 0) {
      EXPECT_NE(bodies[i].find("data: [DONE]"), std::string::npos) << bodies[i];
    }
  }
  EXPECT_EQ(post_json("/v1/completions", {{"prompt", kPrompts[0]}, {"max_tokens", 2}})["choices"].size(), 1u);
  auto m = httplib::Client("127.0.0.1", server_->port).Get("/metrics");
  ASSERT_TRUE(m);
  for (const char* name : {"lumen_requests_total", "lumen_prompt_tokens_total", "lumen_generated_tokens_total",
                           "lumen_queue_depth", "lumen_active_sequences", "lumen_batch_size", "lumen_tokens_per_second"})
    EXPECT_NE(m->body.find(std::string("\n") + name + " "), std::string::npos) << name;
}

TEST_F(Http, ApiKeyAndSigterm) {
  ServerProcess small;
  small.start(model_so_, tiny_args({"--parallel", "1", "--api-key", "sesame"}));
  const std::string body = json{{"prompt", "Hello"}, {"max_tokens", 200}, {"ignore_eos", true}}.dump();
  auto no_key = post("/v1/completions", body, small.port);
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  EXPECT_EQ(json::parse(no_key->body)["error"]["type"], "authentication_error");
  auto wrong = post("/v1/completions", body, small.port, {{"Authorization", "Bearer nope"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  // The chat page needs no key: the calls it makes do.
  auto page = httplib::Client("127.0.0.1", small.port).Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  // SIGTERM once a long request is admitted: running or already done, it
  // gets its response (finished, or cut at the grace period), and the
  // process exits 0.
  int long_status = 0;
  std::thread holder([&] {
    auto r = post("/v1/completions", body, small.port, {{"Authorization", "Bearer sesame"}});
    long_status = r ? r->status : -1;
  });
  wait_until([&] { return metric_value(small.port, "lumen_requests_total") >= 1; }, "the request was never admitted");
  EXPECT_EQ(small.terminate(), 0);
  holder.join();
  EXPECT_EQ(long_status, 200);
}

// Without --ctx the context is min(4096, the model's training context), as in
// lumen-run (the shared Session default): a model trained on 512 positions
// serves 512; an explicit --ctx above that is an error, as in lumen-run.
TEST_F(Http, DefaultContextIsCappedByTheTrainingContext) {
  gguf::SynthConfig config = gguf::synth_preset("tiny");  // the reference model's shape
  config.n_ctx = 512;
  config.vocab_from = runtime::testing::tiny_gguf();
  const std::string small_ctx = (dir_ / "ctx512.gguf").string();
  gguf::synthesize(config, small_ctx);

  ServerProcess server;
  server.start(model_so_, {"-m", small_ctx, "-t", "2", "--parallel", "1"});
  EXPECT_NE(server.ready_line.find("1 parallel sequences of 512 tokens"), std::string::npos) << server.ready_line;
  EXPECT_EQ(server.terminate(), 0);

  const std::string err = (dir_ / "ctx_error.txt").string();
  const std::string cmd = std::string(LUMEN_BINARY_DIR "/tools/lumen-server ") + model_so_ + " -m " + small_ctx +
                          " --port 0 -t 2 -c 1024 2>" + err;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(runtime::testing::read_file(err).find(
                "lumen-server: error: context size 1024 exceeds the model's training context of 512\n"),
            std::string::npos)
      << runtime::testing::read_file(err);
}

// The server loads through the packed-weight cache, as lumen-run: the suite's
// server wrote it (LUMEN_CACHE_DIR), the next one reads it; --no-pack-cache
// repacks.
TEST_F(Http, ServerUsesThePackCache) {
  EXPECT_NE(server_->ready_line.find("pack cache "), std::string::npos) << server_->ready_line;
  EXPECT_FALSE(fs::is_empty(dir_ / "pack_cache"));
  ServerProcess again;
  again.start(model_so_, tiny_args({"--parallel", "1"}));
  EXPECT_NE(again.ready_line.find("pack cache hit"), std::string::npos) << again.ready_line;
  EXPECT_EQ(again.terminate(), 0);
  ServerProcess repacking;
  repacking.start(model_so_, tiny_args({"--parallel", "1", "--no-pack-cache"}));
  EXPECT_NE(repacking.ready_line.find("pack cache off"), std::string::npos) << repacking.ready_line;
  EXPECT_EQ(repacking.terminate(), 0);
}

// ------------------------------------------------ stepped by the test
// The HTTP layer in this process over a scheduler that runs a forward pass
// only when the test calls step(): what happens between two passes is the
// test's to decide, so outcomes that race with generation in a running server
// (a client vanishing mid-answer, a full queue) are deterministic here.
class SteppedServer {
 public:
  SteppedServer(int parallel, int64_t max_queue) {
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 256;
    so.n_seq = parallel;
    session_ = std::make_unique<runtime::Session>(model(), runtime::testing::tiny_gguf(), so);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(session_->gguf()));
    bool used_chatml = false;
    chat_template_ = std::make_unique<chat::ChatTemplate>(
        chat::load_chat_template(session_->gguf(), runtime::testing::tiny_gguf(), std::nullopt, &used_chatml));
    SchedulerOptions options;
    options.max_queue = max_queue;
    scheduler_ = std::make_unique<Scheduler>(*session_, *tokenizer_, options);
    HttpOptions http_options;
    http_options.port = 0;
    http_ = std::make_unique<HttpServer>(http_options);
    http_->bind();
    http_->attach(*scheduler_, *tokenizer_, *chat_template_, "tiny", session_->n_ctx());
    serving_ = std::thread([this] { http_->serve(); });
  }
  // Ends what is still running (its handlers return), then the HTTP server.
  ~SteppedServer() {
    scheduler_->stop(std::chrono::milliseconds(0));
    scheduler_->step();
    http_->stop();
    serving_.join();
  }

  int port() const { return http_->port(); }
  Scheduler& scheduler() { return *scheduler_; }

 private:
  // The hand-written qwen2 program with in-process kernels, built once.
  static std::shared_ptr<const runtime::CompiledModel> model() {
    static const std::shared_ptr<const runtime::CompiledModel> m = runtime::testing::qwen2_model();
    return m;
  }

  std::unique_ptr<runtime::Session> session_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatTemplate> chat_template_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpServer> http_;
  std::thread serving_;
};

// A client that disappears, streamed or not, frees its sequence: it asks for
// 250 tokens, gets 3 and vanishes with a reset, so the server's next write
// fails and cancels the request; a pass later the slot is free, with at most
// one more token generated (the one whose write failed). A non-streamed answer
// sends a space now and then while it is generated, so its failed write is
// noticed as in a stream. With n choices, every choice's slot is freed.
void expect_vanishing_client_is_cancelled(bool stream, int n = 1, const std::string& path = "/v1/completions",
                                          json body = {{"prompt", "Hello"}}) {
  SteppedServer server(/*parallel=*/n, /*max_queue=*/4);
  Scheduler& sched = server.scheduler();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  body["max_tokens"] = 250;
  body["stream"] = stream;
  body["ignore_eos"] = true;
  body["n"] = n;
  const std::string text = body.dump();
  const std::string req = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(text.size()) + "\r\n\r\n" + text;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  wait_until([&] { return sched.stats().requests == 1; }, "the request never reached the scheduler");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(sched.step());
  char buf[256];
  ASSERT_GT(recv(fd, buf, sizeof buf, 0), 0);  // the answer started
  const linger reset{1, 0};  // close with a reset: every later write to the socket fails
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset), 0);
  close(fd);
  // A fourth token to write, unless the server saw the reset already (then
  // this pass drops the cancelled sequence instead).
  sched.step();
  wait_until([&] { return sched.stats().cancelled == 1; }, "the failed write did not cancel the request");
  EXPECT_FALSE(sched.step());  // nothing left to run: the slot is free
  const SchedulerStats st = sched.stats();
  EXPECT_EQ(st.active, 0);
  EXPECT_GE(st.generated_tokens, 3u * static_cast<uint64_t>(n));
  EXPECT_LE(st.generated_tokens, 4u * static_cast<uint64_t>(n));
}

TEST(HttpSteppedByTheTest, ClientThatDisappearsMidStreamFreesItsSequence) { expect_vanishing_client_is_cancelled(true, 1); }

TEST(HttpSteppedByTheTest, ClientThatDisappearsBeforeAWholeAnswerFreesItsSequence) {
  expect_vanishing_client_is_cancelled(false, 1);
}

TEST(HttpSteppedByTheTest, ClientThatDisappearsMidStreamOfTwoChoicesFreesBothSlots) {
  expect_vanishing_client_is_cancelled(true, 2);
}

// A forced tool call's text is held back until the call closes, yet each
// token still writes (an SSE comment), so the reset is seen as in any stream.
TEST(HttpSteppedByTheTest, ClientThatDisappearsMidConstrainedStreamFreesItsSequence) {
  expect_vanishing_client_is_cancelled(true, 1, "/v1/chat/completions", schema_chat());
}

TEST(HttpSteppedByTheTest, ClientThatDisappearsMidToolCallStreamFreesItsSequence) {
  expect_vanishing_client_is_cancelled(true, 1, "/v1/chat/completions", tool_chat());
}

// One place in all (one slot, no queue): while the first request holds it -
// nothing steps, so it cannot finish - the next one is refused with 503 and
// Retry-After; the first still gets its answer once the passes run.
TEST(HttpSteppedByTheTest, AFullQueueRefusesWith503AndRetryAfter) {
  SteppedServer server(/*parallel=*/1, /*max_queue=*/0);
  Scheduler& sched = server.scheduler();
  auto post_to = [&](const std::string& body) {
    httplib::Client c("127.0.0.1", server.port());
    c.set_read_timeout(120, 0);
    return c.Post("/v1/completions", body, "application/json");
  };
  const std::string body = json{{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}}.dump();
  int first_status = 0;
  std::thread first([&] {
    auto r = post_to(body);
    first_status = r ? r->status : -1;
  });
  wait_until([&] { return sched.stats().requests == 1; }, "the first request never reached the scheduler");
  auto busy = post_to(body);
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503) << busy->body;
  EXPECT_FALSE(busy->get_header_value("Retry-After").empty());
  EXPECT_EQ(sched.stats().rejected, 1u);
  while (sched.step()) {
  }
  first.join();
  EXPECT_EQ(first_status, 200);
}

}  // namespace
}  // namespace lumen::server
