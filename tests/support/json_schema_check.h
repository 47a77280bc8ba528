// Test-only: validates a JSON value against a JSON Schema of the subset
// json_schema_to_gbnf converts (docs/server.md, "JSON Schema subset"), with
// the standard's meaning, not the converter's choices: absent
// additionalProperties allows any, oneOf means exactly one, pattern searches
// (PCRE2 in UTF mode, on code points, close to ECMAScript for the subset).
// Written apart from the converter so that it checks it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace lumen::testing {

namespace json_schema_check_detail {

using json = nlohmann::ordered_json;

inline std::wstring wide(const std::string& s) {
  std::wstring out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(static_cast<wchar_t>(cp));
    i += static_cast<size_t>(n);
  }
  return out;
}

// Whether `pattern` matches somewhere in `subject` (UTF-8, code points);
// with PCRE2_ANCHORED | PCRE2_ENDANCHORED, the whole of it.
inline bool pattern_found(const std::string& pattern, const std::string& subject, uint32_t options = 0) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | options, &error,
                                   &offset, nullptr);
  if (code == nullptr) return false;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(subject.data()), subject.size(), 0, 0, data, nullptr);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return rc >= 0;
}

inline bool has_type(const json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

inline bool format_ok(const std::string& format, const std::string& s) {
  static const std::string date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  static const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  std::string re;
  if (format == "date") re = date;
  else if (format == "time") re = time;
  else if (format == "date-time") re = date + "T" + time;
  else if (format == "uuid") re = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  else return false;
  return pattern_found(re, s, PCRE2_ANCHORED | PCRE2_ENDANCHORED);
}

class Checker {
 public:
  explicit Checker(const json& root) : root_(root) {}

  // "" when `v` validates against `s`; else where and why not.
  std::string check(const json& v, const json& s, const std::string& at, int depth = 0) const {
    if (depth > 200) return at + ": schema recursion too deep";
    if (s.is_boolean()) return s.get<bool>() ? "" : at + ": schema false";
    if (s.contains("$ref")) {
      if (std::string e = check(v, resolve(s["$ref"].get<std::string>()), at, depth + 1); !e.empty()) return e;
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) ok = has_type(v, s["type"].get<std::string>());
      else
        for (const json& t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
      if (!ok) return at + ": not of type " + s["type"].dump();
    }
    if (s.contains("const") && v != s["const"]) return at + ": not the const " + s["const"].dump();
    if (s.contains("enum")) {
      bool found = false;
      for (const json& e : s["enum"]) found = found || v == e;
      if (!found) return at + ": not in the enum";
    }
    if (s.contains("allOf"))
      for (const json& b : s["allOf"])
        if (std::string e = check(v, b, at, depth + 1); !e.empty()) return e;
    if (s.contains("anyOf")) {
      bool any = false;
      for (const json& b : s["anyOf"]) any = any || check(v, b, at, depth + 1).empty();
      if (!any) return at + ": no anyOf branch matches";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const json& b : s["oneOf"]) n += check(v, b, at, depth + 1).empty() ? 1 : 0;
      if (n != 1) return at + ": " + std::to_string(n) + " oneOf branches match";
    }
    if (v.is_string()) {
      const std::wstring w = wide(v.get<std::string>());
      if (s.contains("minLength") && w.size() < s["minLength"].get<size_t>()) return at + ": shorter than minLength";
      if (s.contains("maxLength") && w.size() > s["maxLength"].get<size_t>()) return at + ": longer than maxLength";
      if (s.contains("pattern") && !pattern_found(s["pattern"].get<std::string>(), v.get<std::string>()))
        return at + ": does not match the pattern";
      if (s.contains("format") && !format_ok(s["format"].get<std::string>(), v.get<std::string>()))
        return at + ": not a " + s["format"].get<std::string>();
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
      if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return at + ": not above exclusiveMinimum";
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return at + ": not below exclusiveMaximum";
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": fewer than minItems";
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": more than maxItems";
      size_t tuple = 0;
      const json* prefix = s.contains("prefixItems") ? &s["prefixItems"]
                           : s.contains("items") && s["items"].is_array() ? &s["items"] : nullptr;
      if (prefix != nullptr) {
        tuple = prefix->size();
        for (size_t i = 0; i < v.size() && i < tuple; ++i)
          if (std::string e = check(v[i], (*prefix)[i], at + "/" + std::to_string(i), depth + 1); !e.empty()) return e;
      }
      if (s.contains("items") && !s["items"].is_array())
        for (size_t i = tuple; i < v.size(); ++i)
          if (std::string e = check(v[i], s["items"], at + "/" + std::to_string(i), depth + 1); !e.empty()) return e;
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (const json& r : s["required"])
          if (!v.contains(r.get<std::string>())) return at + ": misses required '" + r.get<std::string>() + "'";
      for (const auto& [key, value] : v.items()) {
        const std::string here = at + "/" + key;
        if (s.contains("properties") && s["properties"].contains(key)) {
          if (std::string e = check(value, s["properties"][key], here, depth + 1); !e.empty()) return e;
        } else if (s.contains("additionalProperties")) {
          if (std::string e = check(value, s["additionalProperties"], here, depth + 1); !e.empty()) return e;
        }
      }
    }
    return "";
  }

 private:
  const json& resolve(const std::string& ref) const { return root_.at(json::json_pointer(ref.substr(1))); }
  const json& root_;
};

}  // namespace json_schema_check_detail

// "" when `value` validates against `schema`; else the first violation found
// ("/path: what").
inline std::string json_schema_violation(const nlohmann::ordered_json& value, const nlohmann::ordered_json& schema) {
  return json_schema_check_detail::Checker(schema).check(value, schema, "");
}

}  // namespace lumen::testing
