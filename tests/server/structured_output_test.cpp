// Structured output end to end: the HTTP server in this process over a running
// scheduler and the tiny random-weight model. For a table of JSON Schemas,
// several seeds, streamed and not, through OpenAI's response_format and
// llama-server's json_schema field: whenever finish_reason is "stop" the
// text parses and validates (tests/support/json_schema_check.h), and most
// requests do stop. Then the errors: a bad request field or schema is a 400
// naming the field, also for a 10,000-deep and a multi-megabyte schema.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../runtime/runtime_support.h"
#include "lumen/runtime/session.h"
#include "lumen/server/http_server.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"
#include "support/json_schema_check.h"

namespace lumen::server {
namespace {

using json = nlohmann::ordered_json;

constexpr int kParallel = 8;

// The HTTP layer and a scheduler that runs on its own thread, as in lumen-server.
class RunningServer {
 public:
  RunningServer() {
    runtime::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = 256;
    so.n_seq = kParallel;
    session_ = std::make_unique<runtime::Session>(runtime::testing::qwen2_model(), runtime::testing::tiny_gguf(), so);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(session_->gguf()));
    bool used_chatml = false;
    chat_template_ = std::make_unique<chat::ChatTemplate>(
        chat::load_chat_template(session_->gguf(), runtime::testing::tiny_gguf(), std::nullopt, &used_chatml));
    scheduler_ = std::make_unique<Scheduler>(*session_, *tokenizer_);
    HttpOptions http_options;
    http_options.port = 0;
    http_options.max_body_bytes = 8u << 20;
    http_ = std::make_unique<HttpServer>(http_options);
    http_->bind();
    http_->attach(*scheduler_, *tokenizer_, *chat_template_, "tiny", session_->n_ctx());
    serving_ = std::thread([this] { http_->serve(); });
    running_ = std::thread([this] { scheduler_->run(); });
  }
  ~RunningServer() {
    scheduler_->stop(std::chrono::milliseconds(0));
    running_.join();
    http_->stop();
    serving_.join();
  }
  int port() const { return http_->port(); }

 private:
  std::unique_ptr<runtime::Session> session_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<chat::ChatTemplate> chat_template_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpServer> http_;
  std::thread serving_, running_;
};

class StructuredOutput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new RunningServer; }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  static httplib::Result post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(300, 0);
    return c.Post(path.c_str(), body, "application/json");
  }

  // The generated text and finish_reason of one request, streamed or not.
  struct Answer {
    std::string text, finish_reason;
  };
  static Answer answer(const std::string& path, json body) {
    const bool chat = path == "/v1/chat/completions";
    auto r = post(path, body.dump());
    if (!r || r->status != 200) {
      ADD_FAILURE() << (r ? r->body : "no answer");
      return {};
    }
    Answer a;
    if (!body.value("stream", false)) {
      const json j = json::parse(r->body);
      const json& choice = j["choices"][0];
      a.text = chat ? choice["message"]["content"].get<std::string>() : choice["text"].get<std::string>();
      a.finish_reason = choice["finish_reason"].get<std::string>();
      return a;
    }
    for (size_t at = 0; (at = r->body.find("data: ", at)) != std::string::npos;) {
      const size_t end = r->body.find("\n\n", at);
      const std::string data = r->body.substr(at + 6, end - at - 6);
      at = end;
      if (data == "[DONE]") break;
      const json chunk = json::parse(data);
      const json& choice = chunk["choices"][0];
      if (chat && choice["delta"].contains("content")) a.text += choice["delta"]["content"].get<std::string>();
      if (!chat) a.text += choice["text"].get<std::string>();
      if (choice["finish_reason"].is_string()) a.finish_reason = choice["finish_reason"].get<std::string>();
    }
    return a;
  }

  static void expect_error(const std::string& path, const std::string& body, const std::string& what) {
    auto r = post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body.substr(0, 200) << " -> " << r->body.substr(0, 300);
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body.substr(0, 300);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(what), std::string::npos) << r->body.substr(0, 300);
  }

  static RunningServer* server_;
};
RunningServer* StructuredOutput::server_ = nullptr;

// Schemas of every kind the subset has, small enough that a random model
// usually completes them within the token budget.
const std::vector<const char*> kSchemas = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"ok":{"type":"boolean"},"note":{"type":"string","maxLength":6}},"required":["ok"]})",
    R"({"type":"array","items":{"type":"integer","minimum":-50,"maximum":50},"minItems":1,"maxItems":4})",
    R"({"type":"array","items":{"enum":["red","green","blue"]},"minItems":2,"maxItems":3})",
    R"({"enum":["yes","no",null,42]})",
    R"({"const":{"version":2}})",
    R"({"type":"object","properties":{"color":{"enum":["red","green"]},"size":{"type":"integer","exclusiveMinimum":0,"exclusiveMaximum":10}},"required":["color","size"]})",
    R"({"type":"object","properties":{"point":{"type":"object","properties":{"x":{"type":"integer","minimum":-9,"maximum":9},"y":{"type":"integer","minimum":-9,"maximum":9}},"required":["x","y"]}},"required":["point"]})",
    R"({"$defs":{"leaf":{"type":"string","minLength":1,"maxLength":3}},"type":"object","properties":{"a":{"$ref":"#/$defs/leaf"},"b":{"$ref":"#/$defs/leaf"}},"required":["a","b"]})",
    R"({"$defs":{"tree":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},"kids":{"type":"array","items":{"$ref":"#/$defs/tree"},"maxItems":1}},"required":["v"]}},"$ref":"#/$defs/tree"})",
    R"({"anyOf":[{"type":"integer","minimum":0,"maximum":999},{"type":"string","maxLength":4},{"type":"null"}]})",
    R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"n":{"type":"integer","minimum":0,"maximum":9}},"required":["kind","n"]},{"type":"object","properties":{"kind":{"const":"b"}},"required":["kind"]}]})",
    R"({"allOf":[{"type":"object","properties":{"id":{"type":"integer","minimum":1,"maximum":99}},"required":["id"]},{"properties":{"tag":{"type":"string","maxLength":4}},"required":["tag"]}]})",
    R"({"type":"string","minLength":2,"maxLength":5})",
    R"({"type":"string","pattern":"^[a-z]{2,4}-[0-9]{1,3}$"})",
    R"({"type":"string","format":"date"})",
    R"({"type":"string","format":"uuid"})",
    R"({"type":"number","minimum":-1,"maximum":1})",
    R"({"type":"integer","minimum":1000,"maximum":1050})",
    R"({"type":["boolean","null"]})",
    R"({"type":"array","prefixItems":[{"type":"string","maxLength":3},{"type":"integer","minimum":0,"maximum":9},{"type":"boolean"}],"items":false,"minItems":3})",
    R"({"type":"object","properties":{"k":{"type":"integer","minimum":0,"maximum":9}},"additionalProperties":{"type":"boolean"},"required":["k"]})",
};

TEST_F(StructuredOutput, EveryStoppedAnswerValidatesAgainstItsSchema) {
  struct Job {
    size_t schema;
    int seed;
    bool stream, chat;
  };
  std::vector<Job> jobs;
  for (size_t s = 0; s < kSchemas.size(); ++s)
    for (int seed = 1; seed <= 3; ++seed) jobs.push_back({s, seed, seed % 2 == 0, seed != 3});
  std::atomic<size_t> next{0};
  std::atomic<int> stopped{0};
  std::mutex mu;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      const Job& job = jobs[i];
      const json schema = json::parse(kSchemas[job.schema]);
      json body = {{"max_tokens", 120}, {"seed", job.seed}, {"stream", job.stream}};
      std::string path;
      if (job.chat) {  // OpenAI's shape
        path = "/v1/chat/completions";
        body["messages"] = json::array({{{"role", "user"}, {"content", "Answer in JSON."}}});
        body["response_format"] = {{"type", "json_schema"},
                                   {"json_schema", {{"name", "answer"}, {"strict", true}, {"schema", schema}}}};
      } else {  // llama-server's field
        path = "/v1/completions";
        body["prompt"] = "JSON:";
        body["json_schema"] = schema;
      }
      const Answer a = answer(path, body);
      if (a.finish_reason != "stop") continue;
      ++stopped;
      const json value = json::parse(a.text, nullptr, /*allow_exceptions=*/false);
      std::string why = value.is_discarded() ? "not JSON" : testing::json_schema_violation(value, schema);
      if (!why.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(std::string(kSchemas[job.schema]) + " seed " + std::to_string(job.seed) + ": " + why +
                           " in " + a.text);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kParallel; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_GE(stopped.load(), static_cast<int>(jobs.size() * 3 / 4)) << "of " << jobs.size();
}

TEST_F(StructuredOutput, BadSchemasAndShapesAre400NamingTheField) {
  const json messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  auto chat = [&](const json& format) { return json{{"messages", messages}, {"response_format", format}}.dump(); };
  const std::string chat_path = "/v1/chat/completions";
  expect_error(chat_path, chat({{"type", "json_schema"}}), "'response_format.json_schema'");
  expect_error(chat_path, chat({{"type", "json_schema"}, {"json_schema", {{"schema", json::object()}}}}),
               "'response_format.json_schema.name'");
  expect_error(chat_path,
               chat({{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", "yes"}, {"schema", json::object()}}}}),
               "'response_format.json_schema.strict'");
  expect_error(chat_path, chat({{"type", "json_schema"}, {"json_schema", {{"name", 7}}}}),
               "'response_format.json_schema.name'");
  expect_error(chat_path, chat({{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"description", 1}}}}),
               "'response_format.json_schema.description' must be a string");
  expect_error(chat_path, chat({{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schemas", json::object()}}}}),
               "'response_format.json_schema.schemas' is not a field of it");
  expect_error(chat_path,
               json{{"messages", messages},
                    {"json_schema", json::object()},
                    {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}}
                   .dump(),
               "'json_schema' and 'response_format' cannot both constrain");
  expect_error(chat_path,
               chat({{"type", "json_schema"},
                     {"json_schema", {{"name", "x"}, {"schema", {{"type", "object"}, {"minProperties", 1}}}}}}),
               "'response_format.json_schema.schema': unsupported keyword 'minProperties' at /");
  expect_error(chat_path, json{{"messages", messages}, {"json_schema", {{"type", "strin"}}}}.dump(),
               "'json_schema': unknown type 'strin' at /type");
  expect_error(chat_path, json{{"messages", messages}, {"json_schema", 3}}.dump(),
               "'json_schema': a schema must be an object or a boolean at /");
  expect_error(chat_path,
               json{{"messages", messages}, {"json_schema", json::object()}, {"grammar", "root ::= \"a\""}}.dump(),
               "cannot both constrain");
  // Hostile sizes: a clean 400, and the server answers after.
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += R"({"items":)";
  deep += "{}" + std::string(10000, '}');
  expect_error("/v1/completions", R"({"prompt":"x","json_schema":)" + deep + "}", "'json_schema': the schema nests deeper");
  std::string big = R"({"prompt":"x","json_schema":{"enum":[)";
  for (int i = 0; i < 60000; ++i) big += (i ? ",\"" : "\"") + std::string(50, 'a') + std::to_string(i) + "\"";
  big += "]}}";
  ASSERT_GT(big.size(), 3u << 20);
  expect_error("/v1/completions", big, "'json_schema': the schema's grammar exceeds");
  const Answer after = answer("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}, {"json_schema", {{"type", "boolean"}}}});
  EXPECT_FALSE(after.finish_reason.empty());
}

}  // namespace
}  // namespace lumen::server
