// lumen-server's HTTP side (cpp-httplib): routes, API keys, body limits,
// OpenAI-style errors, streaming, /health and /metrics, llama-server's
// utility routes. It listens before the
// model is loaded (/health answers 503 until attach()).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "lumen/server/api_utility.h"
#include "lumen/runtime/pooling.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                     // 0: any free port (see port())
  std::string api_key;                 // empty: no key needed
  size_t max_body_bytes = 4u << 20;    // larger bodies get 413
  int read_timeout_seconds = 30;       // slow clients
  int write_timeout_seconds = 30;
  int handler_threads = 64;            // concurrent connections served
};

class HttpServer {
 public:
  explicit HttpServer(HttpOptions options);
  ~HttpServer();
  // Binds the socket; throws std::runtime_error when it cannot.
  void bind();
  int port() const;
  // Serves until stop() (blocks).
  void serve();
  void stop();
  // The model is ready: requests go to the scheduler from now on; `props`
  // is what GET /props adds to the scheduler's context and slots.
  void attach(Scheduler& scheduler, const Tokenizer& tokenizer, const chat::ChatTemplate& chat_template,
              std::string model_name, int64_t n_ctx, ServerProps props = {});
  // /v1/embeddings pools with `pooling` vectors of n_embd floats
  // (Session::n_embd; 0: the model gives none, the route answers 400).
  // Called before attach().
  void set_embeddings(runtime::Pooling pooling, int64_t n_embd);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lumen::server
