// The parser's output before analysis: rules of alternatives of elements
// (no End markers), with where each rule was defined for error messages.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lumen/grammar/grammar.h"

namespace lumen::grammar::detail {

struct RuleSet {
  struct Rule {
    std::string name;     // generated rules: the name of the rule they were written in
    size_t line = 1, col = 1;  // where it was defined (generated: where its text starts)
    std::vector<std::vector<Grammar::Element>> alternatives;
  };
  std::vector<Rule> rules;
  std::vector<std::bitset<256>> byte_sets;
  uint32_t root = 0;
};

// Checks that root derives some finite text, drops the alternatives that
// cannot, refuses left recursion and lays the rules out for the Matcher.
// Throws GrammarError "line:col: what".
std::shared_ptr<const Grammar> compile(RuleSet rules);

// The UTF-8 encodings of the code points lo..hi (no surrogates inside), as
// sequences of byte ranges: every byte string in the product of one sequence's
// ranges encodes a code point of lo..hi, and each such encoding is in exactly one.
struct ByteRange {
  uint8_t lo, hi;
};
std::vector<std::vector<ByteRange>> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace lumen::grammar::detail
