// /v1/embeddings: request parsing, the job that runs the items through the
// scheduler, and the response (see api_embeddings.h).
#include "lumen/server/api_embeddings.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <thread>
#include <nlohmann/json.hpp>

namespace lumen::server {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, message, "invalid_request_error", code);
}

// The fields of OpenAI's embeddings request; any other would be ignored, so it is refused.
constexpr std::string_view kFields[] = {"input", "model", "encoding_format", "dimensions", "user"};

std::vector<int32_t> token_ids(const json& ids, int32_t n_vocab) {
  std::vector<int32_t> out;
  for (const json& t : ids) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
      bad("'input' token ids must be integers in [0, " + std::to_string(n_vocab) + ")");
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

std::string base64(const std::vector<float>& v) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> bytes;
  bytes.reserve(v.size() * 4);
  for (float x : v) {  // little-endian float32, whatever the host
    const uint32_t u = std::bit_cast<uint32_t>(x);
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<uint8_t>(u >> (8 * b)));
  }
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    const uint32_t chunk = (uint32_t{bytes[i]} << 16) | (n > 1 ? uint32_t{bytes[i + 1]} << 8 : 0) |
                           (n > 2 ? uint32_t{bytes[i + 2]} : 0);
    for (size_t d = 0; d < 4; ++d) out += d <= n ? kDigits[(chunk >> (18 - 6 * d)) & 63] : '=';
  }
  return out;
}

// Shortest decimal that reads back as the same float (a JSON reader's double
// rounds to it), so a vector costs ~10 bytes per element.
void append_floats(std::string& out, const std::vector<float>& v) {
  out += '[';
  char buf[32];
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += ',';
    if (!std::isfinite(v[i])) {
      out += "null";
      continue;
    }
    const auto r = std::to_chars(buf, buf + sizeof buf, v[i]);
    out.append(buf, r.ptr);
  }
  out += ']';
}

}  // namespace

std::vector<int32_t> embedding_tokens(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids;
  if (const auto bos = tokenizer.bos_to_add()) ids.push_back(*bos);
  const std::vector<int32_t> body = tokenizer.encode(text, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  if (tokenizer.add_eos() && tokenizer.eos()) ids.push_back(*tokenizer.eos());
  return ids;
}

EmbeddingRequest parse_embedding_request(std::string_view text, const Tokenizer& tokenizer, int64_t n_ctx,
                                         int64_t n_embd) {
  const json body = parse_json_body(text);
  for (const auto& [key, value] : body.items())
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields))
      bad("'" + key + "' is not supported by /v1/embeddings", "unsupported_field");
  for (const char* name : {"model", "user"})
    if (body.contains(name) && !body[name].is_string()) bad(std::string("'") + name + "' must be a string", "invalid_type");

  EmbeddingRequest r;
  if (body.contains("encoding_format") && !body["encoding_format"].is_null()) {
    const json& f = body["encoding_format"];
    if (!f.is_string() || (f != "float" && f != "base64")) bad("'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = f == "base64";
  }
  if (body.contains("dimensions") && !body["dimensions"].is_null()) {
    const json& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() != n_embd)
      bad("'dimensions' must be " + std::to_string(n_embd) + " (this model's embedding width) or absent");
  }

  if (!body.contains("input") || body["input"].is_null()) bad("'input' is required", "missing_field");
  const json& input = body["input"];
  const int32_t n_vocab = tokenizer.n_vocab();
  auto text_item = [&](const json& s) {
    if (s.get_ref<const std::string&>().empty()) bad("'input' must not contain an empty string");
    return embedding_tokens(tokenizer, s.get<std::string>());
  };
  if (input.is_string()) {
    r.inputs.push_back(text_item(input));
  } else if (input.is_array() && !input.empty()) {
    const bool ids = std::all_of(input.begin(), input.end(), [](const json& e) { return e.is_number(); });
    const bool texts = std::all_of(input.begin(), input.end(), [](const json& e) { return e.is_string(); });
    const bool lists = std::all_of(input.begin(), input.end(), [](const json& e) { return e.is_array(); });
    if (!ids && !texts && !lists)
      bad("'input' must be a string, an array of strings, an array of token ids or an array of arrays of token ids",
          "invalid_type");
    if (!ids && input.size() > kMaxEmbeddingInputs)
      bad("'input' has " + std::to_string(input.size()) + " items; at most " + std::to_string(kMaxEmbeddingInputs));
    if (ids) {
      r.inputs.push_back(token_ids(input, n_vocab));
    } else {
      for (const json& item : input) {
        if (lists && item.empty()) bad("'input' must not contain an empty array of token ids");
        r.inputs.push_back(texts ? text_item(item) : token_ids(item, n_vocab));
      }
    }
  } else {
    bad(input.is_array() ? "'input' must not be empty"
                         : "'input' must be a string, an array of strings, an array of token ids or an array of "
                           "arrays of token ids",
        input.is_array() ? "invalid_value" : "invalid_type");
  }
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(r.inputs[i].size());
    if (n == 0) bad("'input' item " + std::to_string(i) + " has no tokens");
    if (n > n_ctx)
      throw ApiError(400,
                     "'input' item " + std::to_string(i) + " has " + std::to_string(n) +
                         " tokens; the context holds " + std::to_string(n_ctx),
                     "invalid_request_error", "context_length_exceeded");
  }
  return r;
}

std::string embedding_response(const std::vector<std::vector<float>>& vectors, bool base64_format,
                               const std::string& model, int64_t prompt_tokens) {
  std::string out = R"({"object":"list","data":[)";
  for (size_t i = 0; i < vectors.size(); ++i) {
    if (i > 0) out += ',';
    out += R"({"object":"embedding","index":)" + std::to_string(i) + R"(,"embedding":)";
    if (base64_format)
      out += '"' + base64(vectors[i]) + '"';
    else
      append_floats(out, vectors[i]);
    out += '}';
  }
  out += R"(],"model":)" + json(model).dump(-1, ' ', false, json::error_handler_t::replace);
  out += R"(,"usage":{"prompt_tokens":)" + std::to_string(prompt_tokens) +
         R"(,"total_tokens":)" + std::to_string(prompt_tokens) + "}}";
  return out;
}

// ------------------------------------------------------------------ the job

EmbeddingJob::EmbeddingJob(Scheduler& scheduler, const EmbeddingRequest& request, runtime::Pooling pooling)
    : scheduler_(scheduler), vectors_(request.inputs.size()) {
  for (const std::vector<int32_t>& ids : request.inputs) {
    GenerationParams g;
    g.prompt = ids;
    g.max_tokens = 0;
    g.pooling = pooling;
    prompt_tokens_ += static_cast<int64_t>(ids.size());
    items_.push_back(std::move(g));
  }
}

bool EmbeddingJob::submit_next() {
  if (submitted_ == items_.size() || in_flight_.size() >= static_cast<size_t>(scheduler_.parallel())) return false;
  std::shared_ptr<Request> handle = scheduler_.submit(items_[submitted_]);
  if (!handle) return false;
  in_flight_.emplace_back(submitted_++, std::move(handle));
  return true;
}

bool EmbeddingJob::start() {
  while (submit_next()) {
  }
  return !in_flight_.empty() || items_.empty();
}

void EmbeddingJob::pump(std::chrono::milliseconds wait) {
  if (error_) return;
  while (submit_next()) {
  }
  if (in_flight_.empty()) {
    // Nothing of ours is queued: the queue is full of others' requests (try
    // again at the next pump) or the scheduler refuses everything.
    if (!scheduler_.accepting())
      error_ = ApiError(503, "the server is stopping", "unavailable_error", "stopping");
    else
      std::this_thread::sleep_for(wait);
    return;
  }
  std::vector<Event> events;
  for (size_t k = 0; k < in_flight_.size();) {
    events.clear();
    in_flight_[k].second->next(events, k == 0 ? wait : std::chrono::milliseconds(0));
    bool ended = false;
    for (Event& e : events) {
      if (e.kind != Event::Kind::Done) continue;
      ended = true;
      if (e.finish_reason == "cancelled") {
        error_ = ApiError(503, "the server is stopping", "unavailable_error", "stopping");
      } else {
        vectors_[in_flight_[k].first] = std::move(e.embedding);
        ++finished_;
      }
    }
    if (ended)
      in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(k));
    else
      ++k;
  }
  if (error_) cancel();
}

void EmbeddingJob::cancel() {
  for (auto& [item, handle] : in_flight_) scheduler_.cancel(handle);
  in_flight_.clear();
}

}  // namespace lumen::server
