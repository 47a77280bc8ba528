// Loading model.so: dlopen, ABI version check before anything else, CPU
// feature check, then the program text and the kernel table.
#include "lumen/runtime/compiled_model.h"

#include <dlfcn.h>

#include <string>

#include "lumen/target/model_abi.h"

namespace lumen::runtime {

void check_cpu_features(uint64_t required, uint64_t available, const std::string& target) {
  uint64_t missing = required & ~available;
  if (missing != 0)
    throw LoadError("model compiled for " + target + " needs CPU features this machine lacks: " +
                    cpu_feature_names(missing));
}

CompiledModel load_model_so(const std::string& path) {
  // A bare name would make dlopen search the library path: always open the file given.
  std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw LoadError("cannot load model '" + path + "': " + (why ? why : "dlopen failed"));
  }
  std::shared_ptr<void> owner(handle, [](void* h) { dlclose(h); });

  using VersionFn = uint32_t (*)();
  using GetFn = const lumen_model_abi* (*)();
  auto version_fn = reinterpret_cast<VersionFn>(dlsym(handle, "lumen_model_abi_version"));
  auto get_fn = reinterpret_cast<GetFn>(dlsym(handle, "lumen_model_get"));
  if (version_fn == nullptr || get_fn == nullptr)
    throw LoadError("'" + path + "' is not a Lumen model (no lumen_model_abi_version/lumen_model_get)");
  uint32_t version = version_fn();
  if (version != LUMEN_MODEL_ABI_VERSION)
    throw LoadError("'" + path + "' has model ABI version " + std::to_string(version) + ", this runtime needs " +
                    std::to_string(LUMEN_MODEL_ABI_VERSION) + " (recompile it with this lumenc)");
  const lumen_model_abi* abi = get_fn();
  if (abi == nullptr || abi->abi_version != LUMEN_MODEL_ABI_VERSION)
    throw LoadError("'" + path + "' returns an invalid model descriptor");

  CompiledModel model;
  model.target = abi->target ? abi->target : "";
  model.compiler = abi->compiler ? abi->compiler : "";
  model.required_cpu = abi->required_cpu;
  bool known_target = false;
  for (Isa isa : kAllIsas) {
    if (model.target == to_string(isa)) {
      model.isa = isa;
      known_target = true;
    }
  }
  if (!known_target) throw LoadError("'" + path + "' targets unknown ISA '" + model.target + "'");
  check_cpu_features(model.required_cpu | required_features(model.isa), cpu_features(), model.target);

  if (abi->program == nullptr) throw LoadError("'" + path + "' carries no program");
  try {
    model.program = program::deserialize(std::string_view(abi->program, abi->program_size));
  } catch (const program::ParseError& e) {
    throw LoadError("'" + path + "': bad program text: " + e.what());
  }
  if (abi->arch != nullptr && model.program.arch != abi->arch)
    throw LoadError("'" + path + "': program architecture '" + model.program.arch +
                    "' differs from the declared '" + abi->arch + "'");
  if (abi->n_kernels > 0 && abi->kernels == nullptr) throw LoadError("'" + path + "': kernel table missing");
  for (uint32_t i = 0; i < abi->n_kernels; ++i) {
    const lumen_kernel_entry& k = abi->kernels[i];
    if (k.name == nullptr || k.code == nullptr || k.code_size == 0)
      throw LoadError("'" + path + "': kernel entry " + std::to_string(i) + " is empty");
    std::string why;
    const std::optional<program::KernelId> id = program::parse_kernel_id(k.name, &why);
    if (!id || !program::fits(*id, model.isa, &why))
      throw LoadError("'" + path + "': kernel entry " + std::to_string(i) + " '" + k.name + "': " + why);
    const uint32_t kind = id->kind == program::KernelKind::Gemv    ? LUMEN_KERNEL_GEMV
                          : id->kind == program::KernelKind::Batch ? LUMEN_KERNEL_BATCH
                                                                   : LUMEN_KERNEL_GEMM;
    if (k.kind != kind || k.epilogue != static_cast<uint32_t>(id->epilogue))
      throw LoadError("'" + path + "': kernel entry '" + k.name + "' declares another kind or epilogue");
    model.kernels[*id] = reinterpret_cast<MatMulFn>(const_cast<void*>(k.code));
  }
  model.code_owner = std::move(owner);
  return model;
}

}  // namespace lumen::runtime
