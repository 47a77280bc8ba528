// The matcher: a set of pushdown stacks over the grammar's elements,
// determinized lazily. A stack is a persistent list of interned nodes
// (element index, parent node): the top element is always a byte set, node 0
// is the empty stack (the text so far is a complete match). A state is an
// interned sorted set of stacks with a transition row over the 256 bytes,
// filled on first use, and a cached token mask: computing a mask walks the
// token trie in preorder, one transition per trie edge, skipping a subtree as
// soon as no stack survives. Caches are per matcher and bounded: past
// kMaxStates states or kMaxNodes nodes, everything but the current state is
// dropped at the next token boundary.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

#include "lumen/grammar/grammar.h"

namespace lumen::grammar {

namespace {

using Element = Grammar::Element;

constexpr size_t kMaxStates = 1 << 14;
constexpr size_t kMaxNodes = 1 << 20;
constexpr size_t kMaxMasks = 64;
constexpr int32_t kDead = 0;      // the state without stacks
constexpr int32_t kUnknown = -1;  // a transition not computed yet
constexpr uint32_t kEmpty = 0;    // the empty stack

struct VectorHash {
  size_t operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t x : v) h = (h ^ x) * 0x100000001b3ull;
    return static_cast<size_t>(h);
  }
};

// The (position, parent) pairs one expansion has visited: open addressing
// with a generation stamp, so clearing is O(1) and nothing is allocated per
// transition once the table has grown.
class VisitedSet {
 public:
  void clear() {
    if (++stamp_ == 0) {  // the stamps wrapped: really clear
      std::fill(stamps_.begin(), stamps_.end(), 0u);
      stamp_ = 1;
    }
    size_ = 0;
  }
  size_t size() const { return size_; }
  // false when already present
  bool insert(uint64_t key) {
    if (2 * (size_ + 1) > keys_.size()) grow();
    const size_t mask = keys_.size() - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
      if (stamps_[i] != stamp_) {
        stamps_[i] = stamp_;
        keys_[i] = key;
        ++size_;
        return true;
      }
      if (keys_[i] == key) return false;
    }
  }

 private:
  static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
  void grow() {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<uint32_t> old_stamps = std::move(stamps_);
    const uint32_t old_stamp = stamp_;
    keys_.assign(std::max<size_t>(64, old_keys.size() * 2), 0);
    stamps_.assign(keys_.size(), 0);
    stamp_ = 1;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_stamps[i] == old_stamp) insert(old_keys[i]);
  }
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> stamps_;
  uint32_t stamp_ = 1;
  size_t size_ = 0;
};

}  // namespace

struct Matcher::Engine {
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenTrie> vocab;

  // Stack nodes; node 0 is the empty stack.
  std::vector<uint32_t> node_pos, node_parent;
  std::unordered_map<uint64_t, uint32_t> node_ids;

  // States; state 0 is dead.
  std::vector<std::vector<uint32_t>> stacks;
  std::vector<int32_t> row;        // state -> its transition row in trans, or -1
  std::vector<int32_t> mask_slot;  // state -> its mask in masks, or -1
  std::vector<int32_t> trans;      // rows of 256 next states
  std::unordered_map<std::vector<uint32_t>, int32_t, VectorHash> state_ids;

  std::vector<std::vector<uint64_t>> masks;
  std::vector<int32_t> mask_owner;
  size_t next_mask = 0, masks_computed = 0;

  int32_t current = kDead;

  // Scratch of expand() and the mask walk.
  std::vector<std::pair<uint32_t, uint32_t>> work;
  VisitedSet seen;
  std::vector<uint32_t> out;
  std::vector<int32_t> at_depth;

  Engine(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> v)
      : grammar(std::move(g)), vocab(std::move(v)) {
    reset_tables();
    out.clear();
    seen.clear();
    for (uint32_t start : grammar->alternatives(grammar->root())) expand(start, kEmpty);
    current = intern_state();
    at_depth.assign(vocab->max_depth() + 1, kDead);
  }

  void reset_tables() {
    node_pos.assign(1, std::numeric_limits<uint32_t>::max());
    node_parent.assign(1, kEmpty);
    node_ids.clear();
    stacks.assign(1, {});
    row.assign(1, -1);
    mask_slot.assign(1, -1);
    trans.clear();
    state_ids.clear();
    state_ids.emplace(std::vector<uint32_t>{}, kDead);
    masks.clear();
    mask_owner.clear();
    next_mask = 0;
  }

  uint32_t intern_node(uint32_t pos, uint32_t parent) {
    const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
    if (auto it = node_ids.find(key); it != node_ids.end()) return it->second;
    const auto id = static_cast<uint32_t>(node_pos.size());
    node_ids.emplace(key, id);
    node_pos.push_back(pos);
    node_parent.push_back(parent);
    return id;
  }

  // Adds to `out` every stack that continues at element `pos` over `parent`,
  // with rule references at the top expanded into their alternatives and
  // finished alternatives popped. Terminates: the grammar has no left
  // recursion (and kMaxExpansion bounds the work).
  void expand(uint32_t pos, uint32_t parent) {
    const std::span<const Element> el = grammar->elements();
    work.emplace_back(pos, parent);
    while (!work.empty() && seen.size() < kMaxExpansion) {
      auto [p, below] = work.back();
      work.pop_back();
      if (!seen.insert((static_cast<uint64_t>(p) << 32) | below)) continue;
      const Element& e = el[p];
      if (e.kind == Element::Kind::End) {
        if (below == kEmpty)
          out.push_back(kEmpty);
        else
          work.emplace_back(node_pos[below], node_parent[below]);
      } else if (e.kind == Element::Kind::Bytes) {
        out.push_back(intern_node(p, below));
      } else {
        // The continuation after the reference; none when it ends the
        // alternative, so right recursion does not grow the stack.
        const uint32_t next = el[p + 1].kind == Element::Kind::End ? below : intern_node(p + 1, below);
        for (uint32_t start : grammar->alternatives(e.value)) work.emplace_back(start, next);
      }
    }
    work.clear();  // what the bound cut off
  }

  int32_t intern_state() {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.size() > kMaxStacks) out.resize(kMaxStacks);
    auto it = state_ids.find(out);
    if (it != state_ids.end()) return it->second;
    const auto id = static_cast<int32_t>(stacks.size());
    stacks.push_back(out);
    row.push_back(-1);
    mask_slot.push_back(-1);
    state_ids.emplace(out, id);
    return id;
  }

  int32_t step(int32_t s, uint8_t b) {
    if (row[static_cast<size_t>(s)] >= 0) {
      const int32_t t = trans[static_cast<size_t>(row[static_cast<size_t>(s)]) * 256 + b];
      if (t != kUnknown) return t;
    } else {
      row[static_cast<size_t>(s)] = static_cast<int32_t>(trans.size() / 256);
      trans.resize(trans.size() + 256, kUnknown);
    }
    out.clear();
    seen.clear();
    const std::span<const Element> el = grammar->elements();
    for (uint32_t node : stacks[static_cast<size_t>(s)]) {
      if (node == kEmpty) continue;
      const uint32_t p = node_pos[node];
      if (grammar->byte_set(el[p].value).test(b)) expand(p + 1, node_parent[node]);
    }
    const int32_t t = intern_state();
    trans[static_cast<size_t>(row[static_cast<size_t>(s)]) * 256 + b] = t;
    return t;
  }

  bool accepting(int32_t s) const {
    const auto& st = stacks[static_cast<size_t>(s)];
    return !st.empty() && st.front() == kEmpty;
  }

  const std::vector<uint64_t>& mask_of(int32_t s) {
    if (mask_slot[static_cast<size_t>(s)] >= 0) return masks[static_cast<size_t>(mask_slot[static_cast<size_t>(s)])];
    size_t slot;
    if (masks.size() < kMaxMasks) {
      slot = masks.size();
      masks.emplace_back();
      mask_owner.push_back(s);
    } else {
      slot = next_mask;
      next_mask = (next_mask + 1) % kMaxMasks;
      mask_slot[static_cast<size_t>(mask_owner[slot])] = -1;
      mask_owner[slot] = s;
    }
    std::vector<uint64_t>& bits = masks[slot];
    bits.assign((static_cast<size_t>(vocab->n_vocab()) + 63) / 64, 0);
    const std::span<const TokenTrie::Node> nodes = vocab->nodes();
    const std::span<const int32_t> ids = vocab->token_ids();
    const size_t n = nodes.size() - 1;  // the last node is a sentinel
    at_depth[0] = s;
    for (size_t i = 1; i < n;) {
      const TokenTrie::Node& node = nodes[i];
      const int32_t t = step(at_depth[node.depth - 1u], node.byte);
      if (t == kDead) {
        i = node.subtree_end;
        continue;
      }
      at_depth[node.depth] = t;
      for (uint32_t k = node.tokens_begin; k < nodes[i + 1].tokens_begin; ++k) {
        const auto id = static_cast<uint32_t>(ids[k]);
        bits[id / 64] |= uint64_t{1} << (id % 64);
      }
      ++i;
    }
    if (accepting(s))
      for (int32_t id : vocab->eog_ids())
        if (id >= 0 && id < vocab->n_vocab())
          bits[static_cast<size_t>(id) / 64] |= uint64_t{1} << (static_cast<size_t>(id) % 64);
    mask_slot[static_cast<size_t>(s)] = static_cast<int32_t>(slot);
    ++masks_computed;
    return bits;
  }

  // Drops every cache but the current state's stacks (copied into fresh tables).
  void compact() {
    std::vector<uint32_t> old_pos = std::move(node_pos), old_parent = std::move(node_parent);
    const std::vector<uint32_t> keep = stacks[static_cast<size_t>(current)];
    reset_tables();
    std::unordered_map<uint32_t, uint32_t> moved{{kEmpty, kEmpty}};
    out.clear();
    for (uint32_t top : keep) {
      std::vector<uint32_t> chain;  // top first, down to the first node already moved
      for (uint32_t n = top; !moved.count(n); n = old_parent[n]) chain.push_back(n);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it)
        moved[*it] = intern_node(old_pos[*it], moved.at(old_parent[*it]));
      out.push_back(moved.at(top));
    }
    current = intern_state();
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab)
    : engine_(std::make_unique<Engine>(std::move(grammar), std::move(vocab))) {}
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::~Matcher() = default;

size_t Matcher::mask(std::span<float> logits) {
  const std::vector<uint64_t>& bits = engine_->mask_of(engine_->current);
  const size_t n_vocab = static_cast<size_t>(engine_->vocab->n_vocab());
  const size_t covered = std::min(logits.size(), n_vocab);
  size_t allowed = 0;
  // A word at a time: whole words of allowed tokens (a string's contents) are left alone.
  for (size_t w = 0; w * 64 < covered; ++w) {
    const size_t begin = w * 64, end = std::min(begin + 64, covered);
    const uint64_t word = bits[w];
    if (word == ~uint64_t{0} && end - begin == 64) {
      allowed += 64;
      continue;
    }
    for (size_t i = begin; i < end; ++i) {
      if ((word >> (i - begin)) & 1)
        ++allowed;
      else
        logits[i] = -std::numeric_limits<float>::infinity();
    }
  }
  for (size_t i = covered; i < logits.size(); ++i) logits[i] = -std::numeric_limits<float>::infinity();
  return allowed;
}

bool Matcher::accept(int32_t token) {
  if (engine_->vocab->is_eog(token)) return accepting();
  const std::string_view bytes = engine_->vocab->bytes(token);
  return !bytes.empty() && accept_bytes(bytes);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  Engine& e = *engine_;
  int32_t s = e.current;
  for (char c : bytes) {
    s = e.step(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  e.current = s;
  if (e.stacks.size() > kMaxStates || e.node_pos.size() > kMaxNodes) e.compact();
  return true;
}

bool Matcher::allows_bytes(std::string_view bytes) {
  int32_t s = engine_->current;
  for (char c : bytes) {
    s = engine_->step(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  return true;
}

bool Matcher::accepting() const { return engine_->accepting(engine_->current); }

bool Matcher::can_continue() const {
  return engine_->stacks[static_cast<size_t>(engine_->current)].size() > (accepting() ? 1u : 0u);
}

size_t Matcher::states() const { return engine_->stacks.size(); }
size_t Matcher::masks_computed() const { return engine_->masks_computed; }

}  // namespace lumen::grammar
