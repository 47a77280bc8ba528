// quant::quantize_row against ggml: the XXH3 of its bytes on fixed inputs
// equals what ggml_quantize_chunk (llama-quantize's path, no importance
// matrix) wrote, recorded in tests/data/quant/reference_quants.json.
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lumen/common/cache.h"
#include "lumen/quant/quant.h"
#include "quant/quant_inputs.h"

namespace {

using lumen::ops::DType;
namespace qt = lumen::quant::test;

nlohmann::json reference() {
  std::ifstream in(LUMEN_SOURCE_DIR "/tests/data/quant/reference_quants.json");
  std::stringstream text;
  text << in.rdbuf();
  return nlohmann::json::parse(text.str());
}

constexpr DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                            DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K,
                            DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

class QuantizeRow : public testing::TestWithParam<DType> {};

TEST_P(QuantizeRow, BytesAreGgmls) {
  static const nlohmann::json ref = reference();
  const DType t = GetParam();
  const nlohmann::json& hashes = ref.at("hashes").at(lumen::ops::to_string(t));
  const int64_t row_bytes = lumen::ops::row_bytes(t, qt::kRowElems);
  for (size_t c = 0; c < qt::kCases.size(); ++c) {
    const std::vector<float> x = qt::make_case(static_cast<int>(c));
    std::vector<uint8_t> out(static_cast<size_t>(row_bytes * qt::kRows));
    // Row by row, as a tensor is written: the hash covers all rows.
    for (int r = 0; r < qt::kRows; ++r) {
      lumen::quant::quantize_row(t, x.data() + r * qt::kRowElems, out.data() + r * row_bytes, qt::kRowElems);
    }
    const std::string got = fmt::format("{:016x}", lumen::hash_bytes(out.data(), out.size(), 0));
    EXPECT_EQ(got, hashes.at(std::string(qt::kCases[c])).get<std::string>()) << "case " << qt::kCases[c];
  }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, QuantizeRow, testing::ValuesIn(kTypes),
                         [](const testing::TestParamInfo<DType>& info) { return lumen::ops::id_name(info.param); });

TEST(QuantizeRow, RejectsRowsOfPartialBlocks) {
  std::vector<float> x(48);
  std::vector<uint8_t> out(64);
  EXPECT_THROW(lumen::quant::quantize_row(DType::Q4_0, x.data(), out.data(), 48), std::invalid_argument);
  EXPECT_THROW(lumen::quant::quantize_row(DType::ActQ8, x.data(), out.data(), 32), std::invalid_argument);
}

}  // namespace
