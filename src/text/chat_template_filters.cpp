// The chat-template filters as a name -> function table: jinja2's filters
// that chat templates use, with its argument names and defaults. A filter is
// one function and one entry in filters(); aliases share a function and tell
// themselves apart by call.name.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "chat_template_interpreter.h"

namespace lumen::chat {

namespace {

// The value of an attribute path "a.b.0" as jinja2's make_attrgetter.
Value attr_path(Interpreter& in, const Value& v, const std::string& path, Pos pos) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (cur.is_undefined()) return cur;
    cur = numeric && part.size() < 18 ? in.get_item(cur, Value::integer(std::stoll(part)), pos) : in.get_item(cur, Value::string(part), pos);
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::vector<Value> select_items(Interpreter& in, const std::vector<Value>& items, CallArgs& a, bool select, bool by_attr, Pos pos) {
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
    in.step(pos);
    Value v = by_attr ? attr_path(in, item, attr, pos) : item;
    bool r = test ? in.apply_test(*test, v, rest, pos) : truthy(v);
    if (r == select) out.push_back(item);
  }
  return out;
}

Value generator(std::vector<Value> items) {
  Value g = Value::make_list(std::move(items));
  g.generator = true;
  return g;
}

// What a filter sees: the value, its arguments, the name it was called by.
struct FilterCall {
  Interpreter& in;
  const std::string& name;
  Value v;
  CallArgs& a;
  Pos pos;
  ArgReader ar;

  std::string text() const { return to_str(v); }
  std::vector<Value> items() const { return in.iterate(v, pos); }
};

using Filter = Value (*)(FilterCall&);

Value do_safe(FilterCall& call) { return call.v.is_string() && call.v.safe ? call.v : markup(to_str(call.v)); }
Value do_string(FilterCall& call) { return call.v.is_string() ? call.v : Value::string(to_str(call.v)); }

Value do_trim(FilterCall& call) {
  return Value::string(py_strip(call.text(), call.ar.get_opt_string(0, "chars"), true, true));
}

Value do_upper(FilterCall& call) { return Value::string(to_upper(call.text())); }
Value do_lower(FilterCall& call) { return Value::string(to_lower(call.text())); }
Value do_capitalize(FilterCall& call) { return Value::string(py_capitalize(call.text())); }

// jinja2: words split at whitespace and -({[< ; first letter up, rest down.
Value do_title(FilterCall& call) {
  std::string s = call.text(), out;
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

Value do_length(FilterCall& call) {
  switch (call.v.kind) {
    case Value::Kind::Undefined: return Value::integer(0);
    case Value::Kind::String: return Value::integer(py_len(call.v.s));
    case Value::Kind::List:
    case Value::Kind::Tuple:
      if (call.v.generator) fail_at(call.pos, "object of type 'generator' has no len()");
      return Value::integer(static_cast<int64_t>(call.v.list->size()));
    case Value::Kind::Dict: return Value::integer(static_cast<int64_t>(call.v.dict->items.size()));
    default: fail_at(call.pos, "object of type '" + type_name(call.v) + "' has no len()");
  }
}

Value do_tojson(FilterCall& call) {
  JsonStyle st;
  st.ensure_ascii = call.ar.get_bool(0, "ensure_ascii", false);
  if (auto ind = call.ar.get(1, "indent"); ind && !ind->is_none()) {
    if (ind->kind == Value::Kind::Int) {
      st.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(ind->i, 0, 64)), ' ');
    } else if (ind->is_string()) {
      st.indent = ind->s;
    } else {
      fail_at(call.pos, "tojson: indent must be an int or a string");
    }
    st.item_sep = ",";
  }
  if (auto sep = call.ar.get(2, "separators"); sep && !sep->is_none()) {
    if (!sep->is_sequence() || sep->list->size() != 2 || !(*sep->list)[0].is_string() || !(*sep->list)[1].is_string())
      fail_at(call.pos, "tojson: separators must be a pair of strings");
    st.item_sep = (*sep->list)[0].s;
    st.key_sep = (*sep->list)[1].s;
  }
  st.sort_keys = call.ar.get_bool(3, "sort_keys", false);
  std::string out;
  to_json(out, call.v, st, 0, call.pos);
  return Value::string(std::move(out));
}

Value do_items(FilterCall& call) {
  if (call.v.is_undefined()) return Value::make_list();
  if (call.v.kind != Value::Kind::Dict) fail_at(call.pos, "items: can only get item pairs from a mapping");
  return (*dict_method(call.v, "items").fn)(call.in, call.a);
}

Value do_default(FilterCall& call) {
  Value def = call.ar.get_or(0, "default_value", Value::string(""));
  const bool boolean = call.ar.get_bool(1, "boolean", false);
  if (call.v.is_undefined() || (boolean && !truthy(call.v))) return def;
  return call.v;
}

Value do_first_or_last(FilterCall& call) {
  std::vector<Value> items = call.items();
  if (items.empty()) return Value::undefined("No " + call.name + " item, sequence was empty.");
  return call.name == "first" ? items.front() : items.back();
}

Value do_list(FilterCall& call) { return Value::make_list(call.items()); }

Value do_unique(FilterCall& call) {
  const bool case_sensitive = call.ar.get_bool(0, "case_sensitive", false);
  auto attr = call.ar.get_opt_string(1, "attribute");
  std::vector<Value> out, keys;
  for (const Value& item : call.items()) {
    Value key = attr ? attr_path(call.in, item, *attr, call.pos) : item;
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

Value do_join(FilterCall& call) {
  std::string sep = call.ar.get_string(0, "d", "");
  auto attr = call.ar.get_opt_string(1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : call.items()) {
    if (!first) out += sep;
    out += to_str(attr ? attr_path(call.in, item, *attr, call.pos) : item);
    first = false;
    if (static_cast<int64_t>(out.size()) > call.in.options().limits.max_output_bytes) fail_at(call.pos, "string too long");
  }
  return Value::string(std::move(out));
}

Value do_replace(FilterCall& call) {
  if (call.a.positional.size() < 2) fail_at(call.pos, "replace needs old and new strings");
  std::string s = call.text();
  std::string r = py_replace(s, to_str(call.a.positional[0]), to_str(call.a.positional[1]), call.ar.get_int(2, "count", -1));
  if (static_cast<int64_t>(r.size()) > call.in.options().limits.max_output_bytes) fail_at(call.pos, "string too long");
  return Value::string(std::move(r));
}

Value do_reverse(FilterCall& call) {
  if (call.v.is_string()) {
    std::vector<std::string> cps = code_points(call.v.s);
    std::string out;
    for (size_t k = cps.size(); k-- > 0;) out += cps[k];
    return Value::string(out);
  }
  std::vector<Value> items = call.items();
  std::reverse(items.begin(), items.end());
  return Value::make_list(std::move(items));
}

Value do_select_or_reject(FilterCall& call) {
  const bool by_attr = call.name.size() > 6;
  return generator(truthy(call.v) ? select_items(call.in, call.items(), call.a, call.name[0] == 's', by_attr, call.pos) : std::vector<Value>{});
}

Value do_map(FilterCall& call) {
  std::vector<Value> out;
  auto attr = call.ar.get_opt_string(99, "attribute");
  if (attr) {
    Value def = call.ar.get_or(99, "default", Value::undefined());
    for (const Value& item : truthy(call.v) ? call.items() : std::vector<Value>{}) {
      Value x = attr_path(call.in, item, *attr, call.pos);
      out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
    }
    return generator(std::move(out));
  }
  if (call.a.positional.empty()) fail_at(call.pos, "map: needs a filter name or attribute=");
  std::string filter = to_str(call.a.positional[0]);
  CallArgs rest;
  rest.pos = call.pos;
  rest.positional.assign(call.a.positional.begin() + 1, call.a.positional.end());
  rest.keyword = call.a.keyword;
  for (const Value& item : truthy(call.v) ? call.items() : std::vector<Value>{}) {
    CallArgs copy = rest;
    out.push_back(call.in.apply_filter(filter, item, copy, call.pos));
  }
  return generator(std::move(out));
}

Value do_int(FilterCall& call) {
  const Value def = call.ar.get_or(0, "default", Value::integer(0));
  switch (call.v.kind) {
    case Value::Kind::Int: return call.v;
    case Value::Kind::Bool: return Value::integer(call.v.b);
    case Value::Kind::Float:
      if (!std::isfinite(call.v.f) || std::fabs(call.v.f) > 9.2e18) return def;
      return Value::integer(static_cast<int64_t>(call.v.f));
    case Value::Kind::String: {
      std::string s = py_strip(call.v.s, std::nullopt, true, true);
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

Value do_float(FilterCall& call) {
  const Value def = call.ar.get_or(0, "default", Value::number(0.0));
  if (call.v.is_number()) return Value::number(as_double(call.v));
  if (call.v.is_string()) {
    std::string s = py_strip(call.v.s, std::nullopt, true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end && *end == '\0') return Value::number(d);
  }
  return def;
}

Value do_abs(FilterCall& call) {
  if (call.v.kind == Value::Kind::Float) return Value::number(std::fabs(call.v.f));
  if (!call.v.is_number()) fail_at(call.pos, "bad operand type for abs(): '" + type_name(call.v) + "'");
  if (as_int(call.v) == INT64_MIN) fail_at(call.pos, "integer overflow");
  return Value::integer(std::llabs(as_int(call.v)));
}

Value do_round(FilterCall& call) {
  const int64_t precision = call.ar.get_int(0, "precision", 0);
  const std::string method = call.ar.get_string(1, "method", "common");
  if (!call.v.is_number()) fail_at(call.pos, "round: value must be a number");
  const double x = as_double(call.v);
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
    fail_at(call.pos, "round: method must be common, ceil or floor");
  }
  return Value::number(r);
}

Value do_escape(FilterCall& call) {
  if (call.v.is_string() && call.v.safe && call.name != "forceescape") return call.v;
  return markup(html_escape(to_str(call.v)));
}

Value do_dictsort(FilterCall& call) {
  if (call.v.kind != Value::Kind::Dict) fail_at(call.pos, "dictsort: value must be a dict");
  const bool case_sensitive = call.ar.get_bool(0, "case_sensitive", false);
  const std::string by = call.ar.get_string(1, "by", "key");
  const bool reverse = call.ar.get_bool(2, "reverse", false);
  std::vector<std::pair<Value, Value>> items = call.v.dict->items;
  const bool by_value = by == "value";
  auto key_of = [&](const std::pair<Value, Value>& kv) {
    Value k = by_value ? kv.second : kv.first;
    if (!case_sensitive && k.is_string()) k = Value::string(to_lower(k.s));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
    int c = call.in.order(key_of(x), key_of(y), "<", call.pos);
    return reverse ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& [k, val] : items) out.push_back(Value::make_list({k, val}, true));
  return Value::make_list(std::move(out));
}

Value do_sort(FilterCall& call) {
  const bool reverse = call.ar.get_bool(0, "reverse", false);
  const bool case_sensitive = call.ar.get_bool(1, "case_sensitive", false);
  auto attr = call.ar.get_opt_string(2, "attribute");
  std::vector<Value> items = call.items();
  auto key_of = [&](const Value& x) {
    Value k = attr ? attr_path(call.in, x, *attr, call.pos) : x;
    if (!case_sensitive && k.is_string()) k = Value::string(to_lower(k.s));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    int c = call.in.order(key_of(x), key_of(y), "<", call.pos);
    return reverse ? c > 0 : c < 0;
  });
  return Value::make_list(std::move(items));
}

Value do_sum(FilterCall& call) {
  auto attr = call.ar.get_opt_string(0, "attribute");
  Value acc = call.ar.get_or(1, "start", Value::integer(0));
  for (const Value& item : call.items()) acc = call.in.binary("+", acc, attr ? attr_path(call.in, item, *attr, call.pos) : item, call.pos);
  return acc;
}

Value do_min_or_max(FilterCall& call) {
  std::vector<Value> items = call.items();
  if (items.empty()) return Value::undefined("No " + call.name + " item, sequence was empty.");
  Value best = items[0];
  for (const Value& x : items) {
    int c = call.in.order(x, best, "<", call.pos);
    if (call.name == "min" ? c < 0 : c > 0) best = x;
  }
  return best;
}

Value do_indent(FilterCall& call) {
  std::string width = "    ";
  if (auto w = call.ar.get(0, "width"); w && !w->is_none()) {
    if (w->is_string()) {
      width = w->s;
    } else {
      width = std::string(static_cast<size_t>(std::clamp<int64_t>(as_int(*w), 0, 256)), ' ');
    }
  }
  const bool first = call.ar.get_bool(1, "first", false);
  const bool blank = call.ar.get_bool(2, "blank", false);
  std::string s = to_str(call.v), out;
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

Value do_attr(FilterCall& call) {
  if (call.a.positional.empty()) fail_at(call.pos, "attr needs a name");
  return call.in.get_attr(call.v, to_str(call.a.positional[0]), call.pos);
}

Value do_format(FilterCall& call) { return Value::string(py_percent_format(to_str(call.v), call.a, call.pos)); }

// jinja2 counts \w+ runs; letters of other scripts count, symbols and emoji do not.
Value do_wordcount(FilterCall& call) {
  int64_t n = 0;
  bool in_word = false;
  for (const std::string& cp : code_points(to_str(call.v))) {
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

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = {
      {"safe", do_safe},
      {"string", do_string},
      {"trim", do_trim},
      {"upper", do_upper},
      {"lower", do_lower},
      {"capitalize", do_capitalize},
      {"title", do_title},
      {"length", do_length},
      {"count", do_length},
      {"tojson", do_tojson},
      {"items", do_items},
      {"default", do_default},
      {"d", do_default},
      {"first", do_first_or_last},
      {"last", do_first_or_last},
      {"list", do_list},
      {"unique", do_unique},
      {"join", do_join},
      {"replace", do_replace},
      {"reverse", do_reverse},
      {"select", do_select_or_reject},
      {"reject", do_select_or_reject},
      {"selectattr", do_select_or_reject},
      {"rejectattr", do_select_or_reject},
      {"map", do_map},
      {"int", do_int},
      {"float", do_float},
      {"abs", do_abs},
      {"round", do_round},
      {"escape", do_escape},
      {"e", do_escape},
      {"forceescape", do_escape},
      {"dictsort", do_dictsort},
      {"sort", do_sort},
      {"sum", do_sum},
      {"min", do_min_or_max},
      {"max", do_min_or_max},
      {"indent", do_indent},
      {"attr", do_attr},
      {"format", do_format},
      {"wordcount", do_wordcount},
  };
  return table;
}

// jinja2 filters no chat template needs: named in the error.
bool unsupported(const std::string& name) {
  static const std::unordered_set<std::string> names = {"batch",     "slice",   "groupby",        "truncate", "wordwrap",
                                                        "urlencode", "xmlattr", "striptags",      "filesizeformat",
                                                        "pprint",    "random",  "center",         "urlize"};
  return names.count(name) != 0;
}

}  // namespace

bool is_filter(const std::string& name) { return filters().count(name) != 0; }

Value Interpreter::apply_filter(const std::string& name, Value v, CallArgs& a, Pos pos) {
  step(pos);
  auto it = filters().find(name);
  if (it == filters().end()) {
    if (unsupported(name)) fail_at(pos, "the filter '" + name + "' is not supported");
    fail_at(pos, "no filter named '" + name + "'");
  }
  FilterCall f{*this, name, std::move(v), a, pos, ArgReader{a, name.c_str()}};
  return it->second(f);
}

}  // namespace lumen::chat
