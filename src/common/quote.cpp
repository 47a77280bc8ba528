#include "lumen/common/quote.h"

#include <cstdio>

namespace lumen {

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string quoted(std::string_view s) {
  std::string out = "'";  // built stepwise: GCC 12 warns falsely (-Wrestrict) on "'" + std::string(s)
  out += s;
  out += "'";
  return out;
}

}  // namespace lumen
