// Python's semantics for the chat-template interpreter's values
// (chat_template_python.h): str methods' building blocks, str() and repr(),
// truthiness, equality, markupsafe escaping.
#include "chat_template_python.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace lumen::chat {

// ---------------------------------------------------------------- UTF-8

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

int64_t py_len(std::string_view s) {
  int64_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool is_space_cp(std::string_view cp) {
  if (cp.size() == 1) {
    const auto c = static_cast<unsigned char>(cp[0]);
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  }
  static const char* const kSpaces[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001", "\u2002", "\u2003",
                                        "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
                                        "\u2028", "\u2029", "\u202f", "\u205f", "\u3000"};
  for (const char* s : kSpaces)
    if (cp == s) return true;
  return false;
}

// Python's str.strip family: chars == nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<std::string> cps = code_points(s);
  std::vector<std::string> set;
  if (chars) set = code_points(*chars);
  auto strip_it = [&](const std::string& cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : is_space_cp(cp);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

namespace {

// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and
// Cyrillic (Python's str.upper/lower there; other scripts pass unchanged).
uint32_t map_case(uint32_t c, bool upper) {
  if (c < 0x80) return upper ? static_cast<uint32_t>(std::toupper(static_cast<int>(c))) : static_cast<uint32_t>(std::tolower(static_cast<int>(c)));
  if (upper) {
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
      const bool odd_is_lower = !(c >= 0x139 && c <= 0x148) && !(c >= 0x179 && c <= 0x17E);
      if (odd_is_lower ? (c & 1) : !(c & 1)) return c - 1;
      return c;
    }
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
    if (c >= 0x430 && c <= 0x44F) return c - 0x20;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    return c;
  }
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F) {
    const bool odd_is_lower = !(c >= 0x139 && c <= 0x148) && !(c >= 0x179 && c <= 0x17E);
    if (odd_is_lower ? !(c & 1) : (c & 1)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  return c;
}

std::string change_case(const std::string& s, bool upper) {
  if (is_ascii(s)) {
    std::string out = s;
    for (char& ch : out) ch = static_cast<char>(map_case(static_cast<unsigned char>(ch), upper));
    return out;
  }
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c0 = static_cast<unsigned char>(s[i]);
    size_t n = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 1;
    if (n != 2 || i + 1 >= s.size()) {  // only 1- and 2-byte sequences have mappings here
      if (n == 1) out += static_cast<char>(map_case(c0, upper));
      else out.append(s, i, std::min(n, s.size() - i));
      i += n;
      continue;
    }
    const uint32_t c = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3Fu);
    const uint32_t m = map_case(c, upper);
    out += static_cast<char>(0xC0 | (m >> 6));
    out += static_cast<char>(0x80 | (m & 0x3F));
    i += 2;
  }
  return out;
}

bool is_alpha_byte(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

}  // namespace

std::string to_upper(const std::string& s) { return change_case(s, true); }
std::string to_lower(const std::string& s) { return change_case(s, false); }

// Python's str.title(): a letter after a non-letter is upper-cased, others lower.
std::string py_title(std::string s) {
  bool prev_cased = false;
  for (char& c : s) {
    if (is_alpha_byte(c)) {
      c = static_cast<char>(prev_cased ? std::tolower(static_cast<unsigned char>(c)) : std::toupper(static_cast<unsigned char>(c)));
      prev_cased = true;
    } else {
      prev_cased = (static_cast<unsigned char>(c) & 0x80) != 0 && prev_cased;
    }
  }
  return s;
}

std::string py_capitalize(std::string s) {
  s = to_lower(std::move(s));
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::vector<std::string> cps = code_points(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) out += cps[i];
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// ---------------------------------------------------------------- printing

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  const int n = static_cast<int>(digits.size());
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (exp + 1 >= n) {
    out = digits + std::string(static_cast<size_t>(exp + 1 - n), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(static_cast<size_t>(exp + 1));
  }
  return sign + out;
}

std::string py_str_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  out += q;
  return out;
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.generator ? "generator" : "list";
    case Value::Kind::Tuple: return "tuple";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Callable: return "function";
  }
  return "object";
}

std::string to_str(const Value& v);

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String: return py_str_repr(v.s);
    case Value::Kind::Undefined: return "Undefined";
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return py_float_repr(v.f);
    case Value::Kind::String: return v.s;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      if (v.generator) return "<generator object>";
      const bool tuple = v.kind == Value::Kind::Tuple;
      std::string out = tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + repr((*v.list)[k]);
      if (tuple && v.list->size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, val] : v.dict->items) {
        out += (first ? "" : ", ") + repr(k) + ": " + repr(val);
        first = false;
      }
      out += "}";
      return v.kind == Value::Kind::Namespace ? "<Namespace " + out + ">" : out;
    }
    case Value::Kind::Callable: return "<function " + v.s + ">";
  }
  return "";
}

// ---------------------------------------------------------------- semantics

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i != 0;
    case Value::Kind::Float: return v.f != 0;
    case Value::Kind::String: return !v.s.empty();
    case Value::Kind::List:
    case Value::Kind::Tuple: return v.generator || !v.list->empty();
    case Value::Kind::Dict: return !v.dict->items.empty();
    default: return true;
  }
}

double as_double(const Value& v) {
  return v.kind == Value::Kind::Float ? v.f : v.kind == Value::Kind::Int ? static_cast<double>(v.i) : (v.b ? 1.0 : 0.0);
}
int64_t as_int(const Value& v) { return v.kind == Value::Kind::Int ? v.i : v.b ? 1 : 0; }

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) return as_double(a) == as_double(b);
    return as_int(a) == as_int(b);
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.s == b.s;
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (a.generator || b.generator) return a.list == b.list;
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equals((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    case Value::Kind::Namespace: return a.dict == b.dict;
    case Value::Kind::Callable: return a.fn == b.fn;
    default: return false;
  }
}


const Value* Dict::find(const Value& key) const {
  for (const auto& kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}
Value* Dict::find(const Value& key) {
  for (auto& kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}
void Dict::set(const Value& key, Value value) {
  if (Value* v = find(key)) {
    *v = std::move(value);
  } else {
    items.emplace_back(key, std::move(value));
  }
}


// Python's str.format for {} / {N} / {name} fields (no format specs).
std::string py_str_format(const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) fail_at(a.pos, "format: single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
        fail_at(a.pos, "format: format specs and conversions are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index >= a.positional.size()) fail_at(a.pos, "format: not enough arguments");
        v = &a.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
        size_t k = std::stoul(field);
        if (k >= a.positional.size()) fail_at(a.pos, "format: index out of range");
        v = &a.positional[k];
      } else {
        for (auto& [key, val] : a.keyword)
          if (key == field) v = &val;
        if (!v) fail_at(a.pos, "format: missing argument '" + field + "'");
      }
      out += to_str(*v);
      i = close;
    } else if (c == '}') {
      fail_at(a.pos, "format: single '}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

// Python's "%s" % args for the format filter.
std::string py_percent_format(const std::string& fmt, CallArgs& a, Pos pos) {
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail_at(pos, "format: incomplete format");
    const char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next_arg >= a.positional.size()) fail_at(pos, "format: not enough arguments for format string");
    const Value& v = a.positional[next_arg++];
    if (c == 's') {
      out += to_str(v);
    } else if (c == 'r') {
      out += repr(v);
    } else if (c == 'd' || c == 'i') {
      if (!v.is_number()) fail_at(pos, "format: %d format: a real number is required, not " + type_name(v));
      out += std::to_string(v.kind == Value::Kind::Float ? static_cast<int64_t>(v.f) : as_int(v));
    } else if (c == 'f') {
      if (!v.is_number()) fail_at(pos, "format: must be real number, not " + type_name(v));
      char b[64];
      std::snprintf(b, sizeof b, "%f", as_double(v));
      out += b;
    } else {
      fail_at(pos, std::string("format: unsupported format character '") + c + "'");
    }
  }
  if (next_arg < a.positional.size()) fail_at(pos, "format: not all arguments converted during string formatting");
  return out;
}

Value markup(std::string s) {
  Value v = Value::string(std::move(s));
  v.safe = true;
  return v;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace lumen::chat
