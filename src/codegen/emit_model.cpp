// Emission of model.so: the scheduled program and its generated kernels,
// behind the C ABI of include/lumen/target/model_abi.h.
//
// We write one GNU assembler file (kernels as .byte runs in .text, the ABI
// tables in .data.rel.ro, the program text in .rodata) and let the system
// toolchain assemble and link it with `cc -shared -nostdlib`. Why not write
// ELF ourselves: the dynamic section, symbol/hash tables and relocations of a
// loadable shared object are a few hundred lines of format code that the
// system linker already gets right, and the result carries no dependency (no
// libc, no runtime library). The cost is that lumenc needs `cc` at compile
// time, which every machine that builds Lumen has. See docs/architecture.md.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/target/model_abi.h"

extern char** environ;

namespace lumen::codegen {
namespace {

// Writes `bytes` as .byte lines of 32 values.
void write_bytes(std::ostream& os, const uint8_t* bytes, size_t n) {
  for (size_t i = 0; i < n; i += 32) {
    os << "  .byte ";
    for (size_t j = i; j < n && j < i + 32; ++j) os << (j > i ? "," : "") << unsigned(bytes[j]);
    os << '\n';
  }
}

void write_string(std::ostream& os, const std::string& label, const std::string& s) {
  os << label << ":\n";
  write_bytes(os, reinterpret_cast<const uint8_t*>(s.data()), s.size());
  os << "  .byte 0\n";
}

// The matmul kernels the program's schedules name, in first-use order.
std::vector<program::KernelId> kernels_of(const program::Program& p) {
  std::vector<program::KernelId> kernels;
  std::set<program::KernelId> seen;
  auto add = [&](const program::KernelId& k) {
    if (seen.insert(k).second) kernels.push_back(k);
  };
  for (const auto* ops : {&p.pre, &p.layer, &p.post})
    for (const auto& op : *ops)
      if (op.kind == ops::OpId::MatMul) {
        for (const program::KernelId& k : op.schedule.kernels()) add(k);
      }
  return kernels;
}

// The ABI structs of model_abi.h as the assembler writes them: each field in
// declaration order with its offset and size, one .long or .quad per field.
struct AbiField {
  size_t offset, size;
};
#define LUMEN_ABI_FIELD(S, member) AbiField{offsetof(S, member), sizeof(S::member)}
constexpr AbiField kKernelEntryFields[] = {
    LUMEN_ABI_FIELD(lumen_kernel_entry, name),      LUMEN_ABI_FIELD(lumen_kernel_entry, code),
    LUMEN_ABI_FIELD(lumen_kernel_entry, code_size), LUMEN_ABI_FIELD(lumen_kernel_entry, kind),
    LUMEN_ABI_FIELD(lumen_kernel_entry, epilogue)};
constexpr AbiField kModelAbiFields[] = {
    LUMEN_ABI_FIELD(lumen_model_abi, abi_version), LUMEN_ABI_FIELD(lumen_model_abi, reserved),
    LUMEN_ABI_FIELD(lumen_model_abi, required_cpu), LUMEN_ABI_FIELD(lumen_model_abi, target),
    LUMEN_ABI_FIELD(lumen_model_abi, arch),         LUMEN_ABI_FIELD(lumen_model_abi, compiler),
    LUMEN_ABI_FIELD(lumen_model_abi, program),      LUMEN_ABI_FIELD(lumen_model_abi, program_size),
    LUMEN_ABI_FIELD(lumen_model_abi, n_kernels),    LUMEN_ABI_FIELD(lumen_model_abi, reserved2),
    LUMEN_ABI_FIELD(lumen_model_abi, kernels)};
#undef LUMEN_ABI_FIELD

// The fields follow each other without padding and end where the struct
// does, each 4 or 8 bytes: a field added to, removed from, moved or widened in
// model_abi.h and not here fails to compile.
template <size_t N>
constexpr bool lists_the_struct(const AbiField (&fields)[N], size_t struct_size) {
  size_t at = 0;
  for (const AbiField& f : fields) {
    if (f.offset != at || (f.size != 4 && f.size != 8)) return false;
    at += f.size;
  }
  return at == struct_size;
}
static_assert(lists_the_struct(kKernelEntryFields, sizeof(lumen_kernel_entry)));
static_assert(lists_the_struct(kModelAbiFields, sizeof(lumen_model_abi)));
static_assert(alignof(lumen_kernel_entry) == 8 && alignof(lumen_model_abi) == 8);  // .p2align 3

// One struct's values (assembler expressions), a field each.
template <size_t N>
void write_struct(std::ostream& os, const AbiField (&fields)[N], const std::array<std::string, N>& values) {
  for (size_t i = 0; i < N; ++i) os << (fields[i].size == 8 ? "  .quad " : "  .long ") << values[i] << '\n';
}

uint32_t kernel_table_kind(program::KernelKind k) {
  switch (k) {
    case program::KernelKind::Gemv: return LUMEN_KERNEL_GEMV;
    case program::KernelKind::Gemm: return LUMEN_KERNEL_GEMM;
    case program::KernelKind::Batch: return LUMEN_KERNEL_BATCH;
  }
  return LUMEN_KERNEL_GEMM;
}

// Runs argv, returns its exit status; stderr goes to `log_path`.
int run_command(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string first_line_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

void emit_model_so(const program::Program& program, Isa isa, CpuTune tune, const std::string& out_path) {
  const std::string program_text = program::serialize(program);
  const std::vector<program::KernelId> kernels = kernels_of(program);

  std::ostringstream s;
  s << "# Generated by lumenc: " << program.source_name << " for " << to_string(isa) << ", tuned for " << to_string(tune) << "\n";
  s << "  .text\n";
  // Each kernel is a local function symbol named after its id (not exported:
  // the kernel table is the interface), so that perf and objdump name it.
  std::vector<size_t> code_sizes;
  for (const program::KernelId& k : kernels) {
    const std::string symbol = program::kernel_symbol(k);
    const std::vector<uint8_t> code = generate_matmul_kernel(isa, k, tune);
    code_sizes.push_back(code.size());
    s << "  .p2align 6\n  .type " << symbol << ",@function\n" << symbol << ":\n";
    write_bytes(s, code.data(), code.size());
    s << "  .size " << symbol << ", " << code.size() << "\n";
  }
  s << "  .globl lumen_model_abi_version\n  .type lumen_model_abi_version,@function\n"
    << "lumen_model_abi_version:\n  movl $" << LUMEN_MODEL_ABI_VERSION << ", %eax\n  ret\n"
    << "  .globl lumen_model_get\n  .type lumen_model_get,@function\n"
    << "lumen_model_get:\n  leaq .Labi(%rip), %rax\n  ret\n";

  s << "  .section .rodata\n";
  write_string(s, ".Ltarget", to_string(isa));
  write_string(s, ".Larch", program.arch);
  write_string(s, ".Lcompiler", "lumenc " LUMEN_VERSION_STRING);
  write_string(s, ".Lprogram", program_text);
  for (size_t i = 0; i < kernels.size(); ++i)
    write_string(s, ".Lname" + std::to_string(i), program::to_string(kernels[i]));

  s << "  .section .data.rel.ro,\"aw\"\n  .p2align 3\n.Lkernels:\n";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const program::KernelId& k = kernels[i];
    write_struct(s, kKernelEntryFields,
                 {".Lname" + std::to_string(i), program::kernel_symbol(k), std::to_string(code_sizes[i]),
                  std::to_string(kernel_table_kind(k.kind)), std::to_string(static_cast<uint32_t>(k.epilogue))});
  }
  s << ".Labi:\n";
  write_struct(s, kModelAbiFields,
               {std::to_string(LUMEN_MODEL_ABI_VERSION), "0", std::to_string(required_features(isa)), ".Ltarget",
                ".Larch", ".Lcompiler", ".Lprogram", std::to_string(program_text.size()),
                std::to_string(kernels.size()), "0", kernels.empty() ? std::string("0") : std::string(".Lkernels")});
  s << "  .section .note.GNU-stack,\"\",@progbits\n";

  namespace fs = std::filesystem;
  char tmpl[] = "/tmp/lumenc-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("cannot create a temporary directory");
  const fs::path dir(tmpl);
  const fs::path asm_path = dir / "model.s";
  const fs::path log_path = dir / "cc.log";
  {
    std::ofstream out(asm_path);
    out << s.str();
    if (!out) {
      fs::remove_all(dir);
      throw std::runtime_error("cannot write " + asm_path.string());
    }
  }
  const char* cc_env = std::getenv("CC");
  const std::string cc = cc_env && *cc_env ? cc_env : "cc";
  const int rc = run_command({cc, "-shared", "-nostdlib", "-Wl,-z,noexecstack", "-Wl,--hash-style=gnu",
                           "-o", out_path, asm_path.string()},
                          log_path.string());
  const std::string why = rc == -1 ? "cannot run '" + cc + "'" : first_line_of(log_path.string());
  fs::remove_all(dir);
  if (rc != 0)
    throw std::runtime_error("assembling " + out_path + " failed (" + cc + "): " + why);
}

}  // namespace lumen::codegen
