// The cache folder follows the environment in its documented order; the
// cache hash depends on every byte, the length and the seed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "lumen/common/cache.h"

namespace lumen {
namespace {

TEST(Cache, FolderFollowsTheEnvironment) {
  const char* names[3] = {"LUMEN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::string keep[3];
  bool had[3];
  for (int i = 0; i < 3; ++i) {
    const char* v = std::getenv(names[i]);
    had[i] = v != nullptr;
    keep[i] = v ? v : "";
  }
  setenv("LUMEN_CACHE_DIR", "/a", 1);
  setenv("XDG_CACHE_HOME", "/b", 1);
  setenv("HOME", "/c", 1);
  EXPECT_EQ(cache_dir(), "/a");
  setenv("LUMEN_CACHE_DIR", "", 1);  // empty counts as unset
  EXPECT_EQ(cache_dir(), "/b/lumen");
  unsetenv("LUMEN_CACHE_DIR");
  EXPECT_EQ(cache_dir(), "/b/lumen");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(cache_dir(), "/c/.cache/lumen");
  unsetenv("HOME");
  EXPECT_EQ(cache_dir(), "");
  for (int i = 0; i < 3; ++i) {
    if (had[i]) {
      setenv(names[i], keep[i].c_str(), 1);
    } else {
      unsetenv(names[i]);
    }
  }
}

TEST(Cache, HashSeesEveryByteTheLengthAndTheSeed) {
  std::vector<unsigned char> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7 + 1);
  const uint64_t h = hash_bytes(data.data(), data.size(), 0);
  EXPECT_EQ(hash_bytes(data.data(), data.size(), 0), h);
  EXPECT_NE(hash_bytes(data.data(), data.size(), 1), h);
  EXPECT_NE(hash_bytes(data.data(), data.size() - 1, 0), h);
  data[150] ^= 1;
  EXPECT_NE(hash_bytes(data.data(), data.size(), 0), h);
}

}  // namespace
}  // namespace lumen
