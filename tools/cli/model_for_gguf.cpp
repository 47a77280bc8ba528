// The compile-for-GGUF step of lumen-run and lumen-server (see model_for_gguf.h).
#include "cli/model_for_gguf.h"

#include <cstdio>
#include <stdexcept>

#include "lumen/driver/driver.h"
#include "lumen/gguf/gguf.h"
#include "lumen/target/cpu_tune.h"
#include "lumen/target/isa.h"

namespace lumen::cli {

driver::WeightTypes weight_types_of(const gguf::File& file) {
  driver::WeightTypes types;
  for (const gguf::TensorInfo& t : file.tensors()) {
    const std::optional<ops::DType> d = ops::dtype_of_ggml(static_cast<uint32_t>(t.type));
    if (!d || !ops::row(*d).weight)
      throw std::runtime_error("tensor '" + t.name + "' has type " + std::string(gguf::to_string(t.type)) +
                               ", which Lumen does not read");
    types.emplace(t.name, *d);
  }
  return types;
}

std::string model_for_gguf(const std::string& gguf_path, const std::optional<std::string>& dsl_dir,
                           std::string_view tool) {
  std::string arch;
  driver::WeightTypes types;
  try {
    gguf::File file = gguf::File::open(gguf_path);
    auto a = file.get_string("general.architecture");
    if (!a) throw std::runtime_error("'" + gguf_path + "' has no general.architecture");
    arch = *a;
    types = weight_types_of(file);
  } catch (const gguf::Error& e) {
    throw std::runtime_error(e.what());
  }
  const Isa isa = best_isa(cpu_features());
  const CpuTune tune = host_cpu_tune();
  try {
    const driver::CachedModel model =
        driver::model_for_architecture(arch, isa, tune, driver::dsl_folder(dsl_dir), types);
    if (model.compiled) {
      std::fprintf(stderr, "%s%.*s: compiled %s for %s (tuned for %s) into %s\n", model.warnings.c_str(),
                   static_cast<int>(tool.size()), tool.data(), model.program.c_str(), to_string(isa),
                   to_string(tune), model.path.c_str());
    }
    return model.path;
  } catch (const driver::Error& e) {
    std::fprintf(stderr, "%s", e.diagnostics.c_str());
    throw std::runtime_error(e.what());
  }
}

}  // namespace lumen::cli
