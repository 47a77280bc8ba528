// The packed-weight cache (see include/lumen/runtime/pack_cache.h).
//
// File layout: the header in the first 4096 bytes, a hole up to 2 MiB, then
// the packed bytes exactly as they sit in memory. The header: magic, format
// version, header size (the packed bytes' offset), the key, the packed size
// and the checksum of the packed bytes (hash_parallel, seed 0). The 2 MiB
// offset lets the page cache hold the packed bytes in 2 MiB folios (written in
// aligned 4 MiB pieces) that a mapping at a 2 MiB-aligned address maps on
// 2 MiB pages; version 1 put them at 4096, where no folio can line up.
#include "lumen/runtime/pack_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "lumen/common/cache.h"
#include "lumen/runtime/thread_pool.h"

namespace lumen::runtime {
namespace {

constexpr char kMagic[8] = {'L', 'U', 'M', 'E', 'N', 'P', 'K', '\n'};
constexpr uint32_t kFormatVersion = 3;  // 3: XXH3 checksums
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHeaderBytes = kHugePage;  // where the packed bytes start
constexpr size_t kHeaderPageBytes = 4096;   // what of it is written
constexpr size_t kPieceBytes = size_t(4) << 20;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t key_lo, key_hi;
  uint64_t packed_bytes;
  uint64_t checksum;
  uint32_t flags;  // kHugeFolios
};
// Set when, right after writing, the page cache held the file in 2 MiB folios
// (this kernel and filesystem can), so a mapping on small pages means they
// were evicted and read back small, which reading them again repairs.
constexpr uint32_t kHugeFolios = 1;
static_assert(sizeof(Header) <= kHeaderPageBytes);

// pread/pwrite all of [buf, buf + n) at `offset`; false on an error or EOF.
bool read_all(int fd, uint8_t* buf, size_t n, off_t offset) {
  while (n > 0) {
    const ssize_t got = pread(fd, buf, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    buf += got;
    n -= size_t(got);
    offset += got;
  }
  return true;
}
bool write_all(int fd, const uint8_t* buf, size_t n, off_t offset) {
  while (n > 0) {
    const ssize_t put = pwrite(fd, buf, n, offset);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) return false;
    buf += put;
    n -= size_t(put);
    offset += put;
  }
  return true;
}

size_t pieces_of(size_t bytes) { return (bytes + kPieceBytes - 1) / kPieceBytes; }

// The per-piece hashes folded in order.
uint64_t fold(const std::vector<uint64_t>& piece_hashes, size_t bytes, uint64_t seed) {
  return hash_bytes(piece_hashes.data(), piece_hashes.size() * sizeof(uint64_t), seed ^ bytes);
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

// Reads and checks the header of the open cache file `fd`: Hit when it is
// the file for `key` and `bytes` (its contents still unchecked).
PackCacheRead check_header(int fd, const PackCacheKey& key, size_t bytes, Header& h) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || !read_all(fd, reinterpret_cast<uint8_t*>(&h), sizeof h, 0))
    return PackCacheRead::Corrupt;
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) return PackCacheRead::Corrupt;
  if (h.version != kFormatVersion || h.header_bytes != kHeaderBytes || h.key_lo != key.lo || h.key_hi != key.hi ||
      h.packed_bytes != bytes)
    return PackCacheRead::Stale;
  if (uint64_t(st.st_size) != kHeaderBytes + bytes) return PackCacheRead::Corrupt;
  return PackCacheRead::Hit;
}

// FilePmdMapped of the mapping that starts at `start`, from /proc/self/smaps
// (0 if it cannot be told).
size_t file_pmd_mapped(const void* start) {
  std::ifstream smaps("/proc/self/smaps");
  const auto want = reinterpret_cast<uintptr_t>(start);
  bool in_mapping = false;
  std::string line;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0, kb = 0;
    char dash = 0;
    if (line.find(':') == std::string::npos || line.find(' ') < line.find(':')) {
      // A mapping's first line: "lo-hi perms offset dev inode path".
      if (std::sscanf(line.c_str(), "%llx%c%llx", &lo, &dash, &hi) == 3 && dash == '-') {
        if (in_mapping) return 0;
        in_mapping = lo == want;
      }
      continue;
    }
    if (in_mapping && std::sscanf(line.c_str(), "FilePmdMapped: %llu kB", &kb) == 1) return size_t(kb) << 10;
  }
  return 0;
}

// Whether the first 2 MiB of packed bytes in the open file `fd` (just
// written, so in the page cache) map on a 2 MiB page.
bool page_cache_has_huge_folios(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0 || uint64_t(st.st_size) < kHeaderBytes + kHugePage) return false;
  void* reserve = mmap(nullptr, 2 * kHugePage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) return false;
  const auto base = reinterpret_cast<uintptr_t>(reserve);
  void* start = reinterpret_cast<void*>((base + kHugePage - 1) & ~uintptr_t(kHugePage - 1));
  bool huge = false;
  if (mmap(start, kHugePage, PROT_READ, MAP_SHARED | MAP_FIXED, fd, off_t(kHeaderBytes)) != MAP_FAILED) {
    madvise(start, kHugePage, MADV_HUGEPAGE);
    volatile uint8_t touch = *static_cast<const volatile uint8_t*>(start);
    (void)touch;
    huge = file_pmd_mapped(start) > 0;
  }
  munmap(reserve, 2 * kHugePage);
  return huge;
}

}  // namespace

size_t huge_page_bytes(size_t bytes) { return bytes / kHugePage * kHugePage; }

std::string PackCacheKey::hex() const {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint64_t v : {hi, lo})
    for (int shift = 60; shift >= 0; shift -= 4) s += digits[(v >> shift) & 15];
  return s;
}

uint64_t hash_parallel(const uint8_t* data, size_t bytes, uint64_t seed, ThreadPool& pool) {
  std::vector<uint64_t> piece(pieces_of(bytes));
  pool.parallel_for(int64_t(piece.size()), [&](int64_t i, int) {
    const size_t begin = size_t(i) * kPieceBytes;
    piece[size_t(i)] = hash_bytes(data + begin, std::min(kPieceBytes, bytes - begin), seed + uint64_t(i));
  });
  return fold(piece, bytes, seed);
}

const char* to_string(PackCacheRead r) {
  switch (r) {
    case PackCacheRead::Hit: return "hit";
    case PackCacheRead::Missing: return "miss";
    case PackCacheRead::Corrupt: return "corrupt";
    case PackCacheRead::Stale: return "stale";
  }
  return "?";
}

PackCacheRead read_pack_cache(const std::string& path, const PackCacheKey& key, uint8_t* out, size_t bytes,
                              ThreadPool& pool) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PackCacheRead::Missing;
  FdCloser closer{fd};
  Header h{};
  if (const PackCacheRead r = check_header(fd, key, bytes, h); r != PackCacheRead::Hit) return r;
  // Read and hash each piece on the pool (the piece is still in cache when hashed).
  std::vector<uint64_t> piece(pieces_of(bytes));
  std::atomic<bool> failed{false};
  pool.parallel_for(int64_t(piece.size()), [&](int64_t i, int) {
    const size_t begin = size_t(i) * kPieceBytes, n = std::min(kPieceBytes, bytes - begin);
    if (!read_all(fd, out + begin, n, off_t(kHeaderBytes + begin))) {
      failed = true;
      return;
    }
    piece[size_t(i)] = hash_bytes(out + begin, n, uint64_t(i));
  });
  if (failed || fold(piece, bytes, 0) != h.checksum) return PackCacheRead::Corrupt;
  return PackCacheRead::Hit;
}

namespace {

// Maps the packed bytes of the open cache file `fd` (header `h` already
// checked) at a 2 MiB-aligned address and checks them against h.checksum.
PackCacheMap map_and_check(int fd, const std::string& path, const Header& h, size_t bytes, ThreadPool& pool) {
  PackCacheMap m;
  // Reserve 2 MiB more than the mapping, place it at the first 2 MiB
  // boundary inside, and give the rest back.
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t map_bytes = (bytes + page - 1) / page * page, reserve_bytes = map_bytes + kHugePage;
  void* reserve = mmap(nullptr, reserve_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) {
    m.map_error = std::string("cannot reserve address space: ") + std::strerror(errno);
    return m;
  }
  const auto base = reinterpret_cast<uintptr_t>(reserve), end = base + reserve_bytes;
  const uintptr_t start = (base + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  void* mapped = mmap(reinterpret_cast<void*>(start), map_bytes, PROT_READ, MAP_SHARED | MAP_FIXED, fd,
                      off_t(kHeaderBytes));
  if (mapped == MAP_FAILED) {
    m.map_error = std::string("cannot map ") + path + ": " + std::strerror(errno);
    munmap(reserve, reserve_bytes);
    return m;
  }
  if (start > base) munmap(reserve, start - base);
  if (end > start + map_bytes) munmap(reinterpret_cast<void*>(start + map_bytes), end - (start + map_bytes));
  // Pages read in through this mapping come as 2 MiB folios (advice only:
  // kernels without file huge pages map 4 KiB pages, which the caller sees).
  madvise(mapped, map_bytes, MADV_HUGEPAGE);
  const auto* data = static_cast<const uint8_t*>(mapped);
  std::shared_ptr<const uint8_t> owner(data, [map_bytes](const uint8_t* p) {
    munmap(const_cast<uint8_t*>(p), map_bytes);
  });
  std::vector<uint64_t> piece(pieces_of(bytes));
  pool.parallel_for(int64_t(piece.size()), [&](int64_t i, int) {
    const size_t begin = size_t(i) * kPieceBytes;
    piece[size_t(i)] = hash_bytes(data + begin, std::min(kPieceBytes, bytes - begin), uint64_t(i));
  });
  if (fold(piece, bytes, 0) != h.checksum) {
    m.result = PackCacheRead::Corrupt;
    return m;
  }
  m.huge_bytes = std::min(file_pmd_mapped(data), bytes);
  m.data = std::move(owner);
  m.result = PackCacheRead::Hit;
  return m;
}

}  // namespace

bool mostly_huge(const PackCacheMap& m, size_t bytes) { return m.huge_bytes * 10 >= huge_page_bytes(bytes) * 9; }

PackCacheMap map_pack_cache(const std::string& path, const PackCacheKey& key, size_t bytes, ThreadPool& pool) {
  PackCacheMap m;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return m;
  FdCloser closer{fd};
  Header h{};
  m.result = check_header(fd, key, bytes, h);
  if (m.result != PackCacheRead::Hit) return m;
  if (bytes == 0) {
    m.result = PackCacheRead::Missing;
    m.map_error = "nothing to map";
    return m;
  }
  m = map_and_check(fd, path, h, bytes, pool);
  // Too few 2 MiB pages, where the page cache held this file in 2 MiB folios
  // once: part of it was evicted and read back in small ones (by read()).
  // Drop the pages no one maps and read them again through the huge-page
  // mapping, which brings them in as 2 MiB folios. Where it never did (an
  // older kernel, another filesystem), reading again would not help.
  if (m.result != PackCacheRead::Hit || mostly_huge(m, bytes) || (h.flags & kHugeFolios) == 0) return m;
  m = {};
  posix_fadvise(fd, off_t(kHeaderBytes), off_t(bytes), POSIX_FADV_DONTNEED);
  m = map_and_check(fd, path, h, bytes, pool);
  m.reread = true;
  return m;
}

std::string write_pack_cache(const std::string& path, const PackCacheKey& key, const uint8_t* data, size_t bytes,
                             ThreadPool& pool) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) return "cannot create " + target.parent_path().string() + ": " + ec.message();
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kFormatVersion;
  h.header_bytes = kHeaderBytes;
  h.key_lo = key.lo;
  h.key_hi = key.hi;
  h.packed_bytes = bytes;
  std::vector<uint64_t> piece(pieces_of(bytes));
  std::atomic<bool> failed{false};
  pool.parallel_for(int64_t(piece.size()), [&](int64_t i, int) {
    const size_t begin = size_t(i) * kPieceBytes, n = std::min(kPieceBytes, bytes - begin);
    piece[size_t(i)] = hash_bytes(data + begin, n, uint64_t(i));
    if (!write_all(fd, data + begin, n, off_t(kHeaderBytes + begin))) failed = true;
  });
  h.checksum = fold(piece, bytes, 0);
  if (!failed && page_cache_has_huge_folios(fd)) h.flags |= kHugeFolios;
  std::vector<uint8_t> head(kHeaderPageBytes, 0);
  std::memcpy(head.data(), &h, sizeof h);
  const bool ok = !failed && write_all(fd, head.data(), head.size(), 0);
  const int saved_errno = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + ": " + std::strerror(saved_errno);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp + ": " + why;
  }
  return "";
}

}  // namespace lumen::runtime
