// llama.cpp's default sampler chain (src/llama-sampling.cpp) and stop-string
// streaming. The chain works on (id, logit) candidates: the logit biases and
// then the penalties change the logits of the tokens they name, top-k keeps the k best (one pass with a
// bounded heap, so the vocabulary is never sorted or copied), top-p and min-p
// cut the sorted list, and temperature scales what is left before the softmax
// and the random draw.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "lumen/runtime/sampler.h"
#include "lumen/text/tokenizer.h"

namespace lumen {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Finite logits are clamped into this range so softmax never sees inf - inf.
constexpr float kLogitLimit = 1e30f;

float sanitize(float logit) {
  if (std::isnan(logit) || logit == kNegInf) return kNegInf;
  return std::clamp(logit, -kLogitLimit, kLogitLimit);
}

// Descending logit; equal logits keep the lower id first.
bool better(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// llama_sampler_softmax_impl on an already sorted list: expf relative to the
// maximum, float sum, then normalise.
void softmax(std::vector<Candidate>& c) {
  const float max_logit = c.front().logit;
  if (!std::isfinite(max_logit)) {  // every logit is -inf: the first one takes all
    for (Candidate& x : c) x.p = 0.0f;
    c.front().p = 1.0f;
    return;
  }
  float sum = 0.0f;
  for (Candidate& x : c) {
    x.p = std::exp(x.logit - max_logit);
    sum += x.p;
  }
  for (Candidate& x : c) x.p /= sum;
}

}  // namespace

std::string logit_bias_error(std::span<const LogitBias> biases, int64_t n_vocab) {
  for (const LogitBias& b : biases) {
    if (b.id < 0 || b.id >= n_vocab)
      return "token id " + std::to_string(b.id) + " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")";
    if (b.bias == kNegInf) continue;
    if (!(std::fabs(b.bias) <= kMaxLogitBias))
      return "the bias of token " + std::to_string(b.id) + " must be in [-" + std::to_string(kMaxLogitBias) +
             ", " + std::to_string(kMaxLogitBias) + "] or -inf";
  }
  return {};
}

Sampler::Sampler(const SamplerParams& params) : params_(params) {
  const auto is_nan = [](float v) { return std::isnan(v); };
  if (is_nan(params.top_p) || is_nan(params.min_p) || is_nan(params.temp) || is_nan(params.repeat_penalty) ||
      is_nan(params.frequency_penalty) || is_nan(params.presence_penalty)) {
    throw std::invalid_argument("sampler: parameters must not be NaN");
  }
  if (params.repeat_last_n < 0) throw std::invalid_argument("sampler: repeat_last_n must be >= 0");
  if (params.repeat_penalty <= 0.0f) throw std::invalid_argument("sampler: repeat_penalty must be > 0");
  if (const std::string error = logit_bias_error(params.logit_bias, std::numeric_limits<int32_t>::max());
      !error.empty())
    throw std::invalid_argument("sampler: logit_bias: " + error);
  bias_ = params.logit_bias;
  std::stable_sort(bias_.begin(), bias_.end(), [](const LogitBias& a, const LogitBias& b) { return a.id < b.id; });
  // One entry per id, the biases added in the order given.
  std::vector<LogitBias> merged;
  for (const LogitBias& b : bias_) {
    if (!merged.empty() && merged.back().id == b.id) merged.back().bias += b.bias;
    else merged.push_back(b);
  }
  bias_ = std::move(merged);
  seed_ = params.seed == kRandomSeed ? std::random_device{}() : static_cast<uint32_t>(params.seed);
  rng_.seed(seed_);
  history_.reserve(static_cast<size_t>(params.repeat_last_n));
}

void Sampler::accept(int32_t id) {
  const auto capacity = static_cast<size_t>(params_.repeat_last_n);
  if (capacity == 0) return;
  if (history_.size() < capacity) {
    history_.push_back(id);
  } else {
    history_[history_next_] = id;
  }
  history_next_ = (history_next_ + 1) % capacity;
}

void Sampler::reset() {
  history_.clear();
  history_next_ = 0;
  rng_.seed(seed_);
}

int32_t Sampler::filter(std::span<const float> logits, std::vector<Candidate>& work) const {
  if (logits.empty()) throw std::invalid_argument("sampler: empty logits");
  const size_t n = logits.size();

  if (!bias_.empty() && static_cast<size_t>(bias_.back().id) >= n)
    throw std::invalid_argument("sampler: logit_bias: token id " + std::to_string(bias_.back().id) +
                                " is outside the vocabulary [0, " + std::to_string(n) + ")");
  // A token's logit after its bias (bias_ is sorted by id).
  const auto biased = [&](int32_t id) {
    float logit = sanitize(logits[id]);
    const auto it = std::lower_bound(bias_.begin(), bias_.end(), id,
                                     [](const LogitBias& b, int32_t x) { return b.id < x; });
    if (it != bias_.end() && it->id == id) logit = sanitize(logit + it->bias);
    return logit;
  };

  // Penalties: new logits for the recently seen tokens (at most repeat_last_n),
  // applied to their biased logits; then the biased tokens not seen recently.
  // `adjusted` holds every token whose logit differs from logits[id].
  std::vector<std::pair<int32_t, float>> adjusted;
  const bool penalties_on = params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                            params_.presence_penalty != 0.0f;
  if (penalties_on && !history_.empty()) {
    std::vector<std::pair<int32_t, int>> counts;
    for (int32_t id : history_) {
      if (id < 0 || static_cast<size_t>(id) >= n) continue;
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == id; });
      if (it == counts.end()) counts.emplace_back(id, 1);
      else ++it->second;
    }
    for (const auto& [id, count] : counts) {
      float logit = biased(id);
      // Dividing a negative logit would raise it, so those are multiplied.
      if (logit <= 0.0f) logit *= params_.repeat_penalty;
      else logit /= params_.repeat_penalty;
      logit -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
      adjusted.emplace_back(id, sanitize(logit));
    }
  }
  std::vector<uint8_t> is_adjusted;
  if (!adjusted.empty() || !bias_.empty()) {
    is_adjusted.assign(n, 0);
    for (const auto& [id, logit] : adjusted) is_adjusted[id] = 1;
    for (const LogitBias& b : bias_) {
      if (is_adjusted[b.id]) continue;
      is_adjusted[b.id] = 1;
      adjusted.emplace_back(b.id, biased(b.id));
    }
  }
  // Visits every (id, logit) after biases and penalties, without building a vocabulary-sized list.
  const auto for_each_candidate = [&](auto&& visit) {
    for (size_t i = 0; i < n; ++i) {
      if (!is_adjusted.empty() && is_adjusted[i]) continue;
      visit(Candidate{static_cast<int32_t>(i), sanitize(logits[i]), 0.0f});
    }
    for (const auto& [id, logit] : adjusted) visit(Candidate{id, logit, 0.0f});
  };

  if (params_.temp <= 0.0f) {
    // Greedy: the filters below never remove the best token.
    Candidate best{-1, kNegInf, 1.0f};
    for_each_candidate([&](const Candidate& c) {
      if (best.id < 0 || better(c, best)) best = c;
    });
    best.p = 1.0f;
    work.assign(1, best);
    return best.id;
  }

  // top-k: a bounded heap whose front is the worst kept candidate.
  const size_t k = params_.top_k <= 0 ? n : std::min(n, static_cast<size_t>(params_.top_k));
  work.clear();
  work.reserve(k);
  for_each_candidate([&](const Candidate& c) {
    if (work.size() < k) {
      work.push_back(c);
      std::push_heap(work.begin(), work.end(), better);
    } else if (better(c, work.front())) {
      std::pop_heap(work.begin(), work.end(), better);
      work.back() = c;
      std::push_heap(work.begin(), work.end(), better);
    }
  });
  std::sort(work.begin(), work.end(), better);

  // top-p: the shortest prefix whose probability reaches p.
  if (params_.top_p < 1.0f) {
    softmax(work);
    float cumulative = 0.0f;
    for (size_t i = 0; i < work.size(); ++i) {
      cumulative += work[i].p;
      if (cumulative >= params_.top_p) {
        work.resize(i + 1);
        break;
      }
    }
  }

  // min-p: logits within log(min_p) of the best.
  if (params_.min_p > 0.0f) {
    const float min_logit = work.front().logit + std::log(params_.min_p);
    size_t keep = 1;
    while (keep < work.size() && work[keep].logit >= min_logit) ++keep;
    work.resize(keep);
  }

  for (Candidate& c : work) c.logit = sanitize(c.logit / params_.temp);
  softmax(work);
  return -1;
}

std::vector<Candidate> Sampler::candidates(std::span<const float> logits) const {
  std::vector<Candidate> work;
  filter(logits, work);
  return work;
}

int32_t Sampler::sample(std::span<const float> logits) {
  const int32_t greedy = filter(logits, work_);
  if (greedy >= 0) return greedy;
  std::vector<float> probs(work_.size());
  for (size_t i = 0; i < work_.size(); ++i) probs[i] = work_[i].p;
  std::discrete_distribution<int> draw(probs.begin(), probs.end());
  return work_[static_cast<size_t>(draw(rng_))].id;
}

// ---------------------------------------------------------------------------
// Stop strings

StopScan scan_stop_strings(std::string_view text, std::span<const std::string> stops) {
  StopScan scan;
  scan.safe = text.size();
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    const size_t at = text.find(stop);
    if (at != std::string_view::npos && (scan.stop_at == StopScan::npos || at < scan.stop_at)) scan.stop_at = at;
  }
  if (scan.stop_at != StopScan::npos) {
    scan.safe = scan.stop_at;
    return scan;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  for (const std::string& stop : stops) {
    const size_t longest = std::min(stop.size() - (stop.empty() ? 0 : 1), text.size());
    for (size_t length = longest; length > 0; --length) {
      if (text.substr(text.size() - length) == std::string_view(stop).substr(0, length)) {
        scan.safe = std::min(scan.safe, text.size() - length);
        break;
      }
    }
  }
  return scan;
}

TextStreamer::TextStreamer(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string TextStreamer::push(std::string_view piece) {
  if (stopped_) return {};
  text_.append(piece);
  // A stop string cannot start before emitted_: everything that could have
  // begun one was held back.
  const StopScan scan = scan_stop_strings(std::string_view(text_).substr(emitted_), stops_);
  size_t safe = emitted_ + scan.safe;
  if (scan.stop_at != StopScan::npos) {
    stopped_ = true;
    text_.resize(emitted_ + scan.stop_at);
    safe = text_.size();
  } else {
    // Do not end inside a UTF-8 character (up to 3 bytes of it may be present).
    for (size_t back = 1; back <= 3 && back <= safe - emitted_; ++back) {
      const auto byte = static_cast<unsigned char>(text_[safe - back]);
      if ((byte & 0xC0) == 0x80) continue;
      if (unicode::utf8_sequence_length(byte) > back) safe -= back;
      break;
    }
  }
  std::string ready = text_.substr(emitted_, safe - emitted_);
  emitted_ = safe;
  return ready;
}

std::string TextStreamer::finish() {
  if (stopped_) return {};
  std::string rest = text_.substr(emitted_);
  emitted_ = text_.size();
  return rest;
}

}  // namespace lumen
