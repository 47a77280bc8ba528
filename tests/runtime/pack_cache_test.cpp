// The packed-weight cache: a written file reads back, and maps, bit for bit;
// a missing, truncated, bit-flipped or foreign-key file is reported as such
// (never trusted); a mapping that fails is reported so the caller reads the
// file; a Session misses, then hits (mapped, or read when asked), rebuilds a
// corrupt or stale file, and computes the same logits in every case; a
// loaded Session maps none of the GGUF's weight pages (the one copy it keeps
// is the packed one).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "lumen/common/cache.h"
#include "lumen/gguf/gguf.h"
#include "lumen/runtime/binding.h"
#include "lumen/runtime/pack_cache.h"
#include "lumen/runtime/session.h"
#include "lumen/runtime/thread_pool.h"
#include "runtime_support.h"

namespace lumen::runtime {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(LUMEN_BINARY_DIR) / "tests" / "runtime" / "pack_cache_files" /
                       (std::to_string(getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

void flip_byte(const fs::path& file, std::streamoff offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(char(c ^ 0x10));
}

TEST(PackCache, HashIsTheSameForAnyThreadCountAndSeesOneBit) {
  // 9 MiB + 5: three 4 MiB pieces, the last one ragged.
  std::vector<uint8_t> data = random_bytes((size_t(9) << 20) + 5, 1);
  ThreadPool one(1), three(3);
  const uint64_t h = hash_parallel(data.data(), data.size(), 0, one);
  EXPECT_EQ(hash_parallel(data.data(), data.size(), 0, three), h);
  EXPECT_NE(hash_parallel(data.data(), data.size(), 1, one), h);           // seed
  EXPECT_NE(hash_parallel(data.data(), data.size() - 1, 0, one), h);       // length
  data[data.size() / 2] ^= 0x01;
  EXPECT_NE(hash_parallel(data.data(), data.size(), 0, one), h);           // one bit
  for (size_t n : {1, 7, 8, 31, 33})  // every tail path of hash_bytes
    EXPECT_NE(hash_bytes(data.data(), n, 0), hash_bytes(data.data() + 1, n, 0)) << n;
}

TEST(PackCache, WrittenFileReadsBackAndBadFilesAreNotTrusted) {
  const fs::path dir = fresh_dir("unit");
  const std::string path = (dir / "sub" / "x.lumenpack").string();  // the directory is created
  const std::vector<uint8_t> data = random_bytes((size_t(5) << 20) + 100, 2);
  const PackCacheKey key{11, 22};
  ThreadPool pool(2);
  std::vector<uint8_t> out(data.size());

  EXPECT_EQ(read_pack_cache(path, key, out.data(), out.size(), pool), PackCacheRead::Missing);
  ASSERT_EQ(write_pack_cache(path, key, data.data(), data.size(), pool), "");
  EXPECT_EQ(read_pack_cache(path, key, out.data(), out.size(), pool), PackCacheRead::Hit);
  EXPECT_EQ(out, data);

  // Another key, another size: stale.
  EXPECT_EQ(read_pack_cache(path, PackCacheKey{11, 23}, out.data(), out.size(), pool), PackCacheRead::Stale);
  EXPECT_EQ(read_pack_cache(path, key, out.data(), out.size() - 1, pool), PackCacheRead::Stale);

  // A flipped bit in the packed bytes, a truncated file, a foreign header: corrupt.
  const fs::path copy = dir / "copy.lumenpack";
  fs::copy_file(path, copy);
  flip_byte(copy, (2 << 20) + 3 * 1000 * 1000);
  EXPECT_EQ(read_pack_cache(copy.string(), key, out.data(), out.size(), pool), PackCacheRead::Corrupt);
  fs::remove(copy);
  fs::copy_file(path, copy);
  fs::resize_file(copy, fs::file_size(copy) - 1);
  EXPECT_EQ(read_pack_cache(copy.string(), key, out.data(), out.size(), pool), PackCacheRead::Corrupt);
  fs::remove(copy);
  fs::copy_file(path, copy);
  flip_byte(copy, 0);
  EXPECT_EQ(read_pack_cache(copy.string(), key, out.data(), out.size(), pool), PackCacheRead::Corrupt);
  std::ofstream(copy, std::ios::trunc) << "short";
  EXPECT_EQ(read_pack_cache(copy.string(), key, out.data(), out.size(), pool), PackCacheRead::Corrupt);

  // A directory that cannot be created is reported, not thrown.
  std::ofstream(dir / "file") << "x";
  EXPECT_NE(write_pack_cache((dir / "file" / "y.lumenpack").string(), key, data.data(), data.size(), pool), "");
  fs::remove_all(dir);
}

TEST(PackCache, MappedFileIsBitIdenticalAlignedAndCheckedLikeARead) {
  const fs::path dir = fresh_dir("map");
  const std::string path = (dir / "x.lumenpack").string();
  // Four whole 2 MiB pages and a ragged tail.
  const std::vector<uint8_t> data = random_bytes((size_t(8) << 20) + 100, 3);
  const PackCacheKey key{33, 44};
  ThreadPool pool(2);

  PackCacheMap m = map_pack_cache(path, key, data.size(), pool);
  EXPECT_EQ(m.result, PackCacheRead::Missing);
  EXPECT_EQ(m.map_error, "");
  EXPECT_EQ(m.data, nullptr);
  ASSERT_EQ(write_pack_cache(path, key, data.data(), data.size(), pool), "");
  EXPECT_EQ(fs::file_size(path), (size_t(2) << 20) + data.size());  // the packed bytes start at 2 MiB

  m = map_pack_cache(path, key, data.size(), pool);
  ASSERT_EQ(m.result, PackCacheRead::Hit) << m.map_error;
  ASSERT_NE(m.data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data.get()) % (size_t(2) << 20), 0u);  // huge pages can line up
  EXPECT_EQ(std::memcmp(m.data.get(), data.data(), data.size()), 0);
  EXPECT_EQ(huge_page_bytes(data.size()), size_t(8) << 20);
  EXPECT_LE(m.huge_bytes, huge_page_bytes(data.size()));
  m = {};  // unmapped

  EXPECT_EQ(map_pack_cache(path, PackCacheKey{33, 45}, data.size(), pool).result, PackCacheRead::Stale);
  EXPECT_EQ(map_pack_cache(path, key, data.size() - 1, pool).result, PackCacheRead::Stale);
  const fs::path copy = dir / "copy.lumenpack";
  fs::copy_file(path, copy);
  flip_byte(copy, std::streamoff(fs::file_size(copy) - 7));  // in the ragged tail
  m = map_pack_cache(copy.string(), key, data.size(), pool);
  EXPECT_EQ(m.result, PackCacheRead::Corrupt);
  EXPECT_EQ(m.data, nullptr);
  fs::remove(copy);
  fs::copy_file(path, copy);
  fs::resize_file(copy, fs::file_size(copy) - 1);
  EXPECT_EQ(map_pack_cache(copy.string(), key, data.size(), pool).result, PackCacheRead::Corrupt);
  fs::remove_all(dir);
}

// Where the page cache holds a freshly written file in 2 MiB folios, a file
// evicted and read back 4 KiB at a time (as read() does) maps on 2 MiB pages
// again: map_pack_cache drops and rereads it. Elsewhere it still maps and
// hits, on whatever pages there are.
TEST(PackCache, MappingRepairsAPageCacheReadBackInSmallPieces) {
  const fs::path dir = fresh_dir("reread");
  const std::string path = (dir / "x.lumenpack").string();
  const std::vector<uint8_t> data = random_bytes((size_t(8) << 20) + 100, 5);
  const PackCacheKey key{77, 88};
  ThreadPool pool(2);
  ASSERT_EQ(write_pack_cache(path, key, data.data(), data.size(), pool), "");
  PackCacheMap m = map_pack_cache(path, key, data.size(), pool);
  ASSERT_EQ(m.result, PackCacheRead::Hit);
  const bool page_cache_has_huge_folios = mostly_huge(m, data.size());
  m = {};

  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  fsync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  std::vector<uint8_t> page(4096);
  for (off_t at = 0; pread(fd, page.data(), page.size(), at) > 0; at += off_t(page.size())) {
  }
  ::close(fd);

  m = map_pack_cache(path, key, data.size(), pool);
  ASSERT_EQ(m.result, PackCacheRead::Hit);
  EXPECT_EQ(std::memcmp(m.data.get(), data.data(), data.size()), 0);
  if (page_cache_has_huge_folios) {
    EXPECT_TRUE(m.reread);
    EXPECT_TRUE(mostly_huge(m, data.size())) << m.huge_bytes;
  }
  m = {};
  fs::remove_all(dir);
}

// mmap refused (here: no address space left, in a child process) is reported
// with why, not thrown or crashed on, and the file still reads.
#if defined(__SANITIZE_ADDRESS__)
#define LUMEN_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LUMEN_UNDER_ASAN 1
#endif
#endif
TEST(PackCache, FailedMappingIsReportedAndTheFileStillReads) {
#ifdef LUMEN_UNDER_ASAN
  GTEST_SKIP() << "the sanitizer's own mappings need the address space this test takes away";
#endif
  const fs::path dir = fresh_dir("nomap");
  const std::string path = (dir / "x.lumenpack").string();
  const std::vector<uint8_t> data = random_bytes((size_t(16) << 20) + 5, 4);
  const PackCacheKey key{55, 66};
  {
    ThreadPool pool(1);
    ASSERT_EQ(write_pack_cache(path, key, data.data(), data.size(), pool), "");
  }
  EXPECT_EXIT(
      {
        ThreadPool pool(1);
        std::vector<uint8_t> out(data.size());
        std::string why;
        why.reserve(4096);
        // Address space for small allocations only: the 18 MiB reservation fails.
        rlimit limit{};
        getrlimit(RLIMIT_AS, &limit);
        std::ifstream status("/proc/self/status");
        std::string line;
        size_t vm_kb = 0;
        while (std::getline(status, line))
          if (std::sscanf(line.c_str(), "VmSize: %zu kB", &vm_kb) == 1) break;
        limit.rlim_cur = rlim_t(vm_kb + 4096) << 10;
        if (vm_kb == 0 || setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(3);
        PackCacheMap m = map_pack_cache(path, key, data.size(), pool);
        if (m.result != PackCacheRead::Missing || m.data != nullptr || m.map_error.empty()) std::_Exit(1);
        if (read_pack_cache(path, key, out.data(), out.size(), pool) != PackCacheRead::Hit || out != data)
          std::_Exit(2);
        std::fprintf(stderr, "reported: %s\n", m.map_error.c_str());
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "reported: cannot reserve address space");
  fs::remove_all(dir);
}

// The Session's view: miss, hit, corrupt and stale files, same logits throughout.
TEST(PackCache, SessionMissesHitsAndRebuilds) {
  const auto model = testing::qwen2_model();
  const fs::path dir = fresh_dir("session");
  SessionOptions o;
  o.n_threads = 2;
  o.n_ctx = 64;
  const std::vector<int32_t> tokens = {1, 5, 9, 33, 2};
  std::string how;  // mapped or read, on a hit
  auto logits = [&](const SessionOptions& opt, std::string* status) {
    Session s(model, testing::tiny_gguf(), opt);
    *status = s.load_stats().pack_cache;
    how = s.load_stats().pack_cache_how;
    auto l = s.eval(tokens);
    return std::vector<float>(l.begin(), l.end());
  };
  std::string status;
  const std::vector<float> want = logits(o, &status);
  EXPECT_EQ(status, "off");

  o.pack_cache_dir = dir.string();
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "miss");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].extension(), ".lumenpack");
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "hit");
  EXPECT_EQ(how.rfind("mapped, ", 0), 0u) << how;  // tiny weights: no whole 2 MiB page to miss
  o.map_pack_cache = false;
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "hit");
  EXPECT_EQ(how, "read");
  o.map_pack_cache = true;

  flip_byte(files[0], std::streamoff(fs::file_size(files[0]) - 100));
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "corrupt");
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "hit");  // rebuilt
  EXPECT_EQ(how.rfind("mapped, ", 0), 0u) << how;
  o.map_pack_cache = false;  // the read path rejects a corrupt file too
  flip_byte(files[0], std::streamoff(fs::file_size(files[0]) - 100));
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "corrupt");
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "hit");
  o.map_pack_cache = true;

  flip_byte(files[0], 16);  // key_lo in the header: a file made for other contents
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "stale");
  EXPECT_EQ(logits(o, &status), want);
  EXPECT_EQ(status, "hit");
  fs::remove_all(dir);
}


// Whether the page at `addr` is mapped in this process (/proc/self/pagemap's
// present bit; readable without privileges, unlike the frame number).
bool page_present(int pagemap, uintptr_t addr, uintptr_t page) {
  uint64_t entry = 0;
  EXPECT_EQ(pread(pagemap, &entry, sizeof entry, off_t(addr / page * sizeof entry)), ssize_t(sizeof entry));
  return (entry >> 63) != 0;
}

// Pages of the GGUF's quantized tensors this process maps. (After a
// Session's load an F32 norm read in place maps its neighbours too: the
// kernel's fault-around. So this looks right after bind_model.)
size_t mapped_weight_pages(const gguf::File& file) {
  const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(pagemap, 0);
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  size_t mapped = 0, checked = 0;
  for (const gguf::TensorInfo& t : file.tensors()) {
    if (t.type == gguf::TensorType::F32) continue;  // norms and biases, read in place
    const auto begin = (reinterpret_cast<uintptr_t>(t.data) + page - 1) / page * page;
    const auto end = (reinterpret_cast<uintptr_t>(t.data) + t.n_bytes) / page * page;
    for (uintptr_t a = begin; a < end; a += page, ++checked) mapped += page_present(pagemap, a, page);
  }
  ::close(pagemap);
  EXPECT_GT(checked, 100u);  // the tiny model's weights span many pages
  return mapped;
}

// The tiny model without output.weight: its head is the embedding table,
// which the embedding lookup also reads in place.
std::string tied_copy(const fs::path& dir) {
  const gguf::File in = gguf::File::open(testing::tiny_gguf());
  gguf::Writer w;
  for (const gguf::KeyValue& kv : in.metadata()) w.set(kv.key, kv.value);
  for (const gguf::TensorInfo& t : in.tensors())
    if (t.name != "output.weight") w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  const std::string path = (dir / "tied.gguf").string();
  w.write(path);
  return path;
}

// A load reads every weight (hashed for the cache key, checked, packed) but
// keeps none of the GGUF's pages mapped: the weights are resident once, packed.
TEST(PackCache, BindingKeepsNoneOfTheGgufsWeightPagesMapped) {
  const auto model = testing::qwen2_model();
  const fs::path dir = fresh_dir("pages");
  ThreadPool pool(2);
  for (const std::string& path : {testing::tiny_gguf(), tied_copy(dir)}) {
    SCOPED_TRACE(path);
    const gguf::File file = gguf::File::open(path);
    const fs::path cache = dir / fs::path(path).stem();
    auto check = [&](const std::string& cache_dir, bool map, const char* want_status) {
      const BoundModel b = bind_model(*model, file, /*release_file_pages=*/true, pool, cache_dir, map);
      EXPECT_EQ(b.pack_cache, want_status);
      EXPECT_EQ(mapped_weight_pages(file), 0u) << want_status << (map ? ", mapped" : ", read");
    };
    check("", true, "off");
    check(cache.string(), true, "miss");
    check(cache.string(), true, "hit");
    check(cache.string(), false, "hit");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lumen::runtime
