// The packed-weight cache: the matmul weights as the kernels stream them,
// written once per (GGUF contents, target, program layout) so later loads
// read them back instead of repacking. A file is trusted only when its
// header names the same key and its contents hash to the checksum it
// records; anything else is rebuilt.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace lumen::runtime {

class ThreadPool;

// 128-bit key of what the packed bytes are a function of.
struct PackCacheKey {
  uint64_t lo = 0, hi = 0;
  bool operator==(const PackCacheKey&) const = default;
  std::string hex() const;  // 32 hex digits, the file name
};

// Hashes `bytes` at `data` in 4 MiB pieces on `pool` with the cache hash
// (common/cache.h): the same value for the same bytes whatever the thread count.
uint64_t hash_parallel(const uint8_t* data, size_t bytes, uint64_t seed, ThreadPool& pool);

enum class PackCacheRead { Hit, Missing, Corrupt, Stale };
const char* to_string(PackCacheRead r);  // "hit", "miss", "corrupt", "stale"

// Reads the cache file `path` into `out` (`bytes` of packed weights) when it
// holds exactly those for `key`: Missing if there is no file, Stale if its
// header names another key, size or version, Corrupt if it is truncated or
// its contents do not match its checksum. `out` is undefined unless Hit.
PackCacheRead read_pack_cache(const std::string& path, const PackCacheKey& key, uint8_t* out, size_t bytes,
                              ThreadPool& pool);

// The cache file mapped in place (read-only, the page cache's own pages: no
// copy, no fresh memory for the kernel to zero). The packed bytes start at a
// 2 MiB-aligned file offset and address, so where the page cache holds them in
// 2 MiB folios they are mapped on 2 MiB pages, which decode needs (TLB).
struct PackCacheMap {
  PackCacheRead result = PackCacheRead::Missing;  // as read_pack_cache; Hit only with `data`
  std::shared_ptr<const uint8_t> data;  // the packed bytes; the mapping lives as long as this
  size_t huge_bytes = 0;                // of them mapped on 2 MiB pages (FilePmdMapped in smaps)
  std::string map_error;                // why the intact file could not be mapped ("" if it was)
  bool reread = false;  // the first mapping was mostly on 4 KiB pages: its page cache was dropped and read again
};

// The packed bytes that can sit on 2 MiB pages: all whole 2 MiB pages of them.
size_t huge_page_bytes(size_t bytes);

// Whether at least 90% of huge_page_bytes(bytes) is mapped on 2 MiB pages
// (the rest costs decode little; all on 4 KiB pages costs it 8-13%).
bool mostly_huge(const PackCacheMap& m, size_t bytes);

// Maps the cache file `path` and checks it as read_pack_cache does (every
// 4 MiB piece hashed through the mapping, which faults it in). A mapping
// partly but not mostly_huge is tried once more after dropping the file's
// page cache (pages no other process maps), which the second mapping reads
// back in 2 MiB folios. When the header is right but the mapping fails, result is Missing
// and map_error says why: the caller may still read the file.
PackCacheMap map_pack_cache(const std::string& path, const PackCacheKey& key, size_t bytes, ThreadPool& pool);

// Writes `bytes` at `data` as the cache file `path` for `key` (a temporary
// file renamed into place, so readers never see half a file; the directory
// is created). Returns "" or why it could not.
std::string write_pack_cache(const std::string& path, const PackCacheKey& key, const uint8_t* data, size_t bytes,
                             ThreadPool& pool);

}  // namespace lumen::runtime
