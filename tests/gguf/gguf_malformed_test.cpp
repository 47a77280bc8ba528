// Malformed GGUF files: every cut of a valid file, absurd counts and lengths,
// bad value and tensor types, bad dims, bad offsets, duplicates and bad
// alignment each give a gguf::Error with the documented code, a message
// naming the key or tensor, and the byte offset of the bad field.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "gguf_test_util.h"
#include "lumen/gguf/gguf.h"

namespace lumen::gguf {
namespace {

using Code = Error::Code;
using testing::RawGguf;
using testing::small_writer;
using testing::temp_path;

constexpr uint32_t kF32 = 0, kQ8_0 = 8;
constexpr uint64_t kHuge = std::numeric_limits<uint64_t>::max() / 2;

// Parses `bytes`, expecting an Error with `code` whose message contains
// `needle` and, when given, whose offset is `offset`.
void expect_error(const std::vector<uint8_t>& bytes, Code code, const std::string& needle,
                  std::optional<uint64_t> offset = std::nullopt) {
  try {
    (void)File::from_memory(bytes);
    FAIL() << "accepted; expected code " << static_cast<int>(code) << " with '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("byte offset"), std::string::npos) << e.what();
    if (offset) {
      EXPECT_EQ(e.offset(), *offset) << e.what();
    }
  }
}

TEST(GgufMalformed, EveryTruncationThrows) {
  const std::vector<uint8_t> bytes = small_writer().to_bytes();
  ASSERT_NO_THROW((void)File::from_memory(bytes));
  for (size_t n = 0; n < bytes.size(); ++n) {
    // A fresh allocation of exactly n bytes, so ASan catches any read past it.
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n));
    cut.shrink_to_fit();
    try {
      (void)File::from_memory(cut);
      ADD_FAILURE() << "a file cut to " << n << " of " << bytes.size() << " bytes was accepted";
    } catch (const Error& e) {
      const Code c = e.code();
      EXPECT_TRUE(c == Code::Truncated || c == Code::BadCount || c == Code::BadOffset) << n << ": " << e.what();
    }
  }
}

TEST(GgufMalformed, EmptyMissingAndDirectoryFiles) {
  const auto path = temp_path("empty.gguf");
  std::ofstream(path).close();
  try {
    (void)File::open(path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::Truncated);
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos);
  }
  std::filesystem::remove(path);
  try {
    (void)File::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::Io);
  }
  try {
    (void)File::open(std::filesystem::temp_directory_path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::Io);
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos);
  }
}

TEST(GgufMalformed, MagicAndVersion) {
  RawGguf bad_magic;
  bad_magic.bytes = {'G', 'G', 'M', 'L'};
  bad_magic.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(0);
  expect_error(bad_magic.bytes, Code::BadMagic, "bad magic", 0);
  expect_error(RawGguf().header(0, 0, 1).bytes, Code::BadVersion, "version 1", 4);
  expect_error(RawGguf().header(0, 0, 4).bytes, Code::BadVersion, "version 4", 4);
  expect_error(RawGguf().header(0, 0, 0x03000000).bytes, Code::BadVersion, "big-endian", 4);
  EXPECT_NO_THROW((void)File::from_memory(RawGguf().header(0, 0, 2).bytes));
  EXPECT_NO_THROW((void)File::from_memory(RawGguf().header(0, 0).bytes));
}

TEST(GgufMalformed, HugeCounts) {
  expect_error(RawGguf().header(kHuge, 0).bytes, Code::BadCount, "tensor count", 8);
  expect_error(RawGguf().header(0, kHuge).bytes, Code::BadCount, "metadata count", 16);
  expect_error(RawGguf().header(0, 2).kv_u32("a", 1).bytes, Code::BadCount, "metadata count", 16);
}

TEST(GgufMalformed, HugeLengths) {
  RawGguf key;
  key.header(0, 1);
  const uint64_t key_at = key.mark();
  key.put<uint64_t>(kHuge).zeros(16);
  expect_error(key.bytes, Code::BadCount, "the key has length", key_at);

  RawGguf str;
  str.header(0, 1).str("general.name").put<uint32_t>(8);
  const uint64_t len_at = str.mark();
  str.put<uint64_t>(1000).zeros(8);
  expect_error(str.bytes, Code::BadCount, "key 'general.name'", len_at);

  RawGguf arr;
  arr.header(0, 1).str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8);
  const uint64_t count_at = arr.mark();
  arr.put<uint64_t>(kHuge).zeros(64);
  expect_error(arr.bytes, Code::BadCount, "key 'tokenizer.ggml.tokens': array of", count_at);

  RawGguf arr_item;  // a plausible count whose items' lengths lie
  arr_item.header(0, 1).str("tokenizer.ggml.merges").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("a b");
  arr_item.put<uint64_t>(kHuge);
  expect_error(arr_item.bytes, Code::BadCount, "key 'tokenizer.ggml.merges'");

  RawGguf name;
  name.header(1, 0);
  const uint64_t name_at = name.mark();
  name.put<uint64_t>(kHuge).zeros(40);
  expect_error(name.bytes, Code::BadCount, "tensor info 0", name_at);
}

TEST(GgufMalformed, ValueTypes) {
  RawGguf unknown;
  unknown.header(0, 1).str("x.key");
  const uint64_t type_at = unknown.mark();
  unknown.put<uint32_t>(13).put<uint32_t>(0);
  expect_error(unknown.bytes, Code::BadValueType, "key 'x.key': unknown value type 13", type_at);

  RawGguf nested;
  nested.header(0, 1).str("x.nested").put<uint32_t>(9);
  const uint64_t elem_at = nested.mark();
  nested.put<uint32_t>(9).put<uint64_t>(1).put<uint32_t>(4).put<uint64_t>(1).put<uint32_t>(5);
  expect_error(nested.bytes, Code::BadValueType, "key 'x.nested': nested arrays", elem_at);

  RawGguf bad_elem;
  bad_elem.header(0, 1).str("x.arr").put<uint32_t>(9).put<uint32_t>(0xFFFFFFFF).put<uint64_t>(0);
  expect_error(bad_elem.bytes, Code::BadValueType, "key 'x.arr': unknown value type 4294967295");
}

TEST(GgufMalformed, Keys) {
  RawGguf empty;
  empty.header(0, 1);
  const uint64_t key_at = empty.mark();
  empty.str("").put<uint32_t>(4).put<uint32_t>(1);
  expect_error(empty.bytes, Code::BadKey, "empty key", key_at);

  RawGguf dup;
  dup.header(0, 2).kv_u32("a.b", 1);
  const uint64_t second_at = dup.mark();
  dup.kv_u32("a.b", 2);
  expect_error(dup.bytes, Code::DuplicateKey, "key 'a.b': duplicate key", second_at);
}

TEST(GgufMalformed, Alignment) {
  RawGguf wrong_type;
  wrong_type.header(0, 1).str("general.alignment").put<uint32_t>(10).put<uint64_t>(32);
  expect_error(wrong_type.bytes, Code::BadKey, "key 'general.alignment': must be u32, not u64", 24);
  expect_error(RawGguf().header(0, 1).kv_u32("general.alignment", 0).bytes, Code::BadAlignment, "not a power of two", 24);
  expect_error(RawGguf().header(0, 1).kv_u32("general.alignment", 48).bytes, Code::BadAlignment,
               "alignment 48 is not a power of two", 24);
  RawGguf ok;
  ok.header(1, 1).kv_u32("general.alignment", 8).tensor("t", {2}, kF32, 0).pad(8).zeros(8);
  const File f = File::from_memory(ok.bytes);
  EXPECT_EQ(f.alignment(), 8u);
  EXPECT_EQ(f.data_offset() % 8, 0u);
}

// One tensor `t` with the given dims and type, followed by enough data.
std::vector<uint8_t> one_tensor(std::vector<int64_t> ne, uint32_t type, uint64_t offset = 0, size_t data = 64) {
  RawGguf g;
  g.header(1, 0).tensor("blk.0.t", std::move(ne), type, offset).pad().zeros(data);
  return g.bytes;
}

TEST(GgufMalformed, TensorDims) {
  const uint64_t dims_at = 24 + 8 + 7;  // header, name length, name
  expect_error(one_tensor({1, 1, 1, 1, 1}, kF32), Code::BadTensor, "tensor 'blk.0.t': n_dims 5", dims_at);
  expect_error(one_tensor({}, kF32), Code::BadTensor, "n_dims 0", dims_at);
  expect_error(one_tensor({4, 0}, kF32), Code::BadTensor, "tensor 'blk.0.t': F32 [4, 0] has a dimension that is not positive", dims_at);
  expect_error(one_tensor({-4}, kF32), Code::BadTensor, "not positive");
  expect_error(one_tensor({1ll << 32, 1ll << 32}, kF32), Code::BadTensor, "overflows int64", dims_at);
  expect_error(one_tensor({1ll << 31, 1ll << 31}, kF32), Code::BadTensor, "byte size that overflows", dims_at);
  // The sizes fit but the data would leave the file.
  expect_error(one_tensor({1ll << 30, 1ll << 30}, kF32), Code::BadOffset, "runs past the end");
  expect_error(one_tensor({33}, kQ8_0), Code::BadTensor, "whole number of blocks");
  EXPECT_NO_THROW((void)File::from_memory(one_tensor({32}, kQ8_0)));
}

TEST(GgufMalformed, TensorTypesAndNames) {
  const uint64_t type_at = 24 + 8 + 7 + 4 + 8;
  expect_error(one_tensor({4}, 99), Code::BadTensor, "tensor 'blk.0.t': unknown tensor type 99", type_at);
  expect_error(one_tensor({32}, 4), Code::BadTensor, "unknown tensor type 4");  // removed Q4_2
  RawGguf empty;
  empty.header(1, 0).tensor("", {4}, kF32, 0).pad().zeros(16);
  expect_error(empty.bytes, Code::BadTensor, "empty tensor name", 24);
  RawGguf long_name;
  long_name.header(1, 0).tensor(std::string(64, 'x'), {4}, kF32, 0).pad().zeros(16);
  expect_error(long_name.bytes, Code::BadTensor, "name is 64 bytes long", 24);
  RawGguf dup;
  dup.header(2, 0).tensor("w", {8}, kF32, 0);
  const uint64_t second_at = dup.mark();
  dup.tensor("w", {8}, kF32, 32).pad().zeros(64);
  expect_error(dup.bytes, Code::DuplicateTensor, "tensor 'w': duplicate tensor name", second_at);
}

TEST(GgufMalformed, TensorOffsets) {
  const uint64_t offset_at = 24 + 8 + 7 + 4 + 8 + 4;
  expect_error(one_tensor({4}, kF32, 16), Code::BadOffset, "tensor 'blk.0.t': data offset 16 is not a multiple of the alignment 32", offset_at);
  expect_error(one_tensor({4}, kF32, 64), Code::BadOffset, "runs past the end", offset_at);
  expect_error(one_tensor({4}, kF32, 0xFFFFFFFFFFFFFFE0ull), Code::BadOffset, "runs past the end", offset_at);
  expect_error(one_tensor({16}, kF32, 32, 64), Code::BadOffset, "runs past the end");  // ends 32 bytes after the file
  EXPECT_NO_THROW((void)File::from_memory(one_tensor({16}, kF32, 0, 64)));

  RawGguf overlap;
  overlap.header(2, 0).tensor("first", {16}, kF32, 0);  // 64 bytes
  const uint64_t second_at = overlap.mark() + 8 + 6 + 4 + 8 + 4;
  overlap.tensor("second", {8}, kF32, 32).pad().zeros(128);
  expect_error(overlap.bytes, Code::BadOffset, "tensor 'second': data at offset 32 overlaps tensor 'first'", second_at);

  RawGguf reversed;  // out-of-order but disjoint tensors are fine
  reversed.header(2, 0).tensor("late", {8}, kF32, 64).tensor("early", {16}, kF32, 0).pad().zeros(96);
  const File f = File::from_memory(reversed.bytes);
  EXPECT_EQ(f.find_tensor("late")->data, f.find_tensor("early")->data + 64);
}

TEST(GgufMalformed, ByteFlipsNeverCrash) {
  // Every single-byte change of the header region must parse or throw Error.
  const std::vector<uint8_t> bytes = small_writer().to_bytes();
  const size_t header_end = File::from_memory(bytes).data_offset();
  for (size_t i = 0; i < header_end; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x80}}) {
      std::vector<uint8_t> flipped = bytes;
      flipped[i] = v;
      try {
        (void)File::from_memory(flipped);
      } catch (const Error&) {
      }
    }
  }
}

}  // namespace
}  // namespace lumen::gguf
