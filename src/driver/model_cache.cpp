// The programs for GGUF files: the folder of model programs, the program of
// an architecture, and the compiled-model cache (see driver/driver.h).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include "lumen/common/cache.h"
#include "lumen/driver/driver.h"
#include "lumen/dsl/frontend.h"
#include "lumen/target/model_abi.h"

namespace lumen::driver {

namespace fs = std::filesystem;

namespace {

uint64_t hash_text(std::string_view text, uint64_t seed) { return hash_bytes(text.data(), text.size(), seed); }

// The compiler's identity: its version, the model ABI and the bytes of this
// executable (which contains the compiler), so that a rebuilt tool never
// reuses a model.so an older compiler wrote.
uint64_t compiler_hash() {
  uint64_t h = hash_text(std::string("lumen ") + LUMEN_VERSION_STRING + " abi " +
                             std::to_string(LUMEN_MODEL_ABI_VERSION),
                         0);
  std::ifstream self("/proc/self/exe", std::ios::binary);
  std::vector<char> chunk(1 << 16);
  while (self.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || self.gcount() > 0)
    h = hash_bytes(chunk.data(), static_cast<size_t>(self.gcount()), h);
  return h;
}

}  // namespace

std::string dsl_folder(const std::optional<std::string>& override) {
  if (override) return *override;
  if (const char* env = std::getenv("LUMEN_DSL_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  if (fs::is_directory(LUMEN_DSL_INSTALL_DIR, ec)) return LUMEN_DSL_INSTALL_DIR;
  return LUMEN_DSL_SOURCE_DIR;
}

Source find_program(const std::string& folder, const std::string& arch) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) throw Error("no model programs: '" + folder + "' is not a folder");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder, ec))
    if (entry.path().extension() == ".dsl") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::string known;
  for (const fs::path& f : files) {
    Source source = Source::read(f.string());
    const std::string name = dsl::model_name(source.file, source.text);
    if (name == arch) return source;
    if (!name.empty()) known.append(known.empty() ? "" : ", ").append(name);
  }
  throw Error("no model program describes architecture '" + arch + "' (programs in '" + folder +
              "': " + (known.empty() ? std::string("none") : known) + ")");
}

uint64_t model_cache_key(std::string_view program_text, Isa target, CpuTune tune, const WeightTypes& types) {
  uint64_t h = hash_text(program_text, hash_text(to_string(tune), hash_text(to_string(target), compiler_hash())));
  for (const auto& [name, type] : types) h = hash_text(name + '=' + ops::to_string(type) + ';', h);
  return h;
}

CachedModel model_for_architecture(const std::string& arch, Isa target, CpuTune tune, const std::string& folder,
                                   const WeightTypes& types) {
  const Source source = find_program(folder, arch);
  const fs::path cache = cache_dir();
  if (cache.empty()) throw Error("no cache folder for compiled models: set LUMEN_CACHE_DIR");
  const uint64_t key = model_cache_key(source.text, target, tune, types);
  const fs::path so = cache / fmt::format("{}-{}-{:016x}.so", arch, to_string(target), key);
  CachedModel out;
  out.path = so.string();
  out.program = source.file;
  std::error_code ec;
  if (fs::is_regular_file(so, ec)) return out;

  fs::create_directories(cache, ec);
  if (ec) throw Error("cannot create the cache folder '" + cache.string() + "': " + ec.message());
  // Written beside its final name and renamed: a concurrent run never loads a half file.
  Options options;
  options.stage = Stage::ModelSo;
  options.target = target;
  options.tune = tune;
  options.weight_types = types;
  options.output = so.string() + fmt::format(".{}.partial", static_cast<long>(::getpid()));
  try {
    out.warnings = compile(source, options).diags.format();
  } catch (const Error&) {
    fs::remove(options.output, ec);
    throw;
  }
  fs::rename(options.output, so, ec);
  if (ec) throw Error("cannot write '" + so.string() + "': " + ec.message());
  out.compiled = true;
  return out;
}

}  // namespace lumen::driver
