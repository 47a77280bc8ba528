// The drafting flags (see draft_flags.h).
#include "cli/draft_flags.h"

#include <fmt/format.h>

namespace lumen::cli {

void add_draft_flags(CLI::App& app, runtime::DraftParams& params) {
  app.add_option("--draft,--draft-max,--draft-n", params.n_max,
                 fmt::format("tokens drafted by prompt lookup and verified in one pass (at most {} per pass); 0 = off "
                             "(default {}). The output is the same either way",
                             runtime::kMaxDraftsPerPass, params.n_max))
      ->check(CLI::Range(int64_t{0}, runtime::kMaxDraftTokens));
  app.add_option("--draft-min,--draft-n-min", params.n_min,
                 fmt::format("a lookup that finds fewer tokens drafts nothing (default {})", params.n_min))
      ->check(CLI::Range(int64_t{0}, runtime::kMaxDraftTokens));
  app.add_option("--draft-ngram", params.ngram,
                 fmt::format("longest n-gram of the context matched for a draft, then shorter ones down to 1 (default {})",
                             params.ngram))
      ->check(CLI::Range(int64_t{1}, runtime::kMaxDraftNgram));
}

}  // namespace lumen::cli
