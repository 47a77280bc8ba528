// Embeddings from hidden states (Session::step_hidden): a sequence's rows
// pooled into one vector as llama.cpp pools them (mean of every token, the
// last token, or the first: "cls"), then L2-normalized, as llama-server
// returns them.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "lumen/gguf/gguf.h"

namespace lumen::runtime {

enum class Pooling { Mean, Last, Cls };

// The name of each pooling as `--pooling` spells it, indexed by the enum.
inline constexpr std::array<std::string_view, 3> kPoolingNames = {"mean", "last", "cls"};

inline std::string_view to_string(Pooling pooling) { return kPoolingNames[static_cast<size_t>(pooling)]; }

// The pooling named `name`, or none.
inline std::optional<Pooling> parse_pooling(std::string_view name) {
  for (size_t i = 0; i < kPoolingNames.size(); ++i)
    if (kPoolingNames[i] == name) return static_cast<Pooling>(i);
  return std::nullopt;
}

// A model without a pooling key: in a causal model only the last position
// has attended to the whole input (the pooling of the LLM-based embedders).
inline constexpr Pooling kDefaultPooling = Pooling::Last;

// The pooling the file asks for in `{arch}.pooling_type` (llama.cpp's
// numbering: 1 mean, 2 cls, 3 last); none when the key is absent or names
// another kind (0 none, 4 rank).
std::optional<Pooling> gguf_pooling(const gguf::File& file);

// The pooling to use: `flag` (lumen-server's --pooling) when given, else the
// file's, else kDefaultPooling; `why` says which of the three it is.
struct PoolingChoice {
  Pooling pooling;
  std::string_view why;  // "--pooling", "the GGUF's pooling_type" or "the default"
};
PoolingChoice choose_pooling(std::optional<Pooling> flag, const gguf::File& file);

// One sequence's rows, in position order, folded into its embedding.
class Pooler {
 public:
  Pooler(Pooling pooling, int64_t width);
  void add(std::span<const float> row);
  int64_t rows() const { return rows_; }
  // The pooled vector divided by its L2 norm (a zero vector stays zero).
  // Needs at least one row.
  std::vector<float> result() const;

 private:
  Pooling pooling_;
  int64_t rows_ = 0;
  std::vector<double> sum_;  // mean: the sum of the rows so far
  std::vector<float> row_;   // last: the latest row; cls: the first
};

}  // namespace lumen::runtime
