// A gguf-dump style description of a file: what `lumen-gguf info` prints.
#pragma once

#include <cstddef>
#include <string>

#include "lumen/gguf/gguf.h"

namespace lumen::gguf {

// Metadata and tensor table as text. Without `all_items`, arrays longer than
// kInfoArrayItems are summarized as `[151936 strings: "!", "\"", ... ]`.
constexpr size_t kInfoArrayItems = 8;
std::string describe(const File& file, bool all_items);

}  // namespace lumen::gguf
