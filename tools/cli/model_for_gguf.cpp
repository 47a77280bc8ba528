// The compile-for-GGUF step of lumen-run and lumen-server (see model_for_gguf.h).
#include "cli/model_for_gguf.h"

#include <cstdio>
#include <stdexcept>

#include "lumen/driver/driver.h"
#include "lumen/gguf/gguf.h"
#include "lumen/target/isa.h"

namespace lumen::cli {

std::string model_for_gguf(const std::string& gguf_path, const std::optional<std::string>& dsl_dir,
                           std::string_view tool) {
  std::string arch;
  try {
    gguf::File file = gguf::File::open(gguf_path);
    auto a = file.get_string("general.architecture");
    if (!a) throw std::runtime_error("'" + gguf_path + "' has no general.architecture");
    arch = *a;
  } catch (const gguf::Error& e) {
    throw std::runtime_error(e.what());
  }
  const Isa isa = best_isa(cpu_features());
  try {
    const driver::CachedModel model = driver::model_for_architecture(arch, isa, driver::dsl_folder(dsl_dir));
    if (model.compiled) {
      std::fprintf(stderr, "%s%.*s: compiled %s for %s into %s\n", model.warnings.c_str(),
                   static_cast<int>(tool.size()), tool.data(), model.program.c_str(), to_string(isa),
                   model.path.c_str());
    }
    return model.path;
  } catch (const driver::Error& e) {
    std::fprintf(stderr, "%s", e.diagnostics.c_str());
    throw std::runtime_error(e.what());
  }
}

}  // namespace lumen::cli
