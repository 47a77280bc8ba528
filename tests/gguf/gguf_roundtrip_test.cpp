// GGUF reader and writer: values of every type survive a write/read cycle,
// rewriting a read file reproduces it byte for byte (our own files and the
// llama.cpp-made reference model), typed getters check types, and the
// reference model's metadata and tensor table are as its README says.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "gguf_test_util.h"
#include "support/test_files.h"
#include "lumen/gguf/gguf.h"
#include "lumen/gguf/info.h"

namespace lumen::gguf {
namespace {

using testing::small_writer;
using testing::temp_path;

const std::string kReference = lumen::test_support::tiny_gguf();

// Rebuilds a writer holding everything the file holds.
Writer copy_of(const File& file) {
  Writer w;
  for (const KeyValue& kv : file.metadata()) w.set(kv.key, kv.value);
  for (const TensorInfo& t : file.tensors()) {
    w.add_tensor(t.name, t.type, t.ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  return w;
}

TEST(GgufRoundTrip, EveryValueTypeReadsBack) {
  const std::vector<uint8_t> bytes = small_writer().to_bytes();
  const File f = File::from_memory(bytes);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(f.file_size(), bytes.size());
  EXPECT_EQ(f.metadata().size(), 17u);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(std::get<uint8_t>(f.find("test.u8")->value.scalar()), 200);
  EXPECT_EQ(std::get<int8_t>(f.find("test.i8")->value.scalar()), -100);
  EXPECT_EQ(std::get<uint16_t>(f.find("test.u16")->value.scalar()), 60000);
  EXPECT_EQ(std::get<int16_t>(f.find("test.i16")->value.scalar()), -30000);
  EXPECT_EQ(f.get_uint("test.u32"), 4000000000u);
  EXPECT_EQ(f.get_int("test.i32"), -2000000000);
  EXPECT_EQ(f.get_float("test.f32"), 1.5);
  EXPECT_EQ(f.get_bool("test.bool"), true);
  EXPECT_EQ(f.get_uint("test.u64"), 18000000000000000000ull);
  EXPECT_EQ(f.get_int("test.i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_float("test.f64"), 0.1);
  EXPECT_EQ(f.get_string("test.str"), "héllo\nworld");
  EXPECT_EQ(f.get_string_array("test.strings"), (std::vector<std::string>{"a", "", "ĠĠ ĠĠ", "<|im_end|>"}));
  EXPECT_EQ(f.get_i32_array("test.i32s"), (std::vector<int32_t>{1, -2, 3}));
  EXPECT_EQ(f.get_f32_array("test.f32s"), (std::vector<float>{0.5f, -0.25f}));
  EXPECT_EQ(f.find("test.empty_array")->value.array().elem_type, ValueType::U64);
  EXPECT_TRUE(f.find("test.empty_array")->value.array().items.empty());
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.get_uint("missing"), std::nullopt);

  ASSERT_EQ(f.tensors().size(), 3u);
  const TensorInfo* a = f.find_tensor("a.weight");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, TensorType::Q8_0);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(a->n_elements, 64u);
  EXPECT_EQ(a->n_bytes, 68u);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(a->data, bytes.data() + f.data_offset());
  EXPECT_EQ(a->data[5], 35);
  const TensorInfo* b = f.find_tensor("b.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset, 96u);  // 68 padded to 96
  EXPECT_EQ(b->n_bytes, 6u);
  EXPECT_EQ(f.find_tensor("c.norm")->offset, 128u);
  EXPECT_EQ(f.data_offset() + 128 + 32, bytes.size());  // no trailing padding needed
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufRoundTrip, RewritingGivesTheSameBytes) {
  const std::vector<uint8_t> bytes = small_writer().to_bytes();
  const File f = File::from_memory(bytes);
  EXPECT_EQ(copy_of(f).to_bytes(), bytes);
}

TEST(GgufRoundTrip, CustomAlignment) {
  Writer w = small_writer();
  w.set_alignment(64);
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = File::from_memory(bytes);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_uint("general.alignment"), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(f.find_tensor("b.bias")->offset, 128u);
  EXPECT_EQ(copy_of(f).to_bytes(), bytes);
  EXPECT_THROW(w.set_alignment(48), Error);
  EXPECT_THROW(w.set("general.alignment", Value{ValueType::U64, Scalar(uint64_t{64})}), Error);
}

TEST(GgufRoundTrip, SetReplacesInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_u32("b", 2);
  w.set_string("a", "x");
  const std::vector<uint8_t> bytes = w.to_bytes();
  const File f = File::from_memory(bytes);
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].key, "a");
  EXPECT_EQ(f.get_string("a"), "x");
}

TEST(GgufRoundTrip, StreamedTensorsMatchInMemoryOnes) {
  Writer w;
  w.set_u32("k", 7);
  w.add_tensor("t", TensorType::F32, {5}, Writer::TensorFill([](std::span<uint8_t> out) {
                 for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i);
               }));
  std::vector<uint8_t> plain(20);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(i);
  Writer same;
  same.set_u32("k", 7);
  same.add_tensor("t", TensorType::F32, {5}, plain);
  const auto path = temp_path("streamed.gguf");
  w.write(path.string());
  const File f = File::open(path.string());
  const std::vector<uint8_t> expected = same.to_bytes();
  ASSERT_EQ(f.file_size(), expected.size());
  EXPECT_EQ(std::vector<uint8_t>(f.find_tensor("t")->data, f.find_tensor("t")->data + 20), plain);
  EXPECT_EQ(w.to_bytes(), expected);
  std::filesystem::remove(path);
}

TEST(GgufRoundTrip, WriterRejectsInconsistentTensors) {
  Writer w;
  EXPECT_THROW(w.add_tensor("t", TensorType::F32, {5}, std::vector<uint8_t>(19)), Error);
  EXPECT_THROW(w.add_tensor("q", TensorType::Q8_0, {33}, std::vector<uint8_t>(34)), Error);
  EXPECT_THROW(w.add_tensor("", TensorType::F32, {1}, std::vector<uint8_t>(4)), Error);
  w.add_tensor("t", TensorType::F32, {1}, std::vector<uint8_t>(4));
  try {
    w.add_tensor("t", TensorType::F32, {1}, std::vector<uint8_t>(4));
    FAIL() << "duplicate tensor accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::DuplicateTensor);
  }
  // A value whose declared type does not match what it holds.
  w.set("bad", Value{ValueType::U32, Scalar(1.0f)});
  EXPECT_THROW(w.to_bytes(), Error);
}

TEST(GgufRoundTrip, WriteToBadPathIsAnIoError) {
  try {
    small_writer().write("/nonexistent-dir/x.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::Io);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf"), std::string::npos);
  }
}

TEST(GgufGetters, WrongTypesNameTheKey) {
  const std::vector<uint8_t> bytes = small_writer().to_bytes();
  const File f = File::from_memory(bytes);
  auto expect_wrong = [&](auto&& call, const std::string& key) {
    try {
      call();
      FAIL() << "no error for " << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Error::Code::WrongType);
      EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
      EXPECT_EQ(e.offset(), f.find(key)->offset);
    }
  };
  expect_wrong([&] { (void)f.get_string("test.u32"); }, "test.u32");
  expect_wrong([&] { (void)f.get_uint("test.i32"); }, "test.i32");       // negative
  expect_wrong([&] { (void)f.get_int("test.u64"); }, "test.u64");        // above INT64_MAX
  expect_wrong([&] { (void)f.get_uint("test.f32"); }, "test.f32");
  expect_wrong([&] { (void)f.get_float("test.u32"); }, "test.u32");
  expect_wrong([&] { (void)f.get_bool("test.u8"); }, "test.u8");
  expect_wrong([&] { (void)f.get_string_array("test.i32s"); }, "test.i32s");
  expect_wrong([&] { (void)f.get_i32_array("test.strings"); }, "test.strings");
  expect_wrong([&] { (void)f.get_f32_array("test.str"); }, "test.str");
  EXPECT_EQ(f.get_uint("test.u8"), 200u);    // any integer type that fits
  EXPECT_EQ(f.get_int("test.u16"), 60000);
  EXPECT_EQ(f.get_int("test.i64"), -9000000000000000000ll);
}

TEST(GgufTypes, TraitsAndNames) {
  EXPECT_EQ(type_traits(8)->type_size, 34u);
  EXPECT_EQ(type_traits(8)->block_size, 32u);
  EXPECT_EQ(type_traits(0)->name, "F32");
  EXPECT_FALSE(type_traits(4));   // removed Q4_2
  EXPECT_FALSE(type_traits(39));
  EXPECT_EQ(to_string(TensorType::BF16), "BF16");
  EXPECT_EQ(to_string(ValueType::String), "str");
}

// ---- the llama.cpp-made reference model ----

TEST(GgufReference, MetadataAndTensorTable) {
  const File f = File::open(kReference);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.file_size(), 47653568u);
  EXPECT_EQ(f.get_string("general.architecture"), "qwen2");
  EXPECT_EQ(f.get_uint("general.file_type"), 7u);
  EXPECT_EQ(f.find("general.file_type")->value.type, ValueType::U32);
  EXPECT_EQ(f.get_uint("qwen2.context_length"), 4096u);
  EXPECT_EQ(f.get_uint("qwen2.embedding_length"), 128u);
  EXPECT_EQ(f.get_uint("qwen2.feed_forward_length"), 352u);
  EXPECT_EQ(f.get_uint("qwen2.block_count"), 2u);
  EXPECT_EQ(f.get_uint("qwen2.attention.head_count"), 4u);
  EXPECT_EQ(f.get_uint("qwen2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.get_float("qwen2.rope.freq_base"), 1e6);
  EXPECT_EQ(f.find("qwen2.attention.layer_norm_rms_epsilon")->value.type, ValueType::F32);
  EXPECT_EQ(f.get_float("qwen2.attention.layer_norm_rms_epsilon"), static_cast<double>(1e-6f));
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f.get_uint("tokenizer.ggml.eos_token_id"), 151645u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.bos_token_id"), 151643u);
  EXPECT_EQ(f.get_uint("tokenizer.ggml.padding_token_id"), 151643u);
  EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), false);
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens);
  ASSERT_EQ(tokens->size(), 151936u);
  EXPECT_EQ((*tokens)[151645], "<|im_end|>");
  EXPECT_EQ((*tokens)[151935], "[PAD151935]");
  EXPECT_EQ(f.get_string_array("tokenizer.ggml.merges")->size(), 151387u);
  const auto types = f.get_i32_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types);
  EXPECT_EQ(std::count(types->begin(), types->end(), 1), 151643);
  EXPECT_EQ(std::count(types->begin(), types->end(), 3), 20);
  EXPECT_EQ(std::count(types->begin(), types->end(), 4), 2);
  EXPECT_EQ(std::count(types->begin(), types->end(), 5), 151936 - 151665);

  ASSERT_EQ(f.tensors().size(), 27u);
  EXPECT_EQ(f.tensors().front().name, "token_embd.weight");
  EXPECT_EQ(f.tensors().front().ne, (std::vector<int64_t>{128, 151936}));
  EXPECT_EQ(f.tensors().back().name, "output.weight");
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down.weight")->ne, (std::vector<int64_t>{352, 128}));
  EXPECT_EQ(f.find_tensor("blk.0.attn_k.bias")->type, TensorType::F32);
  EXPECT_EQ(f.find_tensor("blk.0.attn_k.weight")->type, TensorType::Q8_0);
}

TEST(GgufReference, RewriteIsBitExact) {
  const File f = File::open(kReference);
  const std::vector<uint8_t> bytes = copy_of(f).to_bytes();
  std::ifstream in(kReference, std::ios::binary);
  const std::vector<uint8_t> original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), original.size());
  EXPECT_TRUE(bytes == original);
}

TEST(GgufReference, DescribeListsTheTableAndSummarizesArrays) {
  const File f = File::open(kReference);
  const std::string text = describe(f, false);
  EXPECT_NE(text.find("* 24 key/value pairs"), std::string::npos);
  EXPECT_NE(text.find("* 27 tensors"), std::string::npos);
  EXPECT_NE(text.find("tokenizer.ggml.tokens = [151936 strings: \"!\", \"\\\"\", "), std::string::npos);
  EXPECT_NE(text.find("u32    qwen2.context_length = 4096"), std::string::npos);
  EXPECT_NE(text.find("output.weight"), std::string::npos);
  EXPECT_NE(text.find("19.706"), std::string::npos);  // MiB of token_embd
  EXPECT_LT(text.size(), 8000u);
  EXPECT_GT(describe(f, true).size(), 2'000'000u);  // --all prints every token and merge
}

}  // namespace
}  // namespace lumen::gguf
