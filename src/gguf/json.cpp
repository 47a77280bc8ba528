// json::parse on top of nlohmann-json's SAX parser (Debian nlohmann-json3-dev):
// nlohmann does the RFC 8259 lexing and UTF-8 checks; this file builds the
// immutable json::Value tree with an explicit stack (no recursion, so hostile
// nesting cannot exhaust the stack) and turns nlohmann's errors into one line
// "line L, column C: ...".
#include "lumen/gguf/json.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

// nlohmann's messages read "[json.exception.parse_error.101] parse error at
// line 1, column 4: syntax error ...": keep only what follows the location,
// which is recomputed from the byte offset for every kind of error. nlohmann
// echoes the bytes it last read, which may be ill-formed UTF-8: bytes above
// ASCII are printed as \xNN so the message stays one printable line.
std::string describe(std::string_view message) {
  if (message.substr(0, 1) == "[") {
    const size_t close = message.find("] ");
    if (close != std::string_view::npos) message.remove_prefix(close + 2);
  }
  constexpr std::string_view kParseError = "parse error";
  if (message.substr(0, kParseError.size()) == kParseError) {
    const size_t colon = message.find(": ");
    if (colon != std::string_view::npos) message.remove_prefix(colon + 2);
  }
  std::string out;
  for (char c : message) {
    if (static_cast<unsigned char>(c) < 0x80) {
      out += c;
    } else {
      out += fmt::format("\\x{:02X}", static_cast<unsigned char>(c));
    }
  }
  return out;
}

std::string location(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  size_t line = 1;
  for (char c : before) line += c == '\n';
  const size_t line_start = before.rfind('\n');
  const size_t column = line_start == std::string_view::npos ? offset + 1 : offset - line_start;
  return fmt::format("line {}, column {}", line, column);
}

// The SAX handler nlohmann calls; containers under construction live on
// `open_`, the finished document in `root_`.
class TreeBuilder {
 public:
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;

  explicit TreeBuilder(std::string_view text) : text_(text) {}

  bool null() { return add(Value()); }
  bool boolean(bool b) { return add(Value(b)); }
  bool number_integer(number_integer_t n) { return add(Value(static_cast<double>(n))); }
  bool number_unsigned(number_unsigned_t n) { return add(Value(static_cast<double>(n))); }
  bool number_float(number_float_t n, const string_t&) { return add(Value(static_cast<double>(n))); }
  bool string(string_t& s) { return add(Value(std::move(s))); }
  bool binary(binary_t&) { return false; }  // not produced by the JSON text format

  bool start_object(std::size_t) { return open(true); }
  bool key(string_t& name) {
    open_.back().key = std::move(name);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(false); }
  bool end_array() { return close(); }

  bool parse_error(std::size_t offset, const std::string&, const nlohmann::detail::exception& e) {
    // nlohmann's offset counts the bytes read, the offending one included.
    error_ = fmt::format("{}: {}", location(text_, offset == 0 ? 0 : offset - 1), describe(e.what()));
    return false;
  }

  Value take_root() {
    if (too_deep_) throw Error(fmt::format("JSON nesting deeper than {} levels", kMaxDepth));
    if (!error_.empty()) throw Error(error_);
    return std::move(root_);
  }

 private:
  struct Open {
    bool is_object;
    std::string key;  // the member whose value comes next
    Array items;
    Object members;
  };

  bool add(Value v) {
    if (open_.empty()) {
      root_ = std::move(v);
    } else if (Open& top = open_.back(); top.is_object) {
      top.members.emplace_back(std::move(top.key), std::move(v));
    } else {
      top.items.push_back(std::move(v));
    }
    return true;
  }

  bool open(bool is_object) {
    if (open_.size() > static_cast<size_t>(kMaxDepth)) {
      too_deep_ = true;
      return false;
    }
    open_.push_back(Open{is_object, {}, {}, {}});
    return true;
  }

  bool close() {
    Open top = std::move(open_.back());
    open_.pop_back();
    return add(top.is_object ? Value(std::move(top.members)) : Value(std::move(top.items)));
  }

  std::string_view text_;
  std::vector<Open> open_;
  Value root_;
  std::string error_;
  bool too_deep_ = false;
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

Value parse(std::string_view text) {
  TreeBuilder builder(text);
  // Strict (the whole input is one document), no comments.
  nlohmann::json::sax_parse(text.begin(), text.end(), &builder, nlohmann::json::input_format_t::json, true, false);
  return builder.take_root();
}

}  // namespace lumen::json
