// lumen-server's surface beyond generation, end to end: started without a
// model.so it compiles one for the GGUF into the cache (as lumen-run does)
// and a second start finds it there; llama-server's utility routes
// (/tokenize, /detokenize, /apply-template, /props); logit_bias over HTTP
// (forcing, forbidding, batch invariance); the request-field table at the
// route; and lumen-run's --logit-bias.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../runtime/runtime_support.h"
#include "server_process.h"
#include "lumen/gguf/gguf.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class Surface : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(LUMEN_BINARY_DIR) / "tests" / "server" / "surface_test_files" / std::to_string(getpid());
    fs::create_directories(dir_);
    // The compiled model and the packed weights go here, not into the user's cache.
    setenv("LUMEN_CACHE_DIR", (dir_ / "cache").c_str(), 1);
    tokenizer_ = new Tokenizer(Tokenizer::from_gguf(gguf::File::open(runtime::testing::tiny_gguf())));
    server_ = new ServerProcess;
    server_->start("", args({"--parallel", "8", "--api-key", "sesame"}));
  }
  static void TearDownTestSuite() {
    if (server_) server_->terminate();
    delete server_;
    delete tokenizer_;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // No model.so: the source tree's programs, the reference model, 256
  // positions per sequence, 2 threads; then `extra`.
  static std::vector<std::string> args(const std::vector<std::string>& extra) {
    std::vector<std::string> a = {"--dsl-dir", LUMEN_SOURCE_DIR "/dsl", "-m", runtime::testing::tiny_gguf(),
                                  "-c", "256", "-t", "2"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  static httplib::Result post(const std::string& path, const json& body, const std::string& key = "sesame") {
    httplib::Client c("127.0.0.1", server_->port);
    c.set_read_timeout(120, 0);
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Authorization", "Bearer " + key);
    return c.Post(path.c_str(), headers, body.dump(), "application/json");
  }
  static json ok(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << path << " " << body.dump() << " -> " << r->body;
    return json::parse(r->body);
  }
  // A 400 whose message starts with `what`.
  static void expect_400(const std::string& path, const std::string& body, const std::string& what) {
    httplib::Client c("127.0.0.1", server_->port);
    auto r = c.Post(path.c_str(), {{"Authorization", "Bearer sesame"}}, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    EXPECT_EQ(j["error"]["message"].get<std::string>().rfind(what, 0), 0u) << body << " -> " << r->body;
  }
  static std::vector<int32_t> greedy_tokens(const json& extra, int n) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", n}, {"temperature", 0}, {"ignore_eos", true},
                 {"logprobs", 0}};
    body.update(extra);
    const json r = ok("/v1/completions", body);
    std::vector<int32_t> ids;
    for (const json& t : r["choices"][0]["logprobs"]["tokens"]) {
      const json tok = ok("/tokenize", {{"content", t}});
      ids.push_back(tok["tokens"].size() == 1 ? tok["tokens"][0].get<int32_t>() : -1);
    }
    return ids;
  }

  static fs::path dir_;
  static Tokenizer* tokenizer_;
  static ServerProcess* server_;
};
fs::path Surface::dir_;
Tokenizer* Surface::tokenizer_ = nullptr;
ServerProcess* Surface::server_ = nullptr;

// The suite's server compiled its model.so (saying so while /health said
// 503); the next start reuses it and the packed weights.
TEST_F(Surface, WithoutAModelSoTheServerCompilesOneForTheGgufOnce) {
  EXPECT_NE(server_->log.find("lumen-server: compiled "), std::string::npos) << server_->log;
  ServerProcess again;
  again.start("", args({"--parallel", "1"}));
  EXPECT_EQ(again.log.find("compiled"), std::string::npos) << "the cached model.so was not reused: " << again.log;
  EXPECT_NE(again.ready_line.find("pack cache hit"), std::string::npos) << again.ready_line;
  httplib::Client c("127.0.0.1", again.port);
  auto r = c.Post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 3}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(again.terminate(), 0);

  const std::string err = (dir_ / "no_program.txt").string();
  gguf::Writer w;
  w.set_string("general.architecture", "mamba");
  const std::string mamba = (dir_ / "mamba.gguf").string();
  w.write(mamba);
  const std::string cmd = std::string(LUMEN_BINARY_DIR "/tools/lumen-server --port 0 --dsl-dir " LUMEN_SOURCE_DIR
                                      "/dsl -m ") + mamba + " 2>" + err;
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(runtime::testing::read_file(err).find("lumen-server: error: no model program describes architecture 'mamba'"),
            std::string::npos)
      << runtime::testing::read_file(err);
}

TEST_F(Surface, TokenizeAndDetokenize) {
  const std::string text = "Hello world<|im_end|> é";
  const json plain = ok("/tokenize", {{"content", text}});
  const std::vector<int32_t> want = tokenizer_->encode(text, /*parse_special=*/true);
  EXPECT_EQ(plain["tokens"].get<std::vector<int32_t>>(), want);
  EXPECT_EQ(ok("/tokenize", {{"content", text}, {"add_special", true}})["tokens"].get<std::vector<int32_t>>(),
            tokenizer_->encode_prompt(text));
  const json pieces = ok("/tokenize", {{"content", text}, {"with_pieces", true}})["tokens"];
  ASSERT_EQ(pieces.size(), want.size());
  std::string joined;
  for (size_t i = 0; i < pieces.size(); ++i) {
    EXPECT_EQ(pieces[i]["id"], want[i]);
    joined += pieces[i]["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, text);
  // A piece that is part of a character is its bytes: a rare character the
  // vocabulary splits into byte tokens.
  std::string split;
  for (const char* c : {"\U00013067", "\U0001FAB8", "\U0001F9A9", "\u9F98", "\U00010348"})
    if (tokenizer_->encode(c, false).size() > 1) {
      split = c;
      break;
    }
  ASSERT_FALSE(split.empty()) << "every candidate is one token in this vocabulary";
  const json split_pieces = ok("/tokenize", {{"content", split}, {"with_pieces", true}})["tokens"];
  ASSERT_GT(split_pieces.size(), 1u);
  std::string bytes;
  for (const json& piece : split_pieces) {
    ASSERT_TRUE(piece["piece"].is_array()) << split_pieces.dump();
    for (const json& b : piece["piece"]) bytes += static_cast<char>(b.get<int>());
  }
  EXPECT_EQ(bytes, split);
  EXPECT_EQ(ok("/detokenize", {{"tokens", want}})["content"], text);

  expect_400("/tokenize", "{}", "'content' is required");
  expect_400("/tokenize", R"({"content": 5})", "'content' must be a string");
  expect_400("/tokenize", R"({"content": "x", "with_pieces": "yes"})", "'with_pieces' must be a boolean");
  expect_400("/tokenize", R"({"content": "x", "parse_special": true})", "Unrecognized request argument supplied: parse_special");
  expect_400("/tokenize", "[1]", "the body must be a JSON object");
  expect_400("/detokenize", "{}", "'tokens' is required");
  expect_400("/detokenize", R"({"tokens": "abc"})", "'tokens' must be a list");
  expect_400("/detokenize", R"({"tokens": [-1]})", "'tokens' must be integers in [0, ");
  expect_400("/detokenize", json{{"tokens", {tokenizer_->n_vocab()}}}.dump(), "'tokens' must be integers in [0, ");
}

// /apply-template gives the prompt chat completions runs: its tokens are the
// chat request's prompt tokens.
TEST_F(Surface, ApplyTemplateIsThePromptOfTheChat) {
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  const std::string prompt = ok("/apply-template", {{"messages", messages}})["prompt"];
  EXPECT_NE(prompt.find("Be brief."), std::string::npos) << prompt;
  const json chat = ok("/v1/chat/completions", {{"messages", messages}, {"max_tokens", 1}});
  EXPECT_EQ(chat["usage"]["prompt_tokens"].get<size_t>(), tokenizer_->encode_prompt(prompt).size());
  expect_400("/apply-template", "{}", "'messages' is required");
  expect_400("/apply-template", R"({"messages": [{"content": "x"}]})", "every message needs a string 'role'");
  expect_400("/apply-template", R"({"messages": [], "tools": []})", "Unrecognized request argument supplied: tools");
}

TEST_F(Surface, PropsAndTheApiKey) {
  auto r = httplib::Client("127.0.0.1", server_->port).Get("/props");  // public, as in llama-server
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json p = json::parse(r->body);
  EXPECT_EQ(p["total_slots"], 8);
  EXPECT_EQ(p["model_path"], runtime::testing::tiny_gguf());
  EXPECT_EQ(p["default_generation_settings"]["n_ctx"], 256);
  const json& params = p["default_generation_settings"]["params"];
  EXPECT_EQ(params["top_k"], 40);
  EXPECT_FLOAT_EQ(params["temperature"].get<float>(), 0.8f);
  EXPECT_EQ(params["seed"], -1);
  EXPECT_EQ(p["chat_template"], gguf::File::open(runtime::testing::tiny_gguf()).get_string("tokenizer.chat_template").value_or(""));
  EXPECT_TRUE(p["build_info"].is_string());
  // Every other route wants the key, the utility routes and /v1's unprefixed aliases too.
  for (const char* path : {"/tokenize", "/detokenize", "/apply-template", "/v1/completions", "/completions",
                           "/chat/completions"}) {
    auto no_key = post(path, json{{"content", "x"}}, "");
    ASSERT_TRUE(no_key);
    EXPECT_EQ(no_key->status, 401) << path;
  }
}

// +100 makes a token the greedy pick at every step; -100 on the greedy token
// moves the pick elsewhere; the biased requests run beside unbiased ones
// give what they give alone (batch invariance).
TEST_F(Surface, LogitBiasForcesAndForbidsAndKeepsBatchInvariance) {
  const std::vector<int32_t> plain = greedy_tokens(json::object(), 6);
  ASSERT_EQ(plain.size(), 6u);
  const int32_t forced = tokenizer_->encode(" banana", false).front();
  EXPECT_EQ(greedy_tokens({{"logit_bias", {{std::to_string(forced), 100}}}}, 6), std::vector<int32_t>(6, forced));
  const std::vector<int32_t> banned = greedy_tokens({{"logit_bias", {{std::to_string(plain[0]), -100}}}}, 6);
  ASSERT_FALSE(banned.empty());
  for (int32_t id : banned) EXPECT_NE(id, plain[0]);
  const std::vector<int32_t> banned_false =
      greedy_tokens({{"logit_bias", json::array({json::array({plain[0], false})})}}, 6);
  for (int32_t id : banned_false) EXPECT_NE(id, plain[0]);

  // Eight at once, half biased: each equals itself alone (text and logprobs).
  auto body = [&](int i) {
    json b = {{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0.7}, {"seed", 100 + i},
              {"logprobs", 1}};
    if (i % 2 == 1) b["logit_bias"] = {{std::to_string(plain[0]), -5}, {std::to_string(forced), 3.5}};
    return b;
  };
  std::vector<std::string> alone, together(8);
  for (int i = 0; i < 8; ++i) alone.push_back(ok("/v1/completions", body(i))["choices"][0].dump());
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      auto r = post("/v1/completions", body(i));
      if (r && r->status == 200) together[i] = json::parse(r->body)["choices"][0].dump();
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(together[i], alone[i]) << i;

  expect_400("/v1/completions", json{{"prompt", "x"}, {"logit_bias", {{"-3", 1}}}}.dump(), "'logit_bias'");
  expect_400("/v1/completions",
             json{{"prompt", "x"}, {"logit_bias", {{std::to_string(tokenizer_->n_vocab()), 1}}}}.dump(),
             "'logit_bias': token id");
}

// The request-field table answers at the routes.
TEST_F(Surface, FieldsThatWouldChangeTheAnswerAreRefused) {
  expect_400("/v1/chat/completions",
             json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"functions", {{{"name", "f"}}}}}.dump(),
             "'functions' is not supported");
  expect_400("/v1/completions", json{{"prompt", "x"}, {"mirostat", 2}}.dump(), "'mirostat' other than 0 is not supported");
  expect_400("/v1/completions", json{{"prompt", "x"}, {"best_of", 3}}.dump(), "'best_of' other than 1 is not supported");
  expect_400("/completions", json{{"prompt", "x"}, {"temprature", 0}}.dump(),
             "Unrecognized request argument supplied: temprature");
  ok("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}, {"user", "u1"},
                              {"store", false}, {"metadata", {{"k", "v"}}}, {"tools", nullptr}, {"mirostat", 0}});
}

// lumen-run's --logit-bias, as llama.cpp spells it.
TEST_F(Surface, LumenRunLogitBias) {
  const size_t at = server_->log.find(" into ");
  ASSERT_NE(at, std::string::npos) << server_->log;
  const std::string so = server_->log.substr(at + 6, server_->log.find('\n', at) - at - 6);
  const int32_t forced = tokenizer_->encode(" banana", false).front();
  const std::string out = (dir_ / "run.txt").string(), err = (dir_ / "run_err.txt").string();
  auto run = [&](const std::string& flags) {
    const std::string cmd = std::string(LUMEN_BINARY_DIR "/tools/lumen-run ") + so + " --gguf " +
                            runtime::testing::tiny_gguf() + " --temp 0 -t 2 -n 4 -p 'Once upon a time' " + flags +
                            " >" + out + " 2>" + err;
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(run("--logit-bias " + std::to_string(forced) + "+100"), 0) << runtime::testing::read_file(err);
  EXPECT_EQ(runtime::testing::read_file(out), " banana banana banana banana");
  EXPECT_EQ(run("-l 5*3"), 2);
  EXPECT_NE(runtime::testing::read_file(err).find("--logit-bias"), std::string::npos) << runtime::testing::read_file(err);
  EXPECT_EQ(run("-l 5+101"), 2);
  EXPECT_EQ(run("-l 5+inf"), 2);
  EXPECT_EQ(run("-l " + std::to_string(tokenizer_->n_vocab()) + "-inf"), 1);
  EXPECT_NE(runtime::testing::read_file(err).find("lumen-run: error: --logit-bias: token id"), std::string::npos)
      << runtime::testing::read_file(err);
}

}  // namespace
}  // namespace lumen::server
