// JSON Schema -> GBNF (see json_schema.h). One pass over the schema: every
// value rule ends with the bounded whitespace `ws`, so whitespace never sits
// next to whitespace (no ambiguous splits for the matcher); $ref targets
// become one rule each, which makes recursive schemas finite.
#include "lumen/grammar/json_schema.h"

#include "lumen/grammar/grammar.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace lumen::grammar {

namespace {

using json = nlohmann::ordered_json;
using Limits = JsonSchemaLimits;

[[noreturn]] void fail(const std::string& what, const std::string& at) {
  throw SchemaError(what + " at " + (at.empty() ? "/" : at));
}

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// A GBNF literal for raw bytes: quotes and backslashes escaped, control
// bytes as \xHH, everything else (UTF-8 included) as is.
std::string literal(std::string_view bytes) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// One code point inside a GBNF [class]: letters and digits as is, the rest
// as \xHH / \uHHHH / \UHHHHHHHH, so no character is special there.
std::string class_char(uint32_t cp) {
  char buf[16];
  if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return std::string(1, static_cast<char>(cp));
  if (cp < 0x80) std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(cp));
  else if (cp < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
  else std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(cp));
  return buf;
}

// `item` repeated lo..hi times (hi < 0: unbounded), as GBNF.
std::string repeat(const std::string& item, int64_t lo, int64_t hi) {
  if (lo == 0 && hi == 0) return "";
  if (lo == 1 && hi == 1) return item;
  const std::string group = "(" + item + ")";
  if (hi < 0) return lo == 0 ? group + "*" : lo == 1 ? group + "+" : group + "{" + std::to_string(lo) + ",}";
  if (lo == 0 && hi == 1) return group + "?";
  if (lo == hi) return group + "{" + std::to_string(lo) + "}";
  return group + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

// Keywords that constrain nothing.
const std::set<std::string> kAnnotations = {"description", "title", "default", "examples", "$schema",
                                            "$id",         "$comment", "$defs", "definitions"};
const std::set<std::string> kKeywords = {
    "type",      "properties", "required",  "additionalProperties", "enum",      "const",
    "items",     "prefixItems", "minItems", "maxItems",             "$ref",      "anyOf",
    "oneOf",     "allOf",      "minLength", "maxLength",            "format",    "pattern",
    "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string> kTypes = {"string", "number", "integer", "boolean", "null", "object", "array"};

std::string utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// The code points of UTF-8 text (nlohmann has checked it already).
std::vector<uint32_t> code_points(std::string_view s, const std::string& at) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) fail("invalid UTF-8", at);
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

// A character as it is written inside a JSON string.
std::string json_encoded(uint32_t cp) {
  if (cp == '"') return "\\\"";
  if (cp == '\\') return "\\\\";
  if (cp == '\n') return "\\n";
  if (cp == '\t') return "\\t";
  if (cp == '\r') return "\\r";
  if (cp == '\f') return "\\f";
  if (cp == '\b') return "\\b";
  if (cp < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
    return buf;
  }
  return utf8(cp);
}

// Characters JSON (or our grammars) write escaped, never raw.
bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\' || cp == 0x7F; }

// ------------------------------------------------------------ patterns

// A regular expression of the subset (literals, escapes \d \w \s \D \W \S
// and of punctuation, classes, groups, |, quantifiers; anchored ^...$) as
// GBNF for the content of a JSON string. Characters JSON escapes appear in
// their escaped form; negated classes and '.' never produce them.
class PatternTranslator {
 public:
  PatternTranslator(const std::string& pattern, std::string at) : at_(std::move(at)) {
    cps_ = code_points(pattern, at_);
  }

  std::string run() {
    if (cps_.size() < 2 || cps_.front() != '^' || cps_.back() != '$' ||
        (cps_.size() >= 3 && cps_[cps_.size() - 2] == '\\'))
      bad("must start with '^' and end with '$'");
    pos_ = 1;
    end_ = cps_.size() - 1;
    std::string out = alternatives(0);
    if (pos_ != end_) bad("unbalanced ')'");
    return out;
  }

 private:
  using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

  [[noreturn]] void bad(const std::string& what) const {
    fail("'pattern' " + what + (pos_ ? " (at character " + std::to_string(pos_) + ")" : ""), at_);
  }
  bool more() const { return pos_ < end_; }
  uint32_t peek() const { return cps_[pos_]; }

  // Empty string: matches only the empty text.
  std::string alternatives(int depth) {
    if (depth > Limits::kMaxDepth) bad("nests too deep");
    std::vector<std::string> alts;
    bool empty_branch = false;
    for (;;) {
      std::string s = sequence(depth);
      if (s.empty()) empty_branch = true;
      else alts.push_back(s);
      if (more() && peek() == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    if (alts.empty()) return "";
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + (empty_branch ? " )?" : " )");
  }

  std::string sequence(int depth) {
    std::string out;
    while (more() && peek() != '|' && peek() != ')') {
      std::string a = atom(depth);
      a = quantified(a);
      if (!a.empty()) out += (out.empty() ? "" : " ") + a;
    }
    return out;
  }

  std::string quantified(const std::string& a) {
    if (!more()) return a;
    int64_t lo = 0, hi = -1;
    const uint32_t c = peek();
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      lo = 1, ++pos_;
    } else if (c == '?') {
      hi = 1, ++pos_;
    } else if (c == '{') {
      ++pos_;
      lo = number();
      hi = lo;
      if (more() && peek() == ',') {
        ++pos_;
        hi = more() && peek() == '}' ? -1 : number();
      }
      if (!more() || peek() != '}') bad("has a malformed '{m,n}'");
      ++pos_;
      if (hi >= 0 && hi < lo) bad("has '{m,n}' with n < m");
    } else {
      return a;
    }
    if (more() && peek() == '?') ++pos_;  // lazy: the same language
    if (more() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) bad("repeats a repetition");
    if (lo > Limits::kMaxRepeat) bad("repeats more than " + std::to_string(Limits::kMaxRepeat) + " times");
    if (hi > Limits::kMaxRepeat) hi = Limits::kMaxRepeat;  // fewer repetitions still match
    if (a.empty()) return "";
    return repeat(a, lo, hi);
  }

  int64_t number() {
    int64_t v = 0;
    const size_t start = pos_;
    while (more() && peek() >= '0' && peek() <= '9' && pos_ - start < 9) v = v * 10 + (cps_[pos_++] - '0');
    if (pos_ == start) bad("has a malformed '{m,n}'");
    return v;
  }

  std::string atom(int depth) {
    const uint32_t c = cps_[pos_++];
    switch (c) {
      case '(': {
        if (more() && peek() == '?') {
          if (pos_ + 1 < end_ && cps_[pos_ + 1] == ':') pos_ += 2;
          else bad("uses an unsupported group '(?'");
        }
        std::string inner = alternatives(depth + 1);
        if (!more() || peek() != ')') bad("has an unclosed '('");
        ++pos_;
        return inner.empty() ? "" : "(" + inner + ")";
      }
      case '[': return char_class();
      case '.': return "[^\"\\\\\\x00-\\x1F\\x7F]";
      case '\\': {
        if (!more()) bad("ends with '\\'");
        const uint32_t e = cps_[pos_++];
        Ranges r;
        bool negated = false;
        if (class_escape(e, r, negated)) return emit(r, negated);
        return literal(json_encoded(escaped_char(e)));
      }
      case '*':
      case '+':
      case '?':
      case '{': bad("has nothing to repeat");
      case '^':
      case '$': bad("uses '^' or '$' inside");
      default: return literal(json_encoded(c));
    }
  }

  // \d \w \s and negations: their ranges. False for other escapes.
  bool class_escape(uint32_t e, Ranges& r, bool& negated) {
    switch (e) {
      case 'D': negated = true; [[fallthrough]];
      case 'd': r.push_back({'0', '9'}); return true;
      case 'W': negated = true; [[fallthrough]];
      case 'w': r.insert(r.end(), {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); return true;
      case 'S': negated = true; [[fallthrough]];
      case 's': r.insert(r.end(), {{'\t', '\r'}, {' ', ' '}}); return true;
      default: return false;
    }
  }

  // A single escaped character: \n \t \r \f \v or escaped punctuation.
  uint32_t escaped_char(uint32_t e) {
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      default: break;
    }
    if (e < 0x80 && !std::isalnum(static_cast<int>(e))) return e;
    bad("uses an unsupported escape '\\" + utf8(e) + "'");
  }

  std::string char_class() {
    bool negated = false;
    if (more() && peek() == '^') negated = true, ++pos_;
    Ranges r;
    bool first = true;
    while (more() && (peek() != ']' || first)) {
      first = false;
      uint32_t lo = cps_[pos_++];
      if (lo == '\\') {
        if (!more()) bad("ends inside a class");
        const uint32_t e = cps_[pos_++];
        bool neg = false;
        if (class_escape(e, r, neg)) {
          if (neg) bad("uses \\D, \\W or \\S inside a class");
          continue;
        }
        lo = escaped_char(e);
      }
      uint32_t hi = lo;
      if (pos_ + 1 < end_ && peek() == '-' && cps_[pos_ + 1] != ']') {
        ++pos_;
        hi = cps_[pos_++];
        if (hi == '\\') {
          if (!more()) bad("ends inside a class");
          hi = escaped_char(cps_[pos_++]);
        }
        if (hi < lo) bad("has a class range out of order");
      }
      r.push_back({lo, hi});
    }
    if (!more()) bad("has an unclosed '['");
    ++pos_;
    return emit(r, negated);
  }

  // A class as GBNF: raw characters in [ ], the ones JSON escapes as their
  // escaped literals (positive classes only).
  std::string emit(const Ranges& ranges, bool negated) {
    std::string body;
    std::vector<std::string> escaped;
    for (auto [lo, hi] : ranges) {
      for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x7F); ++c)
        if (needs_escape(c) && !negated) escaped.push_back(literal(json_encoded(c)));
      // the raw parts: the range minus the escaped characters
      uint32_t from = lo;
      while (from <= hi) {
        while (from <= hi && needs_escape(from)) ++from;
        if (from > hi) break;
        uint32_t to = from;
        while (to < hi && !needs_escape(to + 1)) ++to;
        body += class_char(from);
        if (to > from) body += '-', body += class_char(to);
        from = to + 1;
      }
    }
    if (negated) return "[^" + body + "\"\\\\\\x00-\\x1F\\x7F]";
    std::vector<std::string> alts;
    if (!body.empty()) alts.push_back("[" + body + "]");
    alts.insert(alts.end(), escaped.begin(), escaped.end());
    if (alts.empty()) bad("has an empty class");
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " )";
  }

  std::string at_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0, end_ = 0;
};

// ------------------------------------------------------------ integer ranges

std::string digit_class(int lo, int hi) {
  if (lo == hi) return std::string("[") + static_cast<char>('0' + lo) + "]";
  return std::string("[") + static_cast<char>('0' + lo) + "-" + static_cast<char>('0' + hi) + "]";
}

// Digit strings of equal length n with lo <= s <= hi (lo, hi of length n).
std::string same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo == hi) return literal(lo);
  if (lo[0] == hi[0]) {
    const std::string rest = same_length_range(lo.substr(1), hi.substr(1));
    return literal(lo.substr(0, 1)) + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = lo.size() - 1;
  const bool lo_all_zero = lo.find_first_not_of('0', 1) == std::string::npos;
  const bool hi_all_nine = hi.find_first_not_of('9', 1) == std::string::npos;
  int first = lo[0] - '0', last = hi[0] - '0';
  std::vector<std::string> alts;
  auto tail_any = [&](const std::string& head) { return n == 0 ? head : head + " " + repeat("[0-9]", n, n); };
  if (!lo_all_zero) {
    const std::string rest = same_length_range(lo.substr(1), std::string(n, '9'));
    alts.push_back(literal(lo.substr(0, 1)) + " " + rest);
    ++first;
  }
  const int mid_last = hi_all_nine ? last : last - 1;
  if (first <= mid_last) alts.push_back(tail_any(digit_class(first, mid_last)));
  if (!hi_all_nine) {
    const std::string rest = same_length_range(std::string(n, '0'), hi.substr(1));
    alts.push_back(literal(hi.substr(0, 1)) + " " + rest);
  }
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// The longest integer the grammars write, in digits (beyond: double rounding).
constexpr int kMaxDigits = 16;

// Non-negative integers (no leading zeros) in [lo, hi]; hi nullopt: unbounded
// (up to kMaxDigits digits).
std::string nonneg_range(uint64_t lo, std::optional<uint64_t> hi) {
  const std::string a = std::to_string(lo);
  const size_t max_len = hi ? std::to_string(*hi).size() : kMaxDigits;
  std::vector<std::string> alts;
  for (size_t len = a.size(); len <= max_len; ++len) {
    std::string from = a;
    if (len > a.size()) {
      from.assign(len, '0');
      from[0] = '1';
    }
    if (!hi && len > a.size()) {  // every longer length at once
      alts.push_back("[1-9] " + repeat("[0-9]", static_cast<int64_t>(len - 1), static_cast<int64_t>(max_len - 1)));
      break;
    }
    const std::string to = hi && len == max_len ? std::to_string(*hi) : std::string(len, '9');
    alts.push_back(same_length_range(from, to));
  }
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// Integers in [lo, hi] (either unbounded), as GBNF; lo <= hi.
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // negatives: "-" and a magnitude in [max(1, -hi), -lo]
    const uint64_t from = hi && *hi < 0 ? static_cast<uint64_t>(-*hi) : 1;
    std::optional<uint64_t> to;
    if (lo) to = static_cast<uint64_t>(-*lo);
    alts.push_back("\"-\" " + nonneg_range(from, to));
  }
  if (!hi || *hi >= 0) {
    std::optional<uint64_t> to;
    if (hi) to = static_cast<uint64_t>(*hi);
    alts.push_back(nonneg_range(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0, to));
  }
  if (alts.size() == 1) return alts[0];
  return "(" + alts[0] + " | " + alts[1] + ")";
}

// ------------------------------------------------------------ the converter

class Converter {
 public:
  Converter(const json& root, std::string prefix) : root_(root), prefix_(std::move(prefix)) {}

  std::string run() {
    const std::string root_name = prefix_ + "root";
    names_.insert(root_name);
    std::string body = visit(root_, "", 0);
    define(root_name, std::move(body));
    std::rotate(rules_.begin(), rules_.end() - 1, rules_.end());  // the start rule first
    std::string out;
    for (const auto& [name, rule] : rules_) out += name + " ::= " + rule + "\n";
    return out;
  }

 private:
  // ---- rules

  std::string fresh_name(const std::string& hint) {
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty() || base.size() > 40) base = base.empty() ? "r" : base.substr(0, 40);
    std::string name = prefix_ + base;
    for (int& n = suffixes_[base]; names_.count(name); ) name = prefix_ + base + "-" + std::to_string(++n);
    names_.insert(name);
    return name;
  }

  void define(const std::string& name, std::string body) {
    bytes_ += name.size() + body.size() + 6;
    if (bytes_ > kMaxGrammarBytes)
      throw SchemaError("the schema's grammar exceeds " + std::to_string(kMaxGrammarBytes) + " bytes");
    rules_.emplace_back(name, std::move(body));
  }

  std::string rule(const std::string& hint, std::string body) {
    const std::string name = fresh_name(hint);
    define(name, std::move(body));
    return name;
  }

  // Shared rules, defined once on first use.
  std::string primitive(const std::string& name) {
    auto it = primitives_.find(name);
    if (it != primitives_.end()) return it->second;
    std::string body;
    if (name == "ws") body = "( \" \" | \"\\n\" [ \\x09]{0,20} )?";
    else if (name == "key-char") body = "[^\"\\\\\\x00-\\x1F\\x7F]";  // no escapes: a key reads as written
    else if (name == "char")  // \u escapes of surrogates left out: a lone one is not valid JSON
      body = "[^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | "
             "[dD] [0-7] [0-9a-fA-F]{2} ) )";
    else if (name == "string") body = "\"\\\"\" " + primitive("char") + "* \"\\\"\" " + primitive("ws");
    else if (name == "boolean") body = "( \"true\" | \"false\" ) " + primitive("ws");
    else if (name == "null") body = "\"null\" " + primitive("ws");
    else if (name == "integer") body = "\"-\"? " + integer_range(0, std::nullopt) + " " + primitive("ws");
    else if (name == "number")
      body = "\"-\"? " + integer_range(0, std::nullopt) + " ( \".\" [0-9]{1," + std::to_string(kMaxDigits) +
             "} )? ( [eE] [-+]? [0-9]{1,2} )? " + primitive("ws");
    else if (name == "value")
      body = primitive("object") + " | " + primitive("array") + " | " + primitive("string") + " | " +
             primitive("number") + " | " + primitive("boolean") + " | " + primitive("null");
    const std::string rule_name = fresh_name(name);
    primitives_[name] = rule_name;
    if (name == "object") {  // recursive with value: the name exists before the body
      const std::string kv = primitive("string") + " \":\" " + primitive("ws") + " " + primitive("value");
      body = "\"{\" " + primitive("ws") + " ( " + kv + " ( \",\" " + primitive("ws") + " " + kv + " )* )? \"}\" " +
             primitive("ws");
    } else if (name == "array") {
      const std::string v = primitive("value");
      body = "\"[\" " + primitive("ws") + " ( " + v + " ( \",\" " + primitive("ws") + " " + v + " )* )? \"]\" " +
             primitive("ws");
    }
    define(rule_name, body);
    return rule_name;
  }

  std::string ws() { return primitive("ws"); }

  // ---- schemas

  std::string visit(const json& s, const std::string& at, int depth) {
    if (depth > Limits::kMaxDepth)
      fail("the schema nests deeper than " + std::to_string(Limits::kMaxDepth) + " levels", at);
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail("schema 'false' matches nothing", at);
      return primitive("value");
    }
    if (!s.is_object()) fail("a schema must be an object or a boolean", at);
    for (const auto& [key, v] : s.items()) {
      if (!kKeywords.count(key) && !kAnnotations.count(key)) fail("unsupported keyword '" + key + "'", at);
    }
    if (s.contains("$ref")) {
      for (const auto& [key, v] : s.items())
        if (key != "$ref" && !kAnnotations.count(key)) fail("keyword '" + key + "' beside '$ref'", at);
      return ref(s["$ref"], at + "/$ref", depth);
    }
    if (s.contains("allOf")) return visit_merged(s, at, depth);
    for (const char* any : {"anyOf", "oneOf"}) {
      if (!s.contains(any)) continue;
      const json& list = s[any];
      const std::string here = at + "/" + any;
      if (!list.is_array() || list.empty()) fail("'" + std::string(any) + "' must be a non-empty array", here);
      json siblings = json::object();
      for (const auto& [key, v] : s.items())
        if (key != any && !kAnnotations.count(key)) siblings[key] = v;
      std::string out = "(";
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string branch_at = here + "/" + std::to_string(i);
        const std::string alt = siblings.empty() ? visit(list[i], branch_at, depth + 1)
                                                 : visit(merge(siblings, list[i], branch_at, depth + 1), branch_at, depth + 1);
        out += (i ? " | " : " ") + alt;
      }
      return out + " )";
    }
    if (s.contains("const") || s.contains("enum")) return visit_enum(s, at);
    return visit_typed(s, at, depth);
  }

  // A local reference: "#" or "#/json/pointer", one rule per target.
  std::string ref(const json& r, const std::string& at, int depth) {
    if (!r.is_string()) fail("'$ref' must be a string", at);
    const std::string target = r.get<std::string>();
    auto it = refs_.find(target);
    if (it != refs_.end()) return it->second;
    const json& s = resolve(target, at);
    const std::string name = fresh_name("ref-" + target.substr(target.rfind('/') + 1));
    refs_[target] = name;
    define(name, visit(s, target.substr(1), depth + 1));
    return name;
  }

  const json& resolve(const std::string& target, const std::string& at) const {
    if (target.empty() || target[0] != '#') fail("only local '$ref' ('#/...') is supported, not '" + target + "'", at);
    if (target.size() > 1 && target[1] != '/') fail("'$ref' '" + target + "' is not a JSON pointer", at);
    const json* node = &root_;
    size_t pos = 1;
    while (pos < target.size()) {
      const size_t next = std::min(target.find('/', pos + 1), target.size());
      std::string token = target.substr(pos + 1, next - pos - 1);
      for (size_t i = 0; (i = token.find('~', i)) != std::string::npos; ++i) {
        if (i + 1 < token.size() && token[i + 1] == '1') token.replace(i, 2, "/");
        else if (i + 1 < token.size() && token[i + 1] == '0') token.replace(i, 2, "~");
      }
      if (node->is_object() && node->contains(token)) {
        node = &(*node)[token];
      } else if (node->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                 token.size() < 10 && std::stoul(token) < node->size()) {
        node = &(*node)[std::stoul(token)];
      } else {
        fail("'$ref' '" + target + "' names nothing", at);
      }
      pos = next;
    }
    return *node;
  }

  // allOf: the sibling keywords and every branch merged into one schema.
  std::string visit_merged(const json& s, const std::string& at, int depth) {
    const json& list = s["allOf"];
    if (!list.is_array() || list.empty()) fail("'allOf' must be a non-empty array", at + "/allOf");
    json merged = json::object();
    for (const auto& [key, v] : s.items())
      if (key != "allOf") merged[key] = v;
    for (size_t i = 0; i < list.size(); ++i)
      merged = merge(merged, list[i], at + "/allOf/" + std::to_string(i), depth + 1);
    return visit(merged, at, depth + 1);
  }

  // A schema that both `a` and `b` accept every match of (or a SchemaError
  // naming what cannot be merged). $ref targets are read in place.
  json merge(const json& a_in, const json& b_in, const std::string& at, int depth) {
    if (depth > Limits::kMaxDepth)
      fail("the schema nests deeper than " + std::to_string(Limits::kMaxDepth) + " levels", at);
    auto deref = [&](const json& s, int hops) -> json {
      json cur = s;
      while (cur.is_object() && cur.contains("$ref")) {
        if (++hops > Limits::kMaxDepth) fail("'$ref' chain too long", at);
        for (const auto& [key, v] : cur.items())
          if (key != "$ref" && !kAnnotations.count(key)) fail("keyword '" + key + "' beside '$ref'", at);
        if (!cur["$ref"].is_string()) fail("'$ref' must be a string", at);
        cur = resolve(cur["$ref"].get<std::string>(), at);
      }
      if (cur.is_boolean()) {
        if (!cur.get<bool>()) fail("schema 'false' matches nothing", at);
        return json::object();
      }
      if (!cur.is_object()) fail("a schema must be an object or a boolean", at);
      if (cur.contains("allOf")) {  // flatten
        json flat = json::object();
        for (const auto& [key, v] : cur.items())
          if (key != "allOf") flat[key] = v;
        const json& list = cur["allOf"];
        if (!list.is_array() || list.empty()) fail("'allOf' must be a non-empty array", at);
        for (size_t i = 0; i < list.size(); ++i) flat = merge(flat, list[i], at + "/allOf/" + std::to_string(i), depth + 1);
        return flat;
      }
      return cur;
    };
    json a = deref(a_in, 0);
    const json b = deref(b_in, 0);
    const json a_before = a;
    for (const auto& [key, v] : b.items()) {
      if (!kKeywords.count(key) && !kAnnotations.count(key)) fail("unsupported keyword '" + key + "'", at);
      if (kAnnotations.count(key) || key == "properties") continue;  // properties: merge_properties
      if (!a.contains(key)) {
        a[key] = v;
        continue;
      }
      json& mine = a[key];
      if (key == "type") {
        auto as_set = [&](const json& t) {
          std::set<std::string> out;
          if (t.is_string()) out.insert(t.get<std::string>());
          else if (t.is_array())
            for (const json& x : t)
              if (x.is_string()) out.insert(x.get<std::string>());
          return out;
        };
        const std::set<std::string> x = as_set(mine), y = as_set(v);
        json both = json::array();
        for (const std::string& t : x) {
          if (y.count(t)) both.push_back(t);
          else if (t == "integer" && y.count("number")) both.push_back(t);
          else if (t == "number" && y.count("integer")) both.push_back("integer");
        }
        if (both.empty()) fail("'allOf' branches allow no common 'type'", at);
        mine = both.size() == 1 ? both[0] : both;
      } else if (key == "required") {
        if (!v.is_array() || !mine.is_array()) fail("'required' must be an array", at);
        for (const json& name : v)
          if (std::find(mine.begin(), mine.end(), name) == mine.end()) mine.push_back(name);
      } else if (key == "enum" || key == "const") {
        const json x = key == "const" ? json::array({mine}) : mine, y = key == "const" ? json::array({v}) : v;
        if (!x.is_array() || !y.is_array()) fail("'enum' must be an array", at);
        json both = json::array();
        for (const json& e : x)
          if (std::find(y.begin(), y.end(), e) != y.end()) both.push_back(e);
        if (both.empty()) fail("'allOf' branches allow no common '" + key + "' value", at);
        a.erase(key);
        a["enum"] = both;
      } else if (key == "minimum" || key == "exclusiveMinimum" || key == "minLength" || key == "minItems") {
        if (!v.is_number() || !mine.is_number()) fail("'" + key + "' must be a number", at);
        if (v.get<double>() > mine.get<double>()) mine = v;
      } else if (key == "maximum" || key == "exclusiveMaximum" || key == "maxLength" || key == "maxItems") {
        if (!v.is_number() || !mine.is_number()) fail("'" + key + "' must be a number", at);
        if (v.get<double>() < mine.get<double>()) mine = v;
      } else if (key == "items" || key == "additionalProperties") {
        if (mine.is_boolean() && !mine.get<bool>()) continue;
        if (v.is_boolean() && !v.get<bool>()) mine = false;
        else mine = merge(mine, v, at + "/" + key, depth + 1);
      } else if (mine != v) {
        fail("'allOf' cannot merge two different '" + key + "'", at);
      }
    }
    merge_properties(a, a_before, b, at, depth);
    return a;
  }

  // Properties of an allOf merge: a name both declare gets both schemas; a
  // name one side declares must also satisfy the other's additionalProperties.
  void merge_properties(json& a, const json& a_before, const json& b, const std::string& at, int depth) {
    const json none = json::object();
    const json pa = a_before.contains("properties") ? a_before["properties"] : none;
    const json& pb = b.contains("properties") ? b["properties"] : none;
    if (!pa.is_object() || !pb.is_object()) fail("'properties' must be an object", at);
    json out = json::object();
    auto required_by = [&](const std::string& name) {
      return a.contains("required") && a["required"].is_array() &&
             std::find(a["required"].begin(), a["required"].end(), json(name)) != a["required"].end();
    };
    auto with_extra = [&](const json& prop, const json& extra, const std::string& name) -> std::optional<json> {
      if (extra.is_boolean() && !extra.get<bool>()) {
        if (required_by(name)) fail("'allOf' requires '" + name + "' that a branch forbids", at);
        return std::nullopt;
      }
      if (extra.is_boolean() || (extra.is_object() && extra.empty())) return prop;
      return merge(prop, extra, at + "/properties/" + pointer_token(name), depth + 1);
    };
    const json b_extra = b.contains("additionalProperties") ? b["additionalProperties"] : json(true);
    for (const auto& [name, prop] : pa.items()) {
      if (pb.contains(name)) out[name] = merge(prop, pb[name], at + "/properties/" + pointer_token(name), depth + 1);
      else if (auto m = with_extra(prop, b_extra, name)) out[name] = *m;
    }
    const json a_extra = a_before.contains("additionalProperties") ? a_before["additionalProperties"] : json(true);
    for (const auto& [name, prop] : pb.items()) {
      if (pa.contains(name)) continue;
      if (auto m = with_extra(prop, a_extra, name)) out[name] = *m;
    }
    if (a_before.contains("properties") || b.contains("properties")) a["properties"] = out;
  }

  std::string visit_enum(const json& s, const std::string& at) {
    std::vector<std::string> types;
    for (const auto& [key, v] : s.items()) {
      if (key == "enum" || key == "const" || kAnnotations.count(key)) continue;
      if (key != "type") fail("keyword '" + key + "' beside '" + (s.contains("enum") ? "enum" : "const") + "'", at);
      types = type_list(v, at);
    }
    std::vector<json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) fail("'enum' must be a non-empty array", at + "/enum");
      const json& list = s["enum"];
      if (s.contains("const") && std::find(list.begin(), list.end(), s["const"]) == list.end()) values.clear();
      if (!s.contains("const")) values.assign(list.begin(), list.end());
    }
    auto has_type = [&](const json& v) {
      if (types.empty()) return true;
      for (const std::string& t : types) {
        if ((t == "string" && v.is_string()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
            (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "number" && v.is_number()) ||
            (t == "integer" && v.is_number() && std::floor(v.get<double>()) == v.get<double>()))
          return true;
      }
      return false;
    };
    std::string out;
    for (const json& v : values) {
      if (!has_type(v)) continue;
      out += (out.empty() ? "( " : " | ") + literal(v.dump(-1, ' ', false, json::error_handler_t::strict));
    }
    if (out.empty()) fail("no value of 'enum'/'const' has the schema's 'type'", at);
    return out + " ) " + ws();
  }

  std::vector<std::string> type_list(const json& t, const std::string& at) {
    std::vector<std::string> out;
    if (t.is_string()) out.push_back(t.get<std::string>());
    else if (t.is_array() && !t.empty())
      for (const json& x : t) {
        if (!x.is_string()) fail("'type' must be a string or an array of strings", at + "/type");
        out.push_back(x.get<std::string>());
      }
    else fail("'type' must be a string or an array of strings", at + "/type");
    for (const std::string& x : out)
      if (!kTypes.count(x)) fail("unknown type '" + x + "'", at + "/type");
    return out;
  }

  std::string visit_typed(const json& s, const std::string& at, int depth) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      types = type_list(s["type"], at);
    } else {  // the type the keywords imply; none: any value
      auto has = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys)
          if (s.contains(k)) return true;
        return false;
      };
      if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
      if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
      if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
      if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
      if (types.empty()) return primitive("value");
    }
    if (types.size() == 1) return visit_type(s, types[0], at, depth);
    std::string out = "(";
    for (size_t i = 0; i < types.size(); ++i) out += (i ? " | " : " ") + visit_type(s, types[i], at, depth);
    return out + " )";
  }

  std::string visit_type(const json& s, const std::string& type, const std::string& at, int depth) {
    if (type == "null") return primitive("null");
    if (type == "boolean") return primitive("boolean");
    if (type == "string") return visit_string(s, at);
    if (type == "integer") return visit_integer(s, at);
    if (type == "number") return visit_number(s, at);
    if (type == "array") return visit_array(s, at, depth);
    return visit_object(s, at, depth);
  }

  // A count keyword (minLength, maxItems, ...): a non-negative integer.
  std::optional<int64_t> count(const json& s, const char* key, const std::string& at) {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>())
      fail("'" + std::string(key) + "' must be a non-negative integer", at + "/" + key);
    return v.get<double>() > 1e15 ? int64_t{1000000000000000} : static_cast<int64_t>(v.get<double>());
  }

  // lo..hi of a count pair, hi clamped to kMaxRepeat (fewer is still valid),
  // lo beyond it refused.
  // hi -1: unbounded.
  std::pair<int64_t, int64_t> bounds(const json& s, const char* min_key, const char* max_key, const std::string& at) {
    const int64_t lo = count(s, min_key, at).value_or(0);
    int64_t hi = count(s, max_key, at).value_or(-1);
    if (lo > Limits::kMaxRepeat)
      fail("'" + std::string(min_key) + "' above " + std::to_string(Limits::kMaxRepeat), at + "/" + min_key);
    if (hi >= 0 && hi < lo) fail("'" + std::string(max_key) + "' below '" + min_key + "'", at + "/" + max_key);
    if (hi > Limits::kMaxRepeat) hi = Limits::kMaxRepeat;
    return {lo, hi};
  }

  std::string visit_string(const json& s, const std::string& at) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      if (lengths || s.contains("pattern")) fail("keyword 'format' beside 'minLength'/'maxLength'/'pattern'", at);
      return format(s["format"], at + "/format");
    }
    if (s.contains("pattern")) {
      if (lengths) fail("keyword 'pattern' beside 'minLength'/'maxLength'", at);
      return pattern(s["pattern"], at + "/pattern");
    }
    if (!lengths) return primitive("string");
    const auto [lo, hi] = bounds(s, "minLength", "maxLength", at);
    return "\"\\\"\" " + repeat(primitive("char"), lo, hi) + " \"\\\"\" " + ws();
  }

  std::string format(const json& f, const std::string& at) {
    if (!f.is_string()) fail("'format' must be a string", at);
    const std::string name = f.get<std::string>();
    auto it = formats_.find(name);
    if (it != formats_.end()) return it->second;
    const std::string date = "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )";
    const std::string time = "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
                             "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
    std::string body;
    if (name == "date") body = date;
    else if (name == "time") body = time;
    else if (name == "date-time") body = date + " \"T\" " + time;
    else if (name == "uuid")
      body = "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
    else fail("unsupported 'format' '" + name + "' (date, time, date-time, uuid are)", at);
    const std::string r = rule(name, "\"\\\"\" " + body + " \"\\\"\" " + ws());
    formats_[name] = r;
    return r;
  }

  std::string pattern(const json& p, const std::string& at) {
    if (!p.is_string()) fail("'pattern' must be a string", at);
    const std::string content = PatternTranslator(p.get<std::string>(), at).run();
    return rule("pattern", "\"\\\"\" " + (content.empty() ? "" : content + " ") + "\"\\\"\" " + ws());
  }

  // A bound keyword's value, or none.
  std::optional<double> bound(const json& s, const char* key, const std::string& at) {
    if (!s.contains(key)) return std::nullopt;
    if (!s[key].is_number()) fail("'" + std::string(key) + "' must be a number", at + "/" + key);
    return s[key].get<double>();
  }

  static constexpr double kMaxBound = 1e15;  // integer bounds beyond are refused (digits, double rounding)

  std::string visit_integer(const json& s, const std::string& at) {
    std::optional<int64_t> lo, hi;
    auto clamp_bound = [&](const char* key, bool lower, bool exclusive) {
      const std::optional<double> v = bound(s, key, at);
      if (!v) return;
      if (std::fabs(*v) > kMaxBound) fail("'" + std::string(key) + "' beyond +-1e15", at + "/" + key);
      int64_t x = static_cast<int64_t>(lower ? std::ceil(*v) : std::floor(*v));
      if (exclusive && static_cast<double>(x) == *v) x += lower ? 1 : -1;
      if (lower) lo = lo ? std::max(*lo, x) : x;
      else hi = hi ? std::min(*hi, x) : x;
    };
    clamp_bound("minimum", true, false);
    clamp_bound("exclusiveMinimum", true, true);
    clamp_bound("maximum", false, false);
    clamp_bound("exclusiveMaximum", false, true);
    if (!lo && !hi) return primitive("integer");
    if (lo && hi && *lo > *hi) fail("no integer within 'minimum'..'maximum'", at);
    return rule("integer-range", integer_range(lo, hi) + " " + ws());
  }

  // Numbers between integer bounds (inclusive or exclusive); fraction digits
  // free, no exponent. Non-integer bounds are refused.
  std::string visit_number(const json& s, const std::string& at) {
    struct Bound { double v; bool exclusive; };
    std::optional<Bound> lo, hi;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      const std::optional<double> v = bound(s, key, at);
      if (!v) continue;
      if (std::floor(*v) != *v || std::fabs(*v) > kMaxBound)
        fail("'" + std::string(key) + "' of a number must be an integer within +-1e15", at + "/" + key);
      const bool exclusive = key[0] == 'e', lower = std::string(key).find("inimum") != std::string::npos;
      std::optional<Bound>& b = lower ? lo : hi;
      if (!b || (lower ? *v > b->v : *v < b->v) || (*v == b->v && exclusive)) b = Bound{*v, exclusive};
    }
    if (!lo && !hi) return primitive("number");
    if (lo && hi && (lo->v > hi->v || (lo->v == hi->v && (lo->exclusive || hi->exclusive))))
      fail("no number within the bounds", at);
    const std::string frac = "[0-9]{1," + std::to_string(kMaxDigits) + "}";
    const std::string zeros = "( \".\" " + repeat("\"0\"", 1, kMaxDigits) + " )?";
    const std::string any_frac = "( \".\" " + frac + " )?";
    // after the first non-zero digit, kMaxDigits more at most: one parse per text
    const std::string nonzero_frac =
        "\".\" " + repeat("\"0\"", 0, kMaxDigits - 1) + " [1-9] " + repeat("[0-9]", 0, kMaxDigits - 1);
    // Magnitudes m with a <= m <= b (b none: unbounded), either end exclusive.
    // Empty when there is none.
    auto magnitude = [&](uint64_t a, bool a_excl, std::optional<uint64_t> b, bool b_excl) -> std::string {
      std::vector<std::string> alts;
      if (b && *b == a) {
        if (!a_excl && !b_excl) alts.push_back(literal(std::to_string(a)) + " " + zeros);
      } else {  // integer part a (a.F < a + 1 <= b), a+1..b-1, then b itself
        alts.push_back(literal(std::to_string(a)) + " " + (a_excl ? nonzero_frac : any_frac));
        if (!b || *b > a + 1) {
          std::optional<uint64_t> top;
          if (b) top = *b - 1;
          alts.push_back(nonneg_range(a + 1, top) + " " + any_frac);
        }
        if (b && !b_excl) alts.push_back(literal(std::to_string(*b)) + " " + zeros);
      }
      if (alts.empty()) return "";
      std::string out;
      for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
      return "( " + out + " )";
    };
    std::vector<std::string> alts;
    const bool negatives = !lo || lo->v < 0;
    const bool positives = !hi || hi->v > 0 || (hi->v == 0 && !hi->exclusive);
    if (negatives) {  // "-" m with max(0, -hi) <= m <= -lo; m = 0 only as "-0.x"
      const bool hi_neg = hi && hi->v < 0;
      const uint64_t a = hi_neg ? static_cast<uint64_t>(-hi->v) : 0;
      const bool a_excl = hi_neg ? hi->exclusive : true;
      std::optional<uint64_t> b;
      if (lo) b = static_cast<uint64_t>(-lo->v);
      const std::string m = magnitude(a, a_excl, b, lo && lo->exclusive);
      if (!m.empty()) alts.push_back("\"-\" " + m);
    }
    if (positives) {
      const bool lo_pos = lo && lo->v >= 0;
      const uint64_t a = lo_pos ? static_cast<uint64_t>(lo->v) : 0;
      std::optional<uint64_t> b;
      if (hi) b = static_cast<uint64_t>(hi->v);
      const std::string m = magnitude(a, lo_pos && lo->exclusive, b, hi && hi->exclusive);
      if (!m.empty()) alts.push_back(m);
    }
    if (alts.empty()) fail("no number within the bounds", at);
    std::string out;
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return rule("number-range", "( " + out + " ) " + ws());
  }

  std::string visit_array(const json& s, const std::string& at, int depth) {
    std::vector<std::string> prefix;
    std::optional<std::string> rest;
    const json* tuple = nullptr;
    std::string key;
    if (s.contains("prefixItems")) {
      tuple = &s["prefixItems"];
      key = "/prefixItems/";
    } else if (s.contains("items") && s["items"].is_array()) {  // draft 7's tuple form
      tuple = &s["items"];
      key = "/items/";
    }
    if (tuple) {
      if (!tuple->is_array()) fail("'prefixItems' must be an array", at + "/prefixItems");
      for (size_t i = 0; i < tuple->size(); ++i) prefix.push_back(visit((*tuple)[i], at + key + std::to_string(i), depth + 1));
    }
    if (s.contains("items") && !s["items"].is_array()) {
      if (!(s["items"].is_boolean() && !s["items"].get<bool>())) rest = visit(s["items"], at + "/items", depth + 1);
    } else if (!tuple) {
      rest = primitive("value");
    }
    auto [lo, hi] = bounds(s, "minItems", "maxItems", at);
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (!rest) hi = hi < 0 ? k : std::min(hi, k);
    if (lo > (hi < 0 ? INT64_MAX : hi)) fail("'minItems' above the items the array may hold", at);
    const std::string comma = "\",\" " + ws() + " ";
    // tail(i): items i.. after i present ones (each with its comma).
    std::string tail;
    const int64_t m = std::max<int64_t>(k, 1);  // items from here on are `rest`s after a comma
    if (rest && (hi < 0 || hi > m)) tail = repeat(comma + *rest, std::max<int64_t>(0, lo - m), hi < 0 ? -1 : hi - m);
    for (int64_t i = k - 1; i >= 1; --i) {
      if (i >= (hi < 0 ? INT64_MAX : hi)) continue;
      std::string item = comma + prefix[static_cast<size_t>(i)] + (tail.empty() ? "" : " " + tail);
      tail = i < lo ? item : "( " + item + " )?";
      if (tail.size() > 200) tail = rule("items", tail);
    }
    std::string first;
    if (hi != 0) {
      first = (k > 0 ? prefix[0] : *rest) + (tail.empty() ? "" : " " + tail);
      if (lo == 0) first = "( " + first + " )?";
    }
    return rule("array", "\"[\" " + ws() + " " + (first.empty() ? "" : first + " ") + "\"]\" " + ws());
  }

  std::string visit_object(const json& s, const std::string& at, int depth) {
    const json none = json::object();
    const json& props = s.contains("properties") ? s["properties"] : none;
    if (!props.is_object()) fail("'properties' must be an object", at + "/properties");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail("'required' must be an array of strings", at + "/required");
      for (const json& r : s["required"]) {
        if (!r.is_string()) fail("'required' must be an array of strings", at + "/required");
        required.insert(r.get<std::string>());
      }
    }
    // Other members where the schema says so; absent: none beside declared
    // properties, any without them (as llama.cpp).
    const json* extra = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    std::optional<std::string> extra_value;
    if (extra && !(extra->is_boolean() && !extra->get<bool>()))
      extra_value = visit(*extra, at + "/additionalProperties", depth + 1);
    else if (!extra && !s.contains("properties"))
      extra_value = primitive("value");

    struct Member { std::string kv; bool required; };
    std::vector<Member> members;
    std::set<std::string> declared;
    for (const auto& [name, sub] : props.items()) {
      declared.insert(name);
      const std::string value = visit(sub, at + "/properties/" + pointer_token(name), depth + 1);
      members.push_back({rule(name + "-kv", literal(json(name).dump()) + " " + ws() + " \":\" " + ws() + " " + value),
                         required.count(name) > 0});
    }
    for (const std::string& name : required) {
      if (declared.count(name)) continue;
      if (extra && extra->is_boolean() && !extra->get<bool>())
        fail("'required' names '" + name + "' that 'additionalProperties: false' forbids", at + "/required");
      const std::string value = extra_value ? *extra_value : primitive("value");
      members.push_back({rule(name + "-kv", literal(json(name).dump()) + " " + ws() + " \":\" " + ws() + " " + value), true});
    }
    const std::string comma = "\",\" " + ws() + " ";
    // Extra members: keys that are not declared names (and carry no escapes,
    // so a key can never decode to a declared one).
    std::string extra_kv;
    if (extra_value) {
      std::set<std::string> names = declared;
      for (const std::string& r : required) names.insert(r);
      extra_kv = rule("additional-kv", other_key(names, at) + " \":\" " + ws() + " " + *extra_value);
    }
    // after_none(i) / after_some(i): members i.. when none / some precede.
    std::string none_tail = extra_value ? "( " + extra_kv + " ( " + comma + extra_kv + " )* )?" : "";
    std::string some_tail = extra_value ? "( " + comma + extra_kv + " )*" : "";
    for (size_t i = members.size(); i-- > 0;) {
      const Member& m = members[i];
      const std::string some_item = comma + m.kv + (some_tail.empty() ? "" : " " + some_tail);
      const std::string none_item = m.kv + (some_tail.empty() ? "" : " " + some_tail);
      std::string some = m.required ? some_item : "( " + some_item + (some_tail.empty() ? " )?" : " | " + some_tail + " )");
      std::string none = m.required ? none_item
                                    : "( " + none_item + (none_tail.empty() ? " )?" : " | " + none_tail + " )");
      some_tail = some.size() > 80 ? rule("members", some) : some;
      none_tail = none.size() > 80 ? rule("members", none) : none;
    }
    return rule("object", "\"{\" " + ws() + " " + (none_tail.empty() ? "" : none_tail + " ") + "\"}\" " + ws());
  }

  // A JSON string key (with its whitespace) that is none of `names`: the
  // names' code points in a trie; a key leaves it at a code point no name has
  // there, or ends where no name ends.
  std::string other_key(const std::set<std::string>& names, const std::string& at) {
    struct Node {
      std::map<uint32_t, size_t> next;
      bool end = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      const std::vector<uint32_t> cps = code_points(n, at);
      if (cps.size() > kMaxExcludedName)
        fail("a property name beside 'additionalProperties' is longer than " + std::to_string(kMaxExcludedName), at);
      size_t node = 0;
      for (uint32_t c : cps) {
        auto it = trie[node].next.find(c);
        if (it == trie[node].next.end()) {
          trie.push_back({});
          it = trie[node].next.emplace(c, trie.size() - 1).first;
        }
        node = it->second;
      }
      trie[node].end = true;
    }
    const std::string key_char = primitive("key-char");
    // Bottom-up: children are created after their parents, so walk backwards.
    std::vector<std::string> rest(trie.size());
    for (size_t i = trie.size(); i-- > 0;) {
      const Node& node = trie[i];
      std::string alts, excluded;
      for (const auto& [c, child] : node.next) {
        excluded += class_char(c);
        alts += (alts.empty() ? "" : " | ") + literal(utf8(c)) + (rest[child].empty() ? "" : " " + rest[child]);
      }
      alts += (alts.empty() ? "" : " | ") + std::string("[^\"\\\\\\x00-\\x1F\\x7F") + excluded + "] " + key_char + "*";
      std::string r = "( " + alts + (node.end ? " )" : " )?");
      rest[i] = r.size() > 80 ? rule("key", r) : r;
    }
    return "\"\\\"\" " + rest[0] + " \"\\\"\" " + ws();
  }

  static constexpr size_t kMaxExcludedName = 256;  // code points of a name the extra keys must avoid

  const json& root_;
  const std::string prefix_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> names_;
  std::map<std::string, std::string> primitives_, refs_, formats_;
  std::map<std::string, int> suffixes_;  // the last number given to a name hint
  size_t bytes_ = 0;
};

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema, std::string_view prefix) {
  for (char c : prefix)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-')
      throw SchemaError("a rule prefix holds letters, digits and '-' only");
  return Converter(schema, std::string(prefix)).run();
}

}  // namespace lumen::grammar
