// lumen-server-bench: load scenarios for an OpenAI-compatible server
// (lumen-server or llama.cpp's llama-server).
//
// --scenario throughput (default): aggregate generated tokens per second
// with N concurrent clients. Each client sends the same kind of request in a
// loop (greedy, ignore_eos, fixed max_tokens, a prompt no server has cached)
// for `requests` requests; the figure is the completion tokens the server
// reports (usage) over the wall time.
//
// --scenario prefix: the prefix cache. A chat with a long system prompt
// (--system-words words, ~1 token each): the first turn's time to first
// token (cold), the second turn's (the same conversation plus the answer
// and a new user message: warm), and (--turns 3) a new conversation with
// the same system prompt (warm on the system prompt only). Streamed; the time to
// first token is when the first content chunk arrives. --session sends
// `X-Session-Id` (the balancer's affinity key, docs/deploy.md) with the
// first turn, --later-session with the others (default: the same).
//
//   lumen-server-bench --port 8080 --streams 1,2,4,8,16 --tokens 64 --requests 2
//   lumen-server-bench --port 8080 --scenario prefix --system-words 2000
//
// With --grammar FILE (GBNF, sent as llama-server's `grammar`) or
// --json-object (response_format json_object), each throughput row is run
// twice: free text, then constrained, so the two tok/s sit side by side.
#include <CLI/CLI.hpp>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string host = "127.0.0.1", streams_text = "1,4,8", label = "server", scenario = "throughput", session, later_session;
  int port = 8080, tokens = 64, requests = 2, prompt_words = 32, system_words = 2000, turns = 3;
  std::string grammar_file;  // throughput: also run constrained by this GBNF
  bool json_object = false;  // throughput: also run constrained by response_format json_object
};

// A run-specific word, so that no server holds a prefix from an earlier run.
std::string run_tag() { return std::to_string(Clock::now().time_since_epoch().count() % 1000003); }

int throughput(const Options& o) {
  std::vector<int> streams;
  std::stringstream ss(o.streams_text);
  for (std::string item; std::getline(ss, item, ',');) streams.push_back(std::stoi(item));

  // The constraint a run sends (none for the free run).
  std::vector<std::pair<std::string, json>> runs = {{o.label, json::object()}};
  if (!o.grammar_file.empty()) {
    std::ifstream in(o.grammar_file);
    const std::string grammar{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    runs.push_back({o.label + " grammar", {{"grammar", grammar}}});
  }
  if (o.json_object) runs.push_back({o.label + " json_object", {{"response_format", {{"type", "json_object"}}}}});

  std::printf("| %s | streams | requests | generated tokens | seconds | tok/s |\n|---|---|---|---|---|---|\n",
              "server");
  for (size_t row = 0; row < streams.size() * runs.size(); ++row) {
    const int n = streams[row / runs.size()];
    const std::string& run_label = runs[row % runs.size()].first;
    const json& constraint = runs[row % runs.size()].second;
    std::atomic<long> generated{0}, failed{0};
    auto start = Clock::now();
    const std::string tag = run_tag();
    std::vector<std::thread> clients;
    for (int c = 0; c < n; ++c)
      clients.emplace_back([&, c] {
        httplib::Client cli(o.host, o.port);
        cli.set_read_timeout(600, 0);
        for (int r = 0; r < o.requests; ++r) {
          std::string prompt = "Run " + tag + " client " + std::to_string(c) + " request " + std::to_string(r) + ":";
          for (int w = 0; w < o.prompt_words; ++w) prompt += " word" + std::to_string((c * 7 + w) % 50);
          json body = {{"prompt", prompt}, {"max_tokens", o.tokens}, {"temperature", 0},
                       {"ignore_eos", true}, {"stream", false}};
          body.update(constraint);
          auto res = cli.Post("/v1/completions", body.dump(), "application/json");
          if (!res || res->status != 200) {
            ++failed;
            continue;
          }
          auto j = json::parse(res->body, nullptr, false);
          if (j.is_object() && j.contains("usage")) generated += j["usage"]["completion_tokens"].get<long>();
        }
      });
    for (auto& t : clients) t.join();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("| %s | %d | %d | %ld | %.2f | %.2f |\n", run_label.c_str(), n, n * o.requests, generated.load(), seconds,
                static_cast<double>(generated.load()) / seconds);
    if (failed) std::printf("(%ld requests failed)\n", failed.load());
    std::fflush(stdout);
  }
  return 0;
}

struct Turn {
  double ttft = 0, seconds = 0;
  int64_t prompt_tokens = -1;
  std::string text;
};

// One streamed chat request; nullopt when it fails.
std::optional<Turn> chat(const Options& o, const json& messages, const std::string& session) {
  httplib::Client cli(o.host, o.port);
  cli.set_read_timeout(600, 0);
  const json body = {{"messages", messages}, {"max_tokens", o.tokens}, {"temperature", 0}, {"ignore_eos", true},
                     {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  if (!session.empty()) req.set_header("X-Session-Id", session);
  Turn turn;
  std::string pending;
  const auto start = Clock::now();
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    pending.append(data, size);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos; pending.erase(0, end + 2)) {
      const std::string record = pending.substr(0, end);
      if (record.rfind("data: ", 0) != 0 || record == "data: [DONE]") continue;
      const json chunk = json::parse(record.substr(6), nullptr, false);
      if (!chunk.is_object()) continue;
      if (chunk.contains("usage")) turn.prompt_tokens = chunk["usage"]["prompt_tokens"].get<int64_t>();
      if (chunk["choices"].empty()) continue;
      const json& content = chunk["choices"][0]["delta"]["content"];
      if (content.is_string() && !content.get<std::string>().empty()) {
        if (turn.text.empty()) turn.ttft = std::chrono::duration<double>(Clock::now() - start).count();
        turn.text += content.get<std::string>();
      }
    }
    return true;
  };
  auto res = cli.send(req);
  if (!res || res->status != 200) return std::nullopt;
  turn.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return turn;
}

int prefix(const Options& o) {
  static const char* kWords[] = {"the", "model", "answers", "questions", "about", "compilers", "and", "kernels",
                                 "with", "care", "for", "every", "detail", "of", "memory", "layout"};
  std::string system = "Run " + run_tag() + ". You are a helpful assistant. Rules:";
  for (int w = 0; w < o.system_words; ++w) system += std::string(" ") + kWords[(w * 7 + w / 16) % 16];
  const json sys = {{"role", "system"}, {"content", system}};
  json first = json::array({sys, {{"role", "user"}, {"content", "What is a KV cache?"}}});
  std::printf("| %s | request | prompt tokens | time to first token (s) | total (s) |\n|---|---|---|---|---|\n",
              "server");
  auto row = [&](const char* what, const std::optional<Turn>& t) {
    if (!t) {
      std::printf("| %s | %s | failed | | |\n", o.label.c_str(), what);
      return false;
    }
    std::printf("| %s | %s | %lld | %.3f | %.3f |\n", o.label.c_str(), what, static_cast<long long>(t->prompt_tokens),
                t->ttft, t->seconds);
    std::fflush(stdout);
    return true;
  };
  const std::optional<Turn> one = chat(o, first, o.session);
  const std::string later = o.later_session.empty() ? o.session : o.later_session;
  if (!row("turn 1 (cold)", one)) return 1;
  json second = first;
  second.push_back({{"role", "assistant"}, {"content", one->text}});
  second.push_back({{"role", "user"}, {"content", "And why does reusing it help?"}});
  if (!row("turn 2 (same conversation)", chat(o, second, later))) return 1;
  if (o.turns < 3) return 0;
  const json other = json::array({sys, {{"role", "user"}, {"content", "Name three compiler passes."}}});
  if (!row("new conversation, same system prompt", chat(o, other, later))) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"lumen-server-bench: load scenarios for an OpenAI-compatible server"};
  app.add_option("--scenario", o.scenario, "throughput (tok/s under N streams) or prefix (prefix cache TTFT)")
      ->check(CLI::IsMember({"throughput", "prefix"}));
  app.add_option("--host", o.host, "server address (default 127.0.0.1)");
  app.add_option("--port", o.port, "server port (default 8080)");
  app.add_option("--streams", o.streams_text, "throughput: concurrent clients, comma-separated (default 1,4,8)");
  app.add_option("--tokens", o.tokens, "max_tokens per request, generated with ignore_eos (default 64)");
  app.add_option("--requests", o.requests, "throughput: requests per client (default 2)");
  app.add_option("--prompt-words", o.prompt_words, "throughput: words in each prompt (default 32)");
  app.add_option("--system-words", o.system_words, "prefix: words in the system prompt (default 2000)");
  app.add_option("--turns", o.turns, "prefix: 2 (the conversation) or 3 (and a new one; default)")
      ->check(CLI::Range(2, 3));
  app.add_option("--session", o.session, "prefix: send X-Session-Id with this value");
  app.add_option("--later-session", o.later_session, "prefix: X-Session-Id of the turns after the first");
  app.add_option("--label", o.label, "name printed in the table (default server)");
  app.add_option("--grammar", o.grammar_file, "throughput: also run constrained by this GBNF file (the `grammar` field)")
      ->check(CLI::ExistingFile);
  app.add_flag("--json-object", o.json_object, "throughput: also run constrained by response_format json_object");
  CLI11_PARSE(app, argc, argv);
  return o.scenario == "prefix" ? prefix(o) : throughput(o);
}
