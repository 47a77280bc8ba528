// Lumen's on-disk caches (compiled models, packed weights) share one folder
// and one hash, stated here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lumen {

// The cache folder: LUMEN_CACHE_DIR, else $XDG_CACHE_HOME/lumen, else
// $HOME/.cache/lumen; "" when none of them is set.
std::string cache_dir();

// The hash that keys and checks cache files: 64-bit XXH3 (Debian
// libxxhash-dev). Fast and not cryptographic: it detects changed or damaged
// contents, not tampering.
uint64_t hash_bytes(const void* data, size_t bytes, uint64_t seed);

}  // namespace lumen
