// lumen-run: loads a compiled model.so, binds it to GGUF weights and
// generates text. Without a model.so it compiles the dsl/ program whose
// `model` line names the GGUF's general.architecture into a cache first. Flags parse here; everything else is the runtime library
// (session), the tokenizer, the sampler and the chat template. Text streams to
// stdout as it is generated; stats and errors go to stderr.
//
// Exit codes: 0 success, 1 runtime error (bad files, context overflow, ...),
// 2 bad command line, 70 internal error (a bug in Lumen). Every error is one
// line: "lumen-run: error: ..." or "lumen-run: internal error: ...".
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/draft_flags.h"
#include "cli/model_for_gguf.h"
#include "cli/sampler_flags.h"
#include "cli/session_flags.h"
#include "lumen/common/internal_error.h"
#include "lumen/text/chat_template.h"
#include "lumen/gguf/gguf.h"
#include "lumen/runtime/compiled_model.h"
#include "lumen/runtime/session.h"
#include "lumen/runtime/speculative.h"
#include "lumen/runtime/thread_pool.h"
#include "lumen/runtime/sampler.h"
#include "lumen/text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

// lumen-run's command line: the flags every Session tool shares, then its own.
struct Options : lumen::cli::SessionFlags {
  std::string model_path;
  std::optional<std::string> dsl_dir;
  std::optional<std::string> prompt, prompt_file, tokenize_text, system, dump_logits, chat_template;
  int64_t n_predict = 128;
  lumen::SamplerParams sampling;
  lumen::runtime::DraftParams draft;
  std::vector<std::string> stops;
  bool chat = false, interactive = false, profile = false;
};

struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw RunError("cannot read prompt file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw RunError("cannot read prompt file '" + path + "'");
  return ss.str();
}

// Counters for the stats line.
struct Stats {
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t decode_rows = 0;  // logits rows sampled after the prompt's (one per plain decode step)
  double prefill_seconds = 0, decode_seconds = 0;
};

class Runner {
 public:
  Runner(const Options& o, lumen::runtime::Session& session, const lumen::Tokenizer& tok)
      : o_(o), session_(session), tok_(tok), sampler_(o.sampling), drafter_(o.draft) {}

  // Evaluates the tokens (as a prefill) and generates up to n_predict tokens,
  // streaming text. Returns the generated text (without any stop string).
  std::string turn(const std::vector<int32_t>& tokens, bool dump_logits) {
    if (tokens.empty()) throw RunError("the prompt is empty");
    const int64_t room = session_.n_ctx() - session_.position();
    if (static_cast<int64_t>(tokens.size()) > room)
      throw RunError("the prompt (" + std::to_string(tokens.size()) + " tokens) does not fit the context of " +
                     std::to_string(session_.n_ctx()) + " (" + std::to_string(room) + " free); raise --ctx");
    if (static_cast<int64_t>(tokens.size()) + o_.n_predict > room && !o_.interactive)
      throw RunError("the prompt (" + std::to_string(tokens.size()) + " tokens) plus " +
                     std::to_string(o_.n_predict) + " generated tokens exceed the context of " +
                     std::to_string(session_.n_ctx()) + "; raise --ctx or lower -n");
    auto t0 = Clock::now();
    std::span<const float> logits = session_.eval(tokens);
    stats_.prefill_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    stats_.prompt_tokens += static_cast<int64_t>(tokens.size());
    for (int32_t t : tokens) sampler_.accept(t);
    if (dump_logits) write_logits(logits);

    for (int32_t t : tokens) history_.push_back(t);

    lumen::TextStreamer streamer(o_.stops);
    std::string reply;
    int64_t produced = 0;
    bool evaluate_last = false;  // the turn ended at -n: the reply's last token still needs its position
    // Samples one row of logits as a plain decode step; the token, or -1 when the turn ends with it.
    // `position` is the context's as plain decoding has it (speculative.h).
    auto emit = [&](std::span<const float> row, int64_t position) -> int32_t {
      const int32_t next = sampler_.sample(row);
      sampler_.accept(next);
      if (tok_.is_eog(next)) return -1;
      ++stats_.generated_tokens;
      history_.push_back(next);
      std::string text = streamer.push(tok_.token_text(next));
      reply += text;
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      if (streamer.stopped()) return -1;
      if (++produced == o_.n_predict) {
        evaluate_last = true;
        return -1;
      }
      if (position >= session_.n_ctx()) {
        std::fprintf(stderr, "lumen-run: context full, generation stopped\n");
        return -1;
      }
      return next;
    };
    int32_t pending = o_.n_predict > 0 ? emit(logits, session_.position()) : -1;
    while (pending >= 0) {
      int32_t next = -1;
      auto t1 = Clock::now();
      stats_.decode_rows += lumen::runtime::decode_step(
          session_, 0, pending, history_, drafter_, o_.n_predict - produced - 1,
          [&](int64_t position, std::span<const float> row) { return next = emit(row, position); });
      stats_.decode_seconds += std::chrono::duration<double>(Clock::now() - t1).count();
      pending = next;
    }
    // A conversation keeps the reply in the context: its last token was
    // sampled but not evaluated, and the next turn starts after it.
    if (evaluate_last && o_.interactive && session_.position() < session_.n_ctx())
      (void)session_.eval(std::span<const int32_t>(&history_.back(), 1));
    std::string rest = streamer.finish();
    reply += rest;
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fflush(stdout);
    return reply;
  }

  const Stats& stats() const { return stats_; }
  const lumen::Sampler& sampler() const { return sampler_; }
  const lumen::runtime::DraftStats& draft_stats() const { return drafter_.stats(); }

 private:
  void write_logits(std::span<const float> logits) {
    std::ofstream out(*o_.dump_logits, std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size_bytes()));
    if (!out) throw RunError("cannot write logits to '" + *o_.dump_logits + "'");
  }

  const Options& o_;
  lumen::runtime::Session& session_;
  const lumen::Tokenizer& tok_;
  lumen::Sampler sampler_;
  lumen::runtime::Drafter drafter_;
  std::vector<int32_t> history_;  // every token of the context: prompt lookup drafts from it
  Stats stats_;
};

// The chat template: --chat-template FILE, else the GGUF's
// tokenizer.chat_template, else ChatML with a warning.
lumen::chat::ChatTemplate load_chat_template(const Options& o, const lumen::gguf::File& file) {
  bool used_chatml = false;
  try {
    lumen::chat::ChatTemplate t = lumen::chat::load_chat_template(file, o.gguf_path, o.chat_template, &used_chatml);
    if (used_chatml)
      std::fprintf(stderr, "lumen-run: warning: '%s' has no tokenizer.chat_template; using ChatML\n", o.gguf_path.c_str());
    return t;
  } catch (const std::runtime_error& e) {
    throw RunError(e.what());
  }
}

std::string render(const lumen::chat::ChatTemplate& tmpl, const std::vector<lumen::chat::Message>& messages) {
  try {
    return lumen::chat::render_chat(tmpl, messages, /*add_generation_prompt=*/true);
  } catch (const lumen::chat::TemplateError& e) {
    throw RunError("chat template: " + std::string(e.what()));
  }
}

int run(const Options& o) {
  if (o.tokenize_text) {
    // Tokenization needs only the vocabulary: no model binding.
    lumen::gguf::File file = [&] {
      try {
        return lumen::gguf::File::open(o.gguf_path);
      } catch (const lumen::gguf::Error& e) {
        throw RunError(e.what());
      }
    }();
    lumen::Tokenizer tok = lumen::Tokenizer::from_gguf(file);
    std::vector<int32_t> ids = tok.encode(*o.tokenize_text, /*parse_special=*/true);
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line.append(i ? " " : "").append(std::to_string(ids[i]));
    if (!line.empty()) std::printf("%s\n", line.c_str());
    return 0;
  }

  auto load_start = Clock::now();
  const std::string model_path =
      o.model_path.empty() ? lumen::cli::model_for_gguf(o.gguf_path, o.dsl_dir, "lumen-run") : o.model_path;
  auto model = std::make_shared<lumen::runtime::CompiledModel>(lumen::runtime::load_model_so(model_path));
  lumen::runtime::SessionOptions so = o.session_options(o.n_threads());
  so.profile = o.profile;
  lumen::runtime::Session session(model, o.gguf_path, so);
  lumen::Tokenizer tok = lumen::Tokenizer::from_gguf(session.gguf());
  if (const std::string error = lumen::logit_bias_error(o.sampling.logit_bias, session.n_vocab()); !error.empty())
    throw RunError("--logit-bias: " + error);
  const double load_seconds = std::chrono::duration<double>(Clock::now() - load_start).count();

  std::vector<lumen::chat::Message> messages;
  if (o.system) messages.push_back({"system", *o.system});
  std::optional<lumen::chat::ChatTemplate> chat_template;
  if (o.chat || o.interactive) chat_template.emplace(load_chat_template(o, session.gguf()));
  std::string prompt;
  if (o.prompt) prompt = *o.prompt;
  if (o.prompt_file) prompt = read_text_file(*o.prompt_file);

  Runner runner(o, session, tok);
  if (o.interactive) {
    // Each turn renders the whole conversation and evaluates only what the
    // context lacks: the text after what was already fed (the previous
    // render plus the reply). A template that rewrites history (e.g. drops
    // old reasoning) restarts the context.
    std::string fed;
    bool first = true;
    while (true) {
      std::string line;
      if (first && !prompt.empty()) {
        line = prompt;
      } else {
        std::fprintf(stderr, "> ");
        std::fflush(stderr);
        if (!std::getline(std::cin, line)) break;
        if (line.empty()) continue;
      }
      first = false;
      messages.push_back({"user", line});
      const std::string full = render(*chat_template, messages);
      std::vector<int32_t> tokens;
      if (session.position() > 0 && full.size() > fed.size() && full.compare(0, fed.size(), fed) == 0) {
        tokens = tok.encode(std::string_view(full).substr(fed.size()), /*parse_special=*/true);
      } else {
        session.clear();
        tokens = tok.encode_prompt(full);
      }
      std::string reply = runner.turn(tokens, false);
      std::printf("\n");
      std::fflush(stdout);
      messages.push_back({"assistant", reply});
      fed = full + reply;
    }
  } else {
    std::string text = prompt;
    if (o.chat) {
      messages.push_back({"user", prompt});
      text = render(*chat_template, messages);
    }
    runner.turn(tok.encode_prompt(text), o.dump_logits.has_value());
  }

  const Stats& st = runner.stats();
  const auto& ls = session.load_stats();
  std::fprintf(stderr,
               "\nlumen-run: load %.2f s (packing %.2f s, %.0f MiB packed, pack cache %s) | %d threads, %s, seed %u\n"
               "lumen-run: prompt %lld tokens, %.2f tok/s | generated %lld tokens, %.2f tok/s\n",
               load_seconds, ls.pack_seconds, static_cast<double>(ls.packed_bytes) / (1 << 20),
               (ls.pack_cache + (ls.pack_cache_how.empty() ? "" : ", " + ls.pack_cache_how)).c_str(),
               session.n_threads(),
               model->target.c_str(), runner.sampler().seed(), static_cast<long long>(st.prompt_tokens),
               st.prefill_seconds > 0 ? static_cast<double>(st.prompt_tokens) / st.prefill_seconds : 0.0,
               static_cast<long long>(st.generated_tokens),
               st.decode_seconds > 0 ? static_cast<double>(st.decode_rows) / st.decode_seconds : 0.0);
  if (o.draft.n_max > 0) {
    const lumen::runtime::DraftStats& ds = runner.draft_stats();
    std::fprintf(stderr, "lumen-run: drafted %lld tokens in %lld passes, accepted %lld (%.1f%%)\n",
                 static_cast<long long>(ds.drafted), static_cast<long long>(ds.passes),
                 static_cast<long long>(ds.accepted),
                 ds.drafted > 0 ? 100.0 * static_cast<double>(ds.accepted) / static_cast<double>(ds.drafted) : 0.0);
  }
  if (o.profile) std::fprintf(stderr, "%s", session.profile_report().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"lumen-run: run a model compiled by lumenc on GGUF weights.\n\n"
               "Examples:\n"
               "  lumen-run --gguf qwen2.5-0.5b-instruct-q8_0.gguf --chat --prompt \"Hi\" -n 64\n"
               "  lumen-run model.so --gguf qwen2.5-0.5b-instruct-q8_0.gguf --prompt \"Hi\"\n",
               "lumen-run"};
  app.add_option("model", o.model_path,
                 "model.so written by `lumenc compile`; without it, the dsl/ program for the GGUF's "
                 "architecture is compiled into the cache (LUMEN_CACHE_DIR, else XDG_CACHE_HOME/lumen)");
  app.add_option("--dsl-dir", o.dsl_dir, "folder of model programs (default: LUMEN_DSL_DIR, else the installed dsl/)");
  lumen::cli::add_session_flags(app, o);
  auto* prompt = app.add_option("-p,--prompt", o.prompt, "prompt text");
  app.add_option("-f,--file", o.prompt_file, "read the prompt from a file")->excludes(prompt);
  app.add_option("-n,--n-predict", o.n_predict, "tokens to generate (default " + std::to_string(o.n_predict) + ")")
      ->check(CLI::Range(int64_t{0}, lumen::kMaxTokensToPredict));
  lumen::cli::add_sampler_flags(app, o.sampling);
  lumen::cli::add_draft_flags(app, o.draft);
  app.add_option("--stop", o.stops, "stop when the output contains this string (repeatable)");
  app.add_flag("--chat", o.chat, "wrap the prompt in the GGUF's chat template (tokenizer.chat_template)");
  app.add_option("--chat-template", o.chat_template, "Jinja chat template file to use instead of the GGUF's");
  app.add_option("--system", o.system, "system prompt for --chat / -i (default: none; the template may add its own)");
  app.add_flag("-i,--interactive", o.interactive, "chat turn by turn, reading lines from stdin");
  app.add_option("--tokenize", o.tokenize_text, "print the token ids of TEXT and exit");
  app.add_option("--dump-logits", o.dump_logits, "write the last prompt position's logits (raw f32) to FILE");
  app.add_flag("--profile", o.profile, "print time per op kind and kernel at the end");
  if (auto exit_code = lumen::cli::parse_command_line(app, argc, argv)) return *exit_code;
  return lumen::run_tool("lumen-run", [&o] { return run(o); });
}
