// Speculative decoding by prompt lookup (no draft model): the tokens that
// followed the latest earlier occurrence of the context's last n-gram are
// drafted, the pending token and the drafts are evaluated in ONE pass, and
// the longest prefix the sampler itself produces is kept. Each verified row
// is computed with the decode step's arithmetic (batch invariance) and the
// sampler draws once per emitted token, so the output is bitwise the one
// without drafting. Used by lumen-run (decode_step) and lumen-server's
// scheduler (Drafter, accept_draft in its batched step).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "lumen/program/program.h"
#include "lumen/runtime/session.h"

namespace lumen::runtime {

// lumen-run's --draft/--draft-min/--draft-ngram and llama-server's request
// fields speculative.n_max and speculative.n_min.
struct DraftParams {
  int64_t n_max = 0;  // most tokens drafted per pass; 0: off
  int64_t n_min = 1;  // a lookup that finds fewer is not drafted
  int64_t ngram = 3;  // the longest n-gram matched; shorter ones down to 1 are tried after it
};

// The accepted ranges of DraftParams (both tools and the API check them).
inline constexpr int64_t kMaxDraftTokens = 64;
inline constexpr int64_t kMaxDraftNgram = 16;
// A verify pass holds the pending token and its drafts; more rows than the
// batch kernels take would run the prefill kernels, which cost more per row
// than a draft saves, so a pass drafts at most this many.
inline constexpr int64_t kMaxDraftsPerPass = program::KernelId::kBatchMaxTokens - 1;

// The n tokens that followed the latest earlier occurrence of history's
// last m tokens, for m = ngram down to 1 (the first m that occurs wins),
// continued past the history's end as the repetition it found (a loop of
// period p drafts n tokens, not p); empty when none occurs.
std::vector<int32_t> prompt_lookup(std::span<const int32_t> history, int64_t ngram, int64_t n);

struct DraftStats {
  int64_t passes = 0;    // verify passes (with at least one drafted token)
  int64_t drafted = 0;   // tokens drafted
  int64_t accepted = 0;  // of them, kept
};

// Drafting for one sequence, backing off when it stops paying: a pass that
// accepts nothing doubles the lookups skipped before the next draft (up to
// kMaxBackoff), one that accepts something resets it; the draft length grows
// by 2 after a fully accepted draft and shrinks by 1 after a partial one.
class Drafter {
 public:
  static constexpr int64_t kMaxBackoff = 32;

  explicit Drafter(DraftParams params = {});
  // A draft of at most min(limit, the current length) tokens to follow
  // `history` (which ends with the pending token); empty when drafting is
  // off, backing off, or the lookup finds fewer than n_min tokens.
  std::vector<int32_t> draft(std::span<const int32_t> history, int64_t limit);
  // What the verify pass of the last draft kept.
  void record(int64_t drafted, int64_t accepted);
  const DraftStats& stats() const { return stats_; }
  const DraftParams& params() const { return params_; }

 private:
  DraftParams params_;
  DraftStats stats_;
  int64_t length_;       // drafts asked of the next lookup
  int64_t backoff_ = 0;  // lookups skipped after the next miss (0: none yet)
  int64_t skip_ = 0;     // lookups still to skip
};

// Walks the rows of a verify pass of [pending, draft...]: emit(i) samples
// row i's logits exactly as a decode step would (mask, sampler, stop checks)
// and returns the token it emitted, or -1 when the sequence ended with it.
// The walk goes on while the emitted token is the draft at that row. Returns
// the drafts accepted: the KV cache's positions for the pending token and
// that many drafts are valid, the rest is to be rolled back (Session::truncate).
int64_t accept_draft(std::span<const int32_t> draft, const std::function<int32_t(int64_t)>& emit);

// One decode step of the sequence in `slot` (lumen-run's loop): drafts for
// `history` (ending with `pending`, the last emitted token, not yet
// evaluated), evaluates pending and the drafts in one pass and walks it with
// accept_draft, or, with no draft, evaluates pending alone. emit(position,
// logits) samples one row; `position` is the slot's position after as many
// plain decode steps (its checks against the context use it, not the
// slot's, which is past the drafts until the walk ends). After the call the
// slot holds exactly the tokens kept. `limit` bounds the drafts (tokens still
// to generate). Returns the rows sampled.
int64_t decode_step(Session& session, int slot, int32_t pending, std::span<const int32_t> history, Drafter& drafter,
                    int64_t limit, const std::function<int32_t(int64_t, std::span<const float>)>& emit);

}  // namespace lumen::runtime
