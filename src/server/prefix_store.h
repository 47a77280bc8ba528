// The prefix cache's RAM store (--cache-ram): KV prefixes saved from slots
// that were about to be reused for something else, keyed by the tokens they
// hold, bounded in bytes, least recently used out first. The scheduler
// saves into it and restores from it (scheduler.cpp); nothing here knows
// the layout of the bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace lumen::server {

class PrefixStore {
 public:
  struct Entry {
    std::vector<int32_t> tokens;  // what the KV bytes hold, position by position
    std::vector<uint8_t> kv;      // Session::save_prefix of those positions
    uint64_t last_use = 0;
  };
  struct Match {
    size_t entry = 0;
    int64_t length = 0;  // tokens shared with the prompt (at most the limit asked)
  };

  explicit PrefixStore(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The entry sharing the longest prefix with `tokens`, at most `limit` of
  // them; none when no entry shares a token.
  std::optional<Match> best(std::span<const int32_t> tokens, int64_t limit) const;
  // Removes an entry and hands it over (put() takes it back).
  Entry take(size_t entry);
  // Keeps `entry` (entries it extends go), evicting the least recently used
  // until it fits; an entry larger than the whole store is not kept.
  void put(Entry entry);
  // Whether a prefix of `bytes` would be kept at all.
  bool fits(uint64_t bytes) const { return bytes > 0 && bytes <= capacity_; }

  uint64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }

 private:
  uint64_t capacity_, bytes_ = 0, clock_ = 0;
  std::vector<Entry> entries_;
};

// Tokens a and b share from the start.
int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace lumen::server
