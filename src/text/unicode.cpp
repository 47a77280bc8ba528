// UTF-8 decoding and encoding with llama.cpp's rules.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/text/tokenizer.h"

namespace lumen::unicode {

namespace {
constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kReplacement = 0xFFFD;
}  // namespace

size_t utf8_sequence_length(uint8_t lead) {
  if (lead < 0xC0) return 1;  // ASCII, or a continuation byte
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> cpts;
  cpts.reserve(text.size());
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const auto is_continuation = [&](size_t i) { return i < text.size() && (byte(i) & 0xC0) == 0x80; };
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t lead = byte(i);
    if (lead < 0x80) {
      cpts.push_back(lead);
      ++i;
      continue;
    }
    // Same acceptance as llama.cpp: the lead byte fixes the length and only
    // the continuation bytes' tag bits are checked (overlong forms and
    // surrogates pass). Anything else costs one byte and yields U+FFFD.
    size_t length = 0;
    uint32_t cpt = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2;
      cpt = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      cpt = lead & 0x0F;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      cpt = lead & 0x07;
    }
    bool complete = length > 0;
    for (size_t k = 1; complete && k < length; ++k) {
      if (!is_continuation(i + k)) complete = false;
      else cpt = (cpt << 6) | (byte(i + k) & 0x3F);
    }
    if (!complete) {
      cpts.push_back(kReplacement);
      ++i;
      continue;
    }
    // llama.cpp would throw while re-encoding such a codepoint; U+FFFD keeps
    // every input tokenizable.
    cpts.push_back(cpt > kMaxCodepoint ? kReplacement : cpt);
    i += length;
  }
  return cpts;
}

void append_utf8(std::string& out, uint32_t cpt) {
  if (cpt > kMaxCodepoint) cpt = kReplacement;
  if (cpt < 0x80) {
    out += static_cast<char>(cpt);
  } else if (cpt < 0x800) {
    out += static_cast<char>(0xC0 | (cpt >> 6));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else if (cpt < 0x10000) {
    out += static_cast<char>(0xE0 | (cpt >> 12));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cpt >> 18));
    out += static_cast<char>(0x80 | ((cpt >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cpt >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cpt & 0x3F));
  }
}

}  // namespace lumen::unicode
