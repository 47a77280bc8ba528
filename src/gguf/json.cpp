// Recursive-descent JSON parser (RFC 8259). Strict: no comments, no trailing
// commas, no NaN; strings are UTF-8 with \uXXXX escapes (surrogate pairs
// joined). Depth is bounded so hostile input cannot exhaust the stack.
#include "lumen/gguf/json.h"

#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace lumen::json {

std::string_view to_string(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Number: return "number";
    case Value::Kind::String: return "string";
    case Value::Kind::Array: return "array";
    case Value::Kind::Object: return "object";
  }
  return "?";
}

namespace {

[[noreturn]] void wrong_kind(Value::Kind have, std::string_view want) {
  throw Error(fmt::format("expected a JSON {}, found {}", want, to_string(have)));
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Value parse_document() {
    skip_space();
    Value v = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(fmt::format("line {}, column {}: {}", line, col, what));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  void expect(char c) {
    if (peek() != c || at_end()) fail(fmt::format("expected '{}'", c));
    ++pos_;
  }

  void expect_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("invalid literal");
    pos_ += word.size();
  }

  // value = object | array | string | number | "true" | "false" | "null"
  Value parse_value(int depth) {
    if (depth > kMaxDepth) fail("nesting too deep");
    if (at_end()) fail("unexpected end of input");
    switch (peek()) {
      case '{': return parse_object(depth);
      case '[': return parse_array(depth);
      case '"': return Value(parse_string());
      case 't': expect_word("true"); return Value(true);
      case 'f': expect_word("false"); return Value(false);
      case 'n': expect_word("null"); return Value();
      default: return Value(parse_number());
    }
  }

  // object = "{" [ string ":" value { "," string ":" value } ] "}"
  Value parse_object(int depth) {
    expect('{');
    Object members;
    skip_space();
    if (peek() == '}' && !at_end()) {
      ++pos_;
      return Value(std::move(members));
    }
    for (;;) {
      skip_space();
      if (peek() != '"' || at_end()) fail("expected a member name");
      std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      Value v = parse_value(depth + 1);
      members.emplace_back(std::move(key), std::move(v));
      skip_space();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect('}');
      return Value(std::move(members));
    }
  }

  // array = "[" [ value { "," value } ] "]"
  Value parse_array(int depth) {
    expect('[');
    Array items;
    skip_space();
    if (peek() == ']' && !at_end()) {
      ++pos_;
      return Value(std::move(items));
    }
    for (;;) {
      skip_space();
      items.push_back(parse_value(depth + 1));
      skip_space();
      if (peek() == ',' && !at_end()) {
        ++pos_;
        continue;
      }
      expect(']');
      return Value(std::move(items));
    }
  }

  // number = [ "-" ] int [ frac ] [ exp ]
  double parse_number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_;
      return pos_ - from;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
    } else if (digits() == 0) {
      pos_ = start;
      fail("invalid value");
    }
    if (peek() == '.' && !at_end()) {
      ++pos_;
      if (digits() == 0) fail("expected digits after '.'");
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digits() == 0) fail("expected digits in the exponent");
    }
    // from_chars: exact and independent of the C locale.
    const std::string_view number = text_.substr(start, pos_ - start);
    double v = 0.0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
    if (ec == std::errc::result_out_of_range) {
      if (number.find("e-") == std::string_view::npos && number.find("E-") == std::string_view::npos) {
        fail("number out of range");
      }
      return 0.0;  // underflow
    }
    if (ec != std::errc() || end != number.data() + number.size()) fail("invalid number");
    return v;
  }

  uint32_t parse_hex4() {
    if (text_.size() - pos_ < 4) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') v |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= uint32_t(c - 'A' + 10);
      else {
        --pos_;
        fail("invalid hex digit in \\u escape");
      }
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // string = '"' { char | escape } '"'; raw bytes are passed through as UTF-8.
  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) {
        --pos_;
        fail("control character in string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = parse_hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") fail("unpaired high surrogate");
            pos_ += 2;
            const uint32_t low = parse_hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("invalid low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("unpaired low surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: --pos_; fail("invalid escape");
      }
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

bool Value::as_bool() const {
  if (kind() != Kind::Bool) wrong_kind(kind(), "bool");
  return std::get<bool>(data_);
}

double Value::as_number() const {
  if (kind() != Kind::Number) wrong_kind(kind(), "number");
  return std::get<double>(data_);
}

int64_t Value::as_int() const {
  const double d = as_number();
  // 2^63 is exactly representable; anything at or above it does not fit.
  if (d != std::floor(d) || d < -9223372036854775808.0 || d >= 9223372036854775808.0) {
    throw Error(fmt::format("expected an integer, found {}", d));
  }
  return static_cast<int64_t>(d);
}

const std::string& Value::as_string() const {
  if (kind() != Kind::String) wrong_kind(kind(), "string");
  return std::get<std::string>(data_);
}

const Array& Value::as_array() const {
  if (kind() != Kind::Array) wrong_kind(kind(), "array");
  return *std::get<std::shared_ptr<Array>>(data_);
}

const Object& Value::as_object() const {
  if (kind() != Kind::Object) wrong_kind(kind(), "object");
  return *std::get<std::shared_ptr<Object>>(data_);
}

const Value* Value::find(std::string_view key) const {
  for (const auto& [name, value] : as_object()) {
    if (name == key) return &value;
  }
  return nullptr;
}

Value parse(std::string_view text) { return Parser(text).parse_document(); }

}  // namespace lumen::json
