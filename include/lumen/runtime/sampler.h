// Token sampling as llama.cpp's default chain (common/sampling.cpp):
// penalties -> top-k -> top-p -> min-p -> temperature -> random draw with
// std::mt19937 + std::discrete_distribution; greedy (argmax, ties to the
// lowest id) when temp <= 0. Also stop-string matching for streamed output.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace lumen {

// Seed value meaning "pick a random seed" (llama.cpp's LLAMA_DEFAULT_SEED).
inline constexpr uint64_t kRandomSeed = 0xFFFFFFFF;

// A bias added to one token's logit before every other sampler (OpenAI's and
// llama-server's logit_bias, llama.cpp's --logit-bias). Biases of the same id add.
struct LogitBias {
  int32_t id;
  float bias;  // in [-kMaxLogitBias, kMaxLogitBias], or -inf: the token is never sampled
};
// OpenAI's range for a bias; -inf (llama-server's `false`) bans the token.
inline constexpr int kMaxLogitBias = 100;

struct SamplerParams {
  int32_t top_k = 40;               // <= 0: keep all
  float top_p = 0.95f;              // >= 1: off
  float min_p = 0.05f;              // <= 0: off
  float temp = 0.8f;                // <= 0: greedy
  float repeat_penalty = 1.0f;      // 1: off
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t repeat_last_n = 64;       // tokens of history the penalties look at
  // kRandomSeed draws one from std::random_device; other values seed
  // std::mt19937 with their low 32 bits, as llama.cpp's uint32 seed.
  uint64_t seed = kRandomSeed;
  // Not a scalar, so not in the table below: lumen-run's --logit-bias and the
  // API's logit_bias parse their own syntax into it.
  std::vector<LogitBias> logit_bias;
};

// Why a bias list cannot be used with a vocabulary of n_vocab tokens (an id
// outside [0, n_vocab), a NaN, +inf or a bias outside the range), or empty
// when it can. The one check lumen-run and the API both make.
std::string logit_bias_error(std::span<const LogitBias> biases, int64_t n_vocab);

// Every sampler parameter a user can set, stated once: lumen-run's flags
// (tools/cli/sampler_flags.cpp) and the HTTP API's request validation
// (src/server/api.cpp) both derive from this table. The default is the
// SamplerParams member's initializer, read back through the entry.
struct RealSamplerParam {
  double lo, hi;  // the accepted range, inclusive
  float SamplerParams::*member;
};
struct IntegerSamplerParam {
  int64_t lo, hi;  // the accepted range, inclusive
  int64_t (*get)(const SamplerParams&);
  void (*set)(SamplerParams&, int64_t);
};
struct SamplerParam {
  std::string_view flags;       // lumen-run's names, as CLI11 takes them ("-s,--seed")
  std::string_view json_field;  // the request field of the OpenAI / llama-server API
  std::string_view help;        // one line, without the default
  std::variant<RealSamplerParam, IntegerSamplerParam> value;
};

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

inline constexpr std::array<SamplerParam, 9> kSamplerParams = {{
    {"--temp", "temperature", "temperature; 0 = greedy", RealSamplerParam{0, 100, &SamplerParams::temp}},
    {"--top-k", "top_k", "top-k; <= 0 keeps all",
     IntegerSamplerParam{-1, kInt32Max, [](const SamplerParams& s) -> int64_t { return s.top_k; },
                         [](SamplerParams& s, int64_t v) { s.top_k = static_cast<int32_t>(v); }}},
    {"--top-p", "top_p", "top-p; 1 = off", RealSamplerParam{0, 1, &SamplerParams::top_p}},
    {"--min-p", "min_p", "min-p; 0 = off", RealSamplerParam{0, 1, &SamplerParams::min_p}},
    {"--repeat-penalty", "repeat_penalty", "repeat penalty; 1 = off",
     RealSamplerParam{1e-6, 1e6, &SamplerParams::repeat_penalty}},
    {"--repeat-last-n", "repeat_last_n", "tokens of history the penalties look at",
     IntegerSamplerParam{0, 1 << 20, [](const SamplerParams& s) -> int64_t { return s.repeat_last_n; },
                         [](SamplerParams& s, int64_t v) { s.repeat_last_n = static_cast<int32_t>(v); }}},
    {"--presence-penalty", "presence_penalty", "presence penalty; 0 = off",
     RealSamplerParam{-2, 2, &SamplerParams::presence_penalty}},
    {"--frequency-penalty", "frequency_penalty", "frequency penalty; 0 = off",
     RealSamplerParam{-2, 2, &SamplerParams::frequency_penalty}},
    // Negative: a random seed (as llama.cpp's -1); others seed with their low 32 bits.
    {"-s,--seed", "seed", "random seed; negative = random",
     IntegerSamplerParam{std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                         [](const SamplerParams& s) -> int64_t {
                           return s.seed == kRandomSeed ? -1 : static_cast<int64_t>(s.seed);
                         },
                         [](SamplerParams& s, int64_t v) { s.seed = v < 0 ? kRandomSeed : static_cast<uint64_t>(v); }}},
}};

// The most tokens one run or request may ask to generate (lumen-run's -n,
// the API's max_tokens and max_completion_tokens).
inline constexpr int64_t kMaxTokensToPredict = kInt32Max;

// One entry of the candidate set the final draw picks from.
struct Candidate {
  int32_t id;
  float logit;  // after penalties and temperature
  float p;      // softmax over the candidates
};

class Sampler {
 public:
  // Throws std::invalid_argument for nonsensical parameters (negative
  // repeat_last_n, repeat_penalty <= 0, NaN values, a logit bias that
  // logit_bias_error rejects for any vocabulary; sample() rejects an id past
  // the end of its logits).
  explicit Sampler(const SamplerParams& params = {});

  // Picks the next token from one row of logits (index = token id). Does not
  // record it: call accept() with the token that is actually used. Throws
  // std::invalid_argument on empty logits. NaN logits count as -inf.
  int32_t sample(std::span<const float> logits);
  // Adds a token to the penalty history. llama-cli also accepts every prompt token.
  void accept(int32_t id);
  // Clears the history and restarts the random sequence from the seed.
  void reset();

  // The candidates sample() would draw from, best first (for tests and debugging).
  std::vector<Candidate> candidates(std::span<const float> logits) const;

  uint32_t seed() const { return seed_; }
  const SamplerParams& params() const { return params_; }

 private:
  // Fills work_ with the filtered candidates; returns the greedy pick when temp <= 0, else -1.
  int32_t filter(std::span<const float> logits, std::vector<Candidate>& work) const;

  SamplerParams params_;
  uint32_t seed_;
  std::mt19937 rng_;
  std::vector<int32_t> history_;  // ring buffer of the last repeat_last_n accepted tokens
  size_t history_next_ = 0;
  std::vector<Candidate> work_;
  std::vector<LogitBias> bias_;  // params_.logit_bias by id, one entry per id
};

// Where a stop string occurs in generated text, and how much of the text can
// be shown without possibly showing part of a stop string.
struct StopScan {
  static constexpr size_t npos = std::string_view::npos;
  size_t stop_at = npos;  // offset of the earliest complete stop string, or npos
  size_t safe = 0;        // bytes that can be streamed: up to stop_at, or up to a
                          // suffix that could still grow into a stop string
};
StopScan scan_stop_strings(std::string_view text, std::span<const std::string> stops);

// Streams generated text: holds back incomplete UTF-8 characters and any
// tail that may be the start of a stop string, and cuts the text at the
// first complete stop string (which is never shown).
class TextStreamer {
 public:
  explicit TextStreamer(std::vector<std::string> stops = {});
  // Adds the bytes of one token; returns the text that is now safe to print.
  // After a stop string completed, returns the text before it and then nothing.
  std::string push(std::string_view piece);
  bool stopped() const { return stopped_; }
  // End of generation without a stop string: returns everything still held.
  std::string finish();
  // All text accepted so far (up to the stop string when stopped).
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

}  // namespace lumen
