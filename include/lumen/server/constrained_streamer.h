// The text stream of a sequence under a grammar: as TextStreamer (incomplete
// UTF-8 held back), but a stop string ends the text only where it starts at an
// offset where the text before it is a complete match; elsewhere it is just
// text and generation goes on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "lumen/runtime/sampler.h"

namespace lumen::server {

class ConstrainedStreamer {
 public:
  // accepting_at_start: the empty text is a complete match.
  ConstrainedStreamer(std::vector<std::string> stops, bool accepting_at_start);
  // Adds one token's bytes; accepting_after[i] says whether the text up to and
  // including piece[i] is a complete match. Returns the text now safe to show.
  std::string push(std::string_view piece, const std::vector<bool>& accepting_after);
  bool stopped() const { return stopped_; }
  // The end without a stop string: everything still held back.
  std::string finish();
  const std::string& text() const { return text_; }

 private:
  std::vector<std::string> stops_;
  std::string text_;
  std::vector<size_t> starts_;  // offsets where a stop string may start (complete match before), not yet ruled out
  size_t released_ = 0;         // bytes passed on to utf8_
  TextStreamer utf8_;           // holds back incomplete characters only (no stop strings)
  bool stopped_ = false;
};

}  // namespace lumen::server
