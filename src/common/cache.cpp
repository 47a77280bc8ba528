// The cache folder and the cache hash (see common/cache.h).
#include "lumen/common/cache.h"

#include <xxhash.h>

#include <cstdlib>

namespace lumen {

std::string cache_dir() {
  if (const char* dir = std::getenv("LUMEN_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::string(xdg) + "/lumen";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.cache/lumen";
  return "";
}

uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed) { return XXH3_64bits_withSeed(data, bytes, seed); }

}  // namespace lumen
