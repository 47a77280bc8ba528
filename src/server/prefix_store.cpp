// The prefix cache's RAM store (prefix_store.h).
#include "prefix_store.h"

#include <algorithm>

namespace lumen::server {

int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<int64_t>(ia - a.begin());
}

std::optional<PrefixStore::Match> PrefixStore::best(std::span<const int32_t> tokens, int64_t limit) const {
  std::optional<Match> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int64_t length = std::min(common_prefix(entries_[i].tokens, tokens), limit);
    if (length > 0 && (!out || length > out->length)) out = Match{i, length};
  }
  return out;
}

PrefixStore::Entry PrefixStore::take(size_t entry) {
  bytes_ -= entries_[entry].kv.size();
  Entry out = std::move(entries_[entry]);
  if (entry + 1 != entries_.size()) entries_[entry] = std::move(entries_.back());
  entries_.pop_back();
  return out;
}

void PrefixStore::put(Entry entry) {
  if (!fits(entry.kv.size())) return;
  // An entry that is a prefix of the new one says nothing the new one does not.
  for (size_t i = entries_.size(); i-- > 0;)
    if (common_prefix(entries_[i].tokens, entry.tokens) == static_cast<int64_t>(entries_[i].tokens.size())) take(i);
  while (bytes_ + entry.kv.size() > capacity_) {
    const auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                         [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    take(static_cast<size_t>(oldest - entries_.begin()));
  }
  entry.last_use = ++clock_;
  bytes_ += entry.kv.size();
  entries_.push_back(std::move(entry));
}

}  // namespace lumen::server
