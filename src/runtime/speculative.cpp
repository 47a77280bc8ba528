// Prompt-lookup drafting, its back-off, and the walk over a verify pass
// (speculative.h).
#include "lumen/runtime/speculative.h"

#include <algorithm>

namespace lumen::runtime {

std::vector<int32_t> prompt_lookup(std::span<const int32_t> history, int64_t ngram, int64_t n) {
  const auto size = static_cast<int64_t>(history.size());
  if (n <= 0) return {};
  for (int64_t m = std::min(ngram, size - 1); m >= 1; --m) {
    const auto tail = history.subspan(static_cast<size_t>(size - m));
    // Latest first: a start s whose m tokens equal the tail and that has a
    // token after them (s + m < size, so the tail itself never matches).
    for (int64_t s = size - m - 1; s >= 0; --s) {
      if (!std::equal(tail.begin(), tail.end(), history.begin() + s)) continue;
      // Copied as LZ77 copies an overlapping match: past the history's end
      // the draft continues from its own first tokens, so a loop of period p
      // drafts n tokens, not p.
      std::vector<int32_t> draft;
      for (int64_t i = s + m; static_cast<int64_t>(draft.size()) < n; ++i)
        draft.push_back(i < size ? history[static_cast<size_t>(i)] : draft[static_cast<size_t>(i - size)]);
      return draft;
    }
  }
  return {};
}

Drafter::Drafter(DraftParams params) : params_(params), length_(params.n_max) {}

std::vector<int32_t> Drafter::draft(std::span<const int32_t> history, int64_t limit) {
  const int64_t n = std::min({length_, limit, kMaxDraftsPerPass});
  if (params_.n_max <= 0 || n <= 0 || n < params_.n_min) return {};
  if (skip_ > 0) {
    --skip_;
    return {};
  }
  std::vector<int32_t> found = prompt_lookup(history, params_.ngram, n);
  if (static_cast<int64_t>(found.size()) < params_.n_min) found.clear();
  return found;
}

void Drafter::record(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  ++stats_.passes;
  stats_.drafted += drafted;
  stats_.accepted += accepted;
  if (accepted == 0) {
    backoff_ = std::min(kMaxBackoff, backoff_ == 0 ? 1 : 2 * backoff_);
    skip_ = backoff_;
  } else {
    backoff_ = 0;
  }
  length_ = accepted == drafted ? std::min(params_.n_max, length_ + 2) : std::max<int64_t>(1, length_ - 1);
}

int64_t accept_draft(std::span<const int32_t> draft, const std::function<int32_t(int64_t)>& emit) {
  const auto k = static_cast<int64_t>(draft.size());
  for (int64_t i = 0; i <= k; ++i) {
    const int32_t token = emit(i);
    if (token < 0 || i == k || token != draft[static_cast<size_t>(i)]) return i;
  }
  return k;
}

int64_t decode_step(Session& session, int slot, int32_t pending, std::span<const int32_t> history, Drafter& drafter,
                    int64_t limit, const std::function<int32_t(int64_t, std::span<const float>)>& emit) {
  const int64_t pos0 = session.position(slot);
  const int64_t room = session.n_ctx() - pos0 - 1;  // positions left after the pending token's
  const std::vector<int32_t> draft = drafter.draft(history, std::min(limit, room));
  std::vector<int32_t> tokens = {pending};
  tokens.insert(tokens.end(), draft.begin(), draft.end());
  const SeqTokens entry{slot, tokens, !draft.empty()};
  session.step(std::span<const SeqTokens>(&entry, 1));
  if (draft.empty()) {
    emit(pos0 + 1, session.step_logits(0));
    return 1;
  }
  int64_t sampled = 0;
  const int64_t accepted = accept_draft(draft, [&](int64_t i) {
    sampled = i + 1;
    return emit(pos0 + 1 + i, session.step_logits(0, i));
  });
  session.truncate(slot, pos0 + 1 + accepted);
  drafter.record(static_cast<int64_t>(draft.size()), accepted);
  return sampled;
}

}  // namespace lumen::runtime
