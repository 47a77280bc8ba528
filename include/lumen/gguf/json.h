// Strict JSON (RFC 8259) parsed into an immutable tree, for Hugging Face
// tokenizer.json files and test data. The parsing is nlohmann-json's (kept out
// of this header); this adds bounded nesting depth, file-ordered members, and
// a one-line json::Error with line and column on bad input.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace lumen::json {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // members in file order

class Value {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Value() = default;
  explicit Value(bool b) : data_(b) {}
  explicit Value(double n) : data_(n) {}
  explicit Value(std::string s) : data_(std::move(s)) {}
  explicit Value(Array a) : data_(std::make_shared<Array>(std::move(a))) {}
  explicit Value(Object o) : data_(std::make_shared<Object>(std::move(o))) {}

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_null() const { return kind() == Kind::Null; }

  // Checked accessors: throw json::Error naming the expected kind.
  bool as_bool() const;
  double as_number() const;
  int64_t as_int() const;  // the number must be integral and fit int64
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;

  // Object member by name (first match), or nullptr. Throws if not an object.
  const Value* find(std::string_view key) const;

 private:
  std::variant<std::monostate, bool, double, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> data_;
};

std::string_view to_string(Value::Kind kind);

// Parses one JSON document (surrounding whitespace allowed; no comments).
// Throws json::Error "line L, column C: ..." on malformed input or ill-formed
// UTF-8, and "JSON nesting deeper than 512 levels" past kMaxDepth.
constexpr int kMaxDepth = 512;
Value parse(std::string_view text);

}  // namespace lumen::json
