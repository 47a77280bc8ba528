// POST /v1/embeddings: a request body parsed and checked into one scheduler
// request per input item (an embedding request: GenerationParams::pooling),
// the items run through the scheduler a few at a time (EmbeddingJob), and
// the pooled vectors written as OpenAI's response, as floats or base64.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/runtime/pooling.h"
#include "lumen/server/api.h"
#include "lumen/server/scheduler.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {

// OpenAI's limit on the items of one request.
inline constexpr size_t kMaxEmbeddingInputs = 2048;

struct EmbeddingRequest {
  std::vector<std::vector<int32_t>> inputs;  // the token ids of each item
  bool base64 = false;                       // encoding_format "base64"
};

// The tokens llama-server embeds for a text: BOS and EOS when the
// vocabulary adds them (llama_tokenize with add_special), special tokens parsed.
std::vector<int32_t> embedding_tokens(const Tokenizer& tokenizer, std::string_view text);

// Parses and checks a body; throws ApiError (400 naming the field).
// n_embd is the width of the model's embeddings (Session::n_embd).
EmbeddingRequest parse_embedding_request(std::string_view body, const Tokenizer& tokenizer, int64_t n_ctx,
                                         int64_t n_embd);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage"}.
std::string embedding_response(const std::vector<std::vector<float>>& vectors, bool base64, const std::string& model,
                               int64_t prompt_tokens);

// One request's items through the scheduler: at most parallel() of them
// queued or running at once, so a long list neither fills the queue for other
// clients nor waits for a free queue entry per item.
class EmbeddingJob {
 public:
  EmbeddingJob(Scheduler& scheduler, const EmbeddingRequest& request, runtime::Pooling pooling);
  // Submits the first items; false when the scheduler takes none (queue full, stopping).
  bool start();
  // Submits what may run, then waits up to `wait` for results and takes them.
  void pump(std::chrono::milliseconds wait);
  bool done() const { return finished_ == vectors_.size(); }
  // Why the job cannot finish (an item was cancelled: the server is stopping).
  const std::optional<ApiError>& error() const { return error_; }
  const std::vector<std::vector<float>>& vectors() const { return vectors_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  // The client is gone: drops the items in flight.
  void cancel();

 private:
  bool submit_next();
  Scheduler& scheduler_;
  std::vector<GenerationParams> items_;
  std::vector<std::vector<float>> vectors_;
  std::vector<std::pair<size_t, std::shared_ptr<Request>>> in_flight_;  // (item, handle), oldest first
  size_t submitted_ = 0, finished_ = 0;
  int64_t prompt_tokens_ = 0;
  std::optional<ApiError> error_;
};

}  // namespace lumen::server
