// The scheduled program's behaviour-free helpers: evaluating its sizes for
// resolved hparams, and enum names.
#include <cmath>
#include <string>

#include "lumen/program/program.h"

namespace lumen::program {

HParamValues::HParamValues(const std::vector<HParam>& hparams, std::span<const double> values) : values_(values) {
  for (size_t i = 0; i < hparams.size(); ++i) index_.emplace(hparams[i].name, i);
}

int64_t HParamValues::eval(const Dim& d, int64_t n_tokens) const {
  std::string missing;
  std::optional<int64_t> v = d.eval(
      [&](const std::string& name) -> std::optional<int64_t> {
        auto it = index_.find(name);
        double x = it != index_.end() && it->second < values_.size() ? values_[it->second] : std::nan("");
        // 9.2e18 is below INT64_MAX as a double, so the cast is defined.
        if (!std::isfinite(x) || std::fabs(x) >= 9.2e18) {
          if (missing.empty()) missing = name;
          return std::nullopt;
        }
        return static_cast<int64_t>(x);
      },
      n_tokens);
  if (!v) throw ops::DimError("hparam '" + missing + "' has no integer value");
  return *v;
}

std::optional<DType> Weight::type_of_layer(int64_t layer) const {
  if (dtypes.size() == 1) return dtypes[0];
  if (layer < 0 || static_cast<size_t>(layer) >= dtypes.size()) return std::nullopt;
  return dtypes[static_cast<size_t>(layer)];
}

std::string layer_tensor_name(std::string_view pattern, int64_t layer) {
  constexpr std::string_view kIndex = "{i}";
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.substr(i, kIndex.size()) == kIndex) {
      out += std::to_string(layer);
      i += kIndex.size();
    } else {
      out += pattern[i++];
    }
  }
  return out;
}

const MatMulKernels* MatMulSchedule::for_format(DType format) const {
  for (const MatMulKernels& k : formats)
    if (k.format == format) return &k;
  return nullptr;
}

std::vector<KernelId> MatMulSchedule::kernels() const {
  std::vector<KernelId> out;
  for (const MatMulKernels& k : formats)
    for (const KernelId& id : k.kernels()) out.push_back(id);
  return out;
}

const char* to_string(Section s) {
  switch (s) {
    case Section::Pre: return "pre";
    case Section::Layer: return "layer";
    case Section::Post: return "post";
  }
  return "?";
}

}  // namespace lumen::program
