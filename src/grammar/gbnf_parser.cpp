// GBNF text -> RuleSet, as llama.cpp's grammar-parser.cpp reads it: a rule
// ends at a newline outside parentheses, `|` may be followed by one, groups,
// repetitions and character classes become generated rules. Recursion is
// bounded by kMaxNesting, so any input fails cleanly.
#include <algorithm>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

#include "rule_set.h"

namespace lumen::grammar {

namespace {

using Element = Grammar::Element;
using detail::RuleSet;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view root) : src_(text), root_name_(root) {
    if (src_.size() <= kMaxGrammarBytes)
      for (size_t i = 0; i < src_.size(); ++i)
        if (src_[i] == '\n') newlines_.push_back(i);
  }

  RuleSet parse() {
    if (src_.size() > kMaxGrammarBytes)
      fail_at(0, "the grammar has " + std::to_string(src_.size()) + " bytes; the limit is " +
                     std::to_string(kMaxGrammarBytes));
    skip_space(true);
    while (pos_ < src_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (size_t r = 0; r < out_.rules.size(); ++r)
      if (!defined_[r]) fail_at(first_use_[r], "undefined rule '" + out_.rules[r].name + "'");
    auto root = names_.find(std::string(root_name_));
    if (root == names_.end()) fail_at(0, "the grammar has no rule '" + std::string(root_name_) + "'");
    out_.root = root->second;
    return std::move(out_);
  }

 private:
  // 1-based line and column (in bytes) of an offset.
  std::pair<size_t, size_t> line_col(size_t at) const {
    const auto it = std::upper_bound(newlines_.begin(), newlines_.end(), at);
    const size_t line = static_cast<size_t>(it - newlines_.begin()) + 1;
    const size_t line_start = it == newlines_.begin() ? 0 : *(it - 1) + 1;
    return {line, at - line_start + 1};
  }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    const auto [line, col] = line_col(at);
    throw GrammarError(std::to_string(line) + ":" + std::to_string(col) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  bool at_end() const { return pos_ >= src_.size(); }
  char peek() const { return at_end() ? '\0' : src_[pos_]; }

  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = src_[pos_];
      if (c == '#') {
        while (!at_end() && src_[pos_] != '\n' && src_[pos_] != '\r') ++pos_;
      } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
        ++pos_;
      } else {
        return;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_word_char(src_[pos_])) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(src_.substr(start, pos_ - start));
  }

  uint32_t new_rule(std::string name, size_t at) {
    if (out_.rules.size() >= kMaxRules)
      fail_at(at, "the grammar needs more than " + std::to_string(kMaxRules) + " rules");
    out_.rules.push_back({std::move(name), 1, 1, {}});
    set_position(out_.rules.back(), at);
    defined_.push_back(true);
    first_use_.push_back(at);
    return static_cast<uint32_t>(out_.rules.size() - 1);
  }

  void set_position(RuleSet::Rule& rule, size_t at) const { std::tie(rule.line, rule.col) = line_col(at); }

  uint32_t named_rule(const std::string& name, size_t at) {
    auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const uint32_t id = new_rule(name, at);
    defined_[id] = false;
    names_.emplace(name, id);
    return id;
  }

  void count_elements(size_t n) {
    elements_ += n;
    if (elements_ > kMaxElements)
      fail("the grammar needs more than " + std::to_string(kMaxElements) + " elements");
  }

  void parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    const uint32_t id = named_rule(name, start);
    if (defined_[id] && !out_.rules[id].alternatives.empty())
      fail_at(start, "rule '" + name + "' is defined twice (first at " + std::to_string(out_.rules[id].line) + ":" +
                         std::to_string(out_.rules[id].col) + ")");
    defined_[id] = true;
    set_position(out_.rules[id], start);
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") fail("expected '::=' after the rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    current_name_ = name;
    auto alternatives = parse_alternatives(false, 0);
    out_.rules[id].alternatives = std::move(alternatives);
    if (peek() == '\r') ++pos_;
    if (peek() == '\n') {
      ++pos_;
    } else if (!at_end()) {
      fail(std::string("expected a newline or the end, found '") + peek() + "'");
    }
  }

  std::vector<std::vector<Element>> parse_alternatives(bool nested, int depth) {
    std::vector<std::vector<Element>> alternatives;
    alternatives.push_back(parse_sequence(nested, depth));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alternatives.push_back(parse_sequence(nested, depth));
    }
    return alternatives;
  }

  // One code point of a literal or class: an escape or a UTF-8 character.
  uint32_t parse_char() {
    if (at_end()) fail("unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(src_[pos_]);
    if (c == '\\') {
      ++pos_;
      if (at_end()) fail("unexpected end after '\\'");
      const char e = src_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': case '^': return static_cast<unsigned char>(e);
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: fail_at(pos_ - 2, std::string("unknown escape '\\") + e + "'");
      }
    }
    const size_t n = unicode::utf8_sequence_length(c);
    if (c >= 0x80 && (n == 1 || pos_ + n > src_.size())) fail("invalid UTF-8 in the grammar");
    uint32_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) {
      const auto b = static_cast<unsigned char>(src_[pos_ + k]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8 in the grammar");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += n;
    return cp;
  }

  uint32_t parse_hex(int digits) {
    const size_t start = pos_ - 2;
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d;
      if (h >= '0' && h <= '9') d = h - '0';
      else if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      else fail_at(start, "expected " + std::to_string(digits) + " hex digits after '\\" + src_[start + 1] + "'");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    if (v > kMaxCodePoint) fail_at(start, "code point above U+10FFFF");
    return v;
  }

  uint32_t byte_set_index(const std::bitset<256>& set) {
    const std::string key = set.to_string();
    auto it = set_ids_.find(key);
    if (it != set_ids_.end()) return it->second;
    out_.byte_sets.push_back(set);
    const auto id = static_cast<uint32_t>(out_.byte_sets.size() - 1);
    set_ids_.emplace(key, id);
    return id;
  }

  Element single_byte(uint8_t b) {
    std::bitset<256> set;
    set.set(b);
    return {Element::Kind::Bytes, byte_set_index(set)};
  }

  void append_literal_char(std::vector<Element>& seq, uint32_t cp) {
    std::string bytes;
    unicode::append_utf8(bytes, cp);
    count_elements(bytes.size());
    for (char b : bytes) seq.push_back(single_byte(static_cast<uint8_t>(b)));
  }

  // A set of code points (sorted, merged ranges without surrogates) as one
  // element: a byte set when it is ASCII only, else a rule of its UTF-8 sequences.
  Element class_element(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate, size_t at) {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (auto r : ranges) {
      if (!merged.empty() && r.first <= merged.back().second + 1)
        merged.back().second = std::max(merged.back().second, r.second);
      else
        merged.push_back(r);
    }
    if (negate) {
      std::vector<std::pair<uint32_t, uint32_t>> complement;
      uint32_t next = 0;
      for (auto r : merged) {
        if (r.first > next) complement.emplace_back(next, r.first - 1);
        next = r.second + 1;
      }
      if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
      merged = std::move(complement);
    }
    std::vector<std::pair<uint32_t, uint32_t>> valid;  // surrogates are not characters
    for (auto r : merged) {
      if (r.first < 0xD800 && r.second >= 0xD800) valid.emplace_back(r.first, 0xD7FF);
      else if (r.first < 0xD800 || r.first > 0xDFFF) valid.push_back(r);
      if (r.second > 0xDFFF && r.first <= 0xDFFF) valid.emplace_back(0xE000, r.second);
    }
    std::bitset<256> ascii;
    std::vector<std::vector<detail::ByteRange>> multi;
    for (auto r : valid) {
      for (uint32_t c = r.first; c <= std::min<uint32_t>(r.second, 0x7F); ++c) ascii.set(c);
      if (r.second >= 0x80)
        for (auto& s : detail::utf8_sequences(std::max<uint32_t>(r.first, 0x80), r.second)) multi.push_back(std::move(s));
    }
    count_elements(1);
    if (multi.empty()) return {Element::Kind::Bytes, byte_set_index(ascii)};
    std::string key;
    for (auto r : valid) key += std::to_string(r.first) + "-" + std::to_string(r.second) + ",";
    auto it = class_rules_.find(key);
    if (it != class_rules_.end()) return {Element::Kind::Rule, it->second};
    const uint32_t rule = new_rule(current_name_, at);
    auto& alternatives = out_.rules[rule].alternatives;
    if (ascii.any()) alternatives.push_back({{Element::Kind::Bytes, byte_set_index(ascii)}});
    for (const auto& seq : multi) {
      std::vector<Element> alt;
      for (auto br : seq) {
        std::bitset<256> set;
        for (uint32_t b = br.lo; b <= br.hi; ++b) set.set(b);
        alt.push_back({Element::Kind::Bytes, byte_set_index(set)});
      }
      count_elements(alt.size() + 1);
      alternatives.push_back(std::move(alt));
    }
    class_rules_.emplace(key, rule);
    return {Element::Kind::Rule, rule};
  }

  // The last symbol of seq (from `start`) repeated min..max times (max < 0: unbounded),
  // as llama.cpp rewrites it: S{m,n} = S ... S (S (S ...)?)?, S* = R with R ::= S R | .
  void repeat(std::vector<Element>& seq, size_t start, int64_t min, int64_t max, size_t at) {
    Element symbol;
    if (seq.size() - start == 1) {
      symbol = seq.back();
    } else {
      const uint32_t rule = new_rule(current_name_, at);
      out_.rules[rule].alternatives.push_back(std::vector<Element>(seq.begin() + static_cast<std::ptrdiff_t>(start), seq.end()));
      symbol = {Element::Kind::Rule, rule};
    }
    seq.resize(start);
    count_elements(static_cast<size_t>(min) + 2 * static_cast<size_t>(max < 0 ? 1 : max - min) + 2);
    for (int64_t i = 0; i < min; ++i) seq.push_back(symbol);
    if (max < 0) {
      const uint32_t rule = new_rule(current_name_, at);
      out_.rules[rule].alternatives = {{symbol, {Element::Kind::Rule, rule}}, {}};
      seq.push_back({Element::Kind::Rule, rule});
      return;
    }
    std::optional<uint32_t> inner;
    for (int64_t i = min; i < max; ++i) {
      const uint32_t rule = new_rule(current_name_, at);
      std::vector<Element> first{symbol};
      if (inner) first.push_back({Element::Kind::Rule, *inner});
      out_.rules[rule].alternatives = {std::move(first), {}};
      inner = rule;
    }
    if (inner) seq.push_back({Element::Kind::Rule, *inner});
  }

  int64_t parse_count() {
    const size_t start = pos_;
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepetition) fail_at(start, "repetition count above " + std::to_string(kMaxRepetition));
      ++pos_;
    }
    if (pos_ == start) fail("expected a number");
    return v;
  }

  std::vector<Element> parse_sequence(bool nested, int depth) {
    std::vector<Element> seq;
    size_t last = 0;  // where the last symbol starts in seq
    bool have_symbol = false;
    while (!at_end()) {
      const size_t at = pos_;
      const char c = src_[pos_];
      if (c == '"') {
        ++pos_;
        last = seq.size();
        while (!at_end() && src_[pos_] != '"') append_literal_char(seq, parse_char());
        if (at_end()) fail_at(at, "unterminated literal");
        ++pos_;
        if (seq.size() == last) {  // "" matches the empty text: a rule with one empty alternative
          const uint32_t rule = new_rule(current_name_, at);
          out_.rules[rule].alternatives.push_back({});
          seq.push_back({Element::Kind::Rule, rule});
        }
        have_symbol = true;
      } else if (c == '[') {
        ++pos_;
        const bool negate = peek() == '^';
        if (negate) ++pos_;
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (!at_end() && src_[pos_] != ']') {
          const size_t range_at = pos_;
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail_at(range_at, "character range ends before it starts");
          }
          ranges.emplace_back(lo, hi);
        }
        if (at_end()) fail_at(at, "unterminated character class");
        ++pos_;
        last = seq.size();
        seq.push_back(class_element(std::move(ranges), negate, at));
        have_symbol = true;
      } else if (c == '.') {
        ++pos_;
        last = seq.size();
        seq.push_back(class_element({}, true, at));
        have_symbol = true;
      } else if (is_word_char(c)) {
        const std::string name = parse_name();
        last = seq.size();
        count_elements(1);
        seq.push_back({Element::Kind::Rule, named_rule(name, at)});
        have_symbol = true;
      } else if (c == '(') {
        if (depth + 1 > kMaxNesting) fail("groups nested deeper than " + std::to_string(kMaxNesting));
        ++pos_;
        skip_space(true);
        auto alternatives = parse_alternatives(true, depth + 1);
        if (peek() != ')') fail("expected ')'");
        ++pos_;
        const uint32_t rule = new_rule(current_name_, at);
        out_.rules[rule].alternatives = std::move(alternatives);
        last = seq.size();
        count_elements(1);
        seq.push_back({Element::Kind::Rule, rule});
        have_symbol = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_symbol) fail(std::string("'") + c + "' without anything to repeat before it");
        ++pos_;
        int64_t min = 0, max = -1;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          skip_space(nested);
          min = parse_count();
          max = min;
          skip_space(nested);
          if (peek() == ',') {
            ++pos_;
            skip_space(nested);
            max = peek() == '}' ? -1 : parse_count();
            skip_space(nested);
          }
          if (peek() != '}') fail("expected '}'");
          ++pos_;
          if (max >= 0 && max < min) fail_at(at, "repetition {m,n} with n < m");
        }
        repeat(seq, last, min, max, at);
        have_symbol = seq.size() > last;  // x*? repeats x* (as llama.cpp does); x{0}* has nothing
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  std::string_view src_;
  std::string_view root_name_;
  size_t pos_ = 0;
  size_t elements_ = 0;
  std::string current_name_;
  RuleSet out_;
  std::vector<size_t> newlines_;  // offsets of '\n', for line_col
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  std::unordered_map<std::string, uint32_t> names_;
  std::unordered_map<std::string, uint32_t> set_ids_;
  std::map<std::string, uint32_t> class_rules_;
};

}  // namespace

std::shared_ptr<const Grammar> Grammar::parse(std::string_view gbnf, std::string_view root) {
  return detail::compile(Parser(gbnf, root).parse());
}

}  // namespace lumen::grammar
