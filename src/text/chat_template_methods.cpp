// The str and dict methods of chat templates as name -> function tables:
// `s.strip()`, `d.items()` and the like, with Python's semantics. A method is
// one function and one entry in its table; aliases share a function and tell
// themselves apart by m.name. Attribute access binds the method to its object.
#include <cctype>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "chat_template_interpreter.h"

namespace lumen::chat {

namespace {

// What a str method sees: the string it is bound to, its arguments, the name it was called by.
struct StrCall {
  Interpreter& in;
  const std::string& name;
  const std::string& s;
  CallArgs& a;
};

// What a dict method sees.
struct DictCall {
  Interpreter& in;
  const std::string& name;
  const DictPtr& d;
  CallArgs& a;
};

using StrMethod = Value (*)(StrCall&);
using DictMethod = Value (*)(DictCall&);

Value str_strip(StrCall& m) {
  const bool l = m.name != "rstrip", r = m.name != "lstrip";
  ArgReader ar{m.a, m.name.c_str()};
  return Value::string(py_strip(m.s, ar.get_opt_string(0, "chars"), l, r));
}

Value str_upper(StrCall& m) { return Value::string(to_upper(m.s)); }
Value str_lower(StrCall& m) { return Value::string(to_lower(m.s)); }
Value str_title(StrCall& m) { return Value::string(py_title(m.s)); }
Value str_capitalize(StrCall& m) { return Value::string(py_capitalize(m.s)); }

Value str_starts_or_ends_with(StrCall& m) {
  const bool starts = m.name == "startswith";
  if (m.a.positional.empty()) fail_at(m.a.pos, "startswith/endswith takes a prefix");
  const Value& p = m.a.positional[0];
  std::vector<std::string> options;
  if (p.is_string()) {
    options.push_back(p.s);
  } else if (p.kind == Value::Kind::Tuple) {
    for (const Value& v : *p.list) {
      if (!v.is_string()) fail_at(m.a.pos, "startswith/endswith: tuple items must be str");
      options.push_back(v.s);
    }
  } else {
    fail_at(m.a.pos, "startswith/endswith first arg must be str or a tuple of str, not " + type_name(p));
  }
  for (const std::string& o : options) {
    if (o.size() > m.s.size()) continue;
    if (starts ? m.s.compare(0, o.size(), o) == 0 : m.s.compare(m.s.size() - o.size(), o.size(), o) == 0)
      return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value str_split(StrCall& m) {
  const bool rev = m.name == "rsplit";
  ArgReader ar{m.a, "split"};
  std::optional<std::string> sep = ar.get_opt_string(0, "sep");
  int64_t maxsplit = ar.get_int(1, "maxsplit", -1);
  std::vector<Value> parts;
  if (sep) {
    if (sep->empty()) fail_at(m.a.pos, "empty separator");
    if (!rev) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t f = m.s.find(*sep, pos);
        if (f == std::string::npos) break;
        parts.push_back(Value::string(m.s.substr(pos, f - pos)));
        pos = f + sep->size();
      }
      parts.push_back(Value::string(m.s.substr(pos)));
    } else {
      size_t end = m.s.size();
      std::vector<Value> rparts;
      while (maxsplit < 0 || static_cast<int64_t>(rparts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t f = m.s.rfind(*sep, end - sep->size());
        if (f == std::string::npos) break;
        rparts.push_back(Value::string(m.s.substr(f + sep->size(), end - f - sep->size())));
        end = f;
      }
      rparts.push_back(Value::string(m.s.substr(0, end)));
      parts.assign(rparts.rbegin(), rparts.rend());
    }
  } else {
    std::vector<std::string> cps = code_points(m.s);
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
}

Value str_splitlines(StrCall& m) {
  std::vector<Value> lines;
  size_t pos = 0;
  while (pos < m.s.size()) {
    size_t f = m.s.find_first_of("\n\r", pos);
    if (f == std::string::npos) {
      lines.push_back(Value::string(m.s.substr(pos)));
      break;
    }
    lines.push_back(Value::string(m.s.substr(pos, f - pos)));
    pos = f + ((m.s[f] == '\r' && f + 1 < m.s.size() && m.s[f + 1] == '\n') ? 2 : 1);
  }
  return Value::make_list(std::move(lines));
}

Value str_replace(StrCall& m) {
  if (m.a.positional.size() < 2 || !m.a.positional[0].is_string() || !m.a.positional[1].is_string())
    fail_at(m.a.pos, "replace() takes two strings");
  ArgReader ar{m.a, "replace"};
  return Value::string(py_replace(m.s, m.a.positional[0].s, m.a.positional[1].s, ar.get_int(2, "count", -1)));
}

Value str_search(StrCall& m) {
  if (m.a.positional.empty() || !m.a.positional[0].is_string()) fail_at(m.a.pos, m.name + "() takes a string");
  const std::string& sub = m.a.positional[0].s;
  if (m.name == "count") {
    if (sub.empty()) return Value::integer(py_len(m.s) + 1);
    int64_t n = 0;
    for (size_t p = m.s.find(sub); p != std::string::npos; p = m.s.find(sub, p + sub.size())) ++n;
    return Value::integer(n);
  }
  size_t f = m.name == "rfind" ? m.s.rfind(sub) : m.s.find(sub);
  if (f == std::string::npos) {
    if (m.name == "index") fail_at(m.a.pos, "substring not found");
    return Value::integer(-1);
  }
  return Value::integer(py_len(std::string_view(m.s).substr(0, f)));
}

Value str_join(StrCall& m) {
  if (m.a.positional.empty()) fail_at(m.a.pos, "join() takes an iterable");
  std::string out;
  bool first = true;
  for (const Value& v : m.in.iterate(m.a.positional[0], m.a.pos)) {
    if (!v.is_string()) fail_at(m.a.pos, "sequence item: expected str instance, " + type_name(v) + " found");
    if (!first) out += m.s;
    out += v.s;
    first = false;
  }
  return Value::string(std::move(out));
}

Value str_is_class(StrCall& m) {
  if (m.s.empty()) return Value::boolean(false);
  bool any_cased = false;
  for (char ch : m.s) {
    const auto c = static_cast<unsigned char>(ch);
    if (m.name == "isdigit" && !std::isdigit(c)) return Value::boolean(false);
    if (m.name == "isalpha" && !std::isalpha(c)) return Value::boolean(false);
    if (m.name == "isalnum" && !std::isalnum(c)) return Value::boolean(false);
    if (m.name == "isspace" && !is_space_cp(std::string(1, ch))) return Value::boolean(false);
    if (m.name == "isupper" && std::islower(c)) return Value::boolean(false);
    if (m.name == "islower" && std::isupper(c)) return Value::boolean(false);
    any_cased = any_cased || std::isalpha(c);
  }
  if (m.name == "isupper" || m.name == "islower") return Value::boolean(any_cased);
  return Value::boolean(true);
}

Value str_format(StrCall& m) { return Value::string(py_str_format(m.s, m.a)); }

const std::unordered_map<std::string, StrMethod>& str_methods() {
  static const std::unordered_map<std::string, StrMethod> table = {
      {"strip", str_strip},
      {"lstrip", str_strip},
      {"rstrip", str_strip},
      {"upper", str_upper},
      {"lower", str_lower},
      {"title", str_title},
      {"capitalize", str_capitalize},
      {"startswith", str_starts_or_ends_with},
      {"endswith", str_starts_or_ends_with},
      {"split", str_split},
      {"rsplit", str_split},
      {"splitlines", str_splitlines},
      {"replace", str_replace},
      {"find", str_search},
      {"rfind", str_search},
      {"count", str_search},
      {"index", str_search},
      {"join", str_join},
      {"isdigit", str_is_class},
      {"isalpha", str_is_class},
      {"isspace", str_is_class},
      {"isalnum", str_is_class},
      {"isupper", str_is_class},
      {"islower", str_is_class},
      {"format", str_format},
  };
  return table;
}

Value dict_items(DictCall& m) {
  std::vector<Value> items;
  for (const auto& [k, v] : m.d->items) items.push_back(Value::make_list({k, v}, true));
  return Value::make_list(std::move(items));
}

Value dict_keys_or_values(DictCall& m) {
  const bool keys = m.name == "keys";
  std::vector<Value> items;
  for (const auto& [k, v] : m.d->items) items.push_back(keys ? k : v);
  return Value::make_list(std::move(items));
}

Value dict_get(DictCall& m) {
  if (m.a.positional.empty()) fail_at(m.a.pos, "get() takes a key");
  if (const Value* v = m.d->find(m.a.positional[0])) return *v;
  return m.a.positional.size() > 1 ? m.a.positional[1] : Value::none();
}

Value dict_copy(DictCall& m) {
  Value c = Value::make_dict();
  *c.dict = *m.d;
  return c;
}

const std::unordered_map<std::string, DictMethod>& dict_methods() {
  static const std::unordered_map<std::string, DictMethod> table = {
      {"items", dict_items},
      {"keys", dict_keys_or_values},
      {"values", dict_keys_or_values},
      {"get", dict_get},
      {"copy", dict_copy},
  };
  return table;
}

}  // namespace

Value string_method(const Value& self, const std::string& name) {
  auto it = str_methods().find(name);
  if (it == str_methods().end()) return Value::undefined();
  return Value::callable(
      [method = it->second, s = self.s, name](Interpreter& in, CallArgs& a) {
        StrCall m{in, name, s, a};
        return method(m);
      },
      name);
}

Value dict_method(const Value& self, const std::string& name) {
  auto it = dict_methods().find(name);
  if (it == dict_methods().end()) return Value::undefined();
  return Value::callable(
      [method = it->second, d = self.dict, name](Interpreter& in, CallArgs& a) {
        DictCall m{in, name, d, a};
        return method(m);
      },
      name);
}

}  // namespace lumen::chat
