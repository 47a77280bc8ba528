// The Session facade (session.h): loading (open, check and bind the GGUF,
// plan the decode and full-batch passes, allocate the KV cache, arena and
// per-thread scratch), eval() and step() splitting tokens into passes, and
// the accessors. Planning is in session_plan.cpp, execution in
// session_execute.cpp, the KV cache in kv_cache.h.
#include "lumen/runtime/session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "lumen/common/numeric.h"
#include "session_impl.h"

namespace lumen::runtime {

using program::Op;
using ::lumen::ops::OpId;
using program::Section;

Session::Session(std::shared_ptr<const CompiledModel> model, const std::string& gguf_path,
                 const SessionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  auto start = std::chrono::steady_clock::now();
  Impl& s = *impl_;
  if (!model) throw LoadError("no model");
  s.model = std::move(model);
  s.options = options;
  if (options.n_threads < 0) throw LoadError("the thread count must be >= 1");
  if (options.n_batch < 1) throw LoadError("the batch size must be >= 1");
  if (options.n_ctx < 0) throw LoadError("the context size must be >= 1");
  if (options.n_seq < 1 || options.n_seq > 4096) throw LoadError("the sequence count must be in [1, 4096]");
  s.n_seq = options.n_seq;
  s.positions.assign(static_cast<size_t>(s.n_seq), 0);
  s.post_rows = std::max<int64_t>(16, s.n_seq);
  try {
    s.file.emplace(gguf::File::open(gguf_path));
  } catch (const gguf::Error& e) {
    throw LoadError(e.what());
  }
  s.n_threads = options.n_threads == 0 ? physical_cores() : options.n_threads;
  s.pool = std::make_unique<ThreadPool>(s.n_threads, options.profile);
  s.bound = bind_model(*s.model, *s.file, /*release_file_pages=*/true, *s.pool, options.pack_cache_dir,
                       options.map_pack_cache);
  const program::Program& p = s.program();

  s.n_ctx = options.n_ctx == 0 ? std::min<int64_t>(4096, s.bound.n_ctx_train) : options.n_ctx;
  if (s.n_ctx < 1 || s.n_ctx > s.bound.n_ctx_train)
    throw LoadError("context size " + std::to_string(s.n_ctx) + " exceeds the model's training context of " +
                    std::to_string(s.bound.n_ctx_train));
  s.n_batch = std::min(options.n_batch, s.n_ctx);

  for (const auto* ops : {&p.pre, &p.layer, &p.post})
    for (const Op& op : *ops) {
      if (op.kind != OpId::Embed || op.weights.size() != 1) continue;
      const auto& tensors = s.bound.tensors[static_cast<size_t>(op.weights[0])];
      for (const gguf::TensorInfo* t : tensors)
        if (t != nullptr && t->ne.size() >= 2) s.max_token_id = std::min(s.max_token_id, t->ne[1]);
    }

  // Plans for decode and for a full batch: every layout and shape error shows now.
  s.plan_for(s.n_batch);
  const Plan& decode = s.plan_for(1);
  s.n_vocab = decode.logits.cols;
  s.build_post_template();
  s.find_hidden_norm();

  // One KV cache per attention op of a layer, as wide as its K.
  std::vector<int64_t> kv_widths;
  for (const ROp& r : decode.sections.layer) {
    if (r.op->kind != OpId::Attention) continue;
    kv_widths.push_back(r.in[1].cols);
    // Each head's row is read as whole blocks, as llama.cpp requires of a quantized cache.
    if (options.kv_type == KvType::Q8_0 && r.head_dim % kQ8Block != 0)
      throw LoadError("--kv q8_0 needs a head size that is a multiple of 32; this model's is " +
                      std::to_string(r.head_dim));
  }
  s.kv = KvCache(kv_widths, s.bound.n_layers, s.n_ctx, s.n_seq, options.kv_type);
  s.stats.kv_bytes = s.kv.bytes();

  int64_t max_cols = 1, max_head_dim = 2;
  for (Section section : program::kSections)
    for (const ROp& r : decode.sections[section]) {
      for (const RView& v : r.in) max_cols = std::max(max_cols, v.cols);
      max_head_dim = std::max(max_head_dim, r.head_dim);
    }
  s.scratch.resize(static_cast<size_t>(s.n_threads));
  for (ThreadScratch& t : s.scratch) {
    t.row.resize(static_cast<size_t>(max_cols));
    t.cos_sin.resize(static_cast<size_t>(max_head_dim));
  }
  s.logits.resize(static_cast<size_t>(s.n_vocab));
  s.stats.packed_bytes = s.bound.packed_bytes;
  s.stats.pack_seconds = s.bound.pack_seconds;
  s.stats.pack_cache = s.bound.pack_cache;
  s.stats.pack_cache_how = s.bound.pack_cache_how;
  s.stats.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Session::~Session() = default;

std::span<const float> Session::eval(std::span<const int32_t> tokens) {
  Impl& s = *impl_;
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t position = s.positions[0];
  if (total == 0) throw EvalError("no tokens to evaluate");
  if (total > s.n_ctx - position)
    throw EvalError(std::to_string(total) + " tokens at position " + std::to_string(position) +
                    " exceed the context size of " + std::to_string(s.n_ctx) + " (use --ctx)");
  for (int32_t id : tokens)
    if (id < 0 || id >= s.max_token_id || id >= s.n_vocab)
      throw EvalError("token id " + std::to_string(id) + " is out of range [0, " +
                      std::to_string(std::min(s.max_token_id, s.n_vocab)) + ")");
  if (s.options.all_logits) s.all_logits.assign(static_cast<size_t>(total * s.n_vocab), 0.0f);

  std::vector<int64_t> kept;
  for (int64_t start = 0; start < total; start += s.n_batch) {
    const int64_t n = std::min(s.n_batch, total - start);
    const Plan& plan = s.plan_for(n);
    s.row_slot.assign(static_cast<size_t>(n), 0);
    s.row_pos.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) s.row_pos[static_cast<size_t>(i)] = s.positions[0] + i;
    s.runs = {SeqRun{0, 0, n, s.positions[0]}};
    const bool last_batch = start + n == total;
    // The post ops turn rows into logits: the last token's, or every
    // token's when all positions' logits are kept.
    kept.clear();
    if (s.options.all_logits)
      for (int64_t i = 0; i < n; ++i) kept.push_back(i);
    else if (last_batch)
      kept.push_back(n - 1);
    float* out = s.options.all_logits ? s.all_logits.data() + start * s.n_vocab : s.logits.data();
    s.forward(plan, tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(n)), kept, out);
    s.positions[0] += n;
  }
  if (s.options.all_logits)
    std::copy(s.all_logits.end() - s.n_vocab, s.all_logits.end(), s.logits.begin());
  return s.logits;
}

void Session::step(std::span<const SeqTokens> batch) {
  Impl& s = *impl_;
  int64_t total = 0;
  std::vector<bool> seen(static_cast<size_t>(s.n_seq), false);
  for (const SeqTokens& e : batch) {
    if (e.slot < 0 || e.slot >= s.n_seq)
      throw EvalError("slot " + std::to_string(e.slot) + " is out of range [0, " + std::to_string(s.n_seq) + ")");
    if (seen[static_cast<size_t>(e.slot)]) throw EvalError("slot " + std::to_string(e.slot) + " appears twice in a step");
    seen[static_cast<size_t>(e.slot)] = true;
    if (e.hidden && s.hidden_norm < 0)
      throw EvalError("this model's program gives no hidden states (its post section does not start with last() and "
                      "a final rms_norm)");
    if (e.hidden && e.all_logits)
      throw EvalError("slot " + std::to_string(e.slot) + " asks for both logits and hidden states");
    const int64_t size = static_cast<int64_t>(e.tokens.size());
    if (size == 0) throw EvalError("slot " + std::to_string(e.slot) + " has no tokens to evaluate");
    const int64_t position = s.positions[static_cast<size_t>(e.slot)];
    if (size > s.n_ctx - position)
      throw EvalError(std::to_string(size) + " tokens at position " + std::to_string(position) + " of slot " +
                      std::to_string(e.slot) + " exceed the context size of " + std::to_string(s.n_ctx));
    for (int32_t id : e.tokens)
      if (id < 0 || id >= s.max_token_id || id >= s.n_vocab)
        throw EvalError("token id " + std::to_string(id) + " is out of range [0, " +
                        std::to_string(std::min(s.max_token_id, s.n_vocab)) + ")");
    total += size;
  }
  if (total == 0) throw EvalError("no tokens to evaluate");
  if (total > s.n_batch)
    throw EvalError(std::to_string(total) + " tokens in one step exceed the batch size of " +
                    std::to_string(s.n_batch));

  std::vector<int32_t> tokens;
  std::vector<int64_t> kept, hidden_rows;
  s.row_slot.clear();
  s.row_pos.clear();
  s.runs.clear();
  s.step_first.clear();
  s.step_kept.clear();
  s.step_size.clear();
  s.step_hidden_first.clear();
  for (const SeqTokens& e : batch) {
    const int64_t size = static_cast<int64_t>(e.tokens.size());
    const int64_t row0 = static_cast<int64_t>(tokens.size());
    const int64_t pos0 = s.positions[static_cast<size_t>(e.slot)];
    s.runs.push_back(SeqRun{e.slot, row0, size, pos0});
    for (int64_t i = 0; i < size; ++i) {
      s.row_slot.push_back(e.slot);
      s.row_pos.push_back(pos0 + i);
    }
    tokens.insert(tokens.end(), e.tokens.begin(), e.tokens.end());
    s.step_first.push_back(kept.size());
    s.step_kept.push_back(e.hidden ? 0 : e.all_logits ? size : 1);
    s.step_size.push_back(size);
    s.step_hidden_first.push_back(e.hidden ? static_cast<int64_t>(hidden_rows.size()) : -1);
    if (e.hidden)
      for (int64_t i = 0; i < size; ++i) hidden_rows.push_back(row0 + i);
    else if (e.all_logits)
      for (int64_t i = 0; i < size; ++i) kept.push_back(row0 + i);
    else
      kept.push_back(row0 + size - 1);
  }
  s.step_out.resize(kept.size() * static_cast<size_t>(s.n_vocab));
  s.step_hidden_out.resize(hidden_rows.size() * static_cast<size_t>(s.n_embd));
  const Plan& plan = s.plan_for(total);
  s.forward(plan, tokens, kept, s.step_out.data(), hidden_rows, s.step_hidden_out.data());
  for (const SeqTokens& e : batch) s.positions[static_cast<size_t>(e.slot)] += static_cast<int64_t>(e.tokens.size());
}

std::span<const float> Session::step_logits(size_t entry, int64_t token) const {
  const Impl& s = *impl_;
  if (entry >= s.step_first.size()) throw std::out_of_range("no step entry " + std::to_string(entry));
  const int64_t kept = s.step_kept[entry], size = s.step_size[entry];
  const int64_t row = token < 0 ? kept - 1 : token - (size - kept);
  if (row < 0 || row >= kept) throw std::out_of_range("no logits kept for token " + std::to_string(token) + " of entry " +
                                           std::to_string(entry) + " (all_logits)");
  const size_t at = (s.step_first[entry] + static_cast<size_t>(row)) * static_cast<size_t>(s.n_vocab);
  return std::span<const float>(s.step_out.data() + at, static_cast<size_t>(s.n_vocab));
}

std::span<const float> Session::step_hidden(size_t entry, int64_t token) const {
  const Impl& s = *impl_;
  if (entry >= s.step_hidden_first.size()) throw std::out_of_range("no step entry " + std::to_string(entry));
  const int64_t first = s.step_hidden_first[entry];
  if (first < 0 || token < 0 || token >= s.step_size[entry])
    throw std::out_of_range("no hidden state kept for token " + std::to_string(token) + " of entry " +
                            std::to_string(entry) + " (SeqTokens::hidden)");
  const size_t at = static_cast<size_t>(first + token) * static_cast<size_t>(s.n_embd);
  return std::span<const float>(s.step_hidden_out.data() + at, static_cast<size_t>(s.n_embd));
}

int64_t Session::position(int slot) const {
  if (slot < 0 || slot >= impl_->n_seq) throw std::out_of_range("no slot " + std::to_string(slot));
  return impl_->positions[static_cast<size_t>(slot)];
}
void Session::clear(int slot) {
  if (slot < 0 || slot >= impl_->n_seq) throw std::out_of_range("no slot " + std::to_string(slot));
  impl_->positions[static_cast<size_t>(slot)] = 0;
}

namespace {
// What slot `slot` holds; throws for a slot that does not exist.
int64_t held(const std::vector<int64_t>& positions, int slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= positions.size()) throw std::out_of_range("no slot " + std::to_string(slot));
  return positions[static_cast<size_t>(slot)];
}
void check_length(int slot, int64_t n, int64_t limit) {
  if (n < 0 || n > limit)
    throw std::out_of_range(std::to_string(n) + " positions of slot " + std::to_string(slot) + " (at most " +
                            std::to_string(limit) + ")");
}
}  // namespace

void Session::copy_prefix(int from, int to, int64_t n) {
  Impl& s = *impl_;
  check_length(from, n, held(s.positions, from));
  held(s.positions, to);
  s.kv.copy(from, to, n);
  s.positions[static_cast<size_t>(to)] = n;
}
void Session::truncate(int slot, int64_t n) {
  check_length(slot, n, held(impl_->positions, slot));
  impl_->positions[static_cast<size_t>(slot)] = n;
}
uint64_t Session::kv_position_bytes() const { return impl_->kv.position_bytes(); }
void Session::save_prefix(int slot, int64_t n, std::span<uint8_t> out) const {
  const Impl& s = *impl_;
  check_length(slot, n, held(s.positions, slot));
  if (out.size() != static_cast<size_t>(n) * s.kv.position_bytes()) throw std::out_of_range("KV buffer size");
  s.kv.save(slot, n, out);
}
void Session::restore_prefix(int slot, int64_t n, std::span<const uint8_t> in) {
  Impl& s = *impl_;
  held(s.positions, slot);
  const uint64_t position_bytes = s.kv.position_bytes();
  if (position_bytes == 0 || in.size() % position_bytes != 0) throw std::out_of_range("KV buffer size");
  const int64_t saved = static_cast<int64_t>(in.size() / position_bytes);
  check_length(slot, n, std::min(saved, s.n_ctx));
  s.kv.load(slot, n, in, saved);
  s.positions[static_cast<size_t>(slot)] = n;
}
int Session::n_seq() const { return impl_->n_seq; }
int64_t Session::n_batch() const { return impl_->n_batch; }

std::span<const float> Session::logits_at(int64_t i) const {
  const Impl& s = *impl_;
  if (!s.options.all_logits || i < 0 || (i + 1) * s.n_vocab > static_cast<int64_t>(s.all_logits.size()))
    throw std::out_of_range("no logits kept for position " + std::to_string(i));
  return std::span<const float>(s.all_logits.data() + i * s.n_vocab, static_cast<size_t>(s.n_vocab));
}

int64_t Session::position() const { return impl_->positions[0]; }
void Session::clear() { impl_->positions[0] = 0; }
int64_t Session::n_ctx() const { return impl_->n_ctx; }
int64_t Session::n_vocab() const { return impl_->n_vocab; }
int64_t Session::n_embd() const { return impl_->n_embd; }
int Session::n_threads() const { return impl_->n_threads; }
const gguf::File& Session::gguf() const { return *impl_->file; }
const CompiledModel& Session::model() const { return *impl_->model; }
const LoadStats& Session::load_stats() const { return impl_->stats; }

std::string Session::profile_report() const {
  const Impl& s = *impl_;
  if (s.profile.empty()) return "";
  std::vector<std::pair<std::string, Profile>> rows(s.profile.begin(), s.profile.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "op                               calls     time(ms)     share     GB/s    GOP/s\n";
  for (const auto& [name, prof] : rows) {
    char line[200];
    double gbs = prof.seconds > 0 ? prof.bytes / prof.seconds / 1e9 : 0;
    double gops = prof.seconds > 0 ? prof.ops / prof.seconds / 1e9 : 0;
    std::snprintf(line, sizeof line, "%-30s %7lld %12.3f %8.1f%% %8.2f %8.2f\n", name.c_str(),
                  static_cast<long long>(prof.calls), prof.seconds * 1e3, total > 0 ? 100 * prof.seconds / total : 0,
                  gbs, gops);
    out += line;
  }
  // The pool: fork/joins per token and what the threads lost waiting at them
  // (thread_pool.h, ThreadPool::Stats), decode steps apart from prefill.
  const std::string title = "pool at " + std::to_string(s.n_threads) + (s.n_threads == 1 ? " thread" : " threads");
  char header[240];
  std::snprintf(header, sizeof header, "\n%-24s %7s %8s %10s %10s %11s %8s %9s %11s %11s\n", title.c_str(), "passes",
                "tokens", "calls/tok", "joins/tok", "tasks/join", "us/join", "wait(ms)", "caller(ms)", "wait share");
  out += header;
  for (const auto& [name, pass] : {std::pair{"decode (1-token passes)", &s.decode_profile},
                                   std::pair{"prefill (longer passes)", &s.prefill_profile}}) {
    if (pass->passes == 0) continue;
    const ThreadPool::Stats& p = pass->pool;
    const double tokens = static_cast<double>(pass->tokens), joins = static_cast<double>(p.joins);
    const double thread_seconds = p.join_seconds * s.n_threads;
    char line[240];
    std::snprintf(line, sizeof line, "%-24s %7lld %8lld %10.1f %10.1f %11.1f %8.2f %9.3f %11.3f %10.1f%%\n", name,
                  static_cast<long long>(pass->passes), static_cast<long long>(pass->tokens),
                  static_cast<double>(p.calls) / tokens, joins / tokens,
                  joins > 0 ? static_cast<double>(p.joined_tasks) / joins : 0, joins > 0 ? 1e6 * p.join_seconds / joins : 0,
                  1e3 * p.wait_seconds, 1e3 * p.caller_wait_seconds,
                  thread_seconds > 0 ? 100 * p.wait_seconds / thread_seconds : 0);
    out += line;
  }
  return out;
}

}  // namespace lumen::runtime
