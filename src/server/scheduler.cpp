// Continuous batching (see scheduler.h). One thread calls step(); HTTP
// threads submit and cancel under the mutex. A step: drop cancelled
// sequences, admit queued requests into free slots, then one Session::step
// with every generating sequence's next token first and prompt chunks after
// (oldest request first, at most prompt_chunk tokens each, n_batch in all).
#include "lumen/server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "lumen/common/internal_error.h"
#include "lumen/server/constrained_streamer.h"

namespace lumen::server {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------ Request

void Request::post(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

bool Request::next(std::vector<Event>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  while (!events_.empty()) {
    out.push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return true;
}

// ---------------------------------------------------------------- logprobs

TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int k) {
  float max = -INFINITY;
  for (float x : logits) max = std::max(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - static_cast<double>(max));
  const double log_sum = std::log(sum);
  auto logprob = [&](int32_t i) {
    return static_cast<double>(logits[static_cast<size_t>(i)]) - static_cast<double>(max) - log_sum;
  };
  TokenLogprob t;
  t.id = id;
  t.logprob = logprob(id);
  if (k > 0) {
    const size_t n = std::min(static_cast<size_t>(k), logits.size());
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), [&](int32_t a, int32_t b) {
      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    });
    for (size_t i = 0; i < n; ++i) t.top.emplace_back(ids[i], logprob(ids[i]));
  }
  return t;
}

// ---------------------------------------------------------------- Scheduler

struct Scheduler::Sequence {
  std::shared_ptr<Request> request;
  int slot = 0;
  size_t prompt_done = 0;  // prompt tokens in the KV cache
  int32_t pending = -1;    // the last generated token, evaluated at the next step
  int64_t generated = 0;
  bool done = false;
  Sampler sampler;
  TextStreamer streamer;
  std::vector<TokenLogprob> prompt_logprobs;
  // With a grammar: its state, the masked copy of the logits, and the text
  // stream whose stop strings count only after a complete match.
  std::optional<grammar::Matcher> matcher;
  std::vector<float> masked;
  std::optional<ConstrainedStreamer> constrained;

  Sequence(std::shared_ptr<Request> r, int s, const std::shared_ptr<const grammar::TokenTrie>& trie)
      : request(std::move(r)), slot(s), sampler(request->params().sampling), streamer(request->params().stops) {
    // As lumen-run: the prompt is part of the penalties' history.
    for (int32_t t : request->params().prompt) sampler.accept(t);
    if (params().grammar) {
      matcher.emplace(params().grammar, trie);
      constrained.emplace(params().stops, matcher->accepting());
    }
  }
  const GenerationParams& params() const { return request->params(); }
  bool stopped() const { return constrained ? constrained->stopped() : streamer.stopped(); }
  std::string finish_text() { return constrained ? constrained->finish() : streamer.finish(); }
};

Scheduler::Scheduler(runtime::Session& session, const Tokenizer& tokenizer, SchedulerOptions options)
    : session_(session), tokenizer_(tokenizer), options_(options) {
  slots_.resize(static_cast<size_t>(session.n_seq()));
  for (int s = 0; s < session.n_seq(); ++s) session_.clear(s);
}

Scheduler::~Scheduler() = default;

int Scheduler::parallel() const { return static_cast<int>(slots_.size()); }

std::shared_ptr<Request> Scheduler::submit(GenerationParams params) {
  LUMEN_ASSERT(!params.prompt.empty(), "the API layer refuses empty prompts");
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t free_slots = std::count(slots_.begin(), slots_.end(), nullptr);
  if (!accepting_ || static_cast<int64_t>(queue_.size()) >= options_.max_queue + free_slots) {
    ++stats_.rejected;
    return nullptr;
  }
  auto request = std::make_shared<Request>(next_id_++, std::move(params));
  queue_.push_back(request);
  ++stats_.requests;
  stats_.queued = static_cast<int64_t>(queue_.size());
  cv_.notify_all();
  return request;
}

void Scheduler::cancel(const std::shared_ptr<Request>& request) {
  if (!request || request->cancelled_.exchange(true)) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.cancelled;
  cv_.notify_all();
}

void Scheduler::admit_locked() {
  // Requests cancelled while queued end here; the others take free slots in order.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancelled()) {
      Event done;
      done.kind = Event::Kind::Done;
      done.finish_reason = "cancelled";
      (*it)->post(std::move(done));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  for (size_t slot = 0; slot < slots_.size() && !queue_.empty(); ++slot) {
    if (slots_[slot]) continue;
    session_.clear(static_cast<int>(slot));
    if (queue_.front()->params().grammar) {
      if (!token_trie_) token_trie_ = grammar::TokenTrie::build(tokenizer_);
      ++stats_.constrained;
    }
    slots_[slot] = std::make_unique<Sequence>(queue_.front(), static_cast<int>(slot), token_trie_);
    stats_.prompt_tokens += queue_.front()->params().prompt.size();
    queue_.pop_front();
  }
  stats_.queued = static_cast<int64_t>(queue_.size());
}

void Scheduler::finish(Sequence& seq, const std::string& reason, std::string text) {
  Event done;
  done.kind = Event::Kind::Done;
  done.text = std::move(text);
  if (reason != "cancelled" && !seq.stopped()) done.text += seq.finish_text();
  done.finish_reason = reason;
  seq.request->post(std::move(done));
  seq.done = true;
}

bool Scheduler::step() {
  std::vector<Sequence*> active;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& seq : slots_)
      if (seq && seq->request->cancelled()) {
        finish(*seq, "cancelled");
        session_.clear(seq->slot);
        seq.reset();
      }
    admit_locked();
    for (auto& seq : slots_)
      if (seq) active.push_back(seq.get());
    stats_.active = static_cast<int64_t>(active.size());
  }
  if (active.empty()) return false;

  // Generating sequences first (one token each), then prompt chunks, oldest first.
  struct Entry {
    Sequence* seq;
    bool decode;
    size_t count;
  };
  std::vector<Entry> entries;
  std::vector<runtime::SeqTokens> batch;
  int64_t budget = session_.n_batch();
  for (Sequence* seq : active)
    if (seq->pending >= 0) {
      entries.push_back({seq, true, 1});
      batch.push_back({seq->slot, std::span<const int32_t>(&seq->pending, 1), false});
      --budget;
    }
  std::vector<Sequence*> prefilling;
  for (Sequence* seq : active)
    if (seq->pending < 0) prefilling.push_back(seq);
  std::sort(prefilling.begin(), prefilling.end(),
            [](const Sequence* a, const Sequence* b) { return a->request->id() < b->request->id(); });
  for (Sequence* seq : prefilling) {
    const std::vector<int32_t>& prompt = seq->params().prompt;
    const int64_t take = std::min({static_cast<int64_t>(prompt.size() - seq->prompt_done), options_.prompt_chunk, budget});
    if (take <= 0) break;
    budget -= take;
    entries.push_back({seq, false, static_cast<size_t>(take)});
    batch.push_back({seq->slot, std::span<const int32_t>(prompt).subspan(seq->prompt_done, static_cast<size_t>(take)),
                     seq->params().prompt_logprobs});
  }
  StepTrace trace;
  int64_t rows = 0;
  for (const auto& e : batch) {
    trace.entries.emplace_back(e.slot, static_cast<int64_t>(e.tokens.size()));
    rows += static_cast<int64_t>(e.tokens.size());
  }
  // The API layer checked every prompt against the context and generation
  // stops at its end, so a refusal here is a bug.
  try {
    session_.step(batch);
  } catch (const runtime::EvalError& e) {
    LUMEN_INTERNAL_ERROR(std::string("scheduler step refused: ") + e.what());
  }

  int64_t generated = 0;
  auto emit = [&](Sequence& seq, std::span<const float> logits) {
    const GenerationParams& p = seq.params();
    std::span<const float> choices = logits;
    if (seq.matcher) {
      // An empty match that cannot grow (a grammar for ""): nothing to generate.
      if (seq.matcher->accepting() && !seq.matcher->can_continue()) {
        finish(seq, "stop");
        return;
      }
      seq.masked.assign(logits.begin(), logits.end());
      size_t allowed = seq.matcher->mask(seq.masked);
      if (p.ignore_eos)
        for (int32_t eog : tokenizer_.eog_ids())
          if (static_cast<size_t>(eog) < seq.masked.size() && seq.masked[static_cast<size_t>(eog)] != -INFINITY) {
            seq.masked[static_cast<size_t>(eog)] = -INFINITY;
            --allowed;
          }
      // No token continues the match (a vocabulary without some byte): cut short.
      if (allowed == 0) {
        finish(seq, "length");
        return;
      }
      choices = seq.masked;
    }
    const int32_t id = seq.sampler.sample(choices);
    seq.sampler.accept(id);
    if (tokenizer_.is_eog(id) && !p.ignore_eos) {
      finish(seq, "stop");
      return;
    }
    Event ev;
    ev.kind = Event::Kind::Token;
    ev.token = p.top_logprobs >= 0 ? token_logprob(logits, id, p.top_logprobs) : TokenLogprob{id, std::nullopt, {}};
    if (seq.matcher) {
      const std::string bytes = tokenizer_.token_text(id);
      std::vector<bool> accepting_after;
      for (char c : bytes) {
        const bool allowed_byte = seq.matcher->accept_bytes(std::string_view(&c, 1));
        LUMEN_ASSERT(allowed_byte, "the mask allows only tokens the grammar accepts");
        accepting_after.push_back(seq.matcher->accepting());
      }
      ev.text = seq.constrained->push(bytes, accepting_after);
    } else {
      ev.text = seq.streamer.push(tokenizer_.token_text(id));
    }
    ++seq.generated;
    ++generated;
    seq.request->post(std::move(ev));
    if (seq.stopped() || (seq.matcher && seq.matcher->accepting() && !seq.matcher->can_continue()))
      finish(seq, "stop");
    else if (seq.generated >= p.max_tokens || session_.position(seq.slot) >= session_.n_ctx())
      finish(seq, "length");
    else
      seq.pending = id;
  };
  for (size_t i = 0; i < entries.size(); ++i) {
    Sequence& seq = *entries[i].seq;
    if (entries[i].decode) {
      emit(seq, session_.step_logits(i));
      continue;
    }
    const GenerationParams& p = seq.params();
    if (p.prompt_logprobs) {
      if (seq.prompt_logprobs.empty()) seq.prompt_logprobs.push_back({p.prompt[0], std::nullopt, {}});
      for (size_t t = 0; t < entries[i].count; ++t) {
        const size_t predicted = seq.prompt_done + t + 1;
        if (predicted < p.prompt.size())
          seq.prompt_logprobs.push_back(token_logprob(session_.step_logits(i, static_cast<int64_t>(t)),
                                                      p.prompt[predicted], std::max(p.top_logprobs, 0)));
      }
    }
    seq.prompt_done += entries[i].count;
    if (seq.prompt_done < p.prompt.size()) continue;
    if (p.prompt_logprobs) {
      Event ev;
      ev.kind = Event::Kind::Prompt;
      ev.prompt = std::move(seq.prompt_logprobs);
      seq.request->post(std::move(ev));
    }
    if (p.max_tokens <= 0)
      finish(seq, "length");
    else
      emit(seq, session_.step_logits(i));
  }

  std::lock_guard<std::mutex> lock(mu_);
  for (auto& seq : slots_)
    if (seq && seq->done) {
      session_.clear(seq->slot);
      seq.reset();
    }
  stats_.active = static_cast<int64_t>(std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; }));
  stats_.generated_tokens += static_cast<uint64_t>(generated);
  ++stats_.steps;
  stats_.last_batch_rows = rows;
  stats_.last_batch_sequences = static_cast<int64_t>(batch.size());
  const auto now = Clock::now();
  recent_.emplace_back(now, generated);
  while (!recent_.empty() && now - recent_.front().first > std::chrono::seconds(10)) recent_.pop_front();
  trace_ = std::move(trace);
  return true;
}

void Scheduler::run() {
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool busy = !queue_.empty() || std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; });
      if (stopping_ && !busy) return;
    }
    if (!step()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stopping_ || !queue_.empty(); });
    }
  }
}

void Scheduler::stop(std::chrono::milliseconds grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    accepting_ = false;
  }
  const auto deadline = Clock::now() + grace;
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool busy = !queue_.empty() || std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; });
      if (!busy) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& request : queue_) request->cancelled_ = true;
  for (auto& seq : slots_)
    if (seq) seq->request->cancelled_ = true;
  stopping_ = true;
  cv_.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  if (recent_.size() >= 2) {
    int64_t tokens = 0;
    for (size_t i = 1; i < recent_.size(); ++i) tokens += recent_[i].second;
    const double seconds = std::chrono::duration<double>(recent_.back().first - recent_.front().first).count();
    s.tokens_per_second = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
  }
  return s;
}

StepTrace Scheduler::last_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_;
}

}  // namespace lumen::server
