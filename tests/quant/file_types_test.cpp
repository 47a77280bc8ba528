// quant::choose_tensor_types against llama-quantize's choices, recorded for
// every file type on the tensor tables of the full-size synthetic
// Qwen2.5-0.5B (24 layers), of a 3-layer `lumen-gguf synth` model and of
// tiny3-q8_0.gguf without output.weight (a tied head)
// (tests/data/quant/llama_quantize_types.json, README.md beside it).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lumen/quant/file_types.h"

namespace {

using lumen::ops::DType;
using lumen::quant::FileTypeId;

nlohmann::json recorded() {
  std::ifstream in(LUMEN_SOURCE_DIR "/tests/data/quant/llama_quantize_types.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

DType type_named(const std::string& id_name) {
  const auto t = lumen::ops::parse_dtype_id(id_name);
  if (!t) throw std::runtime_error("fixture type " + id_name);
  return *t;
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

class ChooseTensorTypes : public testing::TestWithParam<std::string> {};

TEST_P(ChooseTensorTypes, AsLlamaQuantizeForEveryFileType) {
  static const nlohmann::json fixture = recorded();
  const nlohmann::json& m = fixture.at("models").at(GetParam());
  const nlohmann::json& h = m.at("hparams");
  lumen::quant::QuantModel model{h.at("arch"), h.at("n_layer"), h.at("n_head"), h.at("n_head_kv"), h.at("n_expert")};
  std::vector<lumen::quant::QuantTensor> tensors;
  for (const nlohmann::json& t : m.at("tensors")) {
    tensors.push_back({t.at(0), t.at(2).get<std::vector<int64_t>>(), type_named(t.at(1))});
  }
  int file_types = 0;
  for (const auto& [name, types] : m.at("types").items()) {
    const auto ft = lumen::quant::parse_file_type(name);
    ASSERT_TRUE(ft) << name;
    const lumen::quant::TypeChoice choice = lumen::quant::choose_tensor_types(tensors, model, *ft);
    const std::vector<std::string> want = words(types.get<std::string>());
    ASSERT_EQ(want.size(), tensors.size()) << name;
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(lumen::ops::id_name(choice.types[i]), want[i]) << name << ": " << tensors[i].name;
    }
    const auto fallback = m.at("fallback").at(name).get<std::vector<int>>();  // {N, M} of "N of M tensor(s)"
    if (fallback[1] != 0) {
      EXPECT_EQ(choice.n_fallback, fallback[0]) << name;
      EXPECT_EQ(choice.n_fallback + choice.n_k_quantized, fallback[1]) << name;
    } else {
      EXPECT_EQ(choice.n_fallback, 0) << name;
    }
    ++file_types;
  }
  EXPECT_EQ(file_types, 19);
}

INSTANTIATE_TEST_SUITE_P(Recorded, ChooseTensorTypes, testing::Values("qwen2.5-0.5b", "synth-3-layer", "tiny3-tied"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(FileTypes, NamesAsLlamaQuantize) {
  EXPECT_EQ(lumen::quant::parse_file_type("q4_k_m")->id, FileTypeId::Q4_K_M);
  EXPECT_EQ(lumen::quant::parse_file_type("Q4_K")->id, FileTypeId::Q4_K_M);  // llama-quantize's alias
  EXPECT_EQ(lumen::quant::parse_file_type("Q5_K")->id, FileTypeId::Q5_K_M);
  EXPECT_EQ(lumen::quant::parse_file_type("Q3_K")->default_type, DType::Q3_K);
  EXPECT_EQ(static_cast<uint32_t>(lumen::quant::parse_file_type("BF16")->id), 32u);
  EXPECT_FALSE(lumen::quant::parse_file_type("Q4_K_X"));
  EXPECT_FALSE(lumen::quant::parse_file_type("IQ2_XS"));
  EXPECT_TRUE(lumen::quant::needs_importance_matrix("iq2_xs"));
  EXPECT_TRUE(lumen::quant::needs_importance_matrix("IQ1_M"));
  EXPECT_FALSE(lumen::quant::needs_importance_matrix("Q4_0"));
}

// llama-quantize's writing order: tensors outside a layer first, then by
// layer number (not text: blk.10 after blk.9), names sorted within.
TEST(FileTypes, LlamaQuantizeOrder) {
  std::vector<lumen::quant::QuantTensor> t = {{"blk.10.ffn_up.weight", {32, 2}, DType::F32},
                                             {"token_embd.weight", {32, 2}, DType::F32},
                                             {"blk.9.attn_q.weight", {32, 2}, DType::F32},
                                             {"blk.9.attn_k.weight", {32, 2}, DType::F32},
                                             {"output.weight", {32, 2}, DType::F32}};
  EXPECT_EQ(lumen::quant::llama_quantize_order(t), (std::vector<size_t>{4, 1, 3, 2, 0}));
}

// Rows that fit no 32-wide block: llama-quantize gives up on the tensor.
TEST(FileTypes, RowsOfNoBlockAreRefused) {
  const lumen::quant::QuantModel model{"qwen2", 1, 1, 1, 0};
  const std::vector<lumen::quant::QuantTensor> t = {{"blk.0.attn_q.weight", {48, 2}, DType::F32}};
  EXPECT_THROW(lumen::quant::choose_tensor_types(t, model, *lumen::quant::parse_file_type("Q4_0")), std::runtime_error);
  // F16 takes any row.
  EXPECT_EQ(lumen::quant::choose_tensor_types(t, model, *lumen::quant::parse_file_type("F16")).types[0], DType::F16);
}

}  // namespace
