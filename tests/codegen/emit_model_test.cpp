// An emitted model.so, loaded with dlopen, holds every field of model_abi.h
// as emit_model_so meant it: the descriptor, the program text and a kernel
// table entry per kernel the schedules name, whose code is the generated one.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/target/model_abi.h"
#include "support/qwen2_program.h"

namespace lumen::codegen {
namespace {

namespace fs = std::filesystem;

class LoadedModel {
 public:
  explicit LoadedModel(const std::string& path) : handle_(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {}
  ~LoadedModel() {
    if (handle_) dlclose(handle_);
  }
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  void* symbol(const char* name) const { return handle_ ? dlsym(handle_, name) : nullptr; }

 private:
  void* handle_;
};

uint32_t table_kind(program::KernelKind k) {
  switch (k) {
    case program::KernelKind::Gemv: return LUMEN_KERNEL_GEMV;
    case program::KernelKind::Gemm: return LUMEN_KERNEL_GEMM;
    case program::KernelKind::Batch: return LUMEN_KERNEL_BATCH;
  }
  return 0;
}

TEST(EmitModel, EveryAbiFieldReadsBackAsWritten) {
  const fs::path dir = fs::path(LUMEN_BINARY_DIR) / "tests" / "codegen" / ("emit_model_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (Isa isa : kAllIsas) {
    SCOPED_TRACE(to_string(isa));
    const program::Program program = test_data::qwen2_program(isa);
    const std::string so = (dir / (std::string(to_string(isa)) + ".so")).string();
    emit_model_so(program, isa, CpuTune::Generic, so);
    const LoadedModel model(so);
    auto version = reinterpret_cast<uint32_t (*)()>(model.symbol("lumen_model_abi_version"));
    auto get = reinterpret_cast<const lumen_model_abi* (*)()>(model.symbol("lumen_model_get"));
    ASSERT_NE(version, nullptr) << dlerror();
    ASSERT_NE(get, nullptr) << dlerror();
    EXPECT_EQ(version(), LUMEN_MODEL_ABI_VERSION);
    const lumen_model_abi* abi = get();
    ASSERT_NE(abi, nullptr);
    EXPECT_EQ(abi->abi_version, LUMEN_MODEL_ABI_VERSION);
    EXPECT_EQ(abi->reserved, 0u);
    EXPECT_EQ(abi->required_cpu, required_features(isa));
    EXPECT_STREQ(abi->target, to_string(isa));
    EXPECT_EQ(std::string(abi->arch), program.arch);
    EXPECT_STREQ(abi->compiler, "lumenc " LUMEN_VERSION_STRING);
    const std::string text = program::serialize(program);
    EXPECT_EQ(abi->program_size, text.size());
    EXPECT_EQ(std::string(abi->program, abi->program_size), text);
    EXPECT_EQ(abi->program[abi->program_size], '\0');
    EXPECT_EQ(abi->reserved2, 0u);

    std::set<program::KernelId> named;
    for (const auto* ops : {&program.pre, &program.layer, &program.post})
      for (const program::Op& op : *ops)
        if (op.kind == ops::OpId::MatMul)
          for (const program::KernelId& k : op.schedule.kernels()) named.insert(k);
    ASSERT_EQ(abi->n_kernels, named.size());
    ASSERT_NE(abi->kernels, nullptr);
    std::set<program::KernelId> listed;
    for (uint32_t i = 0; i < abi->n_kernels; ++i) {
      const lumen_kernel_entry& entry = abi->kernels[i];
      const std::optional<program::KernelId> id = program::parse_kernel_id(entry.name);
      ASSERT_TRUE(id) << entry.name;
      SCOPED_TRACE(entry.name);
      EXPECT_TRUE(named.count(*id));
      EXPECT_TRUE(listed.insert(*id).second) << "listed twice";
      const std::vector<uint8_t> code = generate_matmul_kernel(isa, *id);
      ASSERT_EQ(entry.code_size, code.size());
      EXPECT_EQ(std::memcmp(entry.code, code.data(), code.size()), 0);
      EXPECT_EQ(entry.kind, table_kind(id->kind));
      EXPECT_EQ(entry.epilogue, static_cast<uint32_t>(id->epilogue));
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lumen::codegen
