// See constrained_streamer.h.
#include "lumen/server/constrained_streamer.h"

#include <algorithm>

namespace lumen::server {

ConstrainedStreamer::ConstrainedStreamer(std::vector<std::string> stops, bool accepting_at_start)
    : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
  if (accepting_at_start && !stops_.empty()) starts_.push_back(0);
}

std::string ConstrainedStreamer::push(std::string_view piece, const std::vector<bool>& accepting_after) {
  if (stopped_) return {};
  const size_t base = text_.size();
  text_.append(piece);
  if (!stops_.empty())
    for (size_t i = 0; i < piece.size() && i < accepting_after.size(); ++i)
      if (accepting_after[i]) starts_.push_back(base + i + 1);
  size_t safe = text_.size();
  std::vector<size_t> still_open;
  for (size_t k : starts_) {
    const std::string_view rest = std::string_view(text_).substr(k);
    for (const std::string& stop : stops_) {
      if (rest.starts_with(stop)) {
        stopped_ = true;
        text_.resize(k);
        std::string ready = utf8_.push(std::string_view(text_).substr(released_));
        released_ = text_.size();
        return ready + utf8_.finish();
      }
    }
    // A tail that may still grow into a stop string starting at k is held back.
    bool open = false;
    for (const std::string& stop : stops_)
      if (rest.size() < stop.size() && std::string_view(stop).starts_with(rest)) open = true;
    if (open) {
      safe = std::min(safe, k);
      still_open.push_back(k);
    }
  }
  starts_ = std::move(still_open);
  std::string ready = utf8_.push(std::string_view(text_).substr(released_, safe - released_));
  released_ = safe;
  return ready;
}

std::string ConstrainedStreamer::finish() {
  if (stopped_) return {};
  std::string rest = utf8_.push(std::string_view(text_).substr(released_));
  released_ = text_.size();
  return rest + utf8_.finish();
}

}  // namespace lumen::server
