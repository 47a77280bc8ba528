// Routes of lumen-server over cpp-httplib (see http_server.h). Every error is
// an OpenAI-style JSON body. A streamed response whose write fails (the
// client went away) cancels its sequence, which frees the slot at the next step.
#include "lumen/server/http_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include <sys/socket.h>
#include <stdexcept>
#include <thread>

#include "chat_page_html.h"  // generated from chat_page.html (CMakeLists.txt)
#include "lumen/server/api.h"
#include "lumen/server/api_utility.h"
#include "lumen/server/api_embeddings.h"

namespace lumen::server {

struct HttpServer::Impl {
  HttpOptions options;
  httplib::Server http;
  int port = -1;
  int listen_socket = -1;  // the bound socket (for the backlog)
  // httplib's stop() does nothing before listen_after_bind() is running, so
  // a stop() that comes first (a load that fails at once) would leave serve()
  // listening forever: stop() records itself and waits for a serve() that has
  // begun to be running or to have returned.
  std::atomic<bool> stop_requested{false}, serving{false};
  std::atomic<Scheduler*> scheduler{nullptr};
  const Tokenizer* tokenizer = nullptr;
  const chat::ChatTemplate* chat_template = nullptr;
  std::string model_name;
  int64_t n_ctx = 0;
  ServerProps props;
  std::atomic<uint64_t> next_id{1};
  runtime::Pooling pooling = runtime::kDefaultPooling;
  int64_t n_embd = 0;

  void routes();
  // llama-server's utility routes: `respond` turns the body into the answer.
  void utility(const char* path, std::string (*respond)(Impl&, const httplib::Request&));
  void completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void embeddings(const httplib::Request& req, httplib::Response& res);
};

namespace {

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

std::string metric(const char* name, const char* type, const char* help, double value) {
  char line[64];
  std::snprintf(line, sizeof line, "%.17g", value);
  return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + line + "\n";
}

}  // namespace

HttpServer::HttpServer(HttpOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->routes();
}

HttpServer::~HttpServer() = default;

void HttpServer::Impl::routes() {
  const int threads = std::max(8, options.handler_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(options.read_timeout_seconds, 0);
  http.set_write_timeout(options.write_timeout_seconds, 0);
  http.set_keep_alive_timeout(5);
  // cpp-httplib 0.11 listens with a backlog of 5, so a burst of clients sees
  // refused connections; keep the listening socket to listen again with a
  // deep queue after the bind (Linux takes the new backlog).
  http.set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    listen_socket = sock;
  });

  // Errors httplib produces itself (unknown route, body too large, bad request
  // line) get the JSON body too.
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404: send_error(res, ApiError(404, "no such route", "not_found_error", "not_found")); break;
      case 413:
        send_error(res, ApiError(413, "the request body is too large", "invalid_request_error", "payload_too_large"));
        break;
      default:
        send_error(res, ApiError(res.status, "the request failed (HTTP " + std::to_string(res.status) + ")", "invalid_request_error"));
    }
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    std::fprintf(stderr, "lumen-server: %s\n", what.c_str());
    send_error(res, ApiError(500, what, "server_error", "internal_error"));
  });
  // The API key guards every route but the probes' /health and /metrics,
  // /props (public in llama-server too: it says nothing a client could abuse)
  // and the chat page (a browser cannot send the key to load it; the page
  // sends it with every request it makes).
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    static constexpr std::string_view kPublic[] = {"/", "/health", "/metrics", "/props"};
    if (options.api_key.empty() || std::find(std::begin(kPublic), std::end(kPublic), req.path) != std::end(kPublic))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth != "Bearer " + options.api_key) {
      send_error(res, ApiError(401, auth.empty() ? "missing API key" : "invalid API key", "authentication_error",
                               "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // The chat page: one static file. Its policy allows nothing from other
  // origins, so the page cannot fetch anything but this server.
  http.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(kChatPageHtml.data(), kChatPageHtml.size(), "text/html; charset=utf-8");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (scheduler.load() == nullptr) {
      send_error(res, ApiError(503, "loading the model", "unavailable_error", "loading"));
      return;
    }
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    if (scheduler.load() == nullptr) {
      send_error(res, ApiError(503, "loading the model", "unavailable_error", "loading"));
      return;
    }
    nlohmann::json j = {{"object", "list"},
                        {"data", {{{"id", model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "lumen"}}}}};
    res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Scheduler* s = scheduler.load();
    SchedulerStats st = s != nullptr ? s->stats() : SchedulerStats{};
    std::string out;
    out += metric("lumen_requests_total", "counter", "requests admitted to the queue", static_cast<double>(st.requests));
    out += metric("lumen_requests_rejected_total", "counter", "requests refused because the queue was full",
                  static_cast<double>(st.rejected));
    out += metric("lumen_requests_cancelled_total", "counter", "requests whose client went away before the end",
                  static_cast<double>(st.cancelled));
    out += metric("lumen_requests_constrained_total", "counter", "requests with a grammar (grammar, response_format) given a slot",
                  static_cast<double>(st.constrained));
    out += metric("lumen_prompt_tokens_total", "counter", "prompt tokens evaluated (not those the prefix cache reused)",
                  static_cast<double>(st.prompt_tokens));
    out += metric("lumen_prefix_cache_hits_total", "counter", "requests that reused a cached KV prefix",
                  static_cast<double>(st.prefix_hits));
    out += metric("lumen_prefix_cache_misses_total", "counter", "requests that found no cached KV prefix",
                  static_cast<double>(st.prefix_misses));
    out += metric("lumen_prefix_cache_reused_tokens_total", "counter", "prompt positions taken from the prefix cache",
                  static_cast<double>(st.prefix_reused_tokens));
    out += metric("lumen_prefix_cache_bytes", "gauge", "KV bytes in the prefix cache's RAM store (--cache-ram)",
                  static_cast<double>(st.prefix_store_bytes));
    out += metric("lumen_prefix_cache_entries", "gauge", "prefixes in the prefix cache's RAM store",
                  static_cast<double>(st.prefix_store_entries));
    out += metric("lumen_generated_tokens_total", "counter", "tokens generated", static_cast<double>(st.generated_tokens));
    out += metric("lumen_steps_total", "counter", "forward passes", static_cast<double>(st.steps));
    out += metric("lumen_queue_depth", "gauge", "requests waiting for a slot", static_cast<double>(st.queued));
    out += metric("lumen_active_sequences", "gauge", "sequences holding a slot", static_cast<double>(st.active));
    out += metric("lumen_batch_size", "gauge", "tokens in the last forward pass", static_cast<double>(st.last_batch_rows));
    out += metric("lumen_batch_sequences", "gauge", "sequences in the last forward pass",
                  static_cast<double>(st.last_batch_sequences));
    out += metric("lumen_tokens_per_second", "gauge", "generated tokens per second over the last 10 s",
                  st.tokens_per_second);
    res.set_content(out, "text/plain; version=0.0.4");
  });
  http.Post("/v1/completions",
            [this](const httplib::Request& req, httplib::Response& res) { completion(Endpoint::Completions, req, res); });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { completion(Endpoint::Chat, req, res); });
  // OpenAI clients sometimes omit the /v1 prefix.
  http.Post("/completions",
            [this](const httplib::Request& req, httplib::Response& res) { completion(Endpoint::Completions, req, res); });
  http.Post("/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { completion(Endpoint::Chat, req, res); });
  for (const char* route : {"/v1/embeddings", "/embeddings"})
    http.Post(route, [this](const httplib::Request& req, httplib::Response& res) { embeddings(req, res); });
  utility("/tokenize", [](Impl& s, const httplib::Request& req) { return tokenize_response(req.body, *s.tokenizer); });
  utility("/detokenize",
          [](Impl& s, const httplib::Request& req) { return detokenize_response(req.body, *s.tokenizer); });
  utility("/apply-template",
          [](Impl& s, const httplib::Request& req) { return apply_template_response(req.body, *s.chat_template); });
  http.Get("/props", [this](const httplib::Request&, httplib::Response& res) {
    Scheduler* s = scheduler.load();
    if (s == nullptr) {
      send_error(res, ApiError(503, "loading the model", "unavailable_error", "loading"));
      return;
    }
    res.set_content(props_response(props, n_ctx, s->parallel(), *tokenizer), "application/json");
  });
}

void HttpServer::Impl::utility(const char* path, std::string (*respond)(Impl&, const httplib::Request&)) {
  http.Post(path, [this, respond](const httplib::Request& req, httplib::Response& res) {
    if (scheduler.load() == nullptr) {
      send_error(res, ApiError(503, "loading the model", "unavailable_error", "loading"));
      return;
    }
    try {
      res.set_content(respond(*this, req), "application/json");
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
}

void HttpServer::Impl::embeddings(const httplib::Request& req, httplib::Response& res) {
  Scheduler* sched = scheduler.load();
  if (sched == nullptr) {
    send_error(res, ApiError(503, "loading the model", "unavailable_error", "loading"));
    return;
  }
  EmbeddingRequest request;
  try {
    if (n_embd == 0) throw ApiError(400, "this model gives no embeddings (its program has no final norm before the head)");
    request = parse_embedding_request(req.body, *tokenizer, n_ctx, n_embd);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  auto job = std::make_shared<EmbeddingJob>(*sched, request, pooling);
  if (!job->start()) {
    res.set_header("Retry-After", "1");
    send_error(res, ApiError(503, "the server is busy: the queue is full", "unavailable_error", "queue_full"));
    return;
  }
  // As a non-streamed completion: a space every kHeartbeat while the items
  // run, so that a client that vanishes cancels them.
  static constexpr auto kHeartbeat = std::chrono::milliseconds(50);
  res.set_chunked_content_provider(
      "application/json",
      [job, base64 = request.base64, model = model_name](size_t, httplib::DataSink& sink) {
        job->pump(kHeartbeat);
        if (job->done() || job->error()) {
          const std::string body = job->error() ? error_body(*job->error())
                                                : embedding_response(job->vectors(), base64, model, job->prompt_tokens());
          if (!sink.write(body.data(), body.size())) return false;
          sink.done();
          return true;
        }
        return sink.write(" ", 1);
      },
      [job](bool success) {
        if (!success || !job->done()) job->cancel();
      });
}

void HttpServer::Impl::completion(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  Scheduler* sched = scheduler.load();
  if (sched == nullptr) {
    send_error(res, ApiError(503, "loading the model", "unavailable_error", "loading"));
    return;
  }
  auto request = std::make_shared<ApiRequest>();
  try {
    *request = parse_request(endpoint, req.body, *tokenizer, *chat_template, n_ctx, sched->parallel());
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  std::shared_ptr<Request> handle = sched->submit(request->generation);
  if (!handle) {
    res.set_header("Retry-After", "1");
    send_error(res, ApiError(503, "the server is busy: the queue is full", "unavailable_error", "queue_full"));
    return;
  }
  const std::string id = (endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-") + std::to_string(handle->id());
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  auto writer = std::make_shared<ResponseWriter>(*request, *tokenizer, model_name, id, created);

  if (!request->stream) {
    // Sent chunked so that a client that vanishes is noticed: while the
    // answer is generated a space (JSON allows leading whitespace) goes out
    // every kHeartbeat, and a failed write cancels the sequence at once.
    static constexpr auto kHeartbeat = std::chrono::milliseconds(50);
    res.set_chunked_content_provider(
        "application/json",
        [request, handle, writer, sched, last = std::chrono::steady_clock::now()](size_t, httplib::DataSink& sink) mutable {
          std::vector<Event> events;
          handle->next(events, kHeartbeat);
          for (const Event& e : events) writer->add(e);
          if (writer->done()) {
            const std::string body = writer->body();
            if (!sink.write(body.data(), body.size())) return false;
            sink.done();
            return true;
          }
          const auto now = std::chrono::steady_clock::now();
          if (now - last >= kHeartbeat) {
            last = now;
            if (!sink.write(" ", 1)) {
              sched->cancel(handle);  // the client is gone
              return false;
            }
          }
          return true;
        },
        [handle, writer, sched](bool success) {
          if (!success || !writer->done()) sched->cancel(handle);
        });
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [request, handle, writer, sched](size_t, httplib::DataSink& sink) {
        std::vector<Event> events;
        if (!handle->next(events, std::chrono::milliseconds(50))) return true;  // nothing yet: httplib calls again
        std::string data;
        for (const Event& e : events) data += writer->stream(e);
        if (!sink.write(data.data(), data.size())) {
          sched->cancel(handle);  // the client is gone
          return false;
        }
        if (writer->done()) sink.done();
        return true;
      },
      [handle, writer, sched](bool success) {
        if (!success || !writer->done()) sched->cancel(handle);
      });
}

void HttpServer::bind() {
  Impl& s = *impl_;
  if (s.options.port == 0)
    s.port = s.http.bind_to_any_port(s.options.host.c_str());
  else
    s.port = s.http.bind_to_port(s.options.host.c_str(), s.options.port) ? s.options.port : -1;
  if (s.port < 0)
    throw std::runtime_error("cannot listen on " + s.options.host + ":" + std::to_string(s.options.port));
  if (s.listen_socket >= 0) ::listen(s.listen_socket, SOMAXCONN);
}

int HttpServer::port() const { return impl_->port; }
void HttpServer::serve() {
  impl_->serving = true;
  if (!impl_->stop_requested) impl_->http.listen_after_bind();
  impl_->serving = false;
}

void HttpServer::stop() {
  impl_->stop_requested = true;
  while (impl_->serving && !impl_->http.is_running()) std::this_thread::yield();
  impl_->http.stop();
}

void HttpServer::set_embeddings(runtime::Pooling pooling, int64_t n_embd) {
  impl_->pooling = pooling;
  impl_->n_embd = n_embd;
}

void HttpServer::attach(Scheduler& scheduler, const Tokenizer& tokenizer, const chat::ChatTemplate& chat_template,
                        std::string model_name, int64_t n_ctx, ServerProps props) {
  impl_->props = std::move(props);
  impl_->tokenizer = &tokenizer;
  impl_->chat_template = &chat_template;
  impl_->model_name = std::move(model_name);
  impl_->n_ctx = n_ctx;
  impl_->scheduler.store(&scheduler);
}

}  // namespace lumen::server
