// Code point ranges as UTF-8 byte-range sequences (the splitting of Rust's
// utf8-ranges / RE2): split lo..hi at encoding-length boundaries, then until
// every continuation byte spans its full 0x80-0xBF range or a single value.
#include "rule_set.h"

namespace lumen::grammar::detail {

namespace {

size_t encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

void split(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteRange>>& out) {
  // Iterative over a worklist: at most a few dozen pieces per range.
  std::vector<std::pair<uint32_t, uint32_t>> work{{lo, hi}};
  while (!work.empty()) {
    auto [a, b] = work.back();
    work.pop_back();
    bool done = false;
    for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (a <= max && b > max) {
        work.emplace_back(max + 1, b);
        work.emplace_back(a, max);
        done = true;
        break;
      }
    }
    if (done) continue;
    for (int i = 1; i < 4 && !done; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((a & ~m) != (b & ~m)) {
        if ((a & m) != 0) {
          work.emplace_back((a | m) + 1, b);
          work.emplace_back(a, a | m);
          done = true;
        } else if ((b & m) != m) {
          work.emplace_back(b & ~m, b);
          work.emplace_back(a, (b & ~m) - 1);
          done = true;
        }
      }
    }
    if (done) continue;
    uint8_t ea[4], eb[4];
    const size_t n = encode(a, ea);
    encode(b, eb);
    std::vector<ByteRange> seq(n);
    for (size_t k = 0; k < n; ++k) seq[k] = {ea[k], eb[k]};
    out.push_back(std::move(seq));
  }
}

}  // namespace

std::vector<std::vector<ByteRange>> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<ByteRange>> out;
  split(lo, hi, out);
  return out;
}

}  // namespace lumen::grammar::detail
