// JSON in and out of template values: json.dumps as the tojson filter
// writes it (Hugging Face's ensure_ascii=False default, indent, separators,
// sort_keys), and the messages and extra variables a render starts from.
#include <algorithm>
#include <cstdio>
#include <string>

#include "chat_template_python.h"

namespace lumen::chat {

namespace {

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

}  // namespace

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

}  // namespace lumen::chat
