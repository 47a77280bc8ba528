// The chat-template interpreter: runs a parsed template over Python-like
// values with jinja2's semantics (Undefined, scoping, loop variables, macros,
// the filters and tests templates use) and Hugging Face's globals
// (raise_exception, strftime_now, tojson as json.dumps).
#include "lumen/text/chat_template.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <unordered_map>

#include "chat_template_ast.h"
#include "chat_template_value.h"

namespace lumen::chat {

TemplateError::TemplateError(int line, int column, const std::string& message)
    : std::runtime_error(std::to_string(line) + ":" + std::to_string(column) + ": " + message),
      line_(line),
      column_(column),
      message_(message) {}

namespace {

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

std::string to_upper(const std::string& s) { return change_case(s, true); }
std::string to_lower(const std::string& s) { return change_case(s, false); }
bool is_alpha_byte(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

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

}  // namespace

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

namespace {

// ---------------------------------------------------------------- JSON

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else if (ensure_ascii && c >= 0x80) {
          // Decode one code point and write \uXXXX (surrogate pairs above the BMP).
          uint32_t cp = 0;
          size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
          cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
          for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
          i += n - 1;
          char b[16];
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(b, sizeof b, "\\u%04x", cp);
          }
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

struct JsonStyle {
  std::optional<std::string> indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool ensure_ascii = false, sort_keys = false;
};

void to_json(std::string& out, const Value& v, const JsonStyle& st, int level, Pos pos) {
  if (level > 512) fail_at(pos, "tojson: value nested too deeply");
  auto newline = [&](int lv) {
    if (!st.indent) return;
    out += '\n';
    for (int k = 0; k < lv; ++k) out += *st.indent;
  };
  switch (v.kind) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.b ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.i); return;
    case Value::Kind::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f < 0 ? "-Infinity" : "Infinity") : py_float_repr(v.f);
      return;
    case Value::Kind::String: json_string(out, v.s, st.ensure_ascii); return;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      if (v.generator) fail_at(pos, "tojson: Object of type generator is not JSON serializable");
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += st.item_sep;
        newline(level + 1);
        to_json(out, (*v.list)[k], st, level + 1, pos);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, val] : v.dict->items) {
        std::string key;
        switch (k.kind) {
          case Value::Kind::String: key = k.s; break;
          case Value::Kind::Int: key = std::to_string(k.i); break;
          case Value::Kind::Float: key = py_float_repr(k.f); break;
          case Value::Kind::Bool: key = k.b ? "true" : "false"; break;
          case Value::Kind::None: key = "null"; break;
          default: fail_at(pos, "tojson: keys must be str, int, float, bool or None, not " + type_name(k));
        }
        items.emplace_back(std::move(key), &val);
      }
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += st.item_sep;
        newline(level + 1);
        json_string(out, items[k].first, st.ensure_ascii);
        out += st.key_sep;
        to_json(out, *items[k].second, st, level + 1, pos);
      }
      newline(level);
      out += '}';
      return;
    }
    default: fail_at(pos, "tojson: Object of type " + type_name(v) + " is not JSON serializable");
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<uint64_t>();
      return u > static_cast<uint64_t>(INT64_MAX) ? Value::number(static_cast<double>(u))
                                                   : Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.dict->set(Value::string(it.key()), from_json(it.value()));
      return d;
    }
    default: return Value::none();
  }
}

// ---------------------------------------------------------------- interpreter

struct LoopControl {
  enum Kind { Break, Continue } kind;
};

}  // namespace

class Interpreter {
 public:
  Interpreter(const RenderOptions& options) : opt_(options) { frames_.emplace_back(); }

  std::string run(const Body& body) {
    exec_body(body);
    return std::move(out_);
  }

  void set_global(const std::string& name, Value v) { frames_[0][name] = std::move(v); }

  // ---------------------------------------------------------- statements

  void step(Pos pos) {
    if (++steps_ > opt_.limits.max_steps)
      fail_at(pos, "the template ran more than " + std::to_string(opt_.limits.max_steps) + " steps (loop or recursion limit)");
  }

  void emit(const std::string& s, Pos pos) {
    out_ += s;
    if (static_cast<int64_t>(out_.size()) > opt_.limits.max_output_bytes)
      fail_at(pos, "the output exceeds " + std::to_string(opt_.limits.max_output_bytes) + " bytes");
  }

  void exec_body(const Body& body) {
    for (const NodePtr& n : body) exec(*n);
  }

  void exec(const Node& n) {
    step(n.pos);
    switch (n.kind) {
      case NodeKind::Text: emit(n.text, n.pos); return;
      case NodeKind::Output: emit(to_str(eval(*n.expr)), n.pos); return;
      case NodeKind::If:
        for (const auto& [cond, body] : n.branches)
          if (truthy(eval(*cond))) {
            exec_body(body);
            return;
          }
        exec_body(n.else_body);
        return;
      case NodeKind::For: exec_for(n); return;
      case NodeKind::Set: exec_set(n); return;
      case NodeKind::Macro: assign(n.name, make_macro(n, nullptr)); return;
      case NodeKind::CallBlock: {
        const Node* block = &n;
        // The macro the call expression calls gets `caller`.
        pending_caller_ = make_macro(n, block);
        Value result = eval(*n.expr);
        pending_caller_ = Value::undefined();
        emit(to_str(result), n.pos);
        return;
      }
      case NodeKind::FilterBlock: {
        std::string text = capture(n.body);
        emit(to_str(apply_filter_chain(*n.filter, Value::string(std::move(text)))), n.pos);
        return;
      }
      case NodeKind::With: {
        std::vector<Value> values;
        for (const auto& a : n.assignments) values.push_back(eval(*a.second));
        frames_.emplace_back();
        for (size_t k = 0; k < values.size(); ++k) frames_.back()[n.assignments[k].first] = values[k];
        try {
          exec_body(n.body);
        } catch (...) {
          frames_.pop_back();
          throw;
        }
        frames_.pop_back();
        return;
      }
      case NodeKind::Break:
        if (loop_depth_ == 0) fail_at(n.pos, "'break' outside of a loop");
        throw LoopControl{LoopControl::Break};
      case NodeKind::Continue:
        if (loop_depth_ == 0) fail_at(n.pos, "'continue' outside of a loop");
        throw LoopControl{LoopControl::Continue};
    }
  }

  std::string capture(const Body& body) {
    std::string saved;
    std::swap(saved, out_);
    try {
      exec_body(body);
    } catch (...) {
      std::swap(saved, out_);
      throw;
    }
    std::swap(saved, out_);
    return saved;
  }

  Value apply_filter_chain(const Expr& chain, Value operand) {
    // chain is Filter(Filter(null, ...), ...): apply innermost first.
    if (chain.children[0]) operand = apply_filter_chain(*chain.children[0], std::move(operand));
    CallArgs args = eval_args(chain.args, chain.pos);
    return apply_filter(chain.name, std::move(operand), args, chain.pos);
  }

  void assign(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }

  void assign_target(const Expr& target, const Value& v, Pos pos) {
    if (target.kind == ExprKind::Name) {
      assign(target.name, v);
    } else if (target.kind == ExprKind::GetAttr) {
      Value obj = eval(*target.children[0]);
      if (obj.kind != Value::Kind::Namespace)
        fail_at(target.pos, "cannot assign attribute on non-namespace object");
      obj.dict->set(Value::string(target.name), v);
    } else {
      // Tuple unpacking.
      std::vector<Value> items = iterate(v, pos);
      if (items.size() != target.children.size())
        fail_at(pos, items.size() > target.children.size()
                         ? "too many values to unpack (expected " + std::to_string(target.children.size()) + ")"
                         : "not enough values to unpack (expected " + std::to_string(target.children.size()) +
                               ", got " + std::to_string(items.size()) + ")");
      for (size_t k = 0; k < items.size(); ++k) assign_target(*target.children[k], items[k], pos);
    }
  }

  void exec_set(const Node& n) {
    Value v;
    if (n.expr) {
      v = eval(*n.expr);
    } else {
      v = Value::string(capture(n.body));
      if (n.filter) v = apply_filter_chain(*n.filter, std::move(v));
    }
    assign_target(*n.targets[0], v, n.pos);
  }

  void exec_for(const Node& n) {
    Value seq = eval(*n.expr);
    std::vector<Value> all = iterate(seq, n.expr->pos);
    std::vector<Value> items;
    if (n.filter) {
      for (Value& item : all) {
        step(n.pos);
        frames_.emplace_back();
        try {
          assign_target(*n.targets[0], item, n.pos);
          if (truthy(eval(*n.filter))) items.push_back(std::move(item));
        } catch (...) {
          frames_.pop_back();
          throw;
        }
        frames_.pop_back();
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      exec_body(n.else_body);
      return;
    }
    const auto length = static_cast<int64_t>(items.size());
    ++loop_depth_;
    struct LoopGuard {
      int& d;
      ~LoopGuard() { --d; }
    } guard{loop_depth_};
    auto last_changed = std::make_shared<std::optional<std::vector<Value>>>();
    for (int64_t k = 0; k < length; ++k) {
      step(n.pos);
      Value loop = Value::make_namespace();
      Dict& d = *loop.dict;
      d.set(Value::string("index"), Value::integer(k + 1));
      d.set(Value::string("index0"), Value::integer(k));
      d.set(Value::string("revindex"), Value::integer(length - k));
      d.set(Value::string("revindex0"), Value::integer(length - k - 1));
      d.set(Value::string("first"), Value::boolean(k == 0));
      d.set(Value::string("last"), Value::boolean(k == length - 1));
      d.set(Value::string("length"), Value::integer(length));
      d.set(Value::string("depth"), Value::integer(1));
      d.set(Value::string("depth0"), Value::integer(0));
      d.set(Value::string("previtem"), k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item"));
      d.set(Value::string("nextitem"), k + 1 < length ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item"));
      d.set(Value::string("cycle"), Value::callable(
                                        [k](Interpreter&, CallArgs& a) -> Value {
                                          if (a.positional.empty()) fail_at(a.pos, "no items for cycling given");
                                          return a.positional[static_cast<size_t>(k) % a.positional.size()];
                                        },
                                        "cycle"));
      d.set(Value::string("changed"), Value::callable(
                                          [last_changed](Interpreter&, CallArgs& a) -> Value {
                                            if (*last_changed && a.positional.size() == (*last_changed)->size()) {
                                              bool same = true;
                                              for (size_t q = 0; q < a.positional.size(); ++q)
                                                same = same && equals(a.positional[q], (**last_changed)[q]);
                                              if (same) return Value::boolean(false);
                                            }
                                            *last_changed = a.positional;
                                            return Value::boolean(true);
                                          },
                                          "changed"));
      frames_.emplace_back();
      bool stop = false;
      try {
        assign_target(*n.targets[0], items[static_cast<size_t>(k)], n.pos);
        frames_.back()["loop"] = std::move(loop);
        exec_body(n.body);
      } catch (const LoopControl& c) {
        stop = c.kind == LoopControl::Break;
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (stop) break;
    }
  }

  Value make_macro(const Node& n, const Node* call_block) {
    // A call block's caller() renders the block body; a macro renders its own.
    const Node* def = &n;
    const bool is_caller = call_block != nullptr;
    // A caller body sees the scope of its call site.
    const size_t defining_depth = is_caller ? base_ : 0;
    return Value::callable(
        [def, is_caller, defining_depth](Interpreter& in, CallArgs& a) -> Value {
          return in.call_macro(*def, is_caller, defining_depth, a);
        },
        n.name);
  }

  Value call_macro(const Node& def, bool is_caller, size_t defining_depth, CallArgs& a) {
    if (++call_depth_ > opt_.limits.max_call_depth) {
      --call_depth_;
      fail_at(a.pos, "macro calls nested deeper than " + std::to_string(opt_.limits.max_call_depth));
    }
    struct DepthGuard {
      int& d;
      ~DepthGuard() { --d; }
    } guard{call_depth_};
    const std::vector<Param>& params = def.params;
    std::unordered_map<std::string, Value> frame;
    std::vector<Value> varargs;
    for (size_t k = 0; k < a.positional.size(); ++k) {
      if (k < params.size()) {
        frame[params[k].name] = a.positional[k];
      } else {
        varargs.push_back(a.positional[k]);
      }
    }
    if (!is_caller && !pending_caller_.is_undefined()) {
      frame["caller"] = pending_caller_;
      pending_caller_ = Value::undefined();
    }
    Value kwargs = Value::make_dict();
    for (auto& kv : a.keyword) {
      const std::string& key = kv.first;  // named, not a structured binding: clang 14 cannot capture those
      const Value& val = kv.second;
      auto it = std::find_if(params.begin(), params.end(), [&](const Param& p) { return p.name == key; });
      if (it == params.end()) {
        kwargs.dict->set(Value::string(key), val);
      } else {
        if (frame.count(key)) fail_at(a.pos, "macro '" + def.name + "' got multiple values for argument '" + key + "'");
        frame[key] = val;
      }
    }
    // Caller blocks run in the scope of the call site; macros in a fresh scope
    // over the template's globals.
    const size_t saved_base = base_;
    base_ = is_caller ? defining_depth : frames_.size();
    frames_.emplace_back(std::move(frame));
    std::string text;
    try {
      auto& f = frames_.back();
      for (const Param& p : params) {
        if (f.count(p.name)) continue;
        f[p.name] = p.default_value ? eval(*p.default_value) : Value::undefined("'" + p.name + "' is undefined");
      }
      f["varargs"] = Value::make_list(std::move(varargs), /*tuple=*/true);
      f["kwargs"] = kwargs;
      text = capture(is_caller ? def.body : def.body);
    } catch (...) {
      frames_.pop_back();
      base_ = saved_base;
      throw;
    }
    frames_.pop_back();
    base_ = saved_base;
    return Value::string(std::move(text));
  }

  // ---------------------------------------------------------- expressions

  Value lookup(const std::string& name) const {
    for (size_t k = frames_.size(); k-- > 0;) {
      if (k < base_ && k != 0) continue;
      auto it = frames_[k].find(name);
      if (it != frames_[k].end()) return it->second;
    }
    if (Value g = builtin_global(name); !g.is_undefined()) return g;
    return Value::undefined("'" + name + "' is undefined");
  }

  [[noreturn]] static void undefined_error(const Value& v, Pos pos) {
    fail_at(pos, v.s.empty() ? "undefined value" : v.s);
  }

  std::vector<Value> iterate(const Value& v, Pos pos) {
    switch (v.kind) {
      case Value::Kind::Undefined: return {};
      case Value::Kind::List:
      case Value::Kind::Tuple: return *v.list;
      case Value::Kind::Dict: {
        std::vector<Value> keys;
        for (const auto& kv : v.dict->items) keys.push_back(kv.first);
        return keys;
      }
      case Value::Kind::String: {
        std::vector<Value> chars;
        for (auto& cp : code_points(v.s)) chars.push_back(Value::string(std::move(cp)));
        return chars;
      }
      default: fail_at(pos, "'" + type_name(v) + "' object is not iterable");
    }
  }

  CallArgs eval_args(const std::vector<Arg>& args, Pos pos) {
    CallArgs a;
    a.pos = pos;
    for (const Arg& arg : args) {
      if (arg.keyword.empty()) {
        a.positional.push_back(eval(*arg.value));
      } else {
        a.keyword.emplace_back(arg.keyword, eval(*arg.value));
      }
    }
    return a;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case ExprKind::Literal:
        switch (e.literal_kind) {
          case LiteralKind::None: return Value::none();
          case LiteralKind::Bool: return Value::boolean(e.int_value != 0);
          case LiteralKind::Int: return Value::integer(e.int_value);
          case LiteralKind::Float: return Value::number(e.float_value);
          case LiteralKind::String: return Value::string(e.str_value);
        }
        return Value::none();
      case ExprKind::Name: return lookup(e.name);
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (const auto& c : e.children) items.push_back(eval(*c));
        return Value::make_list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        Value d = Value::make_dict();
        for (size_t k = 0; k + 1 < e.children.size(); k += 2) {
          Value key = eval(*e.children[k]);
          if (key.is_sequence() && key.kind == Value::Kind::List) fail_at(e.children[k]->pos, "unhashable type: 'list'");
          if (key.is_mapping()) fail_at(e.children[k]->pos, "unhashable type: 'dict'");
          d.dict->set(key, eval(*e.children[k + 1]));
        }
        return d;
      }
      case ExprKind::GetAttr: return get_attr(eval(*e.children[0]), e.name, e.pos);
      case ExprKind::GetItem: {
        Value obj = eval(*e.children[0]);
        const Expr& idx = *e.children[1];
        if (idx.kind == ExprKind::Slice) return slice(obj, idx);
        return get_item(obj, eval(idx), e.pos);
      }
      case ExprKind::Slice: fail_at(e.pos, "unexpected slice");
      case ExprKind::Call: {
        Value callee = eval(*e.children[0]);
        CallArgs args = eval_args(e.args, e.pos);
        return call(callee, args, e.pos);
      }
      case ExprKind::Filter: {
        Value operand = e.children[0] ? eval(*e.children[0]) : Value::undefined();
        CallArgs args = eval_args(e.args, e.pos);
        return apply_filter(e.name, std::move(operand), args, e.pos);
      }
      case ExprKind::Test: {
        Value operand = e.children[0] ? eval(*e.children[0]) : Value::undefined();
        CallArgs args = eval_args(e.args, e.pos);
        bool r = apply_test(e.name, operand, args, e.pos);
        return Value::boolean(e.negated ? !r : r);
      }
      case ExprKind::Unary: {
        Value v = eval(*e.children[0]);
        if (v.is_undefined()) undefined_error(v, e.pos);
        if (!v.is_number()) fail_at(e.pos, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
        if (e.name == "+") return v.kind == Value::Kind::Bool ? Value::integer(v.b) : v;
        if (v.kind == Value::Kind::Float) return Value::number(-v.f);
        if (as_int(v) == INT64_MIN) fail_at(e.pos, "integer overflow");
        return Value::integer(-as_int(v));
      }
      case ExprKind::Binary: return binary(e.name, eval(*e.children[0]), eval(*e.children[1]), e.pos);
      case ExprKind::Compare: {
        Value left = eval(*e.children[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value right = eval(*e.children[k + 1]);
          if (!compare(e.ops[k], left, right, e.pos)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::And: {
        Value l = eval(*e.children[0]);
        return truthy(l) ? eval(*e.children[1]) : l;
      }
      case ExprKind::Or: {
        Value l = eval(*e.children[0]);
        return truthy(l) ? l : eval(*e.children[1]);
      }
      case ExprKind::Not: return Value::boolean(!truthy(eval(*e.children[0])));
      case ExprKind::CondExpr:
        if (truthy(eval(*e.children[1]))) return eval(*e.children[0]);
        if (e.children[2]) return eval(*e.children[2]);
        return Value::undefined("the inline if expression evaluated to false and no else section was defined");
      case ExprKind::Concat: {
        std::string s;
        for (const auto& c : e.children) {
          s += to_str(eval(*c));
          if (static_cast<int64_t>(s.size()) > opt_.limits.max_output_bytes) fail_at(e.pos, "string too long");
        }
        return Value::string(std::move(s));
      }
    }
    fail_at(e.pos, "unsupported expression");
  }

  Value call(const Value& callee, CallArgs& args, Pos pos) {
    step(pos);
    if (callee.is_undefined()) undefined_error(callee, pos);
    if (callee.kind != Value::Kind::Callable) fail_at(pos, "'" + type_name(callee) + "' object is not callable");
    return (*callee.fn)(*this, args);
  }

  bool compare(const std::string& op, const Value& a, const Value& b, Pos pos) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a, pos);
    if (op == "notin") return !contains(b, a, pos);
    const int c = order(a, b, op, pos);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  int order(const Value& a, const Value& b, const std::string& op, Pos pos) {
    if (a.is_number() && b.is_number()) {
      if (a.kind == Value::Kind::Float || b.kind == Value::Kind::Float) {
        const double x = as_double(a), y = as_double(b);
        return x < y ? -1 : x > y ? 1 : 0;
      }
      return as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b) ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) return a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
    if (a.kind == b.kind && a.is_sequence()) {
      for (size_t k = 0; k < a.list->size() && k < b.list->size(); ++k) {
        if (equals((*a.list)[k], (*b.list)[k])) continue;
        return order((*a.list)[k], (*b.list)[k], op, pos);
      }
      return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
    }
    if (a.is_undefined()) undefined_error(a, pos);
    if (b.is_undefined()) undefined_error(b, pos);
    fail_at(pos, "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
  }

  bool contains(const Value& container, const Value& item, Pos pos) {
    switch (container.kind) {
      case Value::Kind::Undefined: return false;
      case Value::Kind::String:
        if (!item.is_string())
          fail_at(pos, "'in <string>' requires string as left operand, not " + type_name(item));
        return container.s.find(item.s) != std::string::npos;
      case Value::Kind::List:
      case Value::Kind::Tuple:
        for (const Value& v : *container.list)
          if (equals(v, item)) return true;
        return false;
      case Value::Kind::Dict: return container.dict->find(item) != nullptr;
      default: fail_at(pos, "argument of type '" + type_name(container) + "' is not iterable");
    }
  }

  Value binary(const std::string& op, const Value& a, const Value& b, Pos pos) {
    if (a.is_undefined()) undefined_error(a, pos);
    if (b.is_undefined()) undefined_error(b, pos);
    auto type_error = [&]() -> Value {
      fail_at(pos, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
    };
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (static_cast<int64_t>(a.s.size() + b.s.size()) > opt_.limits.max_output_bytes) fail_at(pos, "string too long");
        // Markup + str escapes the str (markupsafe).
        if (a.safe || b.safe) return markup((a.safe ? a.s : html_escape(a.s)) + (b.safe ? b.s : html_escape(b.s)));
        return Value::string(a.s + b.s);
      }
      if (a.is_sequence() && a.kind == b.kind) {
        std::vector<Value> items = *a.list;
        items.insert(items.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(items), a.kind == Value::Kind::Tuple);
      }
    }
    if (op == "*") {
      const Value* seq = a.is_string() || a.is_sequence() ? &a : b.is_string() || b.is_sequence() ? &b : nullptr;
      const Value* count = seq == &a ? &b : &a;
      if (seq && (count->kind == Value::Kind::Int || count->kind == Value::Kind::Bool)) {
        const int64_t n = std::max<int64_t>(0, as_int(*count));
        const int64_t unit = seq->is_string() ? static_cast<int64_t>(seq->s.size()) : static_cast<int64_t>(seq->list->size());
        if (unit > 0 && n > opt_.limits.max_output_bytes / unit) fail_at(pos, "repetition result too long");
        if (seq->is_string()) {
          std::string s;
          for (int64_t k = 0; k < n; ++k) s += seq->s;
          return Value::string(std::move(s));
        }
        std::vector<Value> items;
        for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->list->begin(), seq->list->end());
        return Value::make_list(std::move(items), seq->kind == Value::Kind::Tuple);
      }
    }
    if (!a.is_number() || !b.is_number()) return type_error();
    const bool is_float = a.kind == Value::Kind::Float || b.kind == Value::Kind::Float;
    if (op == "/") {
      if (as_double(b) == 0) fail_at(pos, "division by zero");
      return Value::number(as_double(a) / as_double(b));
    }
    if (is_float) {
      const double x = as_double(a), y = as_double(b);
      if (op == "+") return Value::number(x + y);
      if (op == "-") return Value::number(x - y);
      if (op == "*") return Value::number(x * y);
      if (op == "**") return Value::number(std::pow(x, y));
      if (y == 0) fail_at(pos, "float division by zero");
      if (op == "//") return Value::number(std::floor(x / y));
      if (op == "%") {
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value::number(m);
      }
      return type_error();
    }
    const int64_t x = as_int(a), y = as_int(b);
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) fail_at(pos, "integer overflow");
      return Value::integer(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) fail_at(pos, "integer overflow");
      return Value::integer(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) fail_at(pos, "integer overflow");
      return Value::integer(r);
    }
    if (op == "**") {
      if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t acc = 1;
      for (int64_t k = 0; k < y; ++k) {
        if (__builtin_mul_overflow(acc, x, &acc)) fail_at(pos, "integer overflow");
        if (acc == 0 || acc == 1) break;
        if (acc == -1) {
          acc = ((y - k - 1) % 2 == 0) ? -1 : 1;
          break;
        }
      }
      return Value::integer(acc);
    }
    if (y == 0) fail_at(pos, "integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) fail_at(pos, "integer overflow");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    if (op == "//") return Value::integer(q);
    if (op == "%") return Value::integer(m);
    return type_error();
  }

  // Python index normalisation for slices.
  static void slice_indices(int64_t len, const Value& start, const Value& stop, int64_t step, int64_t& b, int64_t& e) {
    auto clamp = [&](const Value& v, int64_t def, bool is_start) {
      if (v.is_none() || v.is_undefined()) return def;
      int64_t x = as_int(v);
      if (x < 0) {
        x += len;
        if (x < 0) x = step < 0 ? -1 : 0;
      } else if (x >= len) {
        x = step < 0 ? len - 1 : len;
      }
      (void)is_start;
      return x;
    };
    b = clamp(start, step < 0 ? len - 1 : 0, true);
    e = clamp(stop, step < 0 ? -1 : len, false);
  }

  Value slice(const Value& obj, const Expr& s) {
    Value start = s.children[0] ? eval(*s.children[0]) : Value::none();
    Value stop = s.children[1] ? eval(*s.children[1]) : Value::none();
    Value stepv = s.children[2] ? eval(*s.children[2]) : Value::none();
    for (const Value* v : {&start, &stop, &stepv})
      if (!v->is_none() && v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool)
        fail_at(s.pos, "slice indices must be integers or None");
    const int64_t step = stepv.is_none() ? 1 : as_int(stepv);
    if (step == 0) fail_at(s.pos, "slice step cannot be zero");
    if (obj.is_undefined()) undefined_error(obj, s.pos);
    std::vector<std::string> cps;
    int64_t len = 0;
    if (obj.is_string()) {
      cps = code_points(obj.s);
      len = static_cast<int64_t>(cps.size());
    } else if (obj.is_sequence()) {
      len = static_cast<int64_t>(obj.list->size());
    } else {
      fail_at(s.pos, "'" + type_name(obj) + "' object is not subscriptable");
    }
    int64_t b = 0, e = 0;
    slice_indices(len, start, stop, step, b, e);
    std::vector<int64_t> idx;
    for (int64_t k = b; step > 0 ? k < e : k > e; k += step) idx.push_back(k);
    if (obj.is_string()) {
      std::string out;
      for (int64_t k : idx) out += cps[static_cast<size_t>(k)];
      return Value::string(std::move(out));
    }
    std::vector<Value> items;
    for (int64_t k : idx) items.push_back((*obj.list)[static_cast<size_t>(k)]);
    return Value::make_list(std::move(items), obj.kind == Value::Kind::Tuple);
  }

  Value get_item(const Value& obj, const Value& key, Pos pos) {
    switch (obj.kind) {
      case Value::Kind::Undefined: undefined_error(obj, pos);
      case Value::Kind::List:
      case Value::Kind::Tuple:
      case Value::Kind::String: {
        if (obj.generator) return Value::undefined("'generator object' has no element " + repr(key));
        if (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool) {
          int64_t k = as_int(key);
          if (obj.is_string()) {
            if (is_ascii(obj.s)) {
              const auto n = static_cast<int64_t>(obj.s.size());
              if (k < 0) k += n;
              if (k < 0 || k >= n) return Value::undefined(py_str_repr(obj.s) + " has no element " + std::to_string(as_int(key)));
              return Value::string(std::string(1, obj.s[static_cast<size_t>(k)]));
            }
            std::vector<std::string> cps = code_points(obj.s);
            const auto n = static_cast<int64_t>(cps.size());
            if (k < 0) k += n;
            if (k < 0 || k >= n) return Value::undefined("str object has no element " + std::to_string(as_int(key)));
            return Value::string(cps[static_cast<size_t>(k)]);
          }
          const auto n = static_cast<int64_t>(obj.list->size());
          if (k < 0) k += n;
          if (k < 0 || k >= n) return Value::undefined(type_name(obj) + " object has no element " + std::to_string(as_int(key)));
          return (*obj.list)[static_cast<size_t>(k)];
        }
        if (key.is_string()) return get_attr(obj, key.s, pos);
        return Value::undefined("'" + type_name(obj) + " object' has no element " + repr(key));
      }
      case Value::Kind::Dict: {
        if (const Value* v = obj.dict->find(key)) return *v;
        if (key.is_string()) return get_attr(obj, key.s, pos);
        return Value::undefined("'dict object' has no element " + repr(key));
      }
      case Value::Kind::Namespace:
        if (key.is_string()) return get_attr(obj, key.s, pos);
        return Value::undefined("'Namespace object' has no element " + repr(key));
      case Value::Kind::None: return Value::undefined("'None' has no attribute " + repr(key));
      default:
        return Value::undefined("'" + type_name(obj) + " object' has no element " + repr(key));
    }
  }

  Value get_attr(const Value& obj, const std::string& name, Pos pos) {
    switch (obj.kind) {
      case Value::Kind::Undefined: undefined_error(obj, pos);
      case Value::Kind::String:
        if (Value m = string_method(obj, name); !m.is_undefined()) return m;
        return Value::undefined("'str object' has no attribute '" + name + "'");
      case Value::Kind::Dict: {
        if (Value m = dict_method(obj, name); !m.is_undefined()) return m;
        if (const Value* v = obj.dict->find(Value::string(name))) return *v;
        return Value::undefined("'dict object' has no attribute '" + name + "'");
      }
      case Value::Kind::Namespace:
        if (const Value* v = obj.dict->find(Value::string(name))) return *v;
        return Value::undefined("'Namespace object' has no attribute '" + name + "'");
      case Value::Kind::None: return Value::undefined("'None' has no attribute '" + name + "'");
      default: return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
    }
  }

  // ---------------------------------------------------------- arguments

  struct ArgReader {
    CallArgs& a;
    const char* fn;
    size_t used_positional = 0;

    std::optional<Value> get(size_t index, const char* name) {
      for (auto& [k, v] : a.keyword)
        if (k == name) return v;
      if (index < a.positional.size()) {
        used_positional = std::max(used_positional, index + 1);
        return a.positional[index];
      }
      return std::nullopt;
    }
    Value get_or(size_t index, const char* name, Value def) {
      auto v = get(index, name);
      return v ? *v : def;
    }
    std::string get_string(size_t index, const char* name, std::string def) {
      auto v = get(index, name);
      if (!v || v->is_undefined()) return def;
      return to_str(*v);
    }
    std::optional<std::string> get_opt_string(size_t index, const char* name) {
      auto v = get(index, name);
      if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
      if (!v->is_string()) fail_at(a.pos, std::string(fn) + ": argument '" + name + "' must be a string");
      return v->s;
    }
    int64_t get_int(size_t index, const char* name, int64_t def) {
      auto v = get(index, name);
      if (!v || v->is_none()) return def;
      if (v->kind != Value::Kind::Int && v->kind != Value::Kind::Bool)
        fail_at(a.pos, std::string(fn) + ": argument '" + name + "' must be an integer");
      return as_int(*v);
    }
    bool get_bool(size_t index, const char* name, bool def) {
      auto v = get(index, name);
      return v ? truthy(*v) : def;
    }
  };

  Value bound(std::string name, std::function<Value(CallArgs&)> f) {
    return Value::callable([f = std::move(f)](Interpreter&, CallArgs& a) { return f(a); }, std::move(name));
  }

  // ---------------------------------------------------------- methods

  Value string_method(const Value& self, const std::string& name) {
    const std::string s = self.s;
    Interpreter* in = this;
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return bound(name, [s, l, r, name](CallArgs& a) {
        ArgReader ar{a, name.c_str()};
        return Value::string(py_strip(s, ar.get_opt_string(0, "chars"), l, r));
      });
    }
    if (name == "upper") return bound(name, [s](CallArgs&) { return Value::string(to_upper(s)); });
    if (name == "lower") return bound(name, [s](CallArgs&) { return Value::string(to_lower(s)); });
    if (name == "title") return bound(name, [s](CallArgs&) { return Value::string(py_title(s)); });
    if (name == "capitalize") return bound(name, [s](CallArgs&) { return Value::string(py_capitalize(s)); });
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      return bound(name, [s, starts](CallArgs& a) {
        if (a.positional.empty()) fail_at(a.pos, "startswith/endswith takes a prefix");
        const Value& p = a.positional[0];
        std::vector<std::string> options;
        if (p.is_string()) {
          options.push_back(p.s);
        } else if (p.kind == Value::Kind::Tuple) {
          for (const Value& v : *p.list) {
            if (!v.is_string()) fail_at(a.pos, "startswith/endswith: tuple items must be str");
            options.push_back(v.s);
          }
        } else {
          fail_at(a.pos, "startswith/endswith first arg must be str or a tuple of str, not " + type_name(p));
        }
        for (const std::string& o : options) {
          if (o.size() > s.size()) continue;
          if (starts ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0)
            return Value::boolean(true);
        }
        return Value::boolean(false);
      });
    }
    if (name == "split" || name == "rsplit") {
      const bool rev = name == "rsplit";
      return bound(name, [s, rev](CallArgs& a) {
        ArgReader ar{a, "split"};
        std::optional<std::string> sep = ar.get_opt_string(0, "sep");
        int64_t maxsplit = ar.get_int(1, "maxsplit", -1);
        std::vector<Value> parts;
        if (sep) {
          if (sep->empty()) fail_at(a.pos, "empty separator");
          if (!rev) {
            size_t pos = 0;
            while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
              size_t f = s.find(*sep, pos);
              if (f == std::string::npos) break;
              parts.push_back(Value::string(s.substr(pos, f - pos)));
              pos = f + sep->size();
            }
            parts.push_back(Value::string(s.substr(pos)));
          } else {
            size_t end = s.size();
            std::vector<Value> rparts;
            while (maxsplit < 0 || static_cast<int64_t>(rparts.size()) < maxsplit) {
              if (end < sep->size()) break;
              size_t f = s.rfind(*sep, end - sep->size());
              if (f == std::string::npos) break;
              rparts.push_back(Value::string(s.substr(f + sep->size(), end - f - sep->size())));
              end = f;
            }
            rparts.push_back(Value::string(s.substr(0, end)));
            parts.assign(rparts.rbegin(), rparts.rend());
          }
        } else {
          std::vector<std::string> cps = code_points(s);
          std::string word;
          bool in_word = false;
          size_t k = 0;
          for (; k < cps.size(); ++k) {
            if (is_space_cp(cps[k])) {
              if (in_word) {
                parts.push_back(Value::string(word));
                word.clear();
                in_word = false;
              }
            } else {
              if (!in_word && maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) break;
              word += cps[k];
              in_word = true;
            }
          }
          if (k < cps.size()) {
            std::string rest;
            for (; k < cps.size(); ++k) rest += cps[k];
            parts.push_back(Value::string(py_strip(rest, std::nullopt, false, true)));
          } else if (in_word) {
            parts.push_back(Value::string(word));
          }
        }
        return Value::make_list(std::move(parts));
      });
    }
    if (name == "splitlines") {
      return bound(name, [s](CallArgs&) {
        std::vector<Value> lines;
        size_t pos = 0;
        while (pos < s.size()) {
          size_t f = s.find_first_of("\n\r", pos);
          if (f == std::string::npos) {
            lines.push_back(Value::string(s.substr(pos)));
            break;
          }
          lines.push_back(Value::string(s.substr(pos, f - pos)));
          pos = f + ((s[f] == '\r' && f + 1 < s.size() && s[f + 1] == '\n') ? 2 : 1);
        }
        return Value::make_list(std::move(lines));
      });
    }
    if (name == "replace") {
      return bound(name, [s](CallArgs& a) {
        if (a.positional.size() < 2 || !a.positional[0].is_string() || !a.positional[1].is_string())
          fail_at(a.pos, "replace() takes two strings");
        ArgReader ar{a, "replace"};
        return Value::string(py_replace(s, a.positional[0].s, a.positional[1].s, ar.get_int(2, "count", -1)));
      });
    }
    if (name == "find" || name == "rfind" || name == "count" || name == "index") {
      return bound(name, [s, name](CallArgs& a) {
        if (a.positional.empty() || !a.positional[0].is_string()) fail_at(a.pos, name + "() takes a string");
        const std::string& sub = a.positional[0].s;
        if (name == "count") {
          if (sub.empty()) return Value::integer(py_len(s) + 1);
          int64_t n = 0;
          for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
          return Value::integer(n);
        }
        size_t f = name == "rfind" ? s.rfind(sub) : s.find(sub);
        if (f == std::string::npos) {
          if (name == "index") fail_at(a.pos, "substring not found");
          return Value::integer(-1);
        }
        return Value::integer(py_len(std::string_view(s).substr(0, f)));
      });
    }
    if (name == "join") {
      return bound(name, [s, in](CallArgs& a) {
        if (a.positional.empty()) fail_at(a.pos, "join() takes an iterable");
        std::string out;
        bool first = true;
        for (const Value& v : in->iterate(a.positional[0], a.pos)) {
          if (!v.is_string()) fail_at(a.pos, "sequence item: expected str instance, " + type_name(v) + " found");
          if (!first) out += s;
          out += v.s;
          first = false;
        }
        return Value::string(std::move(out));
      });
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" || name == "isupper" ||
        name == "islower") {
      return bound(name, [s, name](CallArgs&) {
        if (s.empty()) return Value::boolean(false);
        bool any_cased = false;
        for (char ch : s) {
          const auto c = static_cast<unsigned char>(ch);
          if (name == "isdigit" && !std::isdigit(c)) return Value::boolean(false);
          if (name == "isalpha" && !std::isalpha(c)) return Value::boolean(false);
          if (name == "isalnum" && !std::isalnum(c)) return Value::boolean(false);
          if (name == "isspace" && !is_space_cp(std::string(1, ch))) return Value::boolean(false);
          if (name == "isupper" && std::islower(c)) return Value::boolean(false);
          if (name == "islower" && std::isupper(c)) return Value::boolean(false);
          any_cased = any_cased || std::isalpha(c);
        }
        if (name == "isupper" || name == "islower") return Value::boolean(any_cased);
        return Value::boolean(true);
      });
    }
    if (name == "format") {
      return bound(name, [s](CallArgs& a) { return Value::string(str_format(s, a)); });
    }
    return Value::undefined();
  }

  // Python's str.format for {} / {N} / {name} fields (no format specs).
  static std::string str_format(const std::string& fmt, CallArgs& a) {
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

  Value dict_method(const Value& self, const std::string& name) {
    DictPtr d = self.dict;
    if (name == "items") {
      return bound(name, [d](CallArgs&) {
        std::vector<Value> items;
        for (const auto& [k, v] : d->items) items.push_back(Value::make_list({k, v}, true));
        return Value::make_list(std::move(items));
      });
    }
    if (name == "keys" || name == "values") {
      const bool keys = name == "keys";
      return bound(name, [d, keys](CallArgs&) {
        std::vector<Value> items;
        for (const auto& [k, v] : d->items) items.push_back(keys ? k : v);
        return Value::make_list(std::move(items));
      });
    }
    if (name == "get") {
      return bound(name, [d](CallArgs& a) {
        if (a.positional.empty()) fail_at(a.pos, "get() takes a key");
        if (const Value* v = d->find(a.positional[0])) return *v;
        return a.positional.size() > 1 ? a.positional[1] : Value::none();
      });
    }
    if (name == "copy") {
      return bound(name, [d](CallArgs&) {
        Value c = Value::make_dict();
        *c.dict = *d;
        return c;
      });
    }
    return Value::undefined();
  }

  // ---------------------------------------------------------- globals

  Value builtin_global(const std::string& name) const {
    if (name == "range") {
      return Value::callable(
          [](Interpreter& in, CallArgs& a) -> Value {
            for (const Value& v : a.positional)
              if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
                fail_at(a.pos, "range(): '" + type_name(v) + "' object cannot be interpreted as an integer");
            int64_t start = 0, stop = 0, step = 1;
            if (a.positional.size() == 1) {
              stop = as_int(a.positional[0]);
            } else if (a.positional.size() == 2 || a.positional.size() == 3) {
              start = as_int(a.positional[0]);
              stop = as_int(a.positional[1]);
              if (a.positional.size() == 3) step = as_int(a.positional[2]);
            } else {
              fail_at(a.pos, "range expected 1 to 3 arguments");
            }
            if (step == 0) fail_at(a.pos, "range() arg 3 must not be zero");
            std::vector<Value> items;
            for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
              items.push_back(Value::integer(k));
              in.step(a.pos);
              if (__builtin_add_overflow(k, step, &k)) break;
              k -= step;
            }
            return Value::make_list(std::move(items));
          },
          "range");
    }
    if (name == "namespace" || name == "dict") {
      const bool ns = name == "namespace";
      return Value::callable(
          [ns](Interpreter&, CallArgs& a) -> Value {
            Value v = ns ? Value::make_namespace() : Value::make_dict();
            for (const Value& p : a.positional) {
              if (p.kind != Value::Kind::Dict) fail_at(a.pos, "namespace()/dict() positional argument must be a dict");
              for (const auto& kv : p.dict->items) v.dict->set(kv.first, kv.second);
            }
            for (const auto& [k, val] : a.keyword) v.dict->set(Value::string(k), val);
            return v;
          },
          name);
    }
    if (name == "raise_exception") {
      return Value::callable(
          [](Interpreter&, CallArgs& a) -> Value {
            fail_at(a.pos, "raise_exception: " + (a.positional.empty() ? std::string() : to_str(a.positional[0])));
          },
          name);
    }
    if (name == "strftime_now") {
      return Value::callable(
          [](Interpreter& in, CallArgs& a) -> Value {
            if (a.positional.empty() || !a.positional[0].is_string()) fail_at(a.pos, "strftime_now() takes a format string");
            std::time_t t = in.opt_.now ? static_cast<std::time_t>(*in.opt_.now) : std::time(nullptr);
            std::tm tm{};
            localtime_r(&t, &tm);
            char buf[512];
            const std::string& fmt = a.positional[0].s;
            if (fmt.size() > 200) fail_at(a.pos, "strftime_now(): format too long");
            size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
            return Value::string(std::string(buf, n));
          },
          name);
    }
    return Value::undefined();
  }

  // ---------------------------------------------------------- filters

  // The value of an attribute path "a.b.0" as jinja2's make_attrgetter.
  Value attr_path(const Value& v, const std::string& path, Pos pos) {
    Value cur = v;
    size_t start = 0;
    while (true) {
      size_t dot = path.find('.', start);
      std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
      if (cur.is_undefined()) return cur;
      cur = numeric && part.size() < 18 ? get_item(cur, Value::integer(std::stoll(part)), pos) : get_item(cur, Value::string(part), pos);
      if (dot == std::string::npos) return cur;
      start = dot + 1;
    }
  }

  std::vector<Value> select_items(const std::vector<Value>& items, CallArgs& a, bool select, bool by_attr, Pos pos) {
    std::string attr;
    size_t k = 0;
    if (by_attr) {
      if (a.positional.empty()) fail_at(pos, "selectattr/rejectattr need an attribute");
      attr = to_str(a.positional[0]);
      k = 1;
    }
    std::optional<std::string> test;
    if (k < a.positional.size()) test = to_str(a.positional[k++]);
    CallArgs rest;
    rest.pos = pos;
    rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(k, a.positional.size())), a.positional.end());
    rest.keyword = a.keyword;
    std::vector<Value> out;
    for (const Value& item : items) {
      step(pos);
      Value v = by_attr ? attr_path(item, attr, pos) : item;
      bool r = test ? apply_test(*test, v, rest, pos) : truthy(v);
      if (r == select) out.push_back(item);
    }
    return out;
  }

  static Value generator(std::vector<Value> items) {
    Value g = Value::make_list(std::move(items));
    g.generator = true;
    return g;
  }

  static Value markup(std::string s) {
    Value v = Value::string(std::move(s));
    v.safe = true;
    return v;
  }

  static std::string html_escape(const std::string& s) {
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

  Value apply_filter(const std::string& name, Value v, CallArgs& a, Pos pos) {
    step(pos);
    ArgReader ar{a, name.c_str()};
    auto need_string = [&]() -> std::string {
      return to_str(v);
    };
    auto items_of = [&]() { return iterate(v, pos); };
    if (name == "safe") return v.is_string() && v.safe ? v : markup(to_str(v));
    if (name == "string") return v.is_string() ? v : Value::string(to_str(v));
    if (name == "trim") return Value::string(py_strip(need_string(), ar.get_opt_string(0, "chars"), true, true));
    if (name == "upper") return Value::string(to_upper(need_string()));
    if (name == "lower") return Value::string(to_lower(need_string()));
    if (name == "capitalize") return Value::string(py_capitalize(need_string()));
    if (name == "title") {
      // jinja2: words split at whitespace and -({[< ; first letter up, rest down.
      std::string s = need_string(), out;
      bool word_start = true;
      for (char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (std::isspace(c) || ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<') {
          out += ch;
          word_start = true;
        } else {
          out += static_cast<char>(word_start ? std::toupper(c) : std::tolower(c));
          word_start = false;
        }
      }
      return Value::string(out);
    }
    if (name == "length" || name == "count") {
      switch (v.kind) {
        case Value::Kind::Undefined: return Value::integer(0);
        case Value::Kind::String: return Value::integer(py_len(v.s));
        case Value::Kind::List:
        case Value::Kind::Tuple:
          if (v.generator) fail_at(pos, "object of type 'generator' has no len()");
          return Value::integer(static_cast<int64_t>(v.list->size()));
        case Value::Kind::Dict: return Value::integer(static_cast<int64_t>(v.dict->items.size()));
        default: fail_at(pos, "object of type '" + type_name(v) + "' has no len()");
      }
    }
    if (name == "tojson") {
      JsonStyle st;
      st.ensure_ascii = ar.get_bool(0, "ensure_ascii", false);
      if (auto ind = ar.get(1, "indent"); ind && !ind->is_none()) {
        if (ind->kind == Value::Kind::Int) {
          st.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(ind->i, 0, 64)), ' ');
        } else if (ind->is_string()) {
          st.indent = ind->s;
        } else {
          fail_at(pos, "tojson: indent must be an int or a string");
        }
        st.item_sep = ",";
      }
      if (auto sep = ar.get(2, "separators"); sep && !sep->is_none()) {
        if (!sep->is_sequence() || sep->list->size() != 2 || !(*sep->list)[0].is_string() || !(*sep->list)[1].is_string())
          fail_at(pos, "tojson: separators must be a pair of strings");
        st.item_sep = (*sep->list)[0].s;
        st.key_sep = (*sep->list)[1].s;
      }
      st.sort_keys = ar.get_bool(3, "sort_keys", false);
      std::string out;
      to_json(out, v, st, 0, pos);
      return Value::string(std::move(out));
    }
    if (name == "items") {
      if (v.is_undefined()) return Value::make_list();
      if (v.kind != Value::Kind::Dict) fail_at(pos, "items: can only get item pairs from a mapping");
      return (*dict_method(v, "items").fn)(*this, a);
    }
    if (name == "default" || name == "d") {
      Value def = ar.get_or(0, "default_value", Value::string(""));
      const bool boolean = ar.get_bool(1, "boolean", false);
      if (v.is_undefined() || (boolean && !truthy(v))) return def;
      return v;
    }
    if (name == "first" || name == "last") {
      std::vector<Value> items = items_of();
      if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::make_list(items_of());
    if (name == "unique") {
      const bool case_sensitive = ar.get_bool(0, "case_sensitive", false);
      auto attr = ar.get_opt_string(1, "attribute");
      std::vector<Value> out, keys;
      for (const Value& item : items_of()) {
        Value key = attr ? attr_path(item, *attr, pos) : item;
        if (!case_sensitive && key.is_string()) key = Value::string(to_lower(key.s));
        bool seen = false;
        for (const Value& k : keys) seen = seen || equals(k, key);
        if (!seen) {
          keys.push_back(key);
          out.push_back(item);
        }
      }
      return generator(std::move(out));
    }
    if (name == "join") {
      std::string sep = ar.get_string(0, "d", "");
      auto attr = ar.get_opt_string(1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& item : items_of()) {
        if (!first) out += sep;
        out += to_str(attr ? attr_path(item, *attr, pos) : item);
        first = false;
        if (static_cast<int64_t>(out.size()) > opt_.limits.max_output_bytes) fail_at(pos, "string too long");
      }
      return Value::string(std::move(out));
    }
    if (name == "replace") {
      if (a.positional.size() < 2) fail_at(pos, "replace needs old and new strings");
      std::string s = need_string();
      std::string r = py_replace(s, to_str(a.positional[0]), to_str(a.positional[1]), ar.get_int(2, "count", -1));
      if (static_cast<int64_t>(r.size()) > opt_.limits.max_output_bytes) fail_at(pos, "string too long");
      return Value::string(std::move(r));
    }
    if (name == "reverse") {
      if (v.is_string()) {
        std::vector<std::string> cps = code_points(v.s);
        std::string out;
        for (size_t k = cps.size(); k-- > 0;) out += cps[k];
        return Value::string(out);
      }
      std::vector<Value> items = items_of();
      std::reverse(items.begin(), items.end());
      return Value::make_list(std::move(items));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attr = name.size() > 6;
      return generator(truthy(v) ? select_items(items_of(), a, name[0] == 's', by_attr, pos) : std::vector<Value>{});
    }
    if (name == "map") {
      std::vector<Value> out;
      auto attr = ar.get_opt_string(99, "attribute");
      if (attr) {
        Value def = ar.get_or(99, "default", Value::undefined());
        for (const Value& item : truthy(v) ? items_of() : std::vector<Value>{}) {
          Value x = attr_path(item, *attr, pos);
          out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
        }
        return generator(std::move(out));
      }
      if (a.positional.empty()) fail_at(pos, "map: needs a filter name or attribute=");
      std::string filter = to_str(a.positional[0]);
      CallArgs rest;
      rest.pos = pos;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.keyword = a.keyword;
      for (const Value& item : truthy(v) ? items_of() : std::vector<Value>{}) {
        CallArgs copy = rest;
        out.push_back(apply_filter(filter, item, copy, pos));
      }
      return generator(std::move(out));
    }
    if (name == "int") {
      const Value def = ar.get_or(0, "default", Value::integer(0));
      switch (v.kind) {
        case Value::Kind::Int: return v;
        case Value::Kind::Bool: return Value::integer(v.b);
        case Value::Kind::Float:
          if (!std::isfinite(v.f) || std::fabs(v.f) > 9.2e18) return def;
          return Value::integer(static_cast<int64_t>(v.f));
        case Value::Kind::String: {
          std::string s = py_strip(v.s, std::nullopt, true, true);
          char* end = nullptr;
          errno = 0;
          long long x = std::strtoll(s.c_str(), &end, 10);
          if (!s.empty() && end && *end == '\0' && errno == 0) return Value::integer(x);
          double d = std::strtod(s.c_str(), &end);
          if (!s.empty() && end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18)
            return Value::integer(static_cast<int64_t>(d));
          return def;
        }
        default: return def;
      }
    }
    if (name == "float") {
      const Value def = ar.get_or(0, "default", Value::number(0.0));
      if (v.is_number()) return Value::number(as_double(v));
      if (v.is_string()) {
        std::string s = py_strip(v.s, std::nullopt, true, true);
        char* end = nullptr;
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == '\0') return Value::number(d);
      }
      return def;
    }
    if (name == "abs") {
      if (v.kind == Value::Kind::Float) return Value::number(std::fabs(v.f));
      if (!v.is_number()) fail_at(pos, "bad operand type for abs(): '" + type_name(v) + "'");
      if (as_int(v) == INT64_MIN) fail_at(pos, "integer overflow");
      return Value::integer(std::llabs(as_int(v)));
    }
    if (name == "round") {
      const int64_t precision = ar.get_int(0, "precision", 0);
      const std::string method = ar.get_string(1, "method", "common");
      if (!v.is_number()) fail_at(pos, "round: value must be a number");
      const double x = as_double(v);
      const double m = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
      double r;
      if (method == "common") {
        r = std::round(x * m) / m;  // Python rounds half to even on the exact binary value
        const double scaled = x * m;
        if (std::fabs(scaled - std::trunc(scaled)) == 0.5) r = 2.0 * std::round(scaled / 2.0) / m;
      } else if (method == "ceil") {
        r = std::ceil(x * m) / m;
      } else if (method == "floor") {
        r = std::floor(x * m) / m;
      } else {
        fail_at(pos, "round: method must be common, ceil or floor");
      }
      return Value::number(r);
    }
    if (name == "escape" || name == "e" || name == "forceescape") {
      if (v.is_string() && v.safe && name != "forceescape") return v;
      return markup(html_escape(to_str(v)));
    }
    if (name == "dictsort") {
      if (v.kind != Value::Kind::Dict) fail_at(pos, "dictsort: value must be a dict");
      const bool case_sensitive = ar.get_bool(0, "case_sensitive", false);
      const std::string by = ar.get_string(1, "by", "key");
      const bool reverse = ar.get_bool(2, "reverse", false);
      std::vector<std::pair<Value, Value>> items = v.dict->items;
      const bool by_value = by == "value";
      auto key_of = [&](const std::pair<Value, Value>& kv) {
        Value k = by_value ? kv.second : kv.first;
        if (!case_sensitive && k.is_string()) k = Value::string(to_lower(k.s));
        return k;
      };
      std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
        int c = order(key_of(x), key_of(y), "<", pos);
        return reverse ? c > 0 : c < 0;
      });
      std::vector<Value> out;
      for (auto& [k, val] : items) out.push_back(Value::make_list({k, val}, true));
      return Value::make_list(std::move(out));
    }
    if (name == "sort") {
      const bool reverse = ar.get_bool(0, "reverse", false);
      const bool case_sensitive = ar.get_bool(1, "case_sensitive", false);
      auto attr = ar.get_opt_string(2, "attribute");
      std::vector<Value> items = items_of();
      auto key_of = [&](const Value& x) {
        Value k = attr ? attr_path(x, *attr, pos) : x;
        if (!case_sensitive && k.is_string()) k = Value::string(to_lower(k.s));
        return k;
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        int c = order(key_of(x), key_of(y), "<", pos);
        return reverse ? c > 0 : c < 0;
      });
      return Value::make_list(std::move(items));
    }
    if (name == "sum") {
      auto attr = ar.get_opt_string(0, "attribute");
      Value acc = ar.get_or(1, "start", Value::integer(0));
      for (const Value& item : items_of()) acc = binary("+", acc, attr ? attr_path(item, *attr, pos) : item, pos);
      return acc;
    }
    if (name == "min" || name == "max") {
      std::vector<Value> items = items_of();
      if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
      Value best = items[0];
      for (const Value& x : items) {
        int c = order(x, best, "<", pos);
        if (name == "min" ? c < 0 : c > 0) best = x;
      }
      return best;
    }
    if (name == "indent") {
      std::string width = "    ";
      if (auto w = ar.get(0, "width"); w && !w->is_none()) {
        if (w->is_string()) {
          width = w->s;
        } else {
          width = std::string(static_cast<size_t>(std::clamp<int64_t>(as_int(*w), 0, 256)), ' ');
        }
      }
      const bool first = ar.get_bool(1, "first", false);
      const bool blank = ar.get_bool(2, "blank", false);
      std::string s = to_str(v), out;
      std::vector<std::string> lines;
      size_t p = 0;
      while (true) {
        size_t f = s.find('\n', p);
        lines.push_back(s.substr(p, f == std::string::npos ? std::string::npos : f - p));
        if (f == std::string::npos) break;
        p = f + 1;
      }
      for (size_t k = 0; k < lines.size(); ++k) {
        if (k) out += '\n';
        const bool indent_it = (k > 0 || first) && (blank || !py_strip(lines[k], std::nullopt, true, true).empty());
        if (indent_it) out += width;
        out += lines[k];
      }
      return Value::string(out);
    }
    if (name == "attr") {
      if (a.positional.empty()) fail_at(pos, "attr needs a name");
      return get_attr(v, to_str(a.positional[0]), pos);
    }
    if (name == "format") {
      return Value::string(percent_format(to_str(v), a, pos));
    }
    if (name == "wordcount") {
      // jinja2 counts \w+ runs; letters of other scripts count, symbols and emoji do not.
      int64_t n = 0;
      bool in_word = false;
      for (const std::string& cp : code_points(to_str(v))) {
        uint32_t c = static_cast<unsigned char>(cp[0]);
        if (cp.size() > 1) {
          c &= 0xFF >> (cp.size() + 1);
          for (size_t k = 1; k < cp.size(); ++k) c = (c << 6) | (static_cast<unsigned char>(cp[k]) & 0x3F);
        }
        const bool w = c < 0x80 ? (std::isalnum(static_cast<int>(c)) || c == '_')
                                : (c >= 0xC0 && c < 0x2000 && c != 0xD7 && c != 0xF7) || (c >= 0x3040 && c < 0xA000) ||
                                      (c >= 0xAC00 && c < 0xD7A4);
        if (w && !in_word) ++n;
        in_word = w;
      }
      return Value::integer(n);
    }
    if (name == "batch" || name == "slice" || name == "groupby" || name == "truncate" || name == "wordwrap" ||
        name == "urlencode" || name == "xmlattr" || name == "striptags" || name == "filesizeformat" ||
        name == "pprint" || name == "random" || name == "center" || name == "urlize")
      fail_at(pos, "the filter '" + name + "' is not supported");
    fail_at(pos, "no filter named '" + name + "'");
  }

  // Python's "%s" % args for the format filter.
  std::string percent_format(const std::string& fmt, CallArgs& a, Pos pos) {
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

  // ---------------------------------------------------------- tests

  bool apply_test(const std::string& name, const Value& v, CallArgs& a, Pos pos) {
    auto arg0 = [&]() -> const Value& {
      if (a.positional.empty()) fail_at(pos, "the test '" + name + "' needs an argument");
      return a.positional[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "number") return v.is_number();
    if (name == "integer") return v.kind == Value::Kind::Int;
    if (name == "float") return v.kind == Value::Kind::Float;
    if (name == "boolean") return v.kind == Value::Kind::Bool;
    if (name == "true") return v.kind == Value::Kind::Bool && v.b;
    if (name == "false") return v.kind == Value::Kind::Bool && !v.b;
    if (name == "mapping") return v.kind == Value::Kind::Dict;
    if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_sequence() || v.kind == Value::Kind::Dict;
    if (name == "sequence")
      return v.is_undefined() || v.is_string() || (v.is_sequence() && !v.generator) || v.kind == Value::Kind::Dict;
    if (name == "callable") return v.kind == Value::Kind::Callable;
    if (name == "escaped") return false;
    if (name == "sameas") {
      const Value& o = arg0();
      if (v.kind != o.kind) return false;
      if (v.is_none() || v.is_undefined()) return true;
      if (v.kind == Value::Kind::Bool) return v.b == o.b;
      if (v.is_sequence()) return v.list == o.list;
      if (v.is_mapping()) return v.dict == o.dict;
      return false;
    }
    if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg0());
    if (name == "ne" || name == "!=") return !equals(v, arg0());
    if (name == "lt" || name == "lessthan" || name == "<") return order(v, arg0(), "<", pos) < 0;
    if (name == "le" || name == "<=") return order(v, arg0(), "<=", pos) <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return order(v, arg0(), ">", pos) > 0;
    if (name == "ge" || name == ">=") return order(v, arg0(), ">=", pos) >= 0;
    if (name == "in") return contains(arg0(), v, pos);
    if (name == "even" || name == "odd" || name == "divisibleby") {
      if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool) {
        if (v.is_undefined()) undefined_error(v, pos);
        fail_at(pos, "the test '" + name + "' needs an integer");
      }
      int64_t m = 2;
      if (name == "divisibleby") {
        const Value& d = arg0();
        if (d.kind != Value::Kind::Int || d.i == 0) fail_at(pos, "divisibleby needs a nonzero integer");
        m = d.i;
      }
      const int64_t r = m == -1 ? 0 : as_int(v) % m;
      return name == "odd" ? r != 0 : r == 0;
    }
    if (name == "lower") return to_str(v) == to_lower(to_str(v));
    if (name == "upper") return to_str(v) == to_upper(to_str(v));
    if (name == "filter" || name == "test") {
      static const char* const kFilters[] = {"safe", "string", "trim", "upper", "lower", "capitalize", "title", "length",
                                             "count", "tojson", "items", "default", "d", "first", "last", "list",
                                             "unique", "join", "replace", "reverse", "select", "reject", "selectattr",
                                             "rejectattr", "map", "int", "float", "abs", "round", "escape", "e",
                                             "dictsort", "sort", "sum", "min", "max", "indent", "attr", "format",
                                             "wordcount", "forceescape"};
      static const char* const kTests[] = {"defined", "undefined", "none", "string", "number", "integer", "float",
                                           "boolean", "true", "false", "mapping", "iterable", "sequence", "callable",
                                           "escaped", "sameas", "eq", "equalto", "ne", "lt", "lessthan", "le", "gt",
                                           "greaterthan", "ge", "in", "even", "odd", "divisibleby", "lower", "upper",
                                           "filter", "test"};
      const std::string n = to_str(v);
      if (name == "filter") return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const char* f) { return n == f; });
      return std::any_of(std::begin(kTests), std::end(kTests), [&](const char* f) { return n == f; });
    }
    fail_at(pos, "no test named '" + name + "'");
  }

 private:
  const RenderOptions& opt_;
  std::vector<std::unordered_map<std::string, Value>> frames_;
  size_t base_ = 0;
  Value pending_caller_;  // frames below this (except the globals) are invisible (macro scope)
  std::string out_;
  int64_t steps_ = 0;
  int loop_depth_ = 0;
  int call_depth_ = 0;
};

// ---------------------------------------------------------------- API

ChatTemplate::ChatTemplate(std::string_view source) : program_(parse_template(source)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const RenderOptions& options) const {
  Interpreter in(options);
  in.set_global("messages", from_json(messages));
  in.set_global("add_generation_prompt", Value::boolean(options.add_generation_prompt));
  in.set_global("bos_token", Value::string(options.bos_token));
  in.set_global("eos_token", Value::string(options.eos_token));
  in.set_global("tools", Value::none());
  in.set_global("documents", Value::none());
  if (options.extra.is_object())
    for (auto it = options.extra.begin(); it != options.extra.end(); ++it) in.set_global(it.key(), from_json(it.value()));
  try {
    return in.run(program_->body);
  } catch (const LoopControl&) {
    throw TemplateError(1, 1, "'break' or 'continue' outside of a loop");
  }
}

// llama.cpp's built-in chatml template, written in Jinja.
ChatTemplate ChatTemplate::chatml() {
  return ChatTemplate(
      "{%- for message in messages -%}"
      "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
      "{%- endfor -%}"
      "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}");
}

std::string render_chat(const ChatTemplate& tmpl, const std::vector<Message>& messages, bool add_generation_prompt,
                        const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const Message& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  RenderOptions options;
  options.add_generation_prompt = add_generation_prompt;
  options.bos_token = tmpl.bos_token();
  options.eos_token = tmpl.eos_token();
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "messages") {
        msgs = it.value();
      } else {
        options.extra[it.key()] = it.value();
      }
    }
  }
  return tmpl.render(msgs, options);
}

}  // namespace lumen::chat
