// lumen-server: the OpenAI API over one compiled model, with continuous
// batching (src/server). It listens first (/health says 503 while the model
// loads; without a model.so it compiles the dsl/ program of the GGUF's
// architecture into the cache first, as lumen-run), then serves until SIGTERM
// or SIGINT: new requests are refused, running ones get a few seconds to
// finish, and the process exits 0.
//
// Exit codes: 0 after a signal, 1 runtime error (files, port), 2 bad command
// line, 70 internal error.
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "cli/command_line.h"
#include "cli/model_for_gguf.h"
#include "cli/session_flags.h"
#include "lumen/common/internal_error.h"
#include "lumen/gguf/gguf.h"
#include "lumen/runtime/compiled_model.h"
#include "lumen/runtime/pooling.h"
#include "lumen/runtime/session.h"
#include "lumen/server/http_server.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"

namespace {

// lumen-server's command line: the flags every Session tool shares, then its own.
struct Options : lumen::cli::SessionFlags {
  std::string model_path, alias;
  std::optional<std::string> dsl_dir;
  std::optional<std::string> chat_template;  // a Jinja file instead of the GGUF's
  lumen::server::HttpOptions http;
  int parallel = 4;
  int64_t chunk = 64;
  int64_t max_queue = 64;
  uint64_t cache_ram_mib = lumen::server::SchedulerOptions{}.cache_ram_bytes >> 20;
  double grace_seconds = 5;
  std::optional<std::string> pooling;  // --pooling: overrides the GGUF's {arch}.pooling_type
};

// The Jinja text /props reports: the --chat-template file, else the GGUF's
// (load_chat_template has read both already, so they exist), else "" (ChatML).
std::string chat_template_source(const Options& o, const lumen::gguf::File& file) {
  if (o.chat_template) {
    std::ifstream in(*o.chat_template, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  return file.get_string("tokenizer.chat_template").value_or("");
}

int run(const Options& o) {
  // Signals are taken by one thread with sigwait, so every thread started
  // from here on has them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  lumen::server::HttpOptions http_options = o.http;
  http_options.handler_threads = std::max<int>(8, o.parallel + static_cast<int>(o.max_queue) + 8);
  lumen::server::HttpServer http(http_options);
  http.bind();
  std::fprintf(stderr, "lumen-server: listening on http://%s:%d\n", o.http.host.c_str(), http.port());
  std::fflush(stderr);
  std::thread server_thread([&] { http.serve(); });

  std::atomic<lumen::server::Scheduler*> scheduler{nullptr};
  std::atomic<bool> stopping{false};
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    stopping = true;
    std::fprintf(stderr, "lumen-server: %s: finishing running requests\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    if (lumen::server::Scheduler* s = scheduler.load())
      s->stop(std::chrono::milliseconds(static_cast<int64_t>(o.grace_seconds * 1000)));
    http.stop();
  });
  // A failed load ends the server as a signal would.
  auto shut_down = [&] {
    if (!stopping) pthread_kill(signal_thread.native_handle(), SIGTERM);
    signal_thread.join();
    server_thread.join();
  };

  std::unique_ptr<lumen::runtime::Session> session;
  std::optional<lumen::Tokenizer> tokenizer;
  std::optional<lumen::chat::ChatTemplate> chat_template;
  std::unique_ptr<lumen::server::Scheduler> sched;
  lumen::server::ServerProps props;
  std::optional<lumen::runtime::PoolingChoice> pooling;
  try {
    const std::string model_path =
        o.model_path.empty() ? lumen::cli::model_for_gguf(o.gguf_path, o.dsl_dir, "lumen-server") : o.model_path;
    auto model = std::make_shared<lumen::runtime::CompiledModel>(lumen::runtime::load_model_so(model_path));
    lumen::runtime::SessionOptions so = o.session_options(o.n_threads());
    so.n_seq = o.parallel;
    session = std::make_unique<lumen::runtime::Session>(model, o.gguf_path, so);
    tokenizer.emplace(lumen::Tokenizer::from_gguf(session->gguf()));
    bool used_chatml = false;
    chat_template.emplace(lumen::chat::load_chat_template(session->gguf(), o.gguf_path, o.chat_template, &used_chatml));
    if (used_chatml)
      std::fprintf(stderr, "lumen-server: warning: '%s' has no tokenizer.chat_template; using ChatML\n",
                   o.gguf_path.c_str());
    lumen::server::SchedulerOptions sched_options;
    sched_options.max_queue = o.max_queue;
    sched_options.prompt_chunk = o.chunk;
    sched_options.cache_ram_bytes = o.cache_ram_mib << 20;
    sched = std::make_unique<lumen::server::Scheduler>(*session, *tokenizer, sched_options);
    props.model_path = o.gguf_path;
    props.chat_template_source = chat_template_source(o, session->gguf());
    pooling = lumen::runtime::choose_pooling(o.pooling ? lumen::runtime::parse_pooling(*o.pooling) : std::nullopt,
                                             session->gguf());
  } catch (...) {
    shut_down();
    throw;
  }
  std::string name = o.alias;
  if (name.empty()) name = session->gguf().get_string("general.name").value_or("");
  if (name.empty()) name = std::filesystem::path(o.gguf_path).stem().string();
  http.set_embeddings(pooling->pooling, session->n_embd());
  std::fprintf(stderr, "lumen-server: embeddings: %s pooling (%s)\n", std::string(to_string(pooling->pooling)).c_str(),
               std::string(pooling->why).c_str());
  std::thread scheduler_thread([&] { sched->run(); });
  http.attach(*sched, *tokenizer, *chat_template, name, session->n_ctx(), std::move(props));
  scheduler.store(sched.get());
  const auto& ls = session->load_stats();
  std::fprintf(stderr, "lumen-server: ready: %s, %d parallel sequences of %lld tokens, %d threads, %s, pack cache %s\n",
               name.c_str(), o.parallel, static_cast<long long>(session->n_ctx()), session->n_threads(),
               session->model().target.c_str(),
               (ls.pack_cache + (ls.pack_cache_how.empty() ? "" : ", " + ls.pack_cache_how)).c_str());
  std::fflush(stderr);
  if (stopping) sched->stop(std::chrono::milliseconds(0));  // the signal came while loading
  signal_thread.join();  // serves until a signal
  server_thread.join();
  sched->stop(std::chrono::milliseconds(0));
  scheduler_thread.join();
  std::fprintf(stderr, "lumen-server: stopped\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"lumen-server: the OpenAI API over a model compiled by lumenc, with continuous batching.\n\n"
               "Examples:\n"
               "  lumen-server --gguf qwen2.5-0.5b-instruct-q8_0.gguf --parallel 8 --port 8080\n"
               "  lumen-server model.so --gguf qwen2.5-0.5b-instruct-q8_0.gguf --parallel 8 --port 8080\n",
               "lumen-server"};
  app.add_option("model", o.model_path,
                 "model.so written by `lumenc compile`; without it, the dsl/ program for the GGUF's "
                 "architecture is compiled into the cache (LUMEN_CACHE_DIR, else XDG_CACHE_HOME/lumen), as lumen-run does");
  app.add_option("--dsl-dir", o.dsl_dir, "folder of model programs (default: LUMEN_DSL_DIR, else the installed dsl/)");
  lumen::cli::add_session_flags(app, o);
  app.add_option("--host", o.http.host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", o.http.port, "port (default 8080; 0 picks a free one)")->check(CLI::Range(0, 65535));
  app.add_option("--parallel,--np", o.parallel, "sequences generated together, one KV slot each (default 4)")
      ->check(CLI::Range(1, 256));
  app.add_option("--chunk", o.chunk, "most prompt tokens of one sequence per forward pass (default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--api-key", o.http.api_key, "require 'Authorization: Bearer KEY' on /v1");
  app.add_option("--max-queue", o.max_queue, "requests waiting for a slot; beyond: 503 (default 64)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
  app.add_option("--max-body", o.http.max_body_bytes, "largest request body in bytes; beyond: 413 (default 4 MiB)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  app.add_option("--timeout", o.http.read_timeout_seconds, "read and write timeout per client in seconds (default 30)")
      ->check(CLI::Range(1, 3600));
  app.add_option("--cache-ram", o.cache_ram_mib,
                 "MiB of RAM for KV prefixes of slots reused for other prompts, LRU; 0 = off (default " +
                     std::to_string(o.cache_ram_mib) + ")")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 24));
  app.add_option("--chat-template", o.chat_template, "Jinja chat template file to use instead of the GGUF's");
  app.add_option("--alias", o.alias, "model name in responses (default: general.name, else the file name)");
  const std::vector<std::string> poolings(lumen::runtime::kPoolingNames.begin(), lumen::runtime::kPoolingNames.end());
  app.add_option("--pooling", o.pooling,
                 "embeddings: how hidden states are pooled (default: the GGUF's pooling_type, else " +
                     std::string(to_string(lumen::runtime::kDefaultPooling)) + ")")
      ->check(CLI::IsMember(poolings));
  app.add_option("--grace", o.grace_seconds, "seconds running requests get after SIGTERM (default 5)")
      ->check(CLI::Range(0.0, 3600.0));
  if (auto exit_code = lumen::cli::parse_command_line(app, argc, argv)) return *exit_code;
  o.http.write_timeout_seconds = o.http.read_timeout_seconds;
  if (o.n_ctx * o.parallel > (int64_t{1} << 31)) {
    std::fprintf(stderr, "lumen-server: error: --ctx x --parallel is too large\n");
    return 2;
  }
  return lumen::run_tool("lumen-server", [&o] { return run(o); });
}
