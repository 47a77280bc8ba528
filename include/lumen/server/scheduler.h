// Continuous batching over one Session: requests wait in a bounded queue,
// each admitted one gets a KV slot, and every step() runs ONE forward pass
// holding the next token of every generating sequence plus bounded chunks of
// pending prompts (Session::step, the N>1 kernels). A sequence that ends or is
// cancelled frees its slot at once. No sockets here: the HTTP layer talks to
// Request objects, and the tests drive step() directly.
//
// Prefix cache: a freed slot keeps its KV and remembers the tokens it holds;
// a new request takes the free slot (or the RAM store's entry) sharing the
// longest prefix with its prompt and prefills only the rest. KV bytes are
// copied exactly, so a hit gives bitwise the output of a miss. A request of
// n choices takes n slots: the prompt is prefilled once, its KV copied.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lumen/runtime/pooling.h"
#include "lumen/grammar/grammar.h"
#include "lumen/runtime/sampler.h"
#include "lumen/runtime/session.h"
#include "lumen/runtime/speculative.h"
#include "lumen/text/tokenizer.h"

namespace lumen::server {

struct GenerationParams {
  std::vector<int32_t> prompt;  // token ids, BOS included
  SamplerParams sampling;
  int64_t max_tokens = 16;
  std::vector<std::string> stops;
  bool ignore_eos = false;
  int top_logprobs = -1;         // -1: none; k >= 0: each generated token's log-probability and the k best
  bool prompt_logprobs = false;  // echo: the log-probabilities of the prompt tokens too
  // Choices generated from the prompt, one slot each; choice i samples with
  // seed + i (a random seed: each its own), so choice 0 is the n = 1 answer.
  int n = 1;
  // Set: an embedding request. The prompt prefills its slot keeping every
  // token's hidden state, pooled into Done's embedding; nothing is sampled.
  std::optional<runtime::Pooling> pooling;
  // The text must match this grammar (none: free text). Each sequence gets its
  // own Matcher; only tokens that keep the text completable are sampled, an
  // end-of-generation token only where it is a complete match, and the
  // sequence stops as soon as the match cannot grow.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Control tokens whose text the reply shows (a tool-call syntax's markers,
  // such as Mistral's [TOOL_CALLS]); other control tokens show as nothing.
  std::vector<int32_t> shown_control;
  // Prompt-lookup drafting (llama-server's speculative.n_max / n_min). It
  // never changes the output; it runs only in steps without prompt chunks
  // whose rows stay within the batch kernels (see Scheduler::step).
  // The initializer is the server's default (the API's when a request omits the fields).
  runtime::DraftParams draft{0, 1, 3};
};

// A token with its log-probability under the model (log-softmax of the raw
// logits, before any sampling filter) and the best alternatives.
struct TokenLogprob {
  int32_t id = 0;
  std::optional<double> logprob;  // none for the first prompt token
  std::vector<std::pair<int32_t, double>> top;
};

struct Event {
  enum class Kind { Prompt, Token, Done };
  Kind kind = Kind::Token;
  int choice = 0;                    // which of the request's n choices (Prompt: 0)
  std::vector<TokenLogprob> prompt;  // Prompt: every prompt token (prompt_logprobs only)
  TokenLogprob token;                // Token: the generated token
  std::vector<float> embedding;      // Done of an embedding request: the pooled, L2-normalized hidden states
  std::string text;                  // Token/Done: text now safe to show (stop strings held back)
  std::string finish_reason;         // Done: "stop", "length" or "cancelled" (one Done per choice)
};

// One request's side of the conversation with the scheduler (thread-safe).
class Request {
 public:
  Request(uint64_t id, GenerationParams params) : id_(id), params_(std::move(params)) {}
  // Waits up to `timeout` for events and moves them to `out` (appending).
  // Returns false when there were none.
  bool next(std::vector<Event>& out, std::chrono::milliseconds timeout);
  uint64_t id() const { return id_; }
  const GenerationParams& params() const { return params_; }
  bool cancelled() const { return cancelled_.load(); }

 private:
  friend class Scheduler;
  void post(Event e);
  const uint64_t id_;
  const GenerationParams params_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
};

struct SchedulerOptions {
  int64_t max_queue = 64;      // requests waiting for a slot; beyond: refused
  int64_t prompt_chunk = 64;   // most prompt tokens of one sequence per step
  // The prefix cache's RAM store (lumen-server --cache-ram); 0: off (free
  // slots still keep their KV). 1 GiB holds ~87k positions of Qwen2.5-0.5B
  // (12 KiB each at f16) and ~18k of a 7B model with 4 KV heads of 128.
  uint64_t cache_ram_bytes = uint64_t{1024} << 20;
};

struct SchedulerStats {
  uint64_t requests = 0, rejected = 0, generated_tokens = 0, steps = 0;
  uint64_t prompt_tokens = 0;  // evaluated: the prompt less what the prefix cache reused, once per request
  uint64_t cancelled = 0;  // requests whose client went away (cancel())
  // Prefix cache: requests that reused KV (hits) or not (misses), positions
  // reused instead of evaluated, and the RAM store's size.
  uint64_t prefix_hits = 0, prefix_misses = 0, prefix_reused_tokens = 0;
  uint64_t prefix_store_bytes = 0, prefix_store_entries = 0;
  uint64_t constrained = 0;  // requests with a grammar
  uint64_t drafted_tokens = 0, accepted_tokens = 0;  // speculative decoding: drafted, and kept
  int64_t queued = 0, active = 0;
  int64_t last_batch_rows = 0, last_batch_sequences = 0;
  double tokens_per_second = 0;  // generated, over the last 10 s
};

// What the last step ran, for tests: (slot, tokens) per entry.
struct StepTrace {
  std::vector<std::pair<int, int64_t>> entries;
};

class PrefixStore;

class Scheduler {
 public:
  // The session's n_seq is the number of parallel sequences.
  Scheduler(runtime::Session& session, const Tokenizer& tokenizer, SchedulerOptions options = {});
  ~Scheduler();

  // Queues a request; nullptr when the queue is full or the scheduler stops.
  // The prompt must be non-empty and fit the context, and an embedding
  // request needs the session's hidden states (the API layer checks).
  std::shared_ptr<Request> submit(GenerationParams params);
  // The client is gone: the sequence frees its slot at the next step.
  void cancel(const std::shared_ptr<Request>& request);

  // Runs one forward pass over what is active; false when there was nothing to do.
  bool step();
  // step() until stop(); sleeps while idle.
  void run();
  // Refuse new requests; wait up to `grace` for running and queued ones to
  // finish, then cancel the rest; run() returns.
  void stop(std::chrono::milliseconds grace);

  SchedulerStats stats() const;
  // False once stop() began: submit() refuses everything from then on.
  bool accepting() const;
  StepTrace last_step() const;
  int parallel() const;

 private:
  struct Sequence;
  // A free slot's KV: the tokens it holds, and when it was freed (LRU).
  struct WarmSlot {
    std::vector<int32_t> tokens;
    uint64_t freed = 0;
  };
  void admit_locked();
  // Gives the request its slots, reusing the longest cached prefix.
  void place_locked(const std::shared_ptr<Request>& request, std::vector<int>& free);
  // The free slot to overwrite: an empty one, else the least recently freed.
  int victim(const std::vector<int>& free) const;
  // Before slot's KV is overwritten beyond `keep` positions: into the RAM store.
  void spill_locked(int slot, int64_t keep);
  // The sequence ends: its slot stays warm with what its KV holds.
  void release_locked(std::unique_ptr<Sequence>& seq);
  // The prompt of primary (choice 0) is in its KV: the other choices get a
  // copy, and every choice samples its first token from the same logits.
  void start_choices(Sequence& primary, std::span<const float> logits, int64_t& generated);
  void finish(Sequence& seq, const std::string& reason, std::string text = {}, std::vector<float> embedding = {});
  // Samples the sequence's next token from `logits`; `position` is its slot's
  // position as plain decoding has it (the end-of-context check).
  void emit(Sequence& seq, std::span<const float> logits, int64_t& generated, int64_t position);
  // Emits the rows of a decode entry's verify pass (its drafts kept while the
  // sampler reproduces them) and rolls its slot back; the drafts kept.
  int64_t verify(Sequence& seq, size_t entry, int64_t pos0, int64_t& generated);

  runtime::Session& session_;
  const Tokenizer& tokenizer_;
  const SchedulerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  std::vector<std::unique_ptr<Sequence>> slots_;  // by slot; null when free
  std::vector<WarmSlot> warm_;                    // by slot: what a free slot's KV holds
  std::unique_ptr<PrefixStore> store_;
  uint64_t clock_ = 0;
  uint64_t next_id_ = 1;
  bool accepting_ = true, stopping_ = false;
  SchedulerStats stats_;
  StepTrace trace_;
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> recent_;  // generated tokens per step
  std::shared_ptr<const grammar::TokenTrie> token_trie_;  // built at the first request with a grammar
};

// log-softmax of logits at `id`, and the k most likely (id, log-probability), best first.
TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int k);

}  // namespace lumen::server
