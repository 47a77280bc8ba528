// Pooling hidden states into embeddings (see pooling.h).
#include "lumen/runtime/pooling.h"

#include <cmath>
#include <string>

#include "lumen/common/internal_error.h"

namespace lumen::runtime {

std::optional<Pooling> gguf_pooling(const gguf::File& file) {
  const std::optional<std::string> arch = file.get_string("general.architecture");
  if (!arch) return std::nullopt;
  const std::optional<int64_t> type = file.get_int(*arch + ".pooling_type");
  if (!type) return std::nullopt;
  switch (*type) {
    case 1: return Pooling::Mean;
    case 2: return Pooling::Cls;
    case 3: return Pooling::Last;
    default: return std::nullopt;
  }
}

PoolingChoice choose_pooling(std::optional<Pooling> flag, const gguf::File& file) {
  if (flag) return {*flag, "--pooling"};
  if (const std::optional<Pooling> from_file = gguf_pooling(file)) return {*from_file, "the GGUF's pooling_type"};
  return {kDefaultPooling, "the default"};
}

Pooler::Pooler(Pooling pooling, int64_t width) : pooling_(pooling) {
  if (pooling == Pooling::Mean)
    sum_.assign(static_cast<size_t>(width), 0.0);
  else
    row_.assign(static_cast<size_t>(width), 0.0f);
}

void Pooler::add(std::span<const float> row) {
  const size_t width = pooling_ == Pooling::Mean ? sum_.size() : row_.size();
  LUMEN_ASSERT(row.size() == width, "a hidden state of the pooler's width");
  switch (pooling_) {
    case Pooling::Mean:
      for (size_t i = 0; i < width; ++i) sum_[i] += row[i];
      break;
    case Pooling::Last: std::copy(row.begin(), row.end(), row_.begin()); break;
    case Pooling::Cls:
      if (rows_ == 0) std::copy(row.begin(), row.end(), row_.begin());
      break;
  }
  ++rows_;
}

std::vector<float> Pooler::result() const {
  LUMEN_ASSERT(rows_ > 0, "pooling needs a row");
  std::vector<float> out = row_;
  if (pooling_ == Pooling::Mean) {
    out.resize(sum_.size());
    for (size_t i = 0; i < sum_.size(); ++i) out[i] = static_cast<float>(sum_[i] / static_cast<double>(rows_));
  }
  double squares = 0;
  for (float x : out) squares += static_cast<double>(x) * static_cast<double>(x);
  const double norm = std::sqrt(squares);
  const float scale = norm > 0 ? static_cast<float>(1.0 / norm) : 0.0f;
  for (float& x : out) x *= scale;
  return out;
}

}  // namespace lumen::runtime
