// Python's semantics for the chat-template interpreter's values (internal to
// lumen_text): the building blocks of str methods (code points, strip, case,
// replace), str() and repr(), truthiness, equality, markupsafe escaping
// (chat_template_python.cpp), and JSON in and out (chat_template_json.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_template_value.h"

namespace lumen::chat {

// UTF-8 code points, each as its bytes (an invalid byte is one code point).
std::vector<std::string> code_points(std::string_view s);
bool is_ascii(std::string_view s);
int64_t py_len(std::string_view s);  // len() of a str: code points
bool is_space_cp(std::string_view cp);
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
std::string py_title(std::string s);
std::string py_capitalize(std::string s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count);

std::string py_float_repr(double d);
std::string py_str_repr(const std::string& s);
std::string type_name(const Value& v);
std::string repr(const Value& v);
std::string to_str(const Value& v);

bool truthy(const Value& v);
double as_double(const Value& v);
int64_t as_int(const Value& v);
bool equals(const Value& a, const Value& b);

// Python's str.format for {} / {N} / {name} fields (no format specs), and
// "%s" % args (%s %r %d %i %f) for the format filter.
std::string py_str_format(const std::string& fmt, CallArgs& a);
std::string py_percent_format(const std::string& fmt, CallArgs& a, Pos pos);

// markupsafe: a Markup string, and the escaping Markup applies to plain strings.
Value markup(std::string s);
std::string html_escape(const std::string& s);

// json.dumps's options as the tojson filter passes them.
struct JsonStyle {
  std::optional<std::string> indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool ensure_ascii = false, sort_keys = false;
};
void to_json(std::string& out, const Value& v, const JsonStyle& st, int level, Pos pos);
Value from_json(const nlohmann::ordered_json& j);

}  // namespace lumen::chat
