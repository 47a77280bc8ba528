// Continuous batching (see scheduler.h). One thread calls step(); HTTP
// threads submit and cancel under the mutex. A step: drop cancelled
// sequences, admit queued requests into free slots, then one Session::step
// with every generating sequence's next token first and prompt chunks after
// (oldest request first, at most prompt_chunk tokens each, n_batch in all).
// Admission places a request on the slot holding the longest prefix of its
// prompt (prefix cache, below); a finished sequence leaves its slot warm.
#include "lumen/server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "lumen/common/internal_error.h"
#include "prefix_store.h"
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

namespace {
// Choice c > 0 samples with seed + c; bit 32 keeps the sum from reading as
// kRandomSeed (the sampler takes the low 32 bits).
SamplerParams choice_sampling(SamplerParams p, int choice) {
  if (choice > 0 && p.seed != kRandomSeed) p.seed = (p.seed + static_cast<uint64_t>(choice)) | (uint64_t{1} << 32);
  return p;
}
}  // namespace

struct Scheduler::Sequence {
  std::shared_ptr<Request> request;
  int slot = 0;
  int choice = 0;
  bool waiting = false;    // a choice > 0 until the prompt's KV is copied in from choice 0
  size_t prompt_done = 0;  // prompt tokens in the KV cache
  int32_t pending = -1;    // the last generated token, evaluated at the next step
  int64_t generated = 0;
  bool done = false;
  Sampler sampler;
  TextStreamer streamer;
  std::vector<int32_t> output;  // generated tokens (what the KV holds after the prompt)
  std::vector<int32_t> history;  // the prompt, then the output: what prompt lookup drafts from
  runtime::Drafter drafter;
  std::vector<int32_t> verify;   // this step's rows: the pending token, then its drafts
  std::vector<TokenLogprob> prompt_logprobs;
  // An embedding request's hidden states so far. It needs the state of every
  // prompt position (mean, cls), so its prompt is always prefilled whole.
  std::optional<runtime::Pooler> pooler;
  // With a grammar: its state, the masked copy of the logits, and the text
  // stream whose stop strings count only after a complete match.
  std::optional<grammar::Matcher> matcher;
  std::vector<float> masked;
  std::optional<ConstrainedStreamer> constrained;

  Sequence(std::shared_ptr<Request> r, int s, int c, int64_t n_embd, const std::shared_ptr<const grammar::TokenTrie>& trie)
      : request(std::move(r)),
        slot(s),
        choice(c),
        waiting(c > 0),
        sampler(choice_sampling(request->params().sampling, c)),
        streamer(request->params().stops),
        history(request->params().prompt),
        drafter(request->params().draft) {
    if (request->params().pooling) pooler.emplace(*request->params().pooling, n_embd);
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
  warm_.resize(slots_.size());
  store_ = std::make_unique<PrefixStore>(options_.cache_ram_bytes);
  for (int s = 0; s < session.n_seq(); ++s) session_.clear(s);
}

Scheduler::~Scheduler() = default;

int Scheduler::parallel() const { return static_cast<int>(slots_.size()); }

std::shared_ptr<Request> Scheduler::submit(GenerationParams params) {
  LUMEN_ASSERT(!params.prompt.empty(), "the API layer refuses empty prompts");
  LUMEN_ASSERT(params.n >= 1 && params.n <= parallel(), "the API layer bounds n by --parallel");
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
      for (int c = 0; c < (*it)->params().n; ++c) {
        Event done;
        done.kind = Event::Kind::Done;
        done.choice = c;
        done.finish_reason = "cancelled";
        (*it)->post(std::move(done));
      }
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  // First come, first served: a request of n choices waits for n free slots.
  std::vector<int> free;
  for (size_t slot = 0; slot < slots_.size(); ++slot)
    if (!slots_[slot]) free.push_back(static_cast<int>(slot));
  while (!queue_.empty() && static_cast<int>(free.size()) >= queue_.front()->params().n) {
    place_locked(queue_.front(), free);
    queue_.pop_front();
  }
  stats_.queued = static_cast<int64_t>(queue_.size());
  stats_.prefix_store_bytes = store_->bytes();
  stats_.prefix_store_entries = store_->size();
}

// ------------------------------------------------------------ prefix cache

void Scheduler::place_locked(const std::shared_ptr<Request>& request, std::vector<int>& free) {
  const GenerationParams& p = request->params();
  const std::span<const int32_t> prompt(p.prompt);
  if (p.grammar) {
    if (!token_trie_) token_trie_ = grammar::TokenTrie::build(tokenizer_);
    ++stats_.constrained;
  }
  // The last prompt token is always evaluated: its logits give the first
  // token. Prompt log-probabilities need every position's logits, and
  // embeddings every position's hidden state: no reuse.
  const int64_t limit = p.prompt_logprobs || p.pooling ? 0 : static_cast<int64_t>(prompt.size()) - 1;
  int slot = -1;
  int64_t reuse = 0;
  for (int s : free) {
    const int64_t shared = std::min(common_prefix(warm_[static_cast<size_t>(s)].tokens, prompt), limit);
    if (shared > reuse) slot = s, reuse = shared;
  }
  const std::optional<PrefixStore::Match> stored = store_->best(prompt, limit);
  if (stored && stored->length > reuse) {
    // Out of the store while the victim's KV goes in (that may evict), then back as most recent.
    PrefixStore::Entry entry = store_->take(stored->entry);
    slot = victim(free);
    spill_locked(slot, 0);
    reuse = stored->length;
    session_.restore_prefix(slot, reuse, entry.kv);
    store_->put(std::move(entry));
  } else if (slot >= 0) {
    // A warm slot mostly about something else keeps that in the store.
    if (2 * reuse < static_cast<int64_t>(warm_[static_cast<size_t>(slot)].tokens.size())) spill_locked(slot, reuse);
    session_.truncate(slot, reuse);
  } else {
    slot = victim(free);
    spill_locked(slot, 0);
    session_.clear(slot);
  }
  std::erase(free, slot);
  ++(reuse > 0 ? stats_.prefix_hits : stats_.prefix_misses);
  stats_.prefix_reused_tokens += static_cast<uint64_t>(reuse);
  stats_.prompt_tokens += prompt.size() - static_cast<size_t>(reuse);
  auto primary = std::make_unique<Sequence>(request, slot, 0, session_.n_embd(), token_trie_);
  primary->prompt_done = static_cast<size_t>(reuse);
  slots_[static_cast<size_t>(slot)] = std::move(primary);
  warm_[static_cast<size_t>(slot)].tokens.clear();
  for (int c = 1; c < p.n; ++c) {
    const int other = victim(free);
    spill_locked(other, 0);
    session_.clear(other);
    std::erase(free, other);
    warm_[static_cast<size_t>(other)].tokens.clear();
    slots_[static_cast<size_t>(other)] = std::make_unique<Sequence>(request, other, c, session_.n_embd(), token_trie_);
  }
}

int Scheduler::victim(const std::vector<int>& free) const {
  LUMEN_ASSERT(!free.empty(), "a victim among no free slots");
  return *std::min_element(free.begin(), free.end(), [&](int a, int b) {
    const WarmSlot &wa = warm_[static_cast<size_t>(a)], &wb = warm_[static_cast<size_t>(b)];
    return std::pair(!wa.tokens.empty(), wa.freed) < std::pair(!wb.tokens.empty(), wb.freed);
  });
}

void Scheduler::spill_locked(int slot, int64_t keep) {
  WarmSlot& warm = warm_[static_cast<size_t>(slot)];
  const auto held = static_cast<int64_t>(warm.tokens.size());
  if (held <= keep || !store_->fits(static_cast<uint64_t>(held) * session_.kv_position_bytes())) return;
  PrefixStore::Entry entry;
  entry.kv.resize(static_cast<size_t>(held) * session_.kv_position_bytes());
  session_.save_prefix(slot, held, entry.kv);
  entry.tokens = std::move(warm.tokens);
  warm.tokens.clear();
  store_->put(std::move(entry));
}

void Scheduler::release_locked(std::unique_ptr<Sequence>& seq) {
  // The KV holds the prompt (or the part prefilled) and the generated
  // tokens evaluated so far: position() of them.
  WarmSlot& warm = warm_[static_cast<size_t>(seq->slot)];
  warm.tokens = seq->params().prompt;
  warm.tokens.insert(warm.tokens.end(), seq->output.begin(), seq->output.end());
  warm.tokens.resize(static_cast<size_t>(std::min<int64_t>(session_.position(seq->slot),
                                                            static_cast<int64_t>(warm.tokens.size()))));
  warm.freed = ++clock_;
  seq.reset();
}

void Scheduler::start_choices(Sequence& primary, std::span<const float> logits, int64_t& generated) {
  const GenerationParams& p = primary.params();
  const auto prompt = static_cast<int64_t>(p.prompt.size());
  std::vector<Sequence*> choices = {&primary};
  for (auto& other : slots_)
    if (other && other->waiting && other->request == primary.request) {
      session_.copy_prefix(primary.slot, other->slot, prompt);
      other->waiting = false;
      other->prompt_done = p.prompt.size();
      choices.push_back(other.get());
    }
  for (Sequence* seq : choices) {
    if (p.max_tokens <= 0)
      finish(*seq, "length");
    else
      emit(*seq, logits, generated, session_.position(seq->slot));
  }
}

void Scheduler::emit(Sequence& seq, std::span<const float> logits, int64_t& generated, int64_t position) {
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
  ev.choice = seq.choice;
  ev.token = p.top_logprobs >= 0 ? token_logprob(logits, id, p.top_logprobs) : TokenLogprob{id, std::nullopt, {}};
  const bool shown = std::find(p.shown_control.begin(), p.shown_control.end(), id) != p.shown_control.end();
  if (seq.matcher) {
    const std::string bytes = tokenizer_.token_text(id, shown);
    std::vector<bool> accepting_after;
    for (char c : bytes) {
      const bool allowed_byte = seq.matcher->accept_bytes(std::string_view(&c, 1));
      LUMEN_ASSERT(allowed_byte, "the mask allows only tokens the grammar accepts");
      accepting_after.push_back(seq.matcher->accepting());
    }
    ev.text = seq.constrained->push(bytes, accepting_after);
  } else {
    ev.text = seq.streamer.push(tokenizer_.token_text(id, shown));
  }
  seq.output.push_back(id);
  seq.history.push_back(id);
  ++seq.generated;
  ++generated;
  seq.request->post(std::move(ev));
  if (seq.stopped() || (seq.matcher && seq.matcher->accepting() && !seq.matcher->can_continue()))
    finish(seq, "stop");
  else if (seq.generated >= p.max_tokens || position >= session_.n_ctx())
    finish(seq, "length");
  else
    seq.pending = id;
}

// Row i of the sequence's verify pass is sampled as its decode step would be
// (emit: the grammar's mask, the sampler, stop strings, max_tokens, the
// context's end, at the position i + 1 plain steps would leave), while the
// emitted token is the draft of that row; the slot then keeps what was kept.
int64_t Scheduler::verify(Sequence& seq, size_t entry, int64_t pos0, int64_t& generated) {
  const std::span<const int32_t> draft = std::span<const int32_t>(seq.verify).subspan(1);
  if (draft.empty()) {
    emit(seq, session_.step_logits(entry), generated, pos0 + 1);
    return 0;
  }
  const int64_t kept = runtime::accept_draft(draft, [&](int64_t i) {
    emit(seq, session_.step_logits(entry, i), generated, pos0 + 1 + i);
    return seq.done ? -1 : seq.pending;
  });
  session_.truncate(seq.slot, pos0 + 1 + kept);
  seq.drafter.record(static_cast<int64_t>(draft.size()), kept);
  return kept;
}

void Scheduler::finish(Sequence& seq, const std::string& reason, std::string text, std::vector<float> embedding) {
  Event done;
  done.kind = Event::Kind::Done;
  done.text = std::move(text);
  done.embedding = std::move(embedding);
  if (reason != "cancelled" && !seq.stopped()) done.text += seq.finish_text();
  done.finish_reason = reason;
  done.choice = seq.choice;
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
        release_locked(seq);
      }
    admit_locked();
    for (auto& seq : slots_)
      if (seq) active.push_back(seq.get());
    stats_.active = static_cast<int64_t>(active.size());
  }
  if (active.empty()) return false;

  // Generating sequences first (their pending token, and drafts when the
  // step has room), then prompt chunks, oldest first.
  struct Entry {
    Sequence* seq;
    bool decode;
    size_t count;
    int64_t pos0 = 0;  // decode: the slot's position before the step
  };
  std::vector<Entry> entries;
  std::vector<runtime::SeqTokens> batch;
  std::vector<Sequence*> decoding, prefilling;
  for (Sequence* seq : active) {
    if (seq->pending >= 0)
      decoding.push_back(seq);
    else if (!seq->waiting)
      prefilling.push_back(seq);
  }
  // Drafts only where they are cheap: no prompt chunk in the step and at most
  // the batch kernels' rows in all (a prefill pass costs more per row than a
  // draft saves). Among the drafting sequences, oldest first.
  const int64_t pass_rows = std::min(program::KernelId::kBatchMaxTokens, session_.n_batch());
  int64_t draft_room = prefilling.empty() ? pass_rows - static_cast<int64_t>(decoding.size()) : 0;
  std::vector<Sequence*> by_age = decoding;
  std::sort(by_age.begin(), by_age.end(),
            [](const Sequence* a, const Sequence* b) { return a->request->id() < b->request->id(); });
  for (Sequence* seq : by_age) {
    seq->verify.assign(1, seq->pending);
    if (draft_room <= 0) continue;
    const int64_t limit = std::min({draft_room, seq->params().max_tokens - seq->generated - 1,
                                    session_.n_ctx() - session_.position(seq->slot) - 1});
    const std::vector<int32_t> draft = seq->drafter.draft(seq->history, limit);
    seq->verify.insert(seq->verify.end(), draft.begin(), draft.end());
    draft_room -= static_cast<int64_t>(draft.size());
  }
  int64_t budget = session_.n_batch();
  for (Sequence* seq : decoding) {
    entries.push_back({seq, true, seq->verify.size(), session_.position(seq->slot)});
    batch.push_back({seq->slot, seq->verify, seq->verify.size() > 1});
    budget -= static_cast<int64_t>(seq->verify.size());
  }
  std::sort(prefilling.begin(), prefilling.end(),
            [](const Sequence* a, const Sequence* b) { return a->request->id() < b->request->id(); });
  for (Sequence* seq : prefilling) {
    const std::vector<int32_t>& prompt = seq->params().prompt;
    const int64_t take = std::min({static_cast<int64_t>(prompt.size() - seq->prompt_done), options_.prompt_chunk, budget});
    if (take <= 0) break;
    budget -= take;
    entries.push_back({seq, false, static_cast<size_t>(take)});
    batch.push_back({seq->slot, std::span<const int32_t>(prompt).subspan(seq->prompt_done, static_cast<size_t>(take)),
                     seq->params().prompt_logprobs, seq->pooler.has_value()});
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

  int64_t generated = 0, drafted = 0, accepted = 0;
  for (const Entry& e : entries)
    if (e.decode && e.count > 1) drafted += static_cast<int64_t>(e.count) - 1;
  for (size_t i = 0; i < entries.size(); ++i) {
    Sequence& seq = *entries[i].seq;
    if (entries[i].decode) {
      accepted += verify(seq, i, entries[i].pos0, generated);
      continue;
    }
    const GenerationParams& p = seq.params();
    if (seq.pooler) {
      for (size_t t = 0; t < entries[i].count; ++t) seq.pooler->add(session_.step_hidden(i, static_cast<int64_t>(t)));
      seq.prompt_done += entries[i].count;
      if (seq.prompt_done < p.prompt.size()) continue;
      finish(seq, "stop", {}, seq.pooler->result());
      continue;
    }
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
    start_choices(seq, session_.step_logits(i), generated);
  }

  std::lock_guard<std::mutex> lock(mu_);
  for (auto& seq : slots_)
    if (seq && seq->done) release_locked(seq);
  stats_.active = static_cast<int64_t>(std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; }));
  stats_.generated_tokens += static_cast<uint64_t>(generated);
  stats_.drafted_tokens += static_cast<uint64_t>(drafted);
  stats_.accepted_tokens += static_cast<uint64_t>(accepted);
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

bool Scheduler::accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_;
}

StepTrace Scheduler::last_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_;
}

}  // namespace lumen::server
