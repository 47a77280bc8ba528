// lumen-server-bench: aggregate generated tokens per second of an
// OpenAI-compatible server (lumen-server or llama.cpp's llama-server) with
// N concurrent clients. Each client sends the same kind of request in a loop
// (greedy, ignore_eos, fixed max_tokens, a prompt no server has cached) for
// `requests` requests; the figure
// is the completion tokens the server reports (usage) over the wall time.
//
//   lumen-server-bench --port 8080 --streams 1,2,4,8,16 --tokens 64 --requests 2
//
// With --grammar FILE (GBNF, sent as llama-server's `grammar`) or
// --json-object (response_format json_object), each row is run twice: free
// text, then constrained, so the two tok/s sit side by side.
#include <CLI/CLI.hpp>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  std::string host = "127.0.0.1", streams_text = "1,4,8", label = "server";
  int port = 8080, tokens = 64, requests = 2, prompt_words = 32;
  CLI::App app{"lumen-server-bench: generated tok/s of an OpenAI-compatible server under N concurrent streams"};
  app.add_option("--host", host, "server address (default 127.0.0.1)");
  app.add_option("--port", port, "server port (default 8080)");
  app.add_option("--streams", streams_text, "concurrent clients, comma-separated (default 1,4,8)");
  app.add_option("--tokens", tokens, "max_tokens per request, generated with ignore_eos (default 64)");
  app.add_option("--requests", requests, "requests per client (default 2)");
  app.add_option("--prompt-words", prompt_words, "words in each prompt (default 32)");
  app.add_option("--label", label, "name printed in the table (default server)");
  std::string grammar_file;
  bool json_object = false;
  app.add_option("--grammar", grammar_file, "also run constrained by this GBNF file (the `grammar` field)")
      ->check(CLI::ExistingFile);
  app.add_flag("--json-object", json_object, "also run constrained by response_format json_object");
  CLI11_PARSE(app, argc, argv);
  std::string grammar;
  if (!grammar_file.empty()) {
    std::ifstream in(grammar_file);
    grammar.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The constraint a run sends (none for the free run).
  std::vector<std::pair<std::string, nlohmann::json>> runs = {{label, nlohmann::json::object()}};
  if (!grammar.empty()) runs.push_back({label + " grammar", {{"grammar", grammar}}});
  if (json_object) runs.push_back({label + " json_object", {{"response_format", {{"type", "json_object"}}}}});

  std::vector<int> streams;
  std::stringstream ss(streams_text);
  for (std::string item; std::getline(ss, item, ',');) streams.push_back(std::stoi(item));

  std::printf("| %s | streams | requests | generated tokens | seconds | tok/s |\n|---|---|---|---|---|---|\n",
              "server");
  for (size_t row = 0; row < streams.size() * runs.size(); ++row) {
    const int n = streams[row / runs.size()];
    const std::string& run_label = runs[row % runs.size()].first;
    const nlohmann::json& constraint = runs[row % runs.size()].second;
    std::atomic<long> generated{0}, failed{0};
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> clients;
    for (int c = 0; c < n; ++c)
      clients.emplace_back([&, c] {
        httplib::Client cli(host, port);
        cli.set_read_timeout(600, 0);
        for (int r = 0; r < requests; ++r) {
          // A new prefix every run, so no server reuses a cached prompt.
          std::string prompt = "Run " + std::to_string(start.time_since_epoch().count() % 1000003) + " client " +
                               std::to_string(c) + " request " + std::to_string(r) + ":";
          for (int w = 0; w < prompt_words; ++w) prompt += " word" + std::to_string((c * 7 + w) % 50);
          nlohmann::json body = {{"prompt", prompt}, {"max_tokens", tokens}, {"temperature", 0},
                                 {"ignore_eos", true}, {"stream", false}};
          body.update(constraint);
          auto res = cli.Post("/v1/completions", body.dump(), "application/json");
          if (!res || res->status != 200) {
            ++failed;
            continue;
          }
          auto j = nlohmann::json::parse(res->body, nullptr, false);
          if (j.is_object() && j.contains("usage")) generated += j["usage"]["completion_tokens"].get<long>();
        }
      });
    for (auto& t : clients) t.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("| %s | %d | %d | %ld | %.2f | %.2f |\n", run_label.c_str(), n, n * requests, generated.load(), seconds,
                static_cast<double>(generated.load()) / seconds);
    if (failed) std::printf("(%ld requests failed)\n", failed.load());
    std::fflush(stdout);
  }
  return 0;
}
