// Constrained decoding: a grammar (llama.cpp's GBNF dialect) compiled to
// rules over bytes, the vocabulary's token bytes in a trie, and a Matcher
// that keeps one sequence's position in the grammar and masks the logits so
// that only tokens that keep the text completable can be sampled.
//
// Everything works on bytes: a character class becomes the UTF-8 byte
// sequences of its code points, so a token that ends inside a character
// leaves the matcher inside that character's byte sequence. The matcher is a
// set of pushdown stacks (persistent lists, shared and interned), determinized
// lazily: each set of stacks is one state with a 256-entry transition row and
// a cached token mask. See docs/server.md, "Constrained output".
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/text/tokenizer.h"

namespace lumen::grammar {

// One line; for GBNF text "line:col: what".
struct GrammarError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The limits a grammar must stay within, stated once (docs/server.md cites them).
inline constexpr size_t kMaxGrammarBytes = 1 << 20;     // GBNF text
inline constexpr size_t kMaxRules = 1 << 16;            // rules, generated ones (groups, repetitions, classes) included
inline constexpr size_t kMaxElements = 1 << 21;         // elements of all alternatives
inline constexpr int kMaxNesting = 128;                 // nested parentheses
inline constexpr int64_t kMaxRepetition = 10000;        // m and n of {m,n}
// A state keeps at most this many stacks (an ambiguous grammar can make more);
// dropping some only forgoes continuations, every kept stack still completes.
inline constexpr size_t kMaxStacks = 1024;
// Likewise, one transition expands at most this many (position, stack) pairs,
// so a pathologically ambiguous grammar costs bounded time per byte.
inline constexpr size_t kMaxExpansion = 1 << 16;

class Matcher;

class Grammar {  // immutable, shared by every sequence that uses it
 public:
  // llama.cpp's GBNF dialect: rules `name ::= ...` (names of letters, digits, - and _),
  // alternatives |, groups ( ), "literals" and [classes] (ranges, ^) with the escapes
  // \n \t \r \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH (code points, not bytes), . (any
  // character), * + ? {m} {m,} {m,n}, comments #. Throws GrammarError: syntax, an
  // undefined or twice-defined rule, a missing root, a grammar that matches nothing (no
  // finite derivation from root), left recursion, or a limit above exceeded.
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::string_view root = "root");

  // One element of an alternative: a set of bytes, a rule reference, or the
  // end of the alternative.
  struct Element {
    enum class Kind : uint8_t { End, Bytes, Rule };
    Kind kind;
    uint32_t value;  // Bytes: index into byte_sets(); Rule: rule id
  };
  std::span<const Element> elements() const { return elements_; }
  // Element index where each alternative of rule r starts.
  std::span<const uint32_t> alternatives(uint32_t rule) const { return rules_[rule]; }
  const std::bitset<256>& byte_set(uint32_t index) const { return byte_sets_[index]; }
  uint32_t root() const { return root_; }
  size_t rule_count() const { return rules_.size(); }

  // Built by the parser (gbnf_parser.cpp) only.
  Grammar(std::vector<Element> elements, std::vector<std::vector<uint32_t>> rules,
          std::vector<std::bitset<256>> byte_sets, uint32_t root);

 private:
  std::vector<Element> elements_;
  std::vector<std::vector<uint32_t>> rules_;
  std::vector<std::bitset<256>> byte_sets_;
  uint32_t root_;
};

// response_format {"type": "json_object"}: any JSON object, the GBNF of
// llama.cpp's grammars/json.gbnf (whitespace bounded: at most one space, or a
// newline and 20 spaces or tabs, between tokens). Parsed once.
std::shared_ptr<const Grammar> json_object_grammar();
// Its text, for the docs and for grammars that embed JSON values.
std::string_view json_object_gbnf();

class TokenTrie {  // the vocabulary's token bytes (Tokenizer::token_text) in a trie, built once per tokenizer
 public:
  // Control, unknown and unused tokens (empty text) are never allowed; EOG ids are remembered.
  static std::shared_ptr<const TokenTrie> build(const Tokenizer& tokenizer);

  // A trie node in depth-first preorder: its last byte, its depth (bytes from
  // the root), the index just past its subtree, and where its tokens (those
  // whose whole text ends here) start in token_ids(); they end where the
  // next node's start.
  struct Node {
    uint32_t subtree_end;
    uint32_t tokens_begin;
    uint16_t depth;
    uint8_t byte;
  };
  std::span<const Node> nodes() const { return nodes_; }  // nodes()[0] is the root (the empty text)
  std::span<const int32_t> token_ids() const { return token_ids_; }
  size_t max_depth() const { return max_depth_; }
  int32_t n_vocab() const { return n_vocab_; }
  bool is_eog(int32_t id) const;
  std::span<const int32_t> eog_ids() const { return eog_ids_; }
  // The bytes of a token; empty for tokens that are never allowed.
  std::string_view bytes(int32_t id) const;

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  std::vector<int32_t> eog_ids_;
  std::vector<uint8_t> eog_;
  std::string text_;               // every token's bytes, concatenated
  std::vector<uint32_t> offsets_;  // token id -> its bytes in text_ (n_vocab + 1 entries)
  size_t max_depth_ = 0;
  int32_t n_vocab_ = 0;
};

class Matcher {  // one sequence's state
 public:
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab);
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  ~Matcher();

  // -inf for every token whose bytes cannot extend the text toward a match
  // (and for logits past the vocabulary); EOG tokens only when accepting().
  // Returns the number of tokens left allowed.
  size_t mask(std::span<float> logits);
  // Advance by a token's bytes; false (state unchanged) when not allowed. An
  // EOG token is allowed exactly when accepting() and leaves the state as it is.
  bool accept(int32_t token);
  bool accept_bytes(std::string_view bytes);
  // Whether accept_bytes(bytes) would succeed; the state does not change.
  bool allows_bytes(std::string_view bytes);
  bool accepting() const;     // the text so far is a complete match
  bool can_continue() const;  // some non-empty continuation exists

  // For tests and the bench: states determinized and masks computed so far.
  size_t states() const;
  size_t masks_computed() const;

 private:
  struct Engine;
  std::unique_ptr<Engine> engine_;
};

}  // namespace lumen::grammar
