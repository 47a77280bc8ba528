// The vocabulary's token bytes sorted, laid out as a trie in depth-first
// preorder: sorted order puts a token right before the tokens it prefixes,
// so each node's tokens are a contiguous run of token_ids().
#include <algorithm>
#include <numeric>

#include "lumen/grammar/grammar.h"

namespace lumen::grammar {

std::shared_ptr<const TokenTrie> TokenTrie::build(const Tokenizer& tokenizer) {
  auto trie = std::make_shared<TokenTrie>();
  TokenTrie& t = *trie;
  t.n_vocab_ = tokenizer.n_vocab();
  t.eog_.assign(static_cast<size_t>(t.n_vocab_), 0);
  t.eog_ids_ = tokenizer.eog_ids();
  for (int32_t id : t.eog_ids_)
    if (id >= 0 && id < t.n_vocab_) t.eog_[static_cast<size_t>(id)] = 1;
  t.offsets_.reserve(static_cast<size_t>(t.n_vocab_) + 1);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < t.n_vocab_; ++id) {
    t.offsets_.push_back(static_cast<uint32_t>(t.text_.size()));
    if (tokenizer.token_type(id) == TokenType::Control || t.eog_[static_cast<size_t>(id)]) continue;
    const std::string bytes = tokenizer.token_text(id);
    if (bytes.empty() || bytes.size() > UINT16_MAX) continue;
    t.text_ += bytes;
    ids.push_back(id);
  }
  t.offsets_.push_back(static_cast<uint32_t>(t.text_.size()));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string_view x = t.bytes(a), y = t.bytes(b);
    return x < y || (x == y && a < b);
  });

  t.nodes_.push_back({0, 0, 0, 0});
  std::vector<uint32_t> open{0};  // open nodes by depth
  std::string_view previous;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string_view text = t.bytes(ids[i]);
    size_t common = 0;
    while (common < previous.size() && common < text.size() && previous[common] == text[common]) ++common;
    // Close the nodes deeper than the shared prefix: their subtrees end here.
    while (open.size() > common + 1) {
      t.nodes_[open.back()].subtree_end = static_cast<uint32_t>(t.nodes_.size());
      open.pop_back();
    }
    for (size_t d = common; d < text.size(); ++d) {
      open.push_back(static_cast<uint32_t>(t.nodes_.size()));
      t.nodes_.push_back({0, static_cast<uint32_t>(i), static_cast<uint16_t>(d + 1), static_cast<uint8_t>(text[d])});
    }
    t.max_depth_ = std::max(t.max_depth_, text.size());
    previous = text;
  }
  while (!open.empty()) {
    t.nodes_[open.back()].subtree_end = static_cast<uint32_t>(t.nodes_.size());
    open.pop_back();
  }
  t.token_ids_ = std::move(ids);
  // A sentinel so that node i's tokens end at nodes_[i + 1].tokens_begin.
  t.nodes_.push_back({static_cast<uint32_t>(t.nodes_.size() + 1), static_cast<uint32_t>(t.token_ids_.size()), 0, 0});
  return trie;
}

bool TokenTrie::is_eog(int32_t id) const { return id >= 0 && id < n_vocab_ && eog_[static_cast<size_t>(id)] != 0; }

std::string_view TokenTrie::bytes(int32_t id) const {
  if (id < 0 || id >= n_vocab_) return {};
  const size_t at = offsets_[static_cast<size_t>(id)];
  return std::string_view(text_).substr(at, offsets_[static_cast<size_t>(id) + 1] - at);
}

}  // namespace lumen::grammar
